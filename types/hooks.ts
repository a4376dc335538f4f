/**
 * The lifecycle, in one place. The kernel declares these hooks (kernel/hooks.ts)
 * and is their only caller; plugins get the tap-only view below.
 */
import type { AsyncParallelHook, AsyncSeriesHook, SyncHook } from 'tapable';
import type { Continuation, PartitionRef } from './storage.js';

export interface FlushedEvent {
  readonly partitions: readonly { partition: PartitionRef; rows: number; highWater: string }[];
}
export interface RetentionEvent {
  readonly partition: PartitionRef;
  readonly prunedRows: number;
  readonly prunedThroughSeq: string | null;
  /** Rows pruned before every sink exported them (forced by the hard cap). */
  readonly forcedRows: number;
}
export interface CompactionEvent {
  readonly partition: PartitionRef;
  readonly generation: number;
  readonly rowsBefore: number;
  readonly rowsAfter: number;
}
export interface TickEvent {
  readonly sink: string;
  readonly startedAt: Date;
}
export interface TickEndEvent extends TickEvent {
  readonly rows: number;
  readonly bytes: number;
  readonly units: number;
  readonly failed: number;
}
export interface PartitionExportedEvent {
  readonly sink: string;
  readonly partition: PartitionRef;
  readonly rows: number;
  readonly bytes: number;
  readonly units: number;
}
export interface PartitionFailedEvent {
  readonly sink: string;
  readonly partition: PartitionRef;
  readonly error: Error;
  /** Kept in the outbox and retried with backoff. */
  readonly willRetry: boolean;
}
export interface WatermarkAdvancedEvent {
  readonly sink: string;
  readonly partition: PartitionRef;
  readonly from: Continuation | null;
  readonly to: Continuation;
  readonly unit: string;
}
export interface GapEvent {
  readonly sink: string;
  readonly partition: PartitionRef;
  /** Rows pruned before this sink exported them. */
  readonly rows: number;
}

/** Hook kinds, and why: notifications that may do I/O are AsyncSeries (ordered, awaited). */
export interface LifecycleHooks {
  /** After a flush commits: a sink may export promptly. */
  readonly cacheFlushed: AsyncSeriesHook<[FlushedEvent]>;
  readonly retentionDone: AsyncSeriesHook<[RetentionEvent]>;
  readonly compactionDone: AsyncSeriesHook<[CompactionEvent]>;
  readonly tickStart: AsyncSeriesHook<[TickEvent]>;
  readonly tickEnd: AsyncSeriesHook<[TickEndEvent]>;
  readonly partitionExported: AsyncSeriesHook<[PartitionExportedEvent]>;
  readonly partitionFailed: AsyncSeriesHook<[PartitionFailedEvent]>;
  /**
   * Sync: fired inside the export loop right after the durable write that
   * carries the advance; must not block. One write may carry several units'
   * advances (fired in order), so the watermark on disk may already be past `to`.
   */
  readonly watermarkAdvanced: SyncHook<[WatermarkAdvancedEvent]>;
  readonly gapDetected: AsyncSeriesHook<[GapEvent]>;
  /**
   * A drain begins (SIGINT/SIGTERM, or the kernel closing): end parked waits at
   * once and start nothing new; units on the wire may finish, and the kernel
   * closes every shipper after. Fan-out: bounded by the slowest plugin, not the sum.
   */
  readonly shutdown: AsyncParallelHook<[]>;
}

type TapOnly<H> = H extends SyncHook<infer A>
  ? Pick<SyncHook<A>, 'tap'>
  : H extends AsyncSeriesHook<infer A>
    ? Pick<AsyncSeriesHook<A>, 'tap' | 'tapPromise'>
    : H extends AsyncParallelHook<infer A>
      ? Pick<AsyncParallelHook<A>, 'tap' | 'tapPromise'>
      : never;

/** What a plugin sees: it can tap, never call. */
export type HookTaps = { readonly [K in keyof LifecycleHooks]: TapOnly<LifecycleHooks[K]> };
