/**
 * The exactly-once export of one partition for one sink instance:
 *   1. an open intent is finished first, under the same unit identity;
 *   2. the next unit is planned from the watermark and recorded as the intent —
 *      that one atomic write also carries the previous unit's advance;
 *   3. the unit is shipped idempotently (create-if-absent / batch-id ledger);
 *   4. the watermark advances to `until`, the intent clears.
 * A request sink records the next unit as `next` while the current one is in
 * flight, and sends it as soon as the current one is acknowledged.
 * Rows pruned by the hard cap before this sink had them are counted as a gap.
 * Two rules hold for every sink kind: a unit advances only when the rows
 * shipped equal the rows planned (unit.ts), and a unit read back from disk
 * keeps its identity forever: only a unit planned in this run, and refused
 * before anything of it was sent, may be re-planned smaller.
 * Each step has its module: plan.ts plans a unit (every call into the store to
 * decide one: its range, rows, gap and digest), ship.ts reads and ships it,
 * advance.ts holds the watermark's record and its advances.
 * @ref LLP 0005: write-ahead intent
 * @ref LLP 0006: ack-coupled retention and gaps
 * @ref LLP 0014: the next intent
 * @ref LLP 0018: the two kernel rules
 */
import type { LifecycleHooks } from '../../types/hooks.js';
import type { Logger } from '../../types/plugins.js';
import type { UnitLimits, UnitShipper } from '../../types/sinks.js';
import type { PartitionRef } from '../../types/storage.js';
import type { Cache } from '../cache.js';
import { fault } from '../fault.js';
import { suspectedCopy } from '../identity.js';
import type { TransformChain } from '../transform/index.js';
import { Watermark } from './advance.js';
import { cont, seqOf, UnitPlanner, waitForMore } from './plan.js';
import { keepRefused } from './rejected.js';
import { recoveredTooLarge, type Shipped, UnitShipping } from './ship.js';
import type { SinkState } from './states.js';
import type { Prefetch } from './unit.js';
import type { Intent, WatermarkStore } from './watermarks.js';

export interface ExportPolicy {
  readonly minRows: number;
  readonly maxDelayMs: number;
  readonly limits: UnitLimits;
}

export interface SinkRuntime {
  readonly name: string;
  readonly kind: 'blob' | 'request';
  readonly datasets: readonly string[];
  readonly shipper: UnitShipper;
  /** The sink's state dir: its watermarks, its lock, the destination they belong to. */
  readonly state: SinkState;
  readonly watermarks: WatermarkStore;
  readonly policy: ExportPolicy;
  /** A blob sink's root location (its destination's `describe` of a key, less the key), when known. */
  readonly root?: string;
  /** Where its units go (no secrets), checked against the one its watermarks belong to; null: unknown. */
  readonly destination: string | null;
  /** What it does to rows before they ship (length 0: nothing). @ref LLP 0046 */
  readonly transforms: TransformChain;
  /**
   * The shape of what it delivers beyond where (its transforms' identity, its
   * key layout), checked like the destination; '' for rows as cached, in the
   * default layout. @ref LLP 0049
   */
  readonly delivers: string;
}

export interface PartitionOutcome {
  rows: number;
  bytes: number;
  units: number;
  gapRows: number;
  /** Rows the destination refused one by one, kept in the sink's dead letter. @ref LLP 0042 */
  rejectedRows: number;
  /** The small-file policy held rows back this tick. */
  waiting: boolean;
}

export interface ExportEnv {
  readonly cache: Cache;
  readonly hooks: LifecycleHooks;
  readonly log: Logger;
  /** Aborts running units (the kernel closing). */
  readonly signal: AbortSignal;
  /** A drain began: no new unit is planned; the ones under way finish. */
  readonly draining?: AbortSignal;
}

/**
 * Export one partition to one sink: its recorded units first, then new ones
 * planned from the watermark, each shipped and then advanced over.
 */
