/**
 * What `hypsink run` is doing, for its API (`hypsink ctl`): the kernel and the
 * daemon that ticks it, each sink's run state (running, paused, failed), and
 * the operator's verbs: pause, resume and restart one sink, reload the config.
 *
 * A reload opens a second kernel from the config file and builds every sink
 * before it touches the running one: a config that does not load, a plugin
 * that does not activate, or a sink that does not build refuses the reload
 * and changes nothing. Only then are the running ticks ended at their unit
 * boundary (not aborted), the old kernel closed, and the new one scheduled.
 *
 * The last status reading is kept: while the kernel is busy the API answers
 * from it (with when it was read) and the run state as it is now, rather than
 * waiting for turns of a thread the tick holds. @ref LLP 0076
 * @ref LLP 0067
 */
import { HypsinkError, isHypsinkError } from '../../types/errors.js';
import { Daemon, type DaemonOptions } from '../daemon.js';
import type { Hypsink, SinkStatus, StatusReport } from '../runtime.js';
import type { TickReport } from '../sinks/driver.js';

export type SinkRunState = 'running' | 'paused' | 'failed';
export type DaemonState = 'running' | 'reloading' | 'stopping';

/** An error as the API answers it. */
export interface ErrorBody {
  readonly code: string;
  readonly message: string;
  readonly hint: string;
}

export interface LastTick {
  readonly at: string;
  readonly rows: number;
  readonly bytes: number;
  readonly units: number;
  /** Partitions that failed in it. */
  readonly failed: number;
}

/** One sink as `GET /v1/sinks/<name>` shows it: `status --json`'s sink, and how the daemon runs it. */
export interface SinkControlStatus extends SinkStatus {
  readonly state: SinkRunState;
  /** Why it is failed: the error that stopped it until a restart. */
  readonly error: ErrorBody | null;
  /** A tick of it is in flight. */
  readonly ticking: boolean;
  readonly lastTick: LastTick | null;
  /** The error its last tick threw before exporting anything (its sink could not be built, say), else null. */
  readonly lastTickError: ErrorBody | null;
  /** When its partitions' figures were read (during a tick the API answers the last reading; the run state is current). @ref LLP 0076 */
  readonly readAt: string;
}

export interface ControlStatus extends Omit<StatusReport, 'sinks'> {
  readonly daemon: { readonly state: DaemonState; readonly config: string | null; readonly startedAt: string; readonly reloadedAt: string | null };
  readonly sinks: SinkControlStatus[];
  /** When the partitions' figures were read: the reading began then. @ref LLP 0076 */
  readonly readAt: string;
}

export interface ReadyStatus {
  readonly ready: boolean;
  readonly state: DaemonState;
  readonly failed: string[];
}

export interface ReloadResult {
  readonly config: string | null;
  readonly sinks: string[];
  readonly added: string[];
  readonly removed: string[];
  /** Sinks in both configs whose entry changed. */
  readonly changed: string[];
}

export interface SupervisorOptions {
  /** Open a kernel from the config as it is now (the config file read again). */
  readonly open: () => Promise<Hypsink>;
  readonly daemon?: DaemonOptions;
}

/** An error as the API answers it: its code, message and what to do next. */
export function errorBody(e: unknown): ErrorBody {
  if (isHypsinkError(e)) return { code: e.code, message: e.message, hint: e.hint };
  const err = new HypsinkError('HYPSINK_ERR_UNEXPECTED', e instanceof Error ? e.message : String(e), { cause: e });
  return { code: err.code, message: err.message, hint: err.hint };
}

export class Supervisor {
  private k: Hypsink;
  private d: Daemon;
  private phase: DaemonState = 'running';
  private readonly startedAt = new Date().toISOString();
  private reloadedAt: string | null = null;
  /** Paused by the operator: kept over a reload for sinks of the same name. */
  private readonly paused = new Set<string>();
  private readonly lastTicks = new Map<string, LastTick>();
  /** Reloads, restarts and the stop run one at a time. */
  private queue: Promise<unknown> = Promise.resolve();
  private readonly swapListeners = new Set<(k: Hypsink) => void>();
  /** The last status reading and the kernel it was read from. @ref LLP 0076 */
  private last: { readonly k: Hypsink; readonly report: StatusReport; readonly readAt: string } | null = null;
  private reading: Promise<ControlStatus> | null = null;
  private readonly changeListeners = new Set<() => void>();

