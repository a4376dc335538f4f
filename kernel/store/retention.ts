/**
 * Retention: prune the oldest rows of a partition — rows whose timestamp is
 * older than `maxAgeMs`, or the oldest by seq beyond `maxRows` — but only rows
 * every sink has exported (ack-coupled), unless `hardMaxRows` forces more or
 * `ackCoupled` is off. Any prune of rows some sink has not exported is recorded
 * as seq ranges so each sink can count the gap it meets; it is never silent.
 * Rows of units in flight are never pruned.
 * @ref LLP 0006: ack-coupled retention and gaps
 * @ref LLP 0019: gaps are counted against every watermark on disk
 */
import { type RecordBatch, Table } from 'apache-arrow';
import { rowsWithKey } from '../../types/arrow-rows.js';
import type { DatasetSchema } from '../../types/schema.js';
import type { PartitionRef } from '../../types/storage.js';
import { SEQ_COLUMN } from './columns.js';
import { writeDataFile } from '../flush/commit.js';
import { type FileEntry, manifestRows, writeManifest } from './manifest.js';
import { type DataFileLayout, ParquetReader, scratchCounters } from './parquet.js';
import type { PartitionStore } from './partition.js';
import { linkFile, nextManifest, startGeneration } from './rewrite.js';

export interface RetentionPolicy {
  /** Prune rows whose timestamp column is older than this (ms before `now`). */
  readonly maxAgeMs?: number;
  /** Keep at most this many rows per partition (oldest by seq go first). */
  readonly maxRows?: number;
  /** Hard cap: past it rows go even if a sink has not exported them (a gap). */
  readonly hardMaxRows?: number;
  /**
   * Default true: keep rows a sink has not exported. Off, the age and row rules
   * prune them too, and they are counted as that sink's gap all the same.
   */
  readonly ackCoupled?: boolean;
  readonly now?: number;
  /**
   * The lowest watermark seq over the sinks that hold this partition's dataset
   * (-1 when one has exported nothing); undefined when no sink holds it. Rows
   * above it are some sink's: pruning them is a gap, recorded.
   */
  readonly ackFloor?: (p: PartitionRef) => Promise<bigint | undefined>;
  /**
   * Seq ranges of units a sink has recorded as intents and may have shipped:
   * never pruned, not even by the hard cap, so a unit finished after a crash
   * re-reads exactly the rows it shipped (at most one unit per sink is held).
   */
  readonly inFlight?: (p: PartitionRef) => Promise<[bigint, bigint][]>;
}

export interface RetentionResult {
  readonly partition: PartitionRef;
  readonly prunedRows: number;
  readonly forcedRows: number;
  readonly prunedThroughSeq: string | null;
  /** Seq ranges pruned in this pass before every sink exported them. */
  readonly forcedRanges: [string, string][];
}

interface FileCols {
  seqs: bigint[];
  ts: (number | null)[];
}

async function readCols(dir: string, f: FileEntry, schema: DatasetSchema): Promise<FileCols> {
  const reader = await ParquetReader.open(`${dir}/${f.name}`, scratchCounters(), f);
  const cols = [SEQ_COLUMN, ...(schema.timestampColumn ? [schema.timestampColumn] : [])];
  const out: FileCols = { seqs: [], ts: [] };
  try {
    for (let g = 0; g < reader.numRowGroups; g++) {
      for (const b of await reader.readRowGroup(g, cols)) {
        const s = b.getChild(SEQ_COLUMN);
        const t = schema.timestampColumn ? b.getChild(schema.timestampColumn) : null;
        for (let i = 0; i < b.numRows; i++) {
          out.seqs.push((s?.get(i) as bigint | null) ?? 0n);
          const tv = t?.get(i);
          out.ts.push(tv === null || tv === undefined ? null : Number(tv));
        }
      }
    }
  } finally {
    reader.close();
  }
  return out;
}

