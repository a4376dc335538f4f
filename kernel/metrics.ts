/**
 * Prometheus metrics for `hypsink run --metrics-port p` (prom-client). Counters
 * come from lifecycle hooks; gauges (pending rows, watermark, gap rows) are read
 * from the watermark store and manifests at scrape time, so they are right even
 * for exports done by another process.
 */
import { createServer, type Server } from 'node:http';
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import { HypsinkError } from '../types/errors.js';
import type { Hypsink } from './runtime.js';

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

export function createMetrics(k: Hypsink): Registry {
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

  // Gauges are refreshed once per scrape from durable state.
  const refresh = async () => {
    const s = await k.status();
    for (const sink of s.sinks) {
      for (const p of sink.partitions) {
        pending.set(l(sink.name, p), p.pendingRows);
        gap.set(l(sink.name, p), p.gapRows);
        watermark.set(l(sink.name, p), p.watermark === null ? -1 : Number(p.watermark));
      }
    }
  };
  const metricsFn = registry.metrics.bind(registry);
  registry.metrics = async () => {
    await refresh();
    return metricsFn();
  };
  return registry;
}

/** `registry` may be a getter: a reload (LLP 0067) puts a new kernel, and its registry, in place. */
export async function serveMetrics(current: Registry | (() => Registry), port: number, host = '127.0.0.1'): Promise<Server> {
  const server = createServer((req, res) => {
    const registry = typeof current === 'function' ? current() : current;
    if (req.url !== '/metrics') {
      res.writeHead(404).end('see /metrics\n');
      return;
    }
    registry.metrics().then(
      (text) => res.writeHead(200, { 'Content-Type': registry.contentType }).end(text),
      (e: Error) => res.writeHead(500).end(`${e.message}\n`),
    );
  });
  await new Promise<void>((ok, fail) => {
    server.once('error', (e: NodeJS.ErrnoException) => fail(listenError(e, port, host)));
    server.listen(port, host, ok);
  });
  return server;
}
