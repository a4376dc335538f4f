/**
 * The partition commit section: allocate seqs, write the data file, write the
 * manifest — in that order, one partition at a time. Because seqs are taken
 * inside this section, a partition's commit order is its seq order, and a
 * reader never sees a seq lower than one it already saw.
 * @ref LLP 0001: allocator and commit ordering
 * @ref LLP 0002: exactly-once flush
 */
import type { Table } from 'apache-arrow';
import type { DatasetSchema } from '../../types/schema.js';
import { HypsinkError } from '../../types/errors.js';
import { fault } from '../fault.js';
import { writeNewFileDurable } from '../io/durable.js';
import type { SeqAllocator } from './allocator.js';
import { SEQ_COLUMN } from '../store/columns.js';
import { generationDir } from '../store/generations.js';
import type { FileEntry, RowGroupStats } from '../store/manifest.js';
import { manifestRows, writeManifest } from '../store/manifest.js';
import { type ChunkCheck, chunkChecks } from '../store/checksums.js';
import { type DataFileLayout, encodeParquet } from '../store/parquet.js';
import type { PartitionStore } from '../store/partition.js';

/**
 * Rows ready to commit: their count, and how to encode them once their seqs are
 * allocated (in this thread or a flush worker's).
 */
export interface CommitRows {
  readonly rows: number;
  encode(firstSeq: bigint, batchId: string): Promise<EncodedFile>;
}

export interface CommitInput {
  readonly rows: CommitRows;
  readonly batchId: string;
  /** Seqs the caller's commits will take from here on, these rows' included: sizes the allocator's reservation (LLP 0039). */
  readonly ahead?: number;
  /** The spool segment these rows came from; recorded in the same manifest write. */
  readonly marker: { spool: string; segment: number };
  /**
   * Whether a spool (by key) may still hold a segment the manifest has recorded:
   * entries of spools that are gone are dropped, so manifests do not keep one
   * per ingest forever. Absent: every entry is kept.
   */
  readonly spoolExists?: (key: string) => Promise<boolean>;
}

export interface CommitResult {
  readonly committed: boolean;
  readonly rows: number;
  readonly highWater: string | null;
}

/** Per-row-group and per-file seq stats of a table about to be written. */
export function seqStats(table: Table, rowGroupRows: number): RowGroupStats[] {
  const seqs = table.getChild(SEQ_COLUMN);
  const groups: RowGroupStats[] = [];
  for (let start = 0; start < table.numRows; start += rowGroupRows) {
    const end = Math.min(table.numRows, start + rowGroupRows);
    const first = seqs?.get(start) as bigint | null;
    const last = seqs?.get(end - 1) as bigint | null;
    groups.push({ rows: end - start, minSeq: first?.toString() ?? null, maxSeq: last?.toString() ?? null });
  }
  return groups;
}

export function tsRange(table: Table, schema: DatasetSchema): { minTs: number | null; maxTs: number | null } {
  const col = schema.timestampColumn ? table.getChild(schema.timestampColumn) : null;
  if (!col) return { minTs: null, maxTs: null };
  let lo = Number.POSITIVE_INFINITY;
  let hi = Number.NEGATIVE_INFINITY;
  for (const data of col.data) {
    // Epoch ms as the two 32-bit halves of each int64: no BigInt per row.
    const v = data.values as BigInt64Array;
    const halves = new Int32Array(v.buffer, v.byteOffset, v.length * 2);
    const nulls = data.nullCount > 0 ? data.nullBitmap : null;
    for (let i = 0; i < data.length; i++) {
      const bit = data.offset + i;
      if (nulls && (nulls[bit >> 3]! & (1 << (bit & 7))) === 0) continue;
      const n = halves[2 * i + 1]! * 4294967296 + (halves[2 * i]! >>> 0);
      if (n < lo) lo = n;
      if (n > hi) hi = n;
    }
  }
  return lo <= hi ? { minTs: lo, maxTs: hi } : { minTs: null, maxTs: null };
}

/** A data file encoded and described, not yet written: what a flush worker hands back. */
export interface EncodedFile {
  readonly bytes: Uint8Array;
  readonly rows: number;
  readonly rowGroups: RowGroupStats[];
  readonly minTs: number | null;
  readonly maxTs: number | null;
  /** Its column chunks' checksums, taken from the bytes before they are written. @ref LLP 0104 */
  readonly chunks: ChunkCheck[];
}