export async function exportPartition(
  env: ExportEnv,
  sink: SinkRuntime,
  p: PartitionRef,
  /** Throws unless the sink's lock is still ours: checked before each durable write. */
  held: (what: string) => Promise<void> = async () => undefined,
  /** A unit's destination acknowledged it (its rows), for a progress bar. */
  onUnit?: (rows: number) => void,
): Promise<PartitionOutcome> {
  // A suspected copy exports nothing until the operator says what it is. @ref LLP 0055
  if (env.cache.copied) throw suspectedCopy(env.cache.copied, `sink "${sink.name}": ${p.dataset}/source=${p.source}`);
  const run = await PartitionExport.open(env, sink, p, held, onUnit);
  while (!env.signal.aborted) {
    // 1. An open intent is finished first; 2. else the next unit is planned and recorded as the intent.
    const unit = run.recorded() ?? (await run.planNext());
    if (!unit) break;
    // 3. It ships; null: refused as too large before anything of it was stored, and planned again smaller.
    const shipped = await run.ship(unit);
    if (!shipped) continue;
    // 4. The watermark advances to its until (durable with the next write).
    await run.advance(unit, shipped);
  }
  return run.finish();
}

/** The next unit, recorded as `next` and read while the current one was in flight. */
interface Following {
  readonly intent: Intent;
  readonly pre: Prefetch | null;
}

/** A unit acknowledged, and the one after it if it was recorded meanwhile. */
interface Acknowledged {
  readonly shipped: Shipped;
  readonly following: Following | null;
}

/** One export of one partition to one sink: the state its four steps share. */
class PartitionExport {
  readonly out: PartitionOutcome = { rows: 0, bytes: 0, units: 0, gapRows: 0, rejectedRows: 0, waiting: false };
  /**
   * Units read back from disk may have been shipped by an earlier run: they keep
   * their identity whatever the destination says of them now.
   * @ref LLP 0018: a recovered unit keeps its identity
   */
  private readonly recoveredUnits: Set<string>;
  /** The intent recorded before this run, until it is taken. */
  private open: Intent | null;
  /** The unit recorded durably as `next`: it ships once the open one is acknowledged, with no write of its own. */
  private queued: Intent | null;
  /** The body of the unit about to ship, read ahead (request sinks). */
  private ahead: Prefetch | null = null;
  private limits: UnitLimits;
  /** The unit shipping was planned again smaller, once. */
  private halved = false;

  private constructor(
    private readonly env: ExportEnv,
    private readonly sink: SinkRuntime,
    private readonly p: PartitionRef,
    private readonly plan: UnitPlanner,
    private readonly mark: Watermark,
    private readonly shipping: UnitShipping,
    private readonly onUnit: ((rows: number) => void) | undefined,
  ) {
    const rec = mark.durable;
    this.recoveredUnits = new Set([rec.intent?.unit, rec.next?.unit].filter((u): u is string => u !== undefined));
    this.open = rec.intent;
    this.queued = rec.next ?? null;
    this.limits = sink.policy.limits;
  }

  static async open(env: ExportEnv, sink: SinkRuntime, p: PartitionRef, held: (what: string) => Promise<void>, onUnit?: (rows: number) => void): Promise<PartitionExport> {
    const plan = new UnitPlanner(env.cache, sink, p);
    const mark = await Watermark.open(sink, plan, env.hooks, held);
    return new PartitionExport(env, sink, p, plan, mark, new UnitShipping(env, sink, plan), onUnit);
  }

  private stopping(): boolean {
    return this.env.signal.aborted || this.env.draining?.aborted === true;
  }

  /** Step 1: the unit recorded before this run (the open intent, else the one recorded as next), taken once. */
  recorded(): Intent | null {
    if (!this.open && this.queued) {
      this.open = this.queued;
      this.queued = null;
    }
    const unit = this.open;
    this.open = null;
    return unit;
  }

