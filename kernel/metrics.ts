/**
 * Prometheus metrics for `hypsink run --metrics-port p` (prom-client). Counters
 * come from lifecycle hooks; gauges (pending rows, watermark, gap rows) are read
 * from the watermark store and manifests at scrape time, so they are right even
 * for exports done by another process; during a tick, a scrape shows the last
 * reading instead of waiting for the tick (LLP 0068).
 */
import { Worker } from 'node:worker_threads';
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import { HypsinkError } from '../types/errors.js';
import type { Busy, Hypsink } from './runtime.js';

/** The port comes from the command line: a port taken or not ours to take is the operator's to change, not a crash. */
function listenError(e: NodeJS.ErrnoException, port: number, host: string): Error {
  const at = `${host}:${port}`;
  if (e.code === 'EADDRINUSE') {
    return new HypsinkError('HYPSINK_ERR_CONFIG', `metrics port ${port}: ${at} is already in use (EADDRINUSE)`, {
      cause: e,
      hint: `Choose another --metrics-port, or stop the process that listens on ${at} (ss -ltnp shows it); then run again.`,
    });
  }
  if (e.code === 'EACCES') {
    return new HypsinkError('HYPSINK_ERR_CONFIG', `metrics port ${port}: this user may not listen on ${at} (EACCES)`, {
      cause: e,
      hint: 'Choose another --metrics-port (1024 or above needs no privileges); then run again.',
    });
  }
  return e;
}

export function createMetrics(k: Hypsink): Metrics {
  const registry = new Registry();
  const labels = ['sink', 'dataset', 'source'] as const;
  const rows = new Counter({ name: 'hypsink_exported_rows_total', help: 'Rows exported', labelNames: labels, registers: [registry] });
  const bytes = new Counter({ name: 'hypsink_exported_bytes_total', help: 'Bytes exported', labelNames: labels, registers: [registry] });
  const units = new Counter({ name: 'hypsink_units_committed_total', help: 'Units (blobs, batches) committed', labelNames: labels, registers: [registry] });
  const failures = new Counter({ name: 'hypsink_partition_failures_total', help: 'Partition export failures', labelNames: labels, registers: [registry] });
  const ticks = new Histogram({
    name: 'hypsink_tick_duration_seconds',
    help: 'Duration of one sink tick',
    labelNames: ['sink'],
    buckets: [0.01, 0.05, 0.1, 0.5, 1, 5, 15, 60, 300],
    registers: [registry],
  });
  const pending = new Gauge({ name: 'hypsink_pending_rows', help: 'Rows above the watermark', labelNames: labels, registers: [registry] });
  const gap = new Gauge({ name: 'hypsink_gap_rows', help: 'Rows pruned before this sink exported them', labelNames: labels, registers: [registry] });
  const watermark = new Gauge({ name: 'hypsink_watermark_seq', help: 'Watermark seq (-1: nothing exported)', labelNames: labels, registers: [registry] });

  const l = (sink: string, p: { dataset: string; source: string }) => ({ sink, dataset: p.dataset, source: p.source });
  k.hooks.partitionExported.tap('metrics', (e) => {
    rows.inc(l(e.sink, e.partition), e.rows);
    bytes.inc(l(e.sink, e.partition), e.bytes);
    units.inc(l(e.sink, e.partition), e.units);
  });
  k.hooks.partitionFailed.tap('metrics', (e) => failures.inc(l(e.sink, e.partition)));
  k.hooks.tickEnd.tap('metrics', (e) => ticks.observe({ sink: e.sink }, (Date.now() - e.startedAt.getTime()) / 1000));

  // Gauges are refreshed from durable state: one refresh at a time, and a scrape that comes
  // while one runs is answered by it (or by the next one it starts).
  let refreshing: Promise<void> | null = null;
  const refresh = (): Promise<void> => {
    refreshing ??= (async () => {
      try {
        const s = await k.status();
        for (const sink of s.sinks) {
          for (const p of sink.partitions) {
            pending.set(l(sink.name, p), p.pendingRows);
            gap.set(l(sink.name, p), p.gapRows);
            watermark.set(l(sink.name, p), p.watermark === null ? -1 : Number(p.watermark));
          }
        }
        refreshed.set(Date.now() / 1000);
      } finally {
        refreshing = null;
      }
    })();
    return refreshing;
  };
  const refreshed = new Gauge({
    name: 'hypsink_status_refreshed_timestamp_seconds',
    help: 'When the pending, gap and watermark gauges were last read from durable state (during a tick a scrape shows the last reading)',
    registers: [registry],
  });
  return { registry, refresh, busy: k.busy };
}

