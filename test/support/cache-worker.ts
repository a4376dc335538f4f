/**
 * A child-process driver for the kernel cache, for crash and cross-process tests:
 *
 *   node --import tsx test/support/cache-worker.ts '<json script>'
 *
 * With HYPSINK_FAULT=<point> (and HYPSINK_FAULT_AT=<n>) the kernel SIGKILLs the
 * process at that point. Every appendRows call the cache acknowledged is recorded
 * in `ackFile` with a synchronous write before the next step starts, so what the
 * crashed child was told survives it. Events go to stdout as JSON lines.
 */
import { appendFileSync, existsSync } from 'node:fs';
import { ProcessLock } from '../../kernel/io/lock.js';
import type { RetentionPolicy } from '../../kernel/store/retention.js';
import { COLS, openCache, rows, type WorkerCacheOptions } from './datasets.js';

export type WorkerStep =
  /** appendRows of `n` rows of `source` with ids from `from` (ts from `t0`, default 2026). */
  | { op: 'append'; spool: string; source: string; from: number; n: number; t0?: number }
  /** appendBatch of the same kind of rows under a batch id (acknowledged once, whatever the retries). */
  | { op: 'appendBatch'; batch: string; source: string; from: number; n: number }
  /** flushTable of each spool, concurrently (Promise.all). */
  | { op: 'flush'; spools: string[] }
  | { op: 'flushAll' }
  | { op: 'retention'; policy: Omit<RetentionPolicy, 'ackFloor'> }
  | { op: 'compact' }
  /** `rounds` × (append `n` rows of `source` to `spool`, flush it): for concurrent writers. */
  | { op: 'appendFlushLoop'; spool: string; source: string; from: number; n: number; rounds: number; pauseMs?: number }
  /** Take the cache writer lock, say so on stdout, hold it `ms`. */
  | { op: 'holdLock'; ms: number }
  | { op: 'sleep'; ms: number }
  /** Read `first` rows of a partition, say "reading", wait for `path`, read the rest, say "read" with every id. */
  | { op: 'readHold'; source: string; first: number; path: string }
  /** Say "ready", then wait until `path` exists: lines up concurrent workers. */
  | { op: 'waitFile'; path: string };

export interface WorkerScript {
  readonly root: string;
  readonly opts?: WorkerCacheOptions;
  /** Acknowledged appends, one JSON line each: {"source","from","n"}. */
  readonly ackFile?: string;
  readonly steps: readonly WorkerStep[];
}

function say(ev: Record<string, unknown>): void {
  process.stdout.write(JSON.stringify(ev) + '\n');
}

async function main(): Promise<void> {
  const script = JSON.parse(process.argv[2] ?? '') as WorkerScript;
  const cache = await openCache(script.root, script.opts ?? {});
  for (const step of script.steps) {
    switch (step.op) {
      case 'append': {
        await cache.appendRows({ dataset: 'events', id: step.spool }, COLS, rows(step.source, step.from, step.n, step.t0));
        if (script.ackFile) {
          appendFileSync(script.ackFile, JSON.stringify({ source: step.source, from: step.from, n: step.n }) + '\n');
        }
        break;
      }
      case 'appendBatch': {
        await cache.appendBatch('events', step.batch, COLS, rows(step.source, step.from, step.n));
        if (script.ackFile) {
          appendFileSync(script.ackFile, JSON.stringify({ source: step.source, from: step.from, n: step.n }) + '\n');
        }
        break;
      }
      case 'flush': {
        const res = await Promise.all(step.spools.map((id) => cache.flushTable({ dataset: 'events', id })));
        say({ ev: 'flushed', partitions: res.flatMap((r) => r.partitions.map((p) => ({ source: p.partition.source, highWater: p.highWater }))) });
        break;
      }
      case 'flushAll':
        await cache.flushAll();
        break;
      case 'retention':
        await cache.retention(step.policy);
        say({ ev: 'retained' });
        break;
      case 'compact':
        await cache.compact();
        say({ ev: 'compacted' });
        break;
      case 'appendFlushLoop': {
        for (let r = 0; r < step.rounds; r++) {
          const from = step.from + r * step.n;
          await cache.appendRows({ dataset: 'events', id: step.spool }, COLS, rows(step.source, from, step.n));
          if (script.ackFile) appendFileSync(script.ackFile, JSON.stringify({ source: step.source, from, n: step.n }) + '\n');
          const res = await cache.flushTable({ dataset: 'events', id: step.spool });
          say({ ev: 'flushed', from, partitions: res.partitions.map((p) => ({ source: p.partition.source, highWater: p.highWater })) });
          if (step.pauseMs) await new Promise((r) => setTimeout(r, step.pauseMs));
        }
        break;
      }
      case 'holdLock': {
        const lock = new ProcessLock(script.root, `cache ${script.root}`, { waitMs: 5000 });
        await lock.with('test-hold', async () => {
          say({ ev: 'locked', pid: process.pid });
          await new Promise((r) => setTimeout(r, step.ms));
        });
        break;
      }
      case 'sleep':
        await new Promise((r) => setTimeout(r, step.ms));
        break;
      case 'readHold': {
        const it = cache.storage.readRowsSince(cache.partition('events', step.source))[Symbol.asyncIterator]();
        const ids: unknown[] = [];
        for (let i = 0; i < step.first; i++) ids.push((await it.next()).value?.row.id);
        say({ ev: 'reading' });
        while (!existsSync(step.path)) await new Promise((r) => setTimeout(r, 5));
        for (let r = await it.next(); !r.done; r = await it.next()) ids.push(r.value.row.id);
        say({ ev: 'read', ids });
        break;
      }
      case 'waitFile':
        say({ ev: 'ready' });
        while (!existsSync(step.path)) await new Promise((r) => setTimeout(r, 5));
        break;
    }
  }
  say({ ev: 'done' });
}

main().catch((e: unknown) => {
  const err = e as { code?: string; message?: string };
  process.stderr.write(`cache-worker: ${err.code ?? ''} ${err.message ?? String(e)}\n`);
  process.exit(1);
});