export async function retainPartition(
  store: PartitionStore,
  schema: DatasetSchema,
  policy: RetentionPolicy,
  layout: DataFileLayout,
): Promise<RetentionResult> {
  const { generation, manifest } = await store.current();
  await store.sweep();
  await store.removeOrphans(generation, manifest);
  const none: RetentionResult = {
    partition: store.ref,
    prunedRows: 0,
    forcedRows: 0,
    prunedThroughSeq: manifest.prunedThroughSeq,
    forcedRanges: [],
  };
  const total = manifestRows(manifest);
  const cutoff = policy.maxAgeMs !== undefined && schema.timestampColumn ? (policy.now ?? Date.now()) - policy.maxAgeMs : null;
  const capCut = policy.maxRows !== undefined ? Math.max(0, total - policy.maxRows) : 0;
  const hardOver = policy.hardMaxRows !== undefined && total > policy.hardMaxRows;
  const ageCandidate = cutoff !== null && manifest.files.some((f) => f.minTs === undefined || (f.minTs !== null && f.minTs < cutoff));
  if (total === 0 || (capCut === 0 && !hardOver && !ageCandidate)) return none;

  const floor = policy.ackFloor ? await policy.ackFloor(store.ref) : undefined;
  const held = policy.inFlight ? await policy.inFlight(store.ref) : [];
  const isHeld = (s: bigint) => held.some(([lo, hi]) => s >= lo && s <= hi);
  const gdir = store.manifestPath(generation).replace(/\/manifest\.json$/, '');
  const cols = await Promise.all(manifest.files.map((f) => readCols(gdir, f, schema)));

  // Pass 1: what retention may prune on its own (old, and exported by every sink unless not ack-coupled).
  const coupled = policy.ackCoupled ?? true;
  const prune = cols.map((c) => new Uint8Array(c.seqs.length)); // 0 keep, 1 pruned
  let rank = 0;
  let normal = 0;
  cols.forEach((c, fi) => {
    for (let i = 0; i < c.seqs.length; i++, rank++) {
      const ts = c.ts[i];
      const old = rank < capCut || (cutoff !== null && ts !== null && ts !== undefined && ts < cutoff);
      const acked = !coupled || floor === undefined || c.seqs[i]! <= floor;
      if (old && acked && !isHeld(c.seqs[i]!)) {
        prune[fi]![i] = 1;
        normal++;
      }
    }
  });
  // Pass 2: the hard cap takes the oldest remaining rows, exported or not.
  let extra = policy.hardMaxRows !== undefined ? Math.max(0, total - normal - policy.hardMaxRows) : 0;
  for (let fi = 0; fi < cols.length && extra > 0; fi++) {
    const c = cols[fi]!;
    for (let i = 0; i < c.seqs.length && extra > 0; i++) {
      if (prune[fi]![i] || isHeld(c.seqs[i]!)) continue;
      prune[fi]![i] = 1;
      extra--;
    }
  }
  // Every pruned row some sink had not exported is that sink's gap: recorded, never silent.
  let forced = 0;
  const forcedRanges: [bigint, bigint][] = [];
  cols.forEach((c, fi) => {
    for (let i = 0; i < c.seqs.length; i++) {
      const s = c.seqs[i]!;
      if (!prune[fi]![i] || floor === undefined || s <= floor) continue;
      forced++;
      const last = forcedRanges[forcedRanges.length - 1];
      // A range holds consecutive seqs only, so a sink can count any part of it exactly.
      if (last && last[1] + 1n === s) last[1] = s;
      else forcedRanges.push([s, s]);
    }
  });
  const prunedRows = prune.reduce((n, m) => n + m.reduce((a, x) => a + (x ? 1 : 0), 0), 0);
  if (prunedRows === 0) return none;

  const next = nextManifest(manifest, generation + 1);
  await startGeneration(store, generation + 1);
  let through = manifest.prunedThroughSeq === null ? -1n : BigInt(manifest.prunedThroughSeq);
  for (let fi = 0; fi < manifest.files.length; fi++) {
    const f = manifest.files[fi]!;
    const mask = prune[fi]!;
    const dropped = mask.reduce((a, x) => a + (x ? 1 : 0), 0);
    for (let i = 0; i < mask.length; i++) if (mask[i] && cols[fi]!.seqs[i]! > through) through = cols[fi]!.seqs[i]!;
    if (dropped === 0) {
      await linkFile(store, generation, generation + 1, f.name);
      next.files.push(f);
    } else if (dropped < f.rows) {
      next.files.push(await rewriteFile(store, gdir, f, mask, generation + 1, schema, layout));
    }
  }
  next.prunedThroughSeq = through < 0n ? null : through.toString();
  const ranges = forcedRanges.map(([a, b]) => [a.toString(), b.toString()] as [string, string]);
  next.forcedPrunes.push(...ranges);
  await writeManifest(store.manifestPath(generation + 1), next);
  await store.swapTo(generation + 1, 'retention');
  return { partition: store.ref, prunedRows, forcedRows: forced, prunedThroughSeq: next.prunedThroughSeq, forcedRanges: ranges };
}

async function rewriteFile(
  store: PartitionStore,
  gdir: string,
  f: FileEntry,
  mask: Uint8Array,
  toGeneration: number,
  schema: DatasetSchema,
  layout: DataFileLayout,
): Promise<FileEntry> {
  const reader = await ParquetReader.open(`${gdir}/${f.name}`, scratchCounters(), f);
  const kept: RecordBatch[] = [];
  let offset = 0;
  try {
    for (let g = 0; g < reader.numRowGroups; g++) {
      for (const b of await reader.readRowGroup(g)) {
        // The kept rows as one batch (a slice when they are one run), however they interleave with
        // the pruned: rows out of time order at the age cutoff made a slice of a row or two each. @ref LLP 0108
        const rows = rowsWithKey(b, mask.subarray(offset, offset + b.numRows), 0);
        if (rows) kept.push(rows);
        offset += b.numRows;
      }
    }
  } finally {
    reader.close();
  }
  return writeDataFile(store, toGeneration, new Table(kept), schema, layout, f.committedAt);
}