  /**
   * Step 2: plan the next unit from the watermark and record it as the intent (the
   * write carries any pending advance); null when there is none to ship now.
   */
  async planNext(): Promise<Intent | null> {
    // Draining: what is recorded is finished; nothing new is planned.
    if (this.stopping()) return null;
    const base = this.mark.record;
    const next = await this.plan.next(seqOf(base.continuation), this.limits);
    if (!next.plan) {
      if (next.gap) {
        this.mark.stepOver(next.gap);
        this.out.gapRows += next.gap.rows;
      }
      return null;
    }
    if (this.out.units === 0 && next.plan.rows < this.sink.policy.minRows) {
      // The plan is cut at the unit bounds: count every pending row before holding them back.
      const waiting = await this.plan.waiting(base.continuation);
      if (waitForMore(this.sink.policy, waiting, next.plan.oldestCommittedAt)) {
        this.out.waiting = true;
        return null;
      }
    }
    // The destination is reached while the unit's digest reads the cache. @ref LLP 0096
    if (this.out.units === 0 && this.sink.kind === 'request') {
      try {
        this.sink.shipper.warm?.(this.p);
      } catch (e) {
        // Only a head start: ship meets the same failure and reports it.
        this.env.log.debug({ sink: this.sink.name, error: (e as Error).message }, 'warm threw');
      }
    }
    const until = cont(next.plan.until);
    const digest = await this.plan.digest(seqOf(base.continuation), until.seq);
    const unit = this.plan.intent(base.continuation, until, next.plan.rows, digest, base.shippedUntil);
    const writing = this.mark.write({ ...base, intent: unit, next: null });
    if (this.sink.kind === 'request' && this.sink.shipper.reads !== 'batches') {
      // As in the look-ahead: the body is read while its intent is written. A shipper that takes
      // batches is not made to wait for the whole unit: it streams them as they are read, so the
      // destination works on the first rows while the rest are decoded. @ref LLP 0093
      writing.catch(() => undefined); // awaited below
      this.ahead = await this.shipping.read(unit, next.plan.rows);
    }
    await writing;
    fault('export.afterIntent');
    return unit;
  }

  /**
   * Step 3: ship `unit`. A request sink waits on the network: the next unit is
   * recorded and read meanwhile (not while a halved unit ships: the next one is
   * planned afresh at the full size). Null: refused as too large, planned again.
   */
  async ship(unit: Intent): Promise<Acknowledged | null> {
    const pre = this.ahead;
    this.ahead = null;
    // The next unit is planned and read once the shipper has read this one's rows: both read on
    // this thread, and a unit streamed as it is read (LLP 0093) would otherwise feed its
    // destination at half the rate while the next one is read. @ref LLP 0094
    let bodyRead: (go: boolean) => void = () => undefined;
    const read = new Promise<boolean>((resolve) => {
      bodyRead = resolve;
    });
    const queued = this.queued;
    const look = this.sink.kind === 'request' && !this.halved && (queued !== null || !this.stopping()) ? read.then((go) => (go ? this.lookAhead(unit, queued) : null)) : null;
    look?.catch(() => undefined); // awaited below, on every path
    let shipped: Shipped;
    try {
      shipped = await this.shipping.ship(unit, this.recoveredUnits.has(unit.unit), pre ?? undefined, () => bodyRead(true));
      // A unit the destination already had may be acknowledged without a read.
      bodyRead(true);
    } catch (e) {
      // A look-ahead that has not begun does not begin after a failed unit.
      bodyRead(false);
      await look?.catch(() => undefined);
      if ((e as { tooLarge?: boolean }).tooLarge) {
        if (this.recoveredUnits.has(unit.unit)) throw recoveredTooLarge(this.sink, this.p, unit, e as Error);
        if (!this.halved) {
          // Planned in this run and refused before anything of it was stored (nor anything of the
          // next unit, not sent yet): re-plan half as big, once.
          this.halved = true;
          const rows = await this.plan.rows(unit);
          this.limits = { maxRows: Math.max(1, Math.floor(rows / 2)), maxBytes: Math.max(1, Math.floor(this.limits.maxBytes / 2)) };
          await this.mark.write({ ...this.mark.record, intent: null, next: null });
          this.queued = null;
          return null;
        }
      }
      if ((e as { unsent?: boolean }).unsent && !this.recoveredUnits.has(unit.unit)) {
        // Planned in this tick and nothing of it sent (nor of the next unit, shipped only after
        // it): withdrawn, so a sink whose destination never answered is bound to nothing.
        // @ref LLP 0070
        await this.mark.write({ ...this.mark.record, intent: null, next: null }).catch(() => undefined);
        this.queued = null;
        throw e;
      }
      // Keep what was acknowledged before this unit: a retry then starts at this unit, not before it.
      if (this.mark.unwritten) await this.mark.write(this.mark.record).catch(() => undefined);
      throw e;
    }
    // The record the look-ahead wrote is the one this unit's advance builds on.
    const following = look ? await look : null;
    fault('export.afterShip');
    return { shipped, following };
  }