  constructor(
    k: Hypsink,
    private readonly opts: SupervisorOptions,
  ) {
    this.k = k;
    this.d = this.daemonFor(k);
  }

  /** The kernel running now (a reload replaces it). */
  get kernel(): Hypsink {
    return this.k;
  }

  get daemon(): Daemon {
    return this.d;
  }

  get state(): DaemonState {
    return this.phase;
  }

  /** Hear of each kernel a reload puts in place (metrics follow it). Returns the unsubscribe. */
  onSwap(listener: (k: Hypsink) => void): () => void {
    this.swapListeners.add(listener);
    return () => this.swapListeners.delete(listener);
  }

  /**
   * Hear of each change of what `snapshot()` shows: a run state (a tick begins
   * or ends, a verb, the daemon's state) or a new reading. Returns the unsubscribe.
   */
  onChange(listener: () => void): () => void {
    this.changeListeners.add(listener);
    return () => this.changeListeners.delete(listener);
  }

  private changed(): void {
    for (const l of this.changeListeners) l();
  }

  private daemonFor(k: Hypsink): Daemon {
    const onTick = this.opts.daemon?.onTick;
    const onTicking = this.opts.daemon?.onTicking;
    return new Daemon(k, {
      ...this.opts.daemon,
      onTick: (r: TickReport) => {
        this.lastTicks.set(r.sink, { at: new Date().toISOString(), rows: r.rows, bytes: r.bytes, units: r.units, failed: r.failed });
        onTick?.(r);
        this.changed();
      },
      onTicking: (sink, ticking) => {
        onTicking?.(sink, ticking);
        this.changed();
      },
    });
  }

  start(): void {
    // Pauses first: the daemon ticks every sink as it starts.
    for (const s of this.paused) if (this.k.sinks.has(s)) this.d.pause(s);
    this.d.start();
  }

  /** Run `fn` after every reload, restart or stop asked for before it. */
  private serial<T>(fn: () => Promise<T>): Promise<T> {
    const next = this.queue.then(fn);
    this.queue = next.catch(() => undefined);
    return next;
  }

  private refuseWhileStopping(what: string): void {
    if (this.phase === 'stopping') {
      throw new HypsinkError('HYPSINK_ERR_ABORTED', `${what}: hypsink run is shutting down`, { hint: 'Nothing was changed; start hypsink run again to go on.' });
    }
  }

  /** The sink's run state and its partitions. Throws for a sink not in the running config. */
  async sink(name: string): Promise<SinkControlStatus> {
    this.k.entry(name);
    const s = await this.status();
    return s.sinks.find((x) => x.name === name)!;
  }

  /** `status --json` read now, with each sink's run state and the daemon's; kept as the last reading. */
  async status(): Promise<ControlStatus> {
    const k = this.k;
    const d = this.d;
    const readAt = new Date().toISOString();
    const report = await k.status();
    if (k === this.k) this.last = { k, report, readAt };
    const s = this.compose(k, d, report, readAt);
    this.changed();
    return s;
  }

  /** A new reading, unless one is under way: then that one. */
  refresh(): Promise<ControlStatus> {
    this.reading ??= this.status().finally(() => {
      this.reading = null;
    });
    return this.reading;
  }

  /**
   * The last reading's figures with the run state as it is now, without a turn
   * of the kernel's work; null before the running kernel's first reading. @ref LLP 0076
   */
  snapshot(): ControlStatus | null {
    const last = this.last;
    return last && last.k === this.k ? this.compose(last.k, this.d, last.report, last.readAt) : null;
  }

  private compose(k: Hypsink, d: Daemon, report: StatusReport, readAt: string): ControlStatus {
    const sinks = report.sinks.map((s): SinkControlStatus => {
      const stop = k.driver.stoppedBy(s.name);
      const thrown = d.tickError(s.name);
      return {
        ...s,
        state: d.isPaused(s.name) ? 'paused' : stop ? 'failed' : 'running',
        error: stop ? errorBody(stop) : null,
        ticking: d.ticking(s.name),
        lastTick: this.lastTicks.get(s.name) ?? null,
        lastTickError: thrown ? errorBody(thrown) : null,
        readAt,
      };
    });
    return {
      ...report,
      daemon: { state: this.phase, config: k.loaded.file, startedAt: this.startedAt, reloadedAt: this.reloadedAt },
      sinks,
      readAt,
    };
  }

