/**
 * Planning the next export unit from manifest statistics: how far `(since, until]`
 * may reach within a unit's row and byte bounds. Whole row groups are counted
 * from stats; only a row group cut by a bound is opened, and only its seq column.
 * Never cuts between equal seqs (legacy rows all share seq 0).
 * @ref LLP 0003: seq-stat pruning
 * @ref LLP 0005: write-ahead intent (the plan becomes the intent)
 */
import type { ReadCounters } from '../../types/storage.js';
import { SEQ_COLUMN } from './columns.js';
import { effSeq } from './manifest.js';
import { ParquetReader } from './parquet.js';
import type { PartitionStore } from './partition.js';
import { upperBound } from './reader.js';

export interface UnitPlan {
  readonly until: string;
  readonly rows: number;
  readonly estBytes: number;
  /** Commit time of the oldest row in the unit (epoch ms), for the small-file policy. */
  readonly oldestCommittedAt: number;
}

export interface PartitionFacts {
  readonly plan: UnitPlan | null;
  /** Seq ranges pruned by the hard cap above `since` (each range: consecutive seqs, all pruned). */
  readonly forcedAbove: [bigint, bigint][];
}

export async function planUnit(
  store: PartitionStore,
  since: bigint,
  limits: { maxRows: number; maxBytes: number },
  counters: ReadCounters,
): Promise<PartitionFacts> {
  const snap = await store.snapshot();
  try {
    const m = snap.manifest;
    const forcedAbove = clipForced(m.forcedPrunes, since);
    let rows = 0;
    let bytes = 0;
    let until: bigint | null = null;
    let oldest = Number.POSITIVE_INFINITY;
    for (const f of m.files) {
      if (effSeq(f.maxSeq) <= since) continue;
      const rowBytes = f.rows > 0 ? f.bytes / f.rows : 0;
      for (let g = 0; g < f.rowGroups.length; g++) {
        const rg = f.rowGroups[g]!;
        if (effSeq(rg.maxSeq) <= since) continue;
        oldest = Math.min(oldest, f.committedAt ?? 0);
        const whole = effSeq(rg.minSeq) > since;
        // Rows that still fit; a unit always makes progress by at least one row.
        const byBytes = Math.floor((limits.maxBytes - bytes) / Math.max(rowBytes, 1e-9));
        const room = Math.min(limits.maxRows - rows, rows === 0 ? Math.max(1, byBytes) : byBytes);
        if (whole && rg.rows <= room) {
          rows += rg.rows;
          bytes += rg.rows * rowBytes;
          until = effSeq(rg.maxSeq);
          continue;
        }
        if (room <= 0) return { plan: done(until, rows, bytes, oldest), forcedAbove };
        // A bound cuts this row group: find the exact seq from its seq column.
        const reader = await ParquetReader.open(`${snap.dir}/${f.name}`, counters, f);
        try {
          const seqs: bigint[] = [];
          for (const b of await reader.readRowGroup(g, [SEQ_COLUMN])) {
            const v = b.getChild(SEQ_COLUMN);
            for (let i = upperBound(v, b.numRows, since); i < b.numRows; i++) seqs.push((v?.get(i) as bigint | null) ?? 0n);
          }
          const take = Math.min(room, seqs.length);
          const cut = seqs[take - 1]!;
          // Legacy rows share seq 0: a unit takes all of them or none.
          let n = take;
          while (n < seqs.length && seqs[n] === cut) n++;
          rows += n;
          bytes += n * rowBytes;
          until = cut;
          if (n < seqs.length || rows >= limits.maxRows) return { plan: done(until, rows, bytes, oldest), forcedAbove };
        } finally {
          reader.close();
        }
      }
    }
    return { plan: done(until, rows, bytes, oldest), forcedAbove };
  } finally {
    await snap.release();
  }
}

function done(until: bigint | null, rows: number, bytes: number, oldest: number): UnitPlan | null {
  if (until === null || rows === 0) return null;
  return { until: until.toString(), rows, estBytes: Math.round(bytes), oldestCommittedAt: Number.isFinite(oldest) ? oldest : 0 };
}

/** The hard-cap pruned ranges above `since`, from the current manifest (no data file opened). */
export async function forcedAbove(store: PartitionStore, since: bigint): Promise<[bigint, bigint][]> {
  const snap = await store.snapshot();
  try {
    return clipForced(snap.manifest.forcedPrunes, since);
  } finally {
    await snap.release();
  }
}

function clipForced(ranges: readonly [string, string][], since: bigint): [bigint, bigint][] {
  return ranges
    .map(([a, b]) => [BigInt(a), BigInt(b)] as [bigint, bigint])
    .filter(([, hi]) => hi > since)
    .map(([lo, hi]) => [lo > since ? lo : since + 1n, hi] as [bigint, bigint]);
}