  /**
   * While `cur` is in flight (request sinks): plan the unit after it, record it
   * durably as `next` (the same write carries any pending advance), and read its
   * body. A unit already recorded as `next` by an earlier run is read as it is.
   * @ref LLP 0014: the next intent is written while the current unit is in flight
   */
  private async lookAhead(cur: Intent, recorded: Intent | null): Promise<Following | null> {
    if (recorded) {
      if (this.env.signal.aborted) return null;
      return { intent: recorded, pre: this.shipping.prefetch ? await this.shipping.read(recorded, await this.plan.rows(recorded)) : null };
    }
    const plan = await this.plan.ahead(BigInt(cur.until), this.limits);
    if (!plan || this.env.signal.aborted) return null;
    const until = cont(plan.until);
    const digest = await this.plan.digest(BigInt(cur.until), until.seq);
    const intent = this.plan.intent(cont(cur.until), until, plan.rows, digest);
    // The intent needs only the plan: its durable write and the body's read run together.
    const writing = this.mark.write({ ...this.mark.record, intent: cur, next: intent });
    writing.catch(() => undefined); // awaited below
    const pre = await this.shipping.read(intent, plan.rows);
    await writing;
    fault('export.afterIntent');
    return { intent, pre };
  }

  /** Step 4: `unit` was acknowledged: count it, keep the rows refused one by one, and advance the watermark over it. */
  async advance(unit: Intent, { shipped, following }: Acknowledged): Promise<void> {
    const nextUp = following?.intent ?? this.queued;
    const gap = await this.plan.gapIn(unit, shipped.seen);
    const rows = shipped.result.rows;
    // Rows the transforms refused are kept (their seqs and reasons) before the advance that counts them.
    if (shipped.refused.length > 0) await keepRefused(this.env.log, this.sink, this.p, unit, shipped.refused);
    const rejected = (shipped.result.rejected ?? 0) + shipped.refused.length;
    const out = this.out;
    out.rows += rows;
    out.rejectedRows += rejected;
    out.bytes += shipped.result.bytes;
    out.units += 1;
    out.gapRows += gap;
    this.onUnit?.(rows);
    this.mark.advance(unit, { rows, gap, rejected }, nextUp);
    this.queued = nextUp;
    this.ahead = following?.pre ?? null;
    this.halved = false;
    this.limits = this.sink.policy.limits;
  }

  /** The last write carries what is pending; a gap is said once. */
  async finish(): Promise<PartitionOutcome> {
    const { env, sink, p, out, mark } = this;
    if (mark.unwritten) {
      await mark.write(mark.record);
      fault('export.afterAdvance');
    } else if (mark.durable.lastError !== null && !env.signal.aborted) {
      // A partition that failed before and has nothing to ship now is fine again: say so in status.
      await mark.write({ ...mark.durable, lastError: null });
    }
    if (out.gapRows > 0) {
      env.log.warn(
        { sink: sink.name, dataset: p.dataset, source: p.source, gapRows: out.gapRows },
        'rows were pruned by retention before this sink exported them (gap)',
      );
      await env.hooks.gapDetected.promise({ sink: sink.name, partition: p, rows: out.gapRows });
    }
    return out;
  }
}
