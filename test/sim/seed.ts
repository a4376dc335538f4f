/**
 * One seed of the simulation: a random interleaving of ingest (several spools
 * into one partition at once), export for each sink, retention (with forced
 * prunes under a hard cap), compaction, receiver 429/503 bursts, S3 5xx and
 * slow answers, and crashes at random fault points — then a clean run and the
 * oracle: per sink and partition, delivered rows = committed rows minus the
 * reported gap, no duplicate, watermarks never decreased, no open intent.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { rng } from '../../fixtures/demo/generate.js';
import type { FaultRule } from '../support/fault-proxy.js';
import { checkDestinations, Ledger, POINTS_BY_OP, SINKS, settle, WatermarkWatch, type Worker, writeScenarioConfig } from './harness.js';
import type { World } from './world.js';
import type { WorkerOp } from './worker.js';

export { newWorker } from './harness.js';

export interface SeedResult {
  readonly seed: number;
  readonly ok: boolean;
  readonly problems: string[];
  readonly steps: number;
  readonly crashes: number;
  readonly replay: string;
}

export async function runSeed(seed: number, world: World, worker: Worker): Promise<SeedResult> {
  const r = rng(seed);
  const int = (lo: number, hi: number) => lo + Math.floor(r() * (hi - lo + 1));
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(r() * xs.length)]!;
  const dir = await mkdtemp(join(tmpdir(), `hypsink-sim-${seed}-`));
  const sources = [`s${seed}a`, `s${seed}b`].slice(0, int(1, 2));
  const prefix = `sim/${seed}`;
  const configPath = await writeScenarioConfig(dir, world, {
    prefix,
    unitRows: int(3, 40),
    seqBlockSize: int(1, 64),
    rowGroupRows: int(4, 50),
    partSize: pick([1024, 8 * 1024 * 1024]),
  });
  await worker.use(configPath);
  const problems: string[] = [];
  const ledger = new Ledger();
  const watch = new WatermarkWatch(join(dir, 'state'));
  const steps = int(5, 12);
  let armed = 0;
  try {
    for (let step = 0; step < steps; step++) {
      const dice = r();
      const x = r();
      let op: WorkerOp;
      if (x < 0.35) {
        const source = pick(sources);
        op = { op: 'ingest', source, rows: ledger.rows(source, int(1, 40)), spools: int(1, 3) };
      } else if (x < 0.7) {
        op = { op: 'export', sink: pick(SINKS) };
      } else if (x < 0.8) {
        op = { op: 'retention', maxRows: int(5, 80), hardMaxRows: r() < 0.4 ? int(10, 60) : undefined };
      } else if (x < 0.87) {
        op = { op: 'compact' };
      } else if (x < 0.94) {
        // A burst of backpressure: 429/503 with a usable, zero, garbage or absent Retry-After.
        const left = { n: int(1, 4) };
        const status = pick([429, 503]);
        const retryAfter = pick(['0', '1', 'garbage', undefined]);
        const rule: FaultRule = () => {
          if (left.n <= 0) return undefined;
          left.n--;
          return { kind: 'respond', status, headers: retryAfter === undefined ? {} : { 'retry-after': retryAfter } };
        };
        world.setReceiverRule(rule);
        op = { op: 'export', sink: 'central' };
      } else {
        const left = { n: int(1, 3) };
        const slow = r() < 0.5;
        world.setS3Rule(() => {
          if (left.n <= 0) return undefined;
          left.n--;
          return slow ? { kind: 'delay', ms: 30 } : { kind: 'respond', status: 500, body: '<Error><Code>InternalError</Code></Error>' };
        });
        op = { op: 'export', sink: 'lake' };
      }
      // Crashes favour exports, where a crash meets the write-ahead intent.
      const crash = armed < 1 && dice < (op.op === 'export' ? 0.2 : 0.05);
      if (crash) {
        armed++;
        const points = POINTS_BY_OP[op.op === 'export' ? `export ${op.sink}` : op.op] ?? [];
        if (points.length) await worker.send({ op: 'arm', point: pick(points), at: r() < 0.3 ? 2 : 1 });
      }
      const answer = await worker.send(op);
      if (op.op === 'ingest' && 'ok' in answer && answer.ok) ledger.ack(op.source, op.rows);
      if ('ok' in answer && !answer.ok && op.op !== 'export') problems.push(`step ${step} ${op.op} failed: ${String(answer.error)}`);
      if (crash && !('died' in answer)) await worker.send({ op: 'disarm' });
      if (crash && 'died' in answer && op.op === 'export') {
        // The case the write-ahead intent exists for: new rows arrive before the retry.
        for (const source of sources) {
          const rows = ledger.rows(source, int(1, 10));
          const a = await worker.send({ op: 'ingest', source, rows, spools: 1 });
          if ('ok' in a && a.ok) ledger.ack(source, rows);
        }
      }
      world.setReceiverRule(undefined);
      world.setS3Rule(undefined);
      await watch.check(`step ${step} (${op.op})`, problems);
    }
    const status = await settle(worker, problems);
    await watch.check('clean run', problems);
    await checkDestinations(dir, world, prefix, ledger, status, problems);
  } catch (e) {
    problems.push(`harness: ${(e as Error).stack}`);
  }
  if (problems.length === 0) await rm(dir, { recursive: true, force: true });
  else problems.push(`state kept in ${dir}`);
  return { seed, ok: problems.length === 0, problems, steps, crashes: worker.crashes, replay: `npm run sim -- --seeds 1 --start ${seed}` };
}
