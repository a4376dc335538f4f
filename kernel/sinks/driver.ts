/**
 * The sink driver: one tick of a sink exports each of its partitions with
 * bounded concurrency (p-limit), holding the sink instance's lock for the tick
 * so only one exporter runs it at a time. A failed partition goes to the
 * outbox and is retried with backoff on later ticks; its watermark and intent
 * make the retry export no row twice and skip none.
 */
import pLimit from 'p-limit';
import { accessError } from '../../types/access.js';
import { HypsinkError, isHypsinkError } from '../../types/errors.js';
import type { PartitionRef } from '../../types/storage.js';
import { ProcessLock } from '../io/lock.js';
import { KeyedMutex } from '../mutex.js';
import { type ExportEnv, exportPartition, type PartitionOutcome, type SinkRuntime } from './exporter.js';
import type { SinkState } from './states.js';
import { mkdirs } from '../io/mkdirs.js';

export interface DriverOptions {
  readonly concurrency: number;
  readonly lockWaitMs: number;
  readonly outboxBaseMs: number;
  readonly outboxMaxMs: number;
}

interface OutboxEntry {
  attempts: number;
  nextAt: number;
}

export interface PartitionReport extends PartitionOutcome {
  readonly partition: PartitionRef;
  readonly error: HypsinkError | null;
  /** Skipped this tick: still backing off after a failure. */
  readonly deferred: boolean;
}

export interface TickReport {
  readonly sink: string;
  readonly partitions: PartitionReport[];
  readonly rows: number;
  readonly bytes: number;
  readonly units: number;
  readonly failed: number;
}

/**
 * What a progress bar follows during a tick: the rows pending when it began
 * (counted only when asked), then each unit's rows as its destination
 * acknowledges it. @ref LLP 0035
 */
export interface TickProgress {
  readonly onPending?: (rows: number) => void;
  readonly onUnit?: (rows: number) => void;
}

const zero = (): PartitionOutcome => ({ rows: 0, bytes: 0, units: 0, gapRows: 0, rejectedRows: 0, waiting: false });

function asHypsinkError(e: unknown, sink: string): HypsinkError {
  if (isHypsinkError(e)) return e;
  // A path the sink's user may not write stays so: permanent, not a passing fault (@ref LLP 0033).
  const denied = accessError(e, { context: `sink "${sink}"` });
  if (denied) return denied;
  return new HypsinkError('HYPSINK_ERR_RETRYABLE', `sink "${sink}": ${(e as Error)?.message ?? String(e)}`, { cause: e, retryable: true });
}

export class SinkDriver {
  private readonly outbox = new Map<string, OutboxEntry>();
  /** One lock object per sink state dir in this process (configured or not). */
  private readonly locks = new Map<string, ProcessLock>();
  /** Ticks (and quiesced work) of one sink state dir in this process, one at a time. */
  private readonly ticks = new KeyedMutex();
  /** Sinks whose credentials were rejected, and the error: the daemon skips them until restarted (`hypsink ctl restart`). */
  private readonly stopped = new Map<string, HypsinkError>();

  constructor(
    private readonly env: ExportEnv,
    private readonly opts: DriverOptions,
  ) {}

  private lock(state: SinkState): ProcessLock {
    let l = this.locks.get(state.dir);
    if (!l) {
      l = new ProcessLock(state.dir, `sink "${state.name}" (${state.dir})`, { waitMs: this.opts.lockWaitMs });
      this.locks.set(state.dir, l);
    }
    return l;
  }

  /**
   * Run `fn` while no export of these sinks runs, here or in another process:
   * each sink's tick section and export lock, taken in name order (so two
   * callers cannot deadlock). A prune of rows above a watermark runs here, so
   * the intents it holds back are exactly the units that may have been shipped,
   * and no unit's planned rows change under it.
   * @ref LLP 0006: ack-coupled retention and gaps
   */
  async quiesce<T>(states: readonly SinkState[], fn: () => Promise<T>, op = 'retention'): Promise<T> {
    const sorted = [...states].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    const hold = async (i: number): Promise<T> => {
      const state = sorted[i];
      if (!state) return fn();
      await mkdirs(state.dir);
      return this.ticks.run(state.dir, () => this.lock(state).with(op, () => hold(i + 1)));
    };
    return hold(0);
  }

