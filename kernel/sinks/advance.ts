/**
 * A partition's watermark for one sink, as an export moves it: the durable
 * record, and the advances of acknowledged units held in memory until the next
 * durable write (an intent, or the last write of the tick) carries them. Each
 * advance is announced (watermarkAdvanced) once it is durable, never before.
 * @ref LLP 0005: write-ahead intent
 * @ref LLP 0006: ack-coupled retention and gaps
 * @ref LLP 0014: the next intent carries the previous unit's advance
 */
import type { LifecycleHooks } from '../../types/hooks.js';
import type { Continuation, PartitionRef } from '../../types/storage.js';
import type { SinkRuntime } from './exporter.js';
import { cont, type GapStep, type UnitPlanner } from './plan.js';
import type { Intent, WatermarkRecord } from './watermarks.js';

/** A shipped unit's advance, held in memory until the next durable write carries it. */
interface Advance {
  readonly rec: WatermarkRecord;
  readonly from: Continuation | null;
  readonly unit: string;
}

/** What a shipped unit adds to the record. */
export interface UnitCounts {
  /** Rows the destination acknowledged. */
  readonly rows: number;
  /** Rows of its range the hard cap pruned before it was read. */
  readonly gap: number;
  /** Rows refused one by one (by the destination or the transforms). */
  readonly rejected: number;
}

export class Watermark {
  /** Advances not yet durable, in order; the next write carries the last one's record. */
  private pending: Advance[] = [];

  private constructor(
    private readonly sink: SinkRuntime,
    private readonly p: PartitionRef,
    private readonly hooks: LifecycleHooks,
    /** Throws unless the sink's lock is still ours: checked before each durable write. */
    private readonly held: (what: string) => Promise<void>,
    /** The durable record. */
    private rec: WatermarkRecord,
  ) {}

  /** The sink's record of `plan`'s partition; a sink's first record remembers the rows retention had pruned before it came: never its to deliver. */
  static async open(sink: SinkRuntime, plan: UnitPlanner, hooks: LifecycleHooks, held: (what: string) => Promise<void>): Promise<Watermark> {
    const p = plan.p;
    const rec = (await sink.watermarks.find(p)) ?? { ...sink.watermarks.empty(p), baseRows: await plan.prunedForAll() };
    return new Watermark(sink, p, hooks, held, rec);
  }

  /** The record as written last. */
  get durable(): WatermarkRecord {
    return this.rec;
  }

  /** The record as of every acknowledgment so far: what the next write starts from. */
  get record(): WatermarkRecord {
    return this.pending[this.pending.length - 1]?.rec ?? this.rec;
  }

  /** Some acknowledged unit's advance is not durable yet. */
  get unwritten(): boolean {
    return this.pending.length > 0;
  }

  /** Durably write `next`, which carries every pending advance, and announce them. */
  async write(next: WatermarkRecord): Promise<void> {
    const carried = this.pending;
    await this.held(`writing watermark ${this.sink.watermarks.path(this.p)}`);
    this.rec = await this.sink.watermarks.write(this.p, this.rec, next);
    this.pending = this.pending.slice(carried.length);
    for (const a of carried) {
      if (a.rec.continuation) {
        this.hooks.watermarkAdvanced.call({ sink: this.sink.name, partition: this.p, from: a.from, to: a.rec.continuation, unit: a.unit });
      }
    }
  }

  /** No rows above the watermark but pruned ranges: step over them, counting the gap. */
  stepOver(gap: GapStep): void {
    const base = this.record;
    // The last unit shipped ended where the watermark was (or earlier, if it stepped over a gap before). @ref LLP 0041
    const shippedUntil = base.shippedUntil !== undefined ? base.shippedUntil : (base.continuation?.seq ?? null);
    this.pending.push({
      rec: { ...base, continuation: cont(gap.top.toString()), gapRows: base.gapRows + gap.rows, intent: null, shippedUntil },
      from: base.continuation,
      unit: '(gap)',
    });
  }

  /** `unit` was acknowledged: the watermark moves to its `until`; `nextUp`, if recorded, is the intent now (it may ship before this advance is written). */
  advance(unit: Intent, counts: UnitCounts, nextUp: Intent | null): void {
    const { rows, gap, rejected } = counts;
    const { shippedUntil: _stepped, ...before } = this.record;
    this.pending.push({
      rec: {
        ...before,
        ...(rejected > 0 || before.rejectedRows !== undefined ? { rejectedRows: (before.rejectedRows ?? 0) + rejected } : {}),
        continuation: cont(unit.until),
        exportedRowCount: before.exportedRowCount + rows,
        gapRows: before.gapRows + gap,
        intent: nextUp,
        next: null,
        lastExportAt: new Date().toISOString(),
        lastError: null,
      },
      from: before.continuation,
      unit: unit.unit,
    });
  }
}
