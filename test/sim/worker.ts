/**
 * The simulation's worker: a long-lived process that runs operations sent as
 * JSON lines on stdin and answers each with one JSON line on stdout. A crash
 * is armed by setting HYPSINK_FAULT before an operation; the worker then dies
 * by SIGKILL at that point, exactly as a real process would, and the driver
 * starts a new one.
 */
import { createInterface } from 'node:readline';
import { Readable } from 'node:stream';
import { resetFaultHits } from '../../kernel/fault.js';
import { loadConfig } from '../../kernel/config/load.js';
import { ingestNdjson } from '../../kernel/ingest.js';
import { createLogger } from '../../kernel/log.js';
import { Hypsink } from '../../kernel/runtime.js';

export type WorkerOp =
  | { op: 'open'; config: string }
  | { op: 'arm'; point: string; at: number }
  | { op: 'disarm' }
  | { op: 'ingest'; source: string; rows: Record<string, unknown>[]; spools: number }
  | { op: 'export'; sink: string }
  | { op: 'retention'; maxRows?: number; hardMaxRows?: number }
  | { op: 'compact' }
  | { op: 'flush' }
  | { op: 'forget'; sink: string }
  | { op: 'status' };

let k: Hypsink | undefined;

async function run(m: WorkerOp): Promise<unknown> {
  switch (m.op) {
    case 'open':
      await k?.close();
      k = await Hypsink.open(await loadConfig(m.config), { log: createLogger('silent') });
      return { ok: true };
    case 'arm':
      process.env.HYPSINK_FAULT = m.point;
      process.env.HYPSINK_FAULT_AT = String(m.at);
      resetFaultHits();
      return { ok: true };
    case 'disarm':
      delete process.env.HYPSINK_FAULT;
      resetFaultHits();
      return { ok: true };
    case 'ingest': {
      // Several spools into one partition at once: their flushes race for the commit section.
      const per = Math.ceil(m.rows.length / m.spools);
      const parts = Array.from({ length: m.spools }, (_, i) => m.rows.slice(i * per, (i + 1) * per)).filter((p) => p.length);
      const rs = await Promise.all(
        parts.map((rows) => ingestNdjson(k!, 'events', m.source, Readable.from(rows.map((r) => `${JSON.stringify(r)}\n`)), 'sim')),
      );
      return { ok: true, accepted: rs.reduce((n, r) => n + r.accepted, 0) };
    }
    case 'export': {
      const [r] = await k!.export(m.sink);
      return { ok: true, rows: r?.rows ?? 0, failed: r?.failed ?? 0, errors: r?.partitions.flatMap((p) => (p.error ? [p.error.message] : [])) };
    }
    case 'retention': {
      const r = await k!.retention({ maxRows: m.maxRows, hardMaxRows: m.hardMaxRows, ackCoupled: true });
      return { ok: true, pruned: r.reduce((n, x) => n + x.prunedRows, 0), forced: r.reduce((n, x) => n + x.forcedRows, 0) };
    }
    case 'compact':
      await k!.cache.compact();
      return { ok: true };
    case 'flush':
      await k!.flush();
      return { ok: true };
    case 'forget':
      await k!.forgetSink(m.sink);
      return { ok: true };
    case 'status':
      return { ok: true, status: await k!.status() };
  }
}

const lines = createInterface({ input: process.stdin });
// Operations run one at a time, in order.
let chain = Promise.resolve();
lines.on('line', (line) => {
  chain = chain.then(async () => {
    let answer: unknown;
    try {
      answer = await run(JSON.parse(line) as WorkerOp);
    } catch (e) {
      answer = { ok: false, error: `${(e as Error).name}: ${(e as Error).message}`, code: (e as { code?: string }).code };
    }
    process.stdout.write(`${JSON.stringify(answer)}\n`);
  });
});
lines.on('close', () => {
  void chain.then(async () => {
    await k?.close();
    process.exit(0);
  });
});