/**
 * The server answers from a thread of its own with the last exposition the
 * kernel's thread rendered. A tick holds the kernel's thread in stretches of
 * decoding and encoding, and `status()` needs many turns of it, so a scrape
 * answered there waited for the tick (2–11 s). While no flush, export or
 * maintenance runs, the server asks the kernel's thread for a fresh rendering
 * and waits for it (the gauges read at scrape time); while one runs it answers
 * at once with the last rendering and asks for a new one, for the next scrape.
 * A scrape still waiting when work begins is answered then.
 * @ref LLP 0068
 */
const SERVER = `
const { parentPort, workerData } = require('node:worker_threads');
const { createServer } = require('node:http');
let text = workerData.text;
let busy = false;
let next = 0;
const waiting = new Map();
const answer = (res) => res.writeHead(200, { 'Content-Type': workerData.contentType }).end(text);
parentPort.on('message', (m) => {
  if (m.type === 'text') {
    text = m.text;
    if (waiting.has(m.id)) answer(waiting.get(m.id));
    waiting.delete(m.id);
  } else if (m.type === 'failed') {
    waiting.get(m.id)?.writeHead(500).end(m.message + '\\n');
    waiting.delete(m.id);
  } else if (m.type === 'busy') {
    busy = m.busy;
    if (busy) for (const res of waiting.values()) answer(res);
    if (busy) waiting.clear();
  }
});
const server = createServer((req, res) => {
  if (req.url !== '/metrics') return void res.writeHead(404).end('see /metrics\\n');
  const id = ++next;
  if (busy) answer(res);
  else waiting.set(id, res);
  parentPort.postMessage({ type: 'render', id });
});
server.once('error', (e) => parentPort.postMessage({ type: 'listenError', code: e.code, message: e.message }));
server.listen(workerData.port, workerData.host, () => parentPort.postMessage({ type: 'listening', port: server.address().port }));
`;

export interface Metrics {
  readonly registry: Registry;
  /** Read the gauges from durable state (one reading at a time). */
  refresh(): Promise<void>;
  /** The kernel's flushes, exports and maintenance: while any runs, a scrape is answered with the last rendering. */
  readonly busy: Busy;
}

export interface MetricsServer {
  readonly port: number;
  /** Serve another kernel's metrics from now on (a reload put it in place, LLP 0067). */
  use(m: Metrics): void;
  close(): Promise<void>;
}

export async function serveMetrics(first: Metrics, port: number, host = '127.0.0.1'): Promise<MetricsServer> {
  let m = first;
  await m.refresh();
  const worker = new Worker(SERVER, { eval: true, workerData: { port, host, contentType: m.registry.contentType, text: await m.registry.metrics() } });
  const render = (id: number) => {
    const { registry } = m;
    return m
      .refresh()
      .then(() => registry.metrics())
      .then(
        (text) => worker.postMessage({ type: 'text', id, text }),
        (e: Error) => worker.postMessage({ type: 'failed', id, message: e.message }),
      );
  };
  const follow = (busy: Busy) => {
    worker.postMessage({ type: 'busy', busy: busy.active });
    return busy.listen((b) => worker.postMessage({ type: 'busy', busy: b }));
  };
  let unlisten = follow(m.busy);
  try {
    const bound = await new Promise<number>((ok, fail) => {
      worker.on('message', (msg: { type: string; id: number; port: number; code?: string; message: string }) => {
        if (msg.type === 'render') void render(msg.id);
        else if (msg.type === 'listening') ok(msg.port);
        else if (msg.type === 'listenError') fail(listenError(Object.assign(new Error(msg.message), { code: msg.code }), port, host));
      });
      worker.once('error', fail);
    });
    return {
      port: bound,
      use(next: Metrics) {
        unlisten();
        m = next;
        unlisten = follow(m.busy);
      },
      async close() {
        unlisten();
        await worker.terminate();
      },
    };
  } catch (e) {
    unlisten();
    await worker.terminate();
    throw e;
  }
}
