/**
 * `hypsink run`: cron schedules per sink (croner, no overlap), each tick
 * flushing the spools then exporting; optional maintenance schedule; graceful
 * drain on SIGINT/SIGTERM — stop scheduling, abort parked waits, let the
 * current units finish or abandon cleanly (an open intent is finished next run).
 *
 * Parked waits and running units end apart: `Hypsink.drain()` ends parked waits
 * (backpressure, backoff: the plugins' shutdown taps) at once, while a unit in
 * the middle of a write or POST keeps its signal and may finish within
 * `drainMs`; only `Hypsink.close()` after that aborts what still runs.
 */
import { Cron } from 'croner';
import type { Hypsink } from './runtime.js';
import type { TickReport } from './sinks/driver.js';

/** How long ticks aborted at the drain bound get to end (record their failure, release locks). */
const ABORT_GRACE_MS = 5000;

export interface DaemonOptions {
  readonly onTick?: (r: TickReport) => void;
  /** A sink's first tick in flight began (true) or its last one ended (false). */
  readonly onTicking?: (sink: string, ticking: boolean) => void;
  /** How long a drain waits for running units before aborting them (ms). Default 30 s (README "Restarts and shutdown"). */
  readonly drainMs?: number;
}

export class Daemon {
  private readonly jobs: Cron[] = [];
  private readonly running = new Set<Promise<unknown>>();
  private stopped = false;
  /** Sinks with a prompt tick asked for and not yet started. */
  private readonly requested = new Set<string>();
  /** Sinks whose tick is flushing: rows it flushes are exported by that same tick. */
  private readonly flushing = new Set<string>();
  private unlisten: (() => void) | undefined;
  /** Sinks an operator paused (`hypsink ctl pause`): no tick of theirs starts. @ref LLP 0067 */
  private readonly paused = new Set<string>();
  /** Per sink: aborted to end its tick in flight once its recorded units are finished. */
  private readonly halts = new Map<string, AbortController>();
  /** Per sink: its ticks in flight, and who waits for none to be. */
  private readonly busy = new Map<string, { n: number; idle: (() => void)[] }>();
  /** Per sink: the error its last tick threw before any partition report (null: none). */
  private readonly tickErrors = new Map<string, Error>();

  constructor(
    private readonly k: Hypsink,
    private readonly opts: DaemonOptions = {},
  ) {}

  start(): void {
    for (const sink of this.k.sinks.values()) {
      const schedule = this.k.loaded.config.sinks[sink.name]!.schedule;
      this.jobs.push(new Cron(schedule, { protect: true, catch: (e) => this.k.log.error({ err: e }, 'tick failed') }, () => this.track(this.tick(sink.name))));
    }
    const m = this.k.loaded.config.maintenance;
    if (m.schedule) {
      this.jobs.push(
        new Cron(m.schedule, { protect: true }, async () => {
          await this.track(this.k.maintain({ retention: true, compact: true, tables: true, scheduled: true }));
        }),
      );
    }
    this.unlisten = this.k.onTickRequest((sink) => this.requestTick(sink));
    // The first tick of every sink runs now, not at the first cron fire.
    for (const sink of this.k.sinks.values()) this.track(this.tick(sink.name));
  }

  /** A sink asked to export promptly (e.g. on `cacheFlushed`): one more tick, soon. */
  private requestTick(sink: string): void {
    if (this.stopped || this.requested.has(sink) || this.flushing.has(sink) || !this.k.sinks.has(sink)) return;
    this.requested.add(sink);
    setImmediate(() => {
      this.requested.delete(sink);
      this.track(this.tick(sink));
    });
  }

  private track<T>(p: Promise<T>): Promise<T> {
    const q = p.catch((e) => {
      this.k.log.error({ err: e }, 'scheduled work failed');
    });
    this.running.add(q);
    void q.finally(() => this.running.delete(q));
    return p;
  }

