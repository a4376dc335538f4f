/**
 * The manifest of one generation: every data file with its row count, byte size
 * and seq statistics (per file and per row group), the spool segments each
 * commit consumed, and what retention removed. Replaced atomically on every
 * commit: writing it IS the commit point.
 * @ref LLP 0002: exactly-once flush (the consumed spool range rides in the manifest)
 * @ref LLP 0003: seq-stat pruning (parquet-wasm exposes no column statistics)
 */
import { HypsinkError } from '../../types/errors.js';
import { isDecimalSeq, readJsonFile, writeJsonAtomic } from '../io/durable.js';
import { type ChunkCheck, validChecks } from './checksums.js';

export interface RowGroupStats {
  rows: number;
  /** null for legacy rows written before the seq column existed (they sort as seq 0). */
  minSeq: string | null;
  maxSeq: string | null;
}

export interface FileEntry {
  name: string;
  rows: number;
  bytes: number;
  minSeq: string | null;
  maxSeq: string | null;
  rowGroups: RowGroupStats[];
  /** Range of the dataset's timestamp column (epoch ms), for retention; absent when unknown. */
  minTs?: number | null;
  maxTs?: number | null;
  /** When the rows were committed (epoch ms): the small-file policy's max delay counts from here. */
  committedAt?: number;
  /** Each column chunk's offset, length and CRC-32, in file order; absent in files written before LLP 0104. */
  chunks?: ChunkCheck[];
}

export interface Manifest {
  v: 1;
  generation: number;
  /** In seq order: every file's rows sort after the previous file's. */
  files: FileEntry[];
  /** spool key → highest segment number whose rows for this partition are committed. */
  spools: Record<string, number>;
  /** Highest seq retention has removed. */
  prunedThroughSeq: string | null;
  /** Inclusive seq ranges removed before every sink exported them (hard cap): gap accounting. */
  forcedPrunes: [string, string][];
  /**
   * Rows ever committed to the partition (compaction keeps every row): for
   * every sink, exported rows + its gap rows + rows still pending = this.
   */
  committedRows?: number;
}

export interface Cursor {
  v: 1;
  generation: number;
}

export function emptyManifest(generation: number): Manifest {
  return { v: 1, generation, files: [], spools: {}, prunedThroughSeq: null, forcedPrunes: [] };
}

/** Effective seq for ordering and filtering: legacy null seq sorts as 0. */
export function effSeq(s: string | null): bigint {
  return s === null ? 0n : BigInt(s);
}

const seqOrNull = (v: unknown) => v === null || isDecimalSeq(v);

/** Paired assertion: checked before writing a manifest and again whenever one is read. */
export function checkManifest(m: unknown): string | null {
  const x = m as Manifest;
  if (x?.v !== 1 || !Number.isInteger(x.generation) || !Array.isArray(x.files)) return 'not a v1 manifest';
  if (typeof x.spools !== 'object' || x.spools === null) return 'spools missing';
  if (!seqOrNull(x.prunedThroughSeq) || !Array.isArray(x.forcedPrunes)) return 'retention fields missing';
  if (x.committedRows !== undefined && (!Number.isInteger(x.committedRows) || x.committedRows < manifestRows(x))) {
    return `committedRows ${x.committedRows} is below the ${manifestRows(x)} rows present`;
  }
  let prevMax = -1n;
  for (const f of x.files) {
    if (typeof f.name !== 'string' || !/^[A-Za-z0-9._-]+\.parquet$/.test(f.name)) return `bad file name ${f.name}`;
    if (!Number.isInteger(f.rows) || f.rows < 0 || !Number.isInteger(f.bytes)) return `${f.name}: bad counts`;
    if (!seqOrNull(f.minSeq) || !seqOrNull(f.maxSeq) || !Array.isArray(f.rowGroups)) return `${f.name}: bad seq stats`;
    const lo = effSeq(f.minSeq);
    const hi = effSeq(f.maxSeq);
    if (lo > hi) return `${f.name}: minSeq ${f.minSeq} > maxSeq ${f.maxSeq}`;
    // Seq order across files (legacy files share seq 0, so ties at 0 are allowed).
    if (lo < prevMax || (lo === prevMax && lo !== 0n)) return `${f.name}: seq range overlaps the previous file`;
    prevMax = hi;
    let rgRows = 0;
    for (const rg of f.rowGroups) {
      if (!seqOrNull(rg.minSeq) || !seqOrNull(rg.maxSeq) || effSeq(rg.minSeq) > effSeq(rg.maxSeq)) {
        return `${f.name}: bad row group stats`;
      }
      rgRows += rg.rows;
    }
    if (rgRows !== f.rows) return `${f.name}: row groups hold ${rgRows} rows, file says ${f.rows}`;
    if (f.chunks !== undefined && !validChecks(f.chunks)) return `${f.name}: bad chunk checksums`;
  }
  return null;
}

export async function readManifest(path: string): Promise<Manifest> {
  const m = await readJsonFile<Manifest>(path, checkManifest, 'manifest');
  if (!m) throw new HypsinkError('HYPSINK_ERR_CORRUPT', `manifest ${path} is missing while the cursor names its generation`);
  return m;
}

export async function writeManifest(path: string, m: Manifest): Promise<void> {
  const problem = checkManifest(m);
  if (problem) throw new HypsinkError('HYPSINK_ERR_INVARIANT', `refusing to write manifest ${path}: ${problem}`);
  await writeJsonAtomic(path, m);
}

export function checkCursor(v: unknown): string | null {
  const c = v as Cursor;
  return c && c.v === 1 && Number.isInteger(c.generation) && c.generation >= 0 ? null : 'expected {"v":1,"generation":<n>}';
}

export function manifestRows(m: Manifest): number {
  return m.files.reduce((n, f) => n + f.rows, 0);
}

export function manifestHighWater(m: Manifest): string | null {
  let hi: bigint | null = null;
  for (const f of m.files) {
    const s = effSeq(f.maxSeq);
    if (hi === null || s > hi) hi = s;
  }
  return hi === null ? null : hi.toString();
}