  /** Ready: running (not reloading or stopping) with no sink failed. */
  ready(): ReadyStatus {
    const failed = [...this.k.sinks.keys()].filter((s) => !this.d.isPaused(s) && this.k.driver.stoppedBy(s) !== undefined);
    return { ready: this.phase === 'running' && failed.length === 0, state: this.phase, failed };
  }

  /**
   * Pause a sink: no tick of it starts; one in flight finishes the units it has
   * recorded and plans no new one. With `wait`, resolves once it has ended.
   */
  async pause(name: string, wait = true): Promise<SinkControlStatus> {
    this.refuseWhileStopping(`pause sink "${name}"`);
    this.k.entry(name);
    this.paused.add(name);
    this.d.pause(name);
    this.changed();
    if (wait) await this.d.idle(name);
    this.k.log.info({ sink: name }, 'sink paused');
    return this.sink(name);
  }

  /** Resume a paused sink: a tick of it starts now. */
  async resume(name: string): Promise<SinkControlStatus> {
    this.refuseWhileStopping(`resume sink "${name}"`);
    this.k.entry(name);
    const was = this.paused.delete(name);
    this.d.resume(name);
    this.changed();
    if (was) this.k.log.info({ sink: name }, 'sink resumed');
    return this.sink(name);
  }

  /**
   * Restart a sink: its tick in flight ends at its unit boundary, then it is
   * built again from the running config (its shipper and connections anew),
   * its stop and backoff forgotten, and a tick of it starts (unless paused).
   */
  restart(name: string): Promise<SinkControlStatus> {
    return this.serial(async () => {
      this.refuseWhileStopping(`restart sink "${name}"`);
      const k = this.k;
      const d = this.d;
      k.entry(name);
      const paused = d.isPaused(name);
      d.pause(name);
      try {
        await d.idle(name);
        await k.restartSink(name);
      } finally {
        if (!paused) d.resume(name);
        this.changed();
      }
      k.log.info({ sink: name }, 'sink restarted');
      return this.sink(name);
    });
  }

  /**
   * Reload the config: a config that does not load or whose sinks do not all
   * build is refused (thrown) and the running one stays; a valid one replaces
   * the kernel, its sinks and schedules. Pauses carry over by sink name.
   */
  reload(): Promise<ReloadResult> {
    return this.serial(async () => {
      this.refuseWhileStopping('reload');
      const old = this.k;
      const next = await this.opts.open();
      try {
        await next.buildSinks();
      } catch (e) {
        await next.close().catch(() => undefined);
        throw e;
      }
      if (this.phase === 'stopping') {
        await next.close();
        this.refuseWhileStopping('reload');
      }
      this.phase = 'reloading';
      this.changed();
      try {
        // The running ticks end at their unit boundary: nothing is aborted, every intent is closed.
        await this.d.suspend();
        this.k = next;
        this.d = this.daemonFor(next);
        for (const s of [...this.paused]) if (!next.sinks.has(s)) this.paused.delete(s);
        this.start();
      } finally {
        if (this.phase === 'reloading') this.phase = 'running';
        this.changed();
      }
      for (const l of this.swapListeners) l(next);
      await old.close().catch((e: unknown) => next.log.warn({ err: e }, 'closing the kernel of the old config failed'));
      this.reloadedAt = new Date().toISOString();
      const was = old.loaded.config.sinks;
      const now = next.loaded.config.sinks;
      const result: ReloadResult = {
        config: next.loaded.file,
        sinks: Object.keys(now),
        added: Object.keys(now).filter((s) => !(s in was)),
        removed: Object.keys(was).filter((s) => !(s in now)),
        changed: Object.keys(now).filter((s) => s in was && JSON.stringify(was[s]) !== JSON.stringify(now[s])),
      };
      next.log.info({ ...result }, 'config reloaded');
      return result;
    });
  }

  /** Stop: after any reload or restart under way, the running daemon drains (Daemon.stop). */
  stop(): Promise<void> {
    if (this.phase === 'stopping') return this.queue.then(() => undefined);
    this.phase = 'stopping';
    this.changed();
    return this.serial(() => this.d.stop());
  }
}