  async tick(sink: string): Promise<void> {
    if (this.stopped || this.paused.has(sink)) return;
    const b = this.busy.get(sink) ?? { n: 0, idle: [] };
    this.busy.set(sink, b);
    if (b.n++ === 0) this.opts.onTicking?.(sink, true);
    try {
      this.flushing.add(sink);
      try {
        await this.k.flush();
      } finally {
        this.flushing.delete(sink);
      }
      // Draining: the flushed rows are durable in the cache; no export starts now.
      if (this.stopped || this.paused.has(sink)) return;
      const [r] = await this.k.export(sink, { respectBackoff: true, halt: this.halt(sink).signal });
      this.tickErrors.delete(sink);
      if (r) this.opts.onTick?.(r);
    } catch (e) {
      this.tickErrors.set(sink, e as Error);
      throw e;
    } finally {
      if (--b.n === 0) {
        this.opts.onTicking?.(sink, false);
        for (const done of b.idle.splice(0)) done();
      }
    }
  }

  /** The abort of `sink`'s tick in flight (a new one once it was used). */
  private halt(sink: string): AbortController {
    let h = this.halts.get(sink);
    if (!h || h.signal.aborted) {
      h = new AbortController();
      this.halts.set(sink, h);
    }
    return h;
  }

  /**
   * Pause `sink`: no tick of it starts; one in flight finishes the units it has
   * recorded (they are exactly once by their intents) and plans no new one.
   * `idle` says when it has ended. @ref LLP 0067
   */
  pause(sink: string): void {
    this.paused.add(sink);
    this.halts.get(sink)?.abort();
  }

  /** Resume a paused sink: a tick of it starts now. */
  resume(sink: string): void {
    if (!this.paused.delete(sink)) return;
    this.requestTick(sink);
  }

  isPaused(sink: string): boolean {
    return this.paused.has(sink);
  }

  /** A tick of `sink` is in flight (flushing or exporting). */
  ticking(sink: string): boolean {
    return (this.busy.get(sink)?.n ?? 0) > 0;
  }

  /** The error `sink`'s last tick threw before it could report (its sink could not be built, say), if it did. */
  tickError(sink: string): Error | undefined {
    return this.tickErrors.get(sink);
  }

  /** Resolves once no tick of `sink` is in flight. */
  idle(sink: string): Promise<void> {
    const b = this.busy.get(sink);
    if (!b || b.n === 0) return Promise.resolve();
    return new Promise((done) => b.idle.push(done));
  }

  /** One more tick of `sink`, soon (after a resume or a restart). */
  tickSoon(sink: string): void {
    this.requestTick(sink);
  }

  /**
   * For a reload: stop scheduling, end every tick in flight once its recorded
   * units are finished, and wait for them and for maintenance; the kernel
   * stays open (the caller closes it). Nothing is aborted. @ref LLP 0067
   */
  async suspend(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    this.unlisten?.();
    for (const j of this.jobs) j.stop();
    for (const sink of this.k.sinks.keys()) this.halt(sink).abort();
    await Promise.all([...this.running]);
  }

  /** Drain: no new ticks, end parked waits, wait (bounded) for running units, then abort the rest and close plugins. */
  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    this.unlisten?.();
    for (const j of this.jobs) j.stop();
    const running = [...this.running];
    let deadline: NodeJS.Timeout | undefined;
    const bound = new Promise((r) => (deadline = setTimeout(r, this.opts.drainMs ?? 30_000)));
    // Parked waits end now; a unit mid-write or mid-POST is not aborted before the bound.
    const drained = Promise.all([this.k.drain().catch((e: unknown) => this.k.log.error({ err: e }, 'drain failed')), ...running]);
    await Promise.race([drained, bound]);
    clearTimeout(deadline);
    // What still runs is aborted now (close() aborts `signal` first) and ends promptly;
    // an interrupted unit keeps its intent and is finished next run under the same identity.
    const closed = this.k.close();
    let grace: NodeJS.Timeout | undefined;
    await Promise.race([Promise.all(running), new Promise((r) => (grace = setTimeout(r, ABORT_GRACE_MS)))]);
    clearTimeout(grace);
    await closed;
  }
}
