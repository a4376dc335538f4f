/**
 * `npx tsx test/sim/main.ts --seeds N [--start S] [--lanes L]` runs seeds S..S+N-1 and
 * prints a line per failing seed with the command that replays it exactly.
 * `npm run sim:soak` runs seeds until stopped (Ctrl-C) and reports the count.
 */
import { parseArgs } from 'node:util';
import { iceStaleHints } from './harness.js';
import { newWorker, runSeed, type SeedResult } from './seed.js';
import { startWorld } from './world.js';

export async function runSeeds(start: number, count: number, lanes: number, onResult?: (r: SeedResult) => void, stop?: () => boolean): Promise<SeedResult[]> {
  const world = await startWorld();
  const results: SeedResult[] = [];
  let next = start;
  const end = count === Number.POSITIVE_INFINITY ? Number.POSITIVE_INFINITY : start + count;
  try {
    await Promise.all(
      Array.from({ length: lanes }, async (_, i) => {
        // Each lane has its own proxies: one lane's 413 limit or 429 burst never meets another's requests.
        const lane = await world.lane(i);
        const worker = newWorker(lane);
        try {
          while (next < end && !stop?.()) {
            const seed = next++;
            const r = await runSeed(seed, lane, worker);
            results.push(r);
            onResult?.(r);
          }
        } finally {
          await worker.stop();
        }
      }),
    );
  } finally {
    await world.stop();
  }
  return results.sort((a, b) => a.seed - b.seed);
}

/** The figures a run is judged by beside its failures: what the aggregator tier met, and what the maintenance of the ice tables did. @ref LLP 0082 */
export function figures(results: readonly SeedResult[]): string {
  const sum = (f: (r: SeedResult) => number) => results.reduce((n, r) => n + f(r), 0);
  return (
    `aggregator tier: ${sum((r) => (r.agg ? 1 : 0))} seeds, ${sum((r) => (r.agg ? r.crashes : 0))} agent and ${sum((r) => r.aggCrashes)} aggregator crashes; ` +
    `ice: ${sum((r) => r.compactions)} compaction commits, ${sum((r) => r.expiries)} snapshots expired`
  );
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: { seeds: { type: 'string', default: '20' }, start: { type: 'string', default: '1' }, lanes: { type: 'string', default: '3' }, soak: { type: 'boolean', default: false } },
  });
  const start = Number(values.start);
  const count = values.soak ? Number.POSITIVE_INFINITY : Number(values.seeds);
  let stopping = false;
  process.once('SIGINT', () => {
    stopping = true;
  });
  const t0 = Date.now();
  let failed = 0;
  let crashes = 0;
  const results = await runSeeds(start, count, Number(values.lanes), (r) => {
    crashes += r.crashes;
    if (!r.ok) {
      failed++;
      process.stdout.write(`seed ${r.seed} FAILED (${r.steps} steps, ${r.crashes} crashes):\n  ${r.problems.join('\n  ')}\n  replay: ${r.replay}\n`);
    }
  }, () => stopping);
  const secs = ((Date.now() - t0) / 1000).toFixed(1);
  const cpu = process.cpuUsage();
  process.stdout.write(
    `sim: ${results.length} seeds run, ${failed} failed, ${crashes} crashes, ${secs} s (driver CPU ${((cpu.user + cpu.system) / 1e6).toFixed(1)} s); ${figures(results)}` +
      `${iceStaleHints.count ? `; ${iceStaleHints.count} ice tables ended with a stale version hint` : ''}\n`,
  );
  process.exitCode = failed ? 1 : 0;
}

if (import.meta.url === `file://${process.argv[1]}`) await main();
