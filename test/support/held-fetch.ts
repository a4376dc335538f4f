/**
 * GETs made from a thread of their own while this thread is held (a tap that
 * blocks it, as a long encoding does, only harder): they can only be answered
 * by something that does not need this thread's event loop.
 */
import { Worker } from 'node:worker_threads';

export interface HeldAnswer {
  readonly status: number;
  readonly body: string;
}

/** GET each url in turn on another thread, then record every status and body and wake the waiter. */
const FETCHER = `
const { workerData } = require('node:worker_threads');
const flag = new Int32Array(workerData.shared, 0, 1);
const out = new Uint8Array(workerData.shared, 4);
(async () => {
  const answers = [];
  for (const url of workerData.urls) {
    try {
      const r = await fetch(url, { headers: workerData.headers });
      answers.push({ status: r.status, body: await r.text() });
    } catch (e) {
      answers.push({ status: -1, body: String(e) });
    }
  }
  out.set(new TextEncoder().encode(JSON.stringify(answers)).subarray(0, out.length));
})().finally(() => { Atomics.store(flag, 0, 1); Atomics.notify(flag, 0); });
`;

/**
 * Call from the code that holds this thread: blocks it (Atomics.wait) until every
 * GET is answered, or `boundMs` has passed. The bound only keeps a failing run from
 * hanging; what a test asserts is whether the answers came (`null` if not).
 */
export function fetchWhileHeld(urls: readonly string[], opts: { headers?: Record<string, string>; boundMs?: number } = {}): HeldAnswer[] | null {
  const shared = new SharedArrayBuffer(4 + 256 * 1024);
  const flag = new Int32Array(shared, 0, 1);
  const worker = new Worker(FETCHER, { eval: true, workerData: { urls, headers: opts.headers ?? {}, shared } });
  const waited = Atomics.wait(flag, 0, 0, opts.boundMs ?? 30_000);
  void worker.terminate();
  if (waited === 'timed-out') return null;
  const text = new TextDecoder().decode(new Uint8Array(shared, 4)).replace(/\0+$/, '');
  return JSON.parse(text) as HeldAnswer[];
}
