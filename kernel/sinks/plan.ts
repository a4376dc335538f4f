/**
 * Planning a partition's units: every call an export makes into the store to
 * decide what a unit is. The next unit's range and rows within the sink's
 * limits (the planner, from manifest stats), the rows the hard cap pruned above
 * a watermark (a gap), the rows waiting under the small-file policy, the rows
 * a recorded intent must ship, and the digest of the rows a unit ships. The
 * intent that records a plan is built here too, one way for every caller.
 * @ref LLP 0005: write-ahead intent (the plan becomes the intent)
 * @ref LLP 0006: ack-coupled retention and gaps
 * @ref LLP 0054: a unit's digest
 */
import type { DatasetSchema } from '../../types/schema.js';
import type { UnitLimits } from '../../types/sinks.js';
import type { Continuation, PartitionRef } from '../../types/storage.js';
import type { Cache } from '../cache.js';
import type { PartitionStore } from '../store/partition.js';
import { forcedAbove, planUnit, type UnitPlan } from '../store/planner.js';
import { unitDigest } from './digest.js';
import type { ExportPolicy, SinkRuntime } from './exporter.js';
import type { SeqRuns } from './unit.js';
import type { Intent } from './watermarks.js';

export const cont = (seq: string): Continuation => ({ v: 1, seq });
/** A watermark as the seq below a unit's first row: -1 for none. */
export const seqOf = (c: Continuation | null) => (c ? BigInt(c.seq) : -1n);
export const sinceOf = (i: Intent) => (i.since === null ? null : cont(i.since));

/** Seqs the hard cap pruned above the watermark, with no row left to plan: step the watermark over them. */
export interface GapStep {
  /** The last pruned seq: the watermark after the step. */
  readonly top: bigint;
  readonly rows: number;
}

/** What a partition holds above a watermark: the next unit, or else the gap to step over (or nothing). */
export interface NextUnit {
  readonly plan: UnitPlan | null;
  readonly gap: GapStep | null;
}

/** Rows in consecutive-seq ranges that fall in (lo, hi]. */
function countIn(ranges: readonly [bigint, bigint][], lo: bigint, hi: bigint): number {
  let n = 0n;
  for (const [a, b] of ranges) {
    const from = a > lo ? a : lo + 1n;
    const to = b < hi ? b : hi;
    if (to >= from) n += to - from + 1n;
  }
  return Number(n);
}

/** No rows above `since` but pruned ranges: how far the watermark steps over them, and the rows it counts as a gap. */
function gapStep(since: bigint, forced: readonly [bigint, bigint][]): GapStep | null {
  // biome-ignore lint/complexity/useMathMinMax: bigints, which Math.max does not take
  const top = forced.reduce((m, [, b]) => (b > m ? b : m), since);
  if (top <= since) return null;
  return { top, rows: countIn(forced, since, top) };
}

/** The small-file policy: hold back fewer than `minRows` rows until the oldest has waited `maxDelayMs`. */
export function waitForMore(policy: ExportPolicy, pendingRows: number, oldestCommittedAt: number): boolean {
  if (pendingRows >= policy.minRows) return false;
  return Date.now() - oldestCommittedAt < policy.maxDelayMs;
}

/**
 * The planning of one partition's units for one sink: the one place an export
 * asks the store what a unit is.
 */
export class UnitPlanner {
  private readonly store: PartitionStore;
  /** The dataset's schema as this export found it: what units planned now are read with. */
  readonly schema: DatasetSchema;
  private readonly columns: readonly string[];

  constructor(
    private readonly cache: Cache,
    private readonly sink: Pick<SinkRuntime, 'shipper' | 'transforms'>,
    readonly p: PartitionRef,
  ) {
    this.store = cache.store(p);
    this.schema = cache.schema(p.dataset);
    this.columns = this.schema.columns.map((c) => c.name);
  }

  /** Rows retention pruned that no sink owes: where a sink's first record starts counting. */
  prunedForAll(): Promise<number> {
    return prunedForAll(this.cache, this.p);
  }

  /** The unit after `since` within `limits`; without one, the gap above `since` to step over. */
  async next(since: bigint, limits: UnitLimits): Promise<NextUnit> {
    const facts = await planUnit(this.store, since, limits, this.cache.storage, this.columns);
    return { plan: facts.plan, gap: facts.plan ? null : gapStep(since, facts.forcedAbove) };
  }

  /**
   * The unit after `since`, planned while the one before it is in flight. Its rows
   * cannot change before it ships: the tick holds the sink's lock, and a prune of
   * rows above a watermark waits for it (LLP 0006); other prunes stay below.
   * @ref LLP 0011: performance bounds
   */
  async ahead(since: bigint, limits: UnitLimits): Promise<UnitPlan | null> {
    const { plan } = await planUnit(this.cache.store(this.p), since, limits, this.cache.storage, this.columns);
    return plan;
  }

  /** Every row above the watermark `since`, beyond the unit bounds a plan is cut at. */
  waiting(since: Continuation | null): Promise<number> {
    return this.cache.storage.countRowsSince(this.p, { since });
  }

  /** The rows a unit must ship: recorded with its intent, or counted from the cache for intents written before that. */
  async rows(i: Intent): Promise<number> {
    return i.rows ?? (await this.count(sinceOf(i), cont(i.until)));
  }

  /** The rows in `(since, until]`. */
  count(since: Continuation | null, until: Continuation): Promise<number> {
    return this.cache.storage.countRowsSince(this.p, { since, until });
  }

  /** The digest of the rows in `(since, until]`. @ref LLP 0054 */
  digest(since: bigint, until: string): Promise<string> {
    return unitDigest(this.cache, this.p, since, until);
  }

  /** The rows of a shipped unit the hard cap pruned before it was read (a gap): pruned in its range, and not among the seqs it read. */
  async gapIn(i: Intent, seen: SeqRuns): Promise<number> {
    const since = seqOf(sinceOf(i));
    const forced = await forcedAbove(this.store, since);
    const forcedSeen = seen.reduce((n, [a, b]) => n + countIn(forced, a - 1n, b), 0);
    return Math.max(0, countIn(forced, since, BigInt(i.until)) - forcedSeen);
  }

  /**
   * The intent that records a unit planned now: its label, the rows it must ship
   * (counted before the ship), the columns and transforms it ships with, and its digest.
   */
  intent(
    since: Continuation | null,
    until: Continuation,
    rows: number,
    digest: string,
    /** Where the last unit shipped ended, when the watermark stepped over a gap since. */
    prior?: string | null,
  ): Intent {
    return {
      since: since?.seq ?? null,
      until: until.seq,
      unit: this.sink.shipper.unitId(this.p, since, until),
      // Counted before the ship, and kept with the intent: what the unit must ship.
      rows,
      columns: this.schema.columns,
      ...(this.sink.transforms.identity ? { transforms: this.sink.transforms.identity } : {}),
      // What ships, fixed with the label: a retry that finds other rows here is refused. @ref LLP 0054
      digest,
      // The watermark stepped over a gap since the last unit shipped: where that one ended.
      ...(prior !== undefined ? { prior } : {}),
    };
  }
}

/**
 * Rows retention pruned from a partition that were nobody's gap (every sink had
 * them, or no sink held them): what a sink that comes later never owes.
 */
export async function prunedForAll(cache: Cache, p: PartitionRef): Promise<number> {
  const stats = await cache.storage.stats(p);
  const forced = (await forcedAbove(cache.store(p), -1n)).reduce((n, [a, b]) => n + Number(b - a + 1n), 0);
  return Math.max(0, stats.committedRows - stats.rows - forced);
}
