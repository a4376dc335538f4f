/**
 * Planning the next export unit from manifest statistics: how far `(since, until]`
 * may reach within a unit's row and byte bounds. Whole row groups are counted
 * from stats; only a row group cut by a bound is opened, and only its seq column.
 * Never cuts between equal seqs (legacy rows all share seq 0).
 * @ref LLP 0003: seq-stat pruning
 * @ref LLP 0005: write-ahead intent (the plan becomes the intent)
 */
import { SEQ_COLUMN } from './columns.js';
import { effSeq } from './manifest.js';
import type { PartitionStore } from './partition.js';
import type { RecordBatch } from 'apache-arrow';
import { type CacheStorage, LazyFile, upperBound } from './reader.js';

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
  storage: CacheStorage,
  /** The user columns the unit will read. */
  columns: readonly string[],
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
        // A bound cuts this row group: find the exact seq from its seq column. The group is
        // decoded with the columns the unit will read, so its scan finds it decoded.
        {
          const file = new LazyFile(`${snap.dir}/${f.name}`, f, storage.counters);
          let batches: RecordBatch[];
          try {
            batches = await storage.readGroup(file, g, [...columns, SEQ_COLUMN], true);
          } finally {
            file.close();
          }
          // The group's seqs as one sorted sequence over its batches, read by index, not copied.
          const vecs = batches.map((b) => b.getChild(SEQ_COLUMN));
          const sizes = batches.map((b) => b.numRows);
          const total = sizes.reduce((a, x) => a + x, 0);
          const seqAt = (i: number): bigint => {
            let k = 0;
            while (i >= sizes[k]!) i -= sizes[k++]!;
            return (vecs[k]?.get(i) as bigint | null) ?? 0n;
          };
          let first = 0;
          for (let k = 0; k < batches.length; k++) {
            const u = upperBound(vecs[k] ?? null, sizes[k]!, since);
            first += u;
            if (u < sizes[k]!) break;
          }
          const left = total - first;
          const take = Math.min(room, left);
          const cut = seqAt(first + take - 1);
          // Legacy rows share seq 0: a unit takes all of them or none.
          let n = take;
          while (n < left && seqAt(first + n) === cut) n++;
          rows += n;
          bytes += n * rowBytes;
          until = cut;
          if (n < left || rows >= limits.maxRows) return { plan: done(until, rows, bytes, oldest), forcedAbove };
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
  return clipForced((await store.peekManifest()).forcedPrunes, since);
}

function clipForced(ranges: readonly [string, string][], since: bigint): [bigint, bigint][] {
  return ranges
    .map(([a, b]) => [BigInt(a), BigInt(b)] as [bigint, bigint])
    .filter(([, hi]) => hi > since)
    .map(([lo, hi]) => [lo > since ? lo : since + 1n, hi] as [bigint, bigint]);
}