/** Encode a sorted, decorated table as Parquet with its manifest statistics. Pure: runs on any thread. */
export function encodeDataFile(table: Table, schema: DatasetSchema, layout: DataFileLayout): EncodedFile {
  const bytes = encodeParquet(table, layout);
  return { bytes, rows: table.numRows, rowGroups: seqStats(table, layout.rowGroupRows), ...tsRange(table, schema), chunks: chunkChecks(bytes) };
}

/** Write an encoded file into `generation` durably; returns its manifest entry. */
export async function writeEncodedFile(store: PartitionStore, generation: number, file: EncodedFile, committedAt = Date.now()): Promise<FileEntry> {
  const { bytes, rows, rowGroups, minTs, maxTs, chunks } = file;
  const minSeq = rowGroups[0]?.minSeq ?? null;
  const maxSeq = rowGroups[rowGroups.length - 1]?.maxSeq ?? null;
  // Seq ranges make names unique, except legacy (null seq) rows: several files may be all-legacy.
  const base = `data-${minSeq ?? 'legacy'}-${maxSeq ?? 'legacy'}`;
  let name = `${base}.parquet`;
  for (let k = 1; ; k++) {
    try {
      await writeNewFileDurable(`${generationDir(store.dir, generation)}/${name}`, bytes);
      break;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST' || k > 1000) throw e;
      name = `${base}-${k}.parquet`;
    }
  }
  return { name, rows, bytes: bytes.byteLength, minSeq, maxSeq, rowGroups, minTs, maxTs, committedAt, chunks };
}

/** Write a sorted, decorated table as a data file of `generation`; returns its manifest entry. */
export async function writeDataFile(
  store: PartitionStore,
  generation: number,
  table: Table,
  schema: DatasetSchema,
  layout: DataFileLayout,
  committedAt = Date.now(),
): Promise<FileEntry> {
  return writeEncodedFile(store, generation, encodeDataFile(table, schema, layout), committedAt);
}

/** Commit rows into a partition. Caller holds the cache writer lock and the partition's mutex. */
export async function commitRows(
  store: PartitionStore,
  allocator: SeqAllocator,
  input: CommitInput,
): Promise<CommitResult> {
  const { generation, manifest } = await store.current();
  const done = manifest.spools[input.marker.spool];
  if (done !== undefined && done >= input.marker.segment) {
    // A crash came after this partition's commit and before the segment was deleted.
    return { committed: false, rows: 0, highWater: null };
  }
  const range = await allocator.allocate(input.rows.rows, input.ahead);
  const file = await input.rows.encode(range.first, input.batchId);
  // Paired assertion across the thread boundary: the file holds exactly the seqs allocated.
  const first = file.rowGroups[0]?.minSeq;
  const last = file.rowGroups[file.rowGroups.length - 1]?.maxSeq;
  if (file.rows !== input.rows.rows || first !== range.first.toString() || last !== range.last.toString()) {
    throw new HypsinkError(
      'HYPSINK_ERR_INVARIANT',
      `${store.ref.key}: the encoded file holds ${file.rows} rows, seqs ${first}..${last}; allocated ${input.rows.rows}, ${range.first}..${range.last}`,
    );
  }
  const entry = await writeEncodedFile(store, generation, file);
  fault('flush.afterDataFile');
  manifest.files.push(entry);
  manifest.committedRows = (manifest.committedRows ?? manifestRows(manifest) - entry.rows) + entry.rows;
  manifest.spools[input.marker.spool] = input.marker.segment;
  await store.writer?.assertHeld(`committing ${entry.rows} rows to ${store.manifestPath(generation)}`);
  // A spool removed after its last segment was flushed can hold no segment to guard against.
  if (input.spoolExists) {
    for (const key of Object.keys(manifest.spools)) {
      if (key !== input.marker.spool && !(await input.spoolExists(key))) delete manifest.spools[key];
    }
  }
  await writeManifest(store.manifestPath(generation), manifest);
  fault('flush.afterManifest');
  return { committed: true, rows: input.rows.rows, highWater: range.last.toString() };
}