  /**
   * One tick. `respectBackoff` false (the `export` command) retries outbox
   * partitions now; the daemon leaves them until their backoff has passed.
   */
  async tick(
    sink: SinkRuntime,
    respectBackoff: boolean,
    onPartition?: (r: PartitionReport) => void,
    progress: TickProgress = {},
    /** Aborted: the tick ends once the units it has recorded are finished; it plans no new one (a pause). @ref LLP 0067 */
    halt?: AbortSignal,
  ): Promise<TickReport> {
    await mkdirs(sink.state.dir);
    const env: ExportEnv = halt ? { ...this.env, draining: this.env.draining ? AbortSignal.any([this.env.draining, halt]) : halt } : this.env;
    // The cross-process lock is shared within a process, so ticks of one sink in this
    // process (the daemon's first tick and a cron fire) are kept apart here.
    return this.ticks.run(sink.state.dir, () => this.lock(sink.state).with('export', async () => {
      const startedAt = new Date();
      await this.env.hooks.tickStart.promise({ sink: sink.name, startedAt });
      const partitions: PartitionRef[] = [];
      for (const ds of sink.datasets) partitions.push(...(await this.env.cache.listPartitions(ds)));
      // The watermarks must belong to the destination the config names now (LLP 0022).
      let refused: unknown;
      try {
        const replaced = await sink.state.admit(sink.destination, sink.datasets, `sink "${sink.name}"`, sink.delivers);
        if (replaced !== null) {
          this.env.log.warn(
            { sink: sink.name, from: replaced, to: sink.destination },
            `sink "${sink.name}": no unit was ever planned for ${replaced}, so nothing of it is there; its watermarks now belong to ${sink.destination}, as the config says`,
          );
        }
      } catch (e) {
        refused = e;
      }
      if (progress.onPending) progress.onPending(await this.pendingRows(sink, partitions));
      const limit = pLimit(this.opts.concurrency);
      const lock = this.lock(sink.state);
      const held = (what: string) => lock.assertHeld(what);
      const reports = await Promise.all(
        partitions.map((p) => limit(() => (refused === undefined ? this.one(env, sink, p, respectBackoff, held, progress.onUnit) : this.refuse(sink, p, refused)))),
      );
      for (const r of reports) onPartition?.(r);
      const sum = (k: 'rows' | 'bytes' | 'units') => reports.reduce((n, r) => n + r[k], 0);
      const report: TickReport = {
        sink: sink.name,
        partitions: reports,
        rows: sum('rows'),
        bytes: sum('bytes'),
        units: sum('units'),
        failed: reports.filter((r) => r.error).length,
      };
      await this.env.hooks.tickEnd.promise({ sink: sink.name, startedAt, rows: report.rows, bytes: report.bytes, units: report.units, failed: report.failed });
      return report;
    }));
  }

  /** Rows above the sink's watermarks: what this tick has to export, as `status` counts them. */
  private async pendingRows(sink: SinkRuntime, partitions: readonly PartitionRef[]): Promise<number> {
    let n = 0;
    for (const p of partitions) n += await this.env.cache.storage.countRowsSince(p, { since: (await sink.watermarks.find(p))?.continuation ?? null });
    return n;
  }

  private async one(
    env: ExportEnv,
    sink: SinkRuntime,
    p: PartitionRef,
    respectBackoff: boolean,
    held: (what: string) => Promise<void>,
    onUnit?: (rows: number) => void,
  ): Promise<PartitionReport> {
    const key = `${sink.name}\0${p.key}`;
    const entry = this.outbox.get(key);
    if (respectBackoff && (this.stopped.has(sink.name) || (entry && entry.nextAt > Date.now()))) {
      return { ...zero(), partition: p, error: null, deferred: true };
    }
    try {
      const out = await exportPartition(env, sink, p, held, onUnit);
      this.outbox.delete(key);
      if (out.units > 0) {
        await this.env.hooks.partitionExported.promise({ sink: sink.name, partition: p, rows: out.rows, bytes: out.bytes, units: out.units });
      }
      return { ...out, partition: p, error: null, deferred: false };
    } catch (e) {
      const err = asHypsinkError(e, sink.name);
      const attempts = (entry?.attempts ?? 0) + 1;
      // Back off exponentially, but never sooner than the destination asked (Retry-After).
      const backoff = Math.min(this.opts.outboxMaxMs, this.opts.outboxBaseMs * 2 ** (attempts - 1));
      const delay = Math.max(backoff, err.retryAfterMs ?? 0);
      this.outbox.set(key, { attempts, nextAt: Date.now() + delay });
      // Rejected credentials will not pass on their own: the daemon stops the sink until restarted.
      const stop = err.code === 'HYPSINK_ERR_AUTH';
      if (stop) this.stopped.set(sink.name, err);
      await this.recordError(sink, p, err);
      this.env.log.error(
        { sink: sink.name, dataset: p.dataset, source: p.source, code: err.code, attempts, retryInMs: stop ? null : delay },
        stop ? `${err.message}; sink stopped until restart` : err.message,
      );
      await this.env.hooks.partitionFailed.promise({ sink: sink.name, partition: p, error: err, willRetry: !stop });
      return { ...zero(), partition: p, error: err, deferred: false };
    }
  }

  /** The tick cannot run (the destination moved): every partition reports why, nothing is exported. */
  private async refuse(sink: SinkRuntime, p: PartitionRef, e: unknown): Promise<PartitionReport> {
    const err = asHypsinkError(e, sink.name);
    await this.recordError(sink, p, err);
    this.env.log.error({ sink: sink.name, dataset: p.dataset, source: p.source, code: err.code }, err.message);
    await this.env.hooks.partitionFailed.promise({ sink: sink.name, partition: p, error: err, willRetry: false });
    return { ...zero(), partition: p, error: err, deferred: false };
  }

  /** The last error is kept with the watermark so `status` shows it from any process. */
  private async recordError(sink: SinkRuntime, p: PartitionRef, err: HypsinkError): Promise<void> {
    try {
      const rec = await sink.watermarks.read(p);
      await sink.watermarks.write(p, rec, { ...rec, lastError: { code: err.code, message: err.message, at: new Date().toISOString() } });
    } catch {
      // The watermark itself is unreadable: the error already names it.
    }
  }

  /** The error that stopped `sink` until it is restarted, if one did. */
  stoppedBy(sink: string): HypsinkError | undefined {
    return this.stopped.get(sink);
  }

  /** `sink` is restarted (`hypsink ctl restart`): it is tried again at once, its backoff forgotten. @ref LLP 0067 */
  restart(sink: string): void {
    this.stopped.delete(sink);
    for (const key of this.outbox.keys()) if (key.startsWith(`${sink}\0`)) this.outbox.delete(key);
  }

  /** Partitions waiting in the outbox, for status. */
  outboxSize(): number {
    return this.outbox.size;
  }
}
