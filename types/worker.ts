/**
 * A worker thread and the calls made to it (the kernel's flush and parse
 * workers, the SDK's Parquet writer). Replies come back by call
 * number; an error that carries a hypsink code keeps it across the thread
 * boundary. The worker stops when idle (nothing asked, nothing held), and a
 * worker that exits or fails fails every call in flight with WorkerStopped, so
 * the caller can fall back to doing the work itself.
 * @ref LLP 0013: flush work off the main thread
 * @ref LLP 0079: Parquet encoded off the kernel's thread
 */
import { Worker } from 'node:worker_threads';
import { ERROR_CODES, type ErrorCode, HypsinkError } from './errors.js';

/** What a worker sends back for call `call`. */
export type Reply<T> = ({ ok: true } & T) | { ok: false; message: string; code?: string };

/** The worker exited or failed to start. */
export class WorkerStopped extends HypsinkError {
  constructor(what: string, why: string, next?: string) {
    super('HYPSINK_ERR_RETRYABLE', `${what} stopped (${why})${next ? `; ${next}` : ''}`);
  }
}

export interface WorkerThreadOptions {
  /** Names the worker in errors. */
  readonly what: string;
  /** What happens to the work when the worker stops, for the error. */
  readonly onStop?: string;
  /** How long the worker stays after its last reply with nothing asked or held; `keepIdle` changes it. */
  readonly idleMs: number;
  /** Whether the worker holds state for the owner (then it is not idle). */
  readonly holding?: () => boolean;
}

/** A worker entry beside `from` (an import.meta.url): `name`.ts when running from sources, `name`.js compiled. */
export function workerEntry(name: string, from: string): URL {
  return new URL(`./${name}${from.endsWith('.ts') ? '.ts' : '.js'}`, from);
}

export class WorkerThread<Req extends object, Rep extends object> {
  private worker: Worker | undefined;
  private readonly calls = new Map<number, { resolve: (r: Rep) => void; reject: (e: Error) => void }>();
  private nextCall = 0;
  private idle: NodeJS.Timeout | undefined;
  private idleMs: number;

  constructor(
    private readonly entry: URL,
    private readonly opts: WorkerThreadOptions,
  ) {
    this.idleMs = opts.idleMs;
  }

  /**
   * From now on, stop the worker `ms` after it goes idle (a server whose
   * requests come seconds apart keeps a worker it would otherwise start again
   * for each, LLP 0088). A worker idle now is timed again from now.
   */
  keepIdle(ms: number): void {
    this.idleMs = ms;
    if (this.idle !== undefined && this.worker !== undefined) this.idleLater();
  }

  call(m: Req, transfer: ArrayBuffer[] = []): Promise<Rep> {
    const w = this.start();
    clearTimeout(this.idle);
    // A call in flight holds the process open (its caller awaits a reply no handle would keep alive).
    w.ref();
    const call = ++this.nextCall;
    return new Promise((resolve, reject) => {
      this.calls.set(call, { resolve, reject });
      w.postMessage({ ...m, call }, transfer);
    });
  }

  get running(): boolean {
    return this.worker !== undefined;
  }

  /** With nothing asked of it and nothing held, stop the worker after a while. */
  idleLater(): void {
    clearTimeout(this.idle);
    if (this.calls.size === 0 && !this.opts.holding?.()) this.idle = setTimeout(() => void this.close(), this.idleMs).unref();
  }

  async close(): Promise<void> {
    clearTimeout(this.idle);
    const w = this.worker;
    this.worker = undefined;
    if (w) await w.terminate();
  }

  private start(): Worker {
    if (this.worker) return this.worker;
    // Compiled (dist/), a worker is plain JavaScript. Run from sources (tests, the bench), it
    // registers the TypeScript loader the main thread runs under first; only then is tsx needed.
    const w = this.entry.pathname.endsWith('.ts')
      ? new Worker(`import(${JSON.stringify(import.meta.resolve('tsx/esm/api'))}).then((m) => { m.register(); return import(${JSON.stringify(this.entry.href)}); })`, { eval: true })
      : new Worker(this.entry);
    w.on('message', (r: Reply<Rep> & { call: number }) => {
      const pending = this.calls.get(r.call);
      if (!pending) return;
      this.calls.delete(r.call);
      if (this.calls.size === 0) w.unref();
      if (r.ok) pending.resolve(r as unknown as Rep);
      else if (r.code !== undefined && r.code in ERROR_CODES) pending.reject(new HypsinkError(r.code as ErrorCode, r.message));
      else pending.reject(new Error(`${this.opts.what}: ${r.message}`));
      this.idleLater();
    });
    const fail = (e: Error) => {
      if (this.worker === w) this.worker = undefined;
      for (const [call, p] of this.calls) {
        this.calls.delete(call);
        p.reject(new WorkerStopped(this.opts.what, e.message, this.opts.onStop));
      }
    };
    w.on('error', fail);
    w.on('exit', (code) => fail(new Error(`exited with code ${code}`)));
    // An idle worker never holds the process open. After the listeners: adding a 'message'
    // listener refs the worker again, and an unref before it held every process open until
    // the idle timer closed the worker (idleMs after its last reply). @ref LLP 0079
    w.unref();
    this.worker = w;
    return w;
  }
}

/** The worker side: answer each message with `handle`'s reply (or its error), transferring what it names. */
export function serve<Req extends { call: number }, Rep extends object>(
  port: import('node:worker_threads').MessagePort,
  handle: (m: Req) => Promise<{ reply: Rep; transfer?: ArrayBuffer[] }>,
): void {
  port.on('message', (m: Req) => {
    handle(m).then(
      ({ reply, transfer }) => port.postMessage({ ...reply, ok: true, call: m.call }, transfer ?? []),
      (e: unknown) => {
        const err = e as { message?: string; code?: string };
        port.postMessage({ call: m.call, ok: false, message: String(err?.message ?? e), code: err?.code });
      },
    );
  });
}
