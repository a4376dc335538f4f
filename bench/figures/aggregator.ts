/**
 * The aggregator group (issue 27: `hypsink receiver --config`, LLP 0074). The
 * aggregator is the compiled CLI in a child process; the agents are kernels
 * in this process, each with a token of its own in the aggregator's tokens file.
 *
 * - `aggregator_ingest_ratio`: rows/s of two agents' forward sinks exporting
 *   at once to the aggregator (timed until every batch is answered, i.e. its
 *   rows are durable in the aggregator's cache) ÷ rows/s of the CLI's
 *   `hypsink ingest` of the same rows (one NDJSON file) on this machine. A CLI
 *   ingest is a process of its own: its rows/s is N ÷ (time of the N-row
 *   ingest − time of a one-row ingest measured next to it), so the process
 *   start counts on neither side. Rounds interleave the three, alternating
 *   their order; each round's export uses sinks of its own (own watermarks,
 *   own batch ids). Target ≥ 0.7 (issue 27).
 * - `aggregator_commits_per_min_<n>a` and `direct_commits_per_min_<n>a`
 *   (n = 1, 10, 50 agents; report only), and `aggregator_commits_50a_vs_1a`:
 *   Iceberg snapshots committed to one local table per minute. A "minute" is
 *   one tick of each schedule, driven here rather than waited for: every agent
 *   gets a small batch of new rows (source `web`, as a fleet's agents name
 *   their partitions alike) and exports once; the aggregator's Iceberg sink
 *   then ticks once (it is stopped, its config's kernel exports the sink, it
 *   starts again). Side by side, the same agents each export the same rows
 *   with an Iceberg sink of their own to another table (one after another:
 *   racing changes retries, not commits; the `iceberg` group measures races).
 *   Counted from each table's metadata, not from logs.
 */
import { promises as fsp } from 'node:fs';
import { join } from 'node:path';
import type { Hypsink } from '../../kernel/runtime.js';
import { DEFAULT_CONFIG } from '../../kernel/config/defaults.js';
import type { BenchContext } from '../lib/context.js';
import { figure, type FigureGroup, ge, le, report } from '../lib/figure.js';
import { fillPartition } from '../lib/fill.js';
import { DATASET, forwardSink, openKernel, type SinkSpec, tick, writeWorkspace } from '../lib/kernel.js';
import { median, settle, timed } from '../lib/measure.js';
import { BIN, timeNode } from '../lib/process.js';
import { freePort, type ReceiverProcess, spawnAggregator } from '../lib/receiver.js';
import { demoLines } from '../lib/rows.js';

/** The agents' dataset with the column the aggregator writes each row's client into. */
const RECEIVED = {
  [DATASET]: { ...DEFAULT_CONFIG.datasets.activity, columns: [...DEFAULT_CONFIG.datasets.activity.columns, { name: 'hyp_client', type: 'STRING', nullable: false }] },
};
/** A schedule that never comes during a run: the bench drives the aggregator's ticks itself. */
const NEVER = '0 0 1 1 *';
const tokenOf = (agent: string) => `bench-${agent}-Qm7Vx2Lp9Rt4Kw8`;

function icebergSink(dir: string): SinkSpec {
  return { writer: '@hypsink/format-iceberg', destination: '@hypsink/local-fs', datasets: [DATASET], schedule: NEVER, config: { dir }, writerConfig: { commitAttempts: 1000 } };
}

/** The aggregator's workspace: its config (the received dataset, `sinks`) and the agents' tokens. */
async function aggregatorWorkspace(dir: string, agents: readonly string[], sinks: Record<string, SinkSpec>) {
  await fsp.mkdir(dir, { recursive: true });
  const configPath = join(dir, 'hypsink.config.json');
  await fsp.writeFile(configPath, JSON.stringify({ cache: { root: 'cache' }, state: { dir: 'state' }, datasets: RECEIVED, sinks }, null, 1));
  const tokensFile = join(dir, 'tokens');
  await fsp.writeFile(tokensFile, agents.map((a) => `${a} ${tokenOf(a)}\n`).join(''), { mode: 0o600 });
  return { configPath, tokensFile };
}

/** The demo rows `fillPartition(k, source, n, { firstId, run })` appends, as NDJSON lines appended to `path`. */
async function appendFillLines(path: string, n: number, firstId: number, run: number): Promise<void> {
  const frame = 50_000;
  for (let done = 0; done < n; done += frame) {
    const lines = demoLines(Math.min(frame, n - done), firstId + done, run * 1000 + done / frame);
    await fsp.appendFile(path, `${lines.join('\n')}\n`);
  }
}

async function pendingRows(k: Hypsink, sink: string): Promise<number> {
  const s = (await k.status()).sinks.find((x) => x.name === sink);
  return (s?.partitions ?? []).reduce((n, p) => n + p.pendingRows, 0);
}

async function ingestRatio(ctx: BenchContext) {
  const agents = ['agent0', 'agent1'];
  const rows = ctx.size(200_000, 50_000);
  const perAgent = rows / agents.length;
  const reps = ctx.size(7, 3);
  // The first round warms the JIT, the aggregator and its connections; it is not counted.
  const rounds = reps + 1;
  const root = await ctx.tempDir('aggregator-ingest');
  const agg = await aggregatorWorkspace(join(root, 'aggregator'), agents, { lake: { writer: '@hypsink/format-parquet', destination: '@hypsink/local-fs', datasets: [DATASET], schedule: NEVER, config: { dir: 'exports' } } });
  const cliDir = join(root, 'cli');
  await fsp.mkdir(cliDir);
  await writeWorkspace(cliDir, {});
  const file = join(cliDir, 'rows.ndjson');
  await fsp.writeFile(join(cliDir, 'one.ndjson'), `${demoLines(1, 1, 0)[0]}\n`);
  await fsp.writeFile(file, '');
  let recv: ReceiverProcess | undefined = await spawnAggregator(agg.configPath, agg.tokensFile);
  const kernels: Hypsink[] = [];
  const aggMs: number[] = [];
  const cliMs: number[] = [];
  const oneMs: number[] = [];
  try {
    for (const [i, a] of agents.entries()) {
      const dir = join(root, a);
      await fsp.mkdir(dir);
      const sinks = Object.fromEntries(Array.from({ length: rounds }, (_, r) => [`fwd${r}`, forwardSink(recv!.url, { token: tokenOf(a) })]));
      const k = await openKernel(await writeWorkspace(dir, sinks), ctx.log);
      kernels.push(k);
      ctx.progress(`aggregator: filling ${a} with ${perAgent} rows`);
      const firstId = 1 + i * perAgent;
      await fillPartition(k, 'web', perAgent, { firstId, run: i });
      await appendFillLines(file, perAgent, firstId, i);
    }
    const throughAggregator = async (r: number) => {
      settle();
      const t = await timed(() => Promise.all(kernels.map((k) => tick(k, `fwd${r}`))));
      const shipped = t.value.reduce((n, x) => n + x.rows, 0);
      if (shipped !== rows) throw new Error(`aggregator: the agents shipped ${shipped} rows, expected ${rows}`);
      return t.ms;
    };
    const cli = async (r: number, which: 'rows' | 'one') => {
      settle();
      return timeNode([BIN, 'ingest', DATASET, '--source', `${which}-${r}`, '--file', which === 'rows' ? 'rows.ndjson' : 'one.ndjson'], cliDir);
    };
    for (let r = 0; r < rounds; r++) {
      ctx.progress(`aggregator: ingest round ${r + 1}/${rounds}${r === 0 ? ' (warm-up)' : ''}`);
      let a: number;
      let c: number;
      let o: number;
      if (r % 2 === 0) {
        a = await throughAggregator(r);
        c = await cli(r, 'rows');
        o = await cli(r, 'one');
      } else {
        o = await cli(r, 'one');
        c = await cli(r, 'rows');
        a = await throughAggregator(r);
      }
      if (r === 0) continue;
      aggMs.push(a);
      cliMs.push(c);
      oneMs.push(o);
    }
    await recv.close();
    recv = undefined;
  } finally {
    for (const k of kernels) await k.close();
    await recv?.close();
  }
  // Every round's rows are in the aggregator's cache (its sink never ticked: all pending), and every CLI ingest's in the CLI's.
  const ak = await openKernel({ dir: join(root, 'aggregator'), configPath: agg.configPath }, ctx.log);
  const inAggregator = await pendingRows(ak, 'lake').finally(() => ak.close());
  if (inAggregator !== rows * rounds) throw new Error(`aggregator: its cache holds ${inAggregator} rows, expected ${rows * rounds}`);
  const ck = await openKernel({ dir: cliDir, configPath: join(cliDir, 'hypsink.config.json') }, ctx.log);
  const cliStats = await Promise.all(Array.from({ length: rounds }, (_, r) => ck.cache.storage.stats(ck.cache.partition(DATASET, `rows-${r}`)))).finally(() => ck.close());
  for (const s of cliStats) if (s.rows !== rows) throw new Error(`aggregator: a CLI ingest left ${s.rows} rows, expected ${rows}`);
  // Each round: the CLI's ingest time without its process start (the one-row ingest next to it).
  const cliWork = cliMs.map((c, i) => c - oneMs[i]!);
  const ratios = aggMs.map((a, i) => cliWork[i]! / a);
  ctx.detail('aggregator_ingest_ratio', {
    agents: agents.length,
    rows,
    aggregatorRowsPerS: Math.round(rows / (median(aggMs) / 1000)),
    cliIngestRowsPerS: Math.round(rows / (median(cliWork) / 1000)),
    cliIngestRowsPerSWithProcessStart: Math.round(rows / (median(cliMs) / 1000)),
    aggregatorMs: aggMs.map(Math.round),
    cliIngestMs: cliMs.map(Math.round),
    cliOneRowIngestMs: oneMs.map(Math.round),
  });
  return figure('aggregator_ingest_ratio', median(ratios), ge(0.7), ratios);
}

/** Snapshots in a local table's newest metadata version (0 before its first commit). */
async function snapshotsOf(table: string): Promise<number> {
  const names = await fsp.readdir(join(table, 'metadata')).catch(() => [] as string[]);
  const versions = names.flatMap((n) => /^v(\d+)\.metadata\.json$/.exec(n)?.[1] ?? []).map(Number);
  if (versions.length === 0) return 0;
  const meta = JSON.parse(await fsp.readFile(join(table, 'metadata', `v${Math.max(...versions)}.metadata.json`), 'utf8')) as { snapshots?: unknown[] };
  return meta.snapshots?.length ?? 0;
}

/** `n` agents, `minutes` rounds of `rowsPerAgent` new rows each: Iceberg commits per minute through one aggregator and directly. */
async function commitsPerMinute(ctx: BenchContext, n: number, minutes: number, rowsPerAgent: number) {
  const root = await ctx.tempDir(`aggregator-commits-${n}a`);
  const agents = Array.from({ length: n }, (_, i) => `agent${i}`);
  const viaTable = join(root, 'lake-via', DATASET);
  const directTable = join(root, 'lake-direct', DATASET);
  const agg = await aggregatorWorkspace(join(root, 'aggregator'), agents, { lake: icebergSink(join(root, 'lake-via')) });
  // The agents' sinks name one address: each restart of the aggregator listens on it again.
  const port = await freePort();
  let recv: ReceiverProcess | undefined = await spawnAggregator(agg.configPath, agg.tokensFile, port);
  const kernels: Hypsink[] = [];
  const via: number[] = [];
  const direct: number[] = [];
  const minuteMs: { forward: number; aggregatorTick: number; direct: number }[] = [];
  try {
    for (const a of agents) {
      const dir = join(root, a);
      await fsp.mkdir(dir);
      const sinks = { central: { ...forwardSink(recv.url, { token: tokenOf(a) }), schedule: NEVER }, lake: icebergSink(join(root, 'lake-direct')) };
      kernels.push(await openKernel(await writeWorkspace(dir, sinks), ctx.log));
    }
    let next = 1;
    for (let m = 0; m < minutes; m++) {
      ctx.progress(`aggregator: ${n} agent(s), minute ${m + 1}/${minutes}`);
      for (const k of kernels) next = await fillPartition(k, 'web', rowsPerAgent, { firstId: next, run: m });
      const fwd = await timed(() => Promise.all(kernels.map((k) => tick(k, 'central'))));
      const shipped = fwd.value.reduce((s, x) => s + x.rows, 0);
      if (shipped !== n * rowsPerAgent) throw new Error(`aggregator: ${n} agents forwarded ${shipped} rows, expected ${n * rowsPerAgent}`);
      // The aggregator's tick: stopped (its sinks drained), its config's kernel exports the sink once, started again.
      await recv.close();
      recv = undefined;
      const viaBefore = await snapshotsOf(viaTable);
      const ak = await openKernel({ dir: join(root, 'aggregator'), configPath: agg.configPath }, ctx.log);
      const aggTick = await timed(() => tick(ak, 'lake')).finally(() => ak.close());
      if (aggTick.value.rows !== n * rowsPerAgent) throw new Error(`aggregator: its tick exported ${aggTick.value.rows} rows, expected ${n * rowsPerAgent}`);
      via.push((await snapshotsOf(viaTable)) - viaBefore);
      recv = await spawnAggregator(agg.configPath, agg.tokensFile, port);
      const directBefore = await snapshotsOf(directTable);
      let directMs = 0;
      for (const k of kernels) {
        const t = await timed(() => tick(k, 'lake'));
        if (t.value.rows !== rowsPerAgent) throw new Error(`aggregator: an agent's own Iceberg sink exported ${t.value.rows} rows, expected ${rowsPerAgent}`);
        directMs += t.ms;
      }
      direct.push((await snapshotsOf(directTable)) - directBefore);
      minuteMs.push({ forward: Math.round(fwd.ms), aggregatorTick: Math.round(aggTick.ms), direct: Math.round(directMs) });
    }
  } finally {
    for (const k of kernels) await k.close();
    await recv?.close();
  }
  return { via, direct, minuteMs };
}

export const aggregatorGroup: FigureGroup = {
  id: 'aggregator',
  title: 'aggregator ingest rows/s ÷ CLI ingest rows/s; Iceberg commits per minute with 1, 10, 50 agents behind one aggregator and writing directly',
  async run(ctx: BenchContext) {
    const figures = [await ingestRatio(ctx)];
    const minutes = ctx.size(3, 2);
    const rowsPerAgent = ctx.size(200, 50);
    const perMinute: Record<number, number> = {};
    for (const n of [1, 10, 50]) {
      ctx.progress(`aggregator: Iceberg commits per minute, ${n} agent(s)`);
      const r = await commitsPerMinute(ctx, n, minutes, rowsPerAgent);
      perMinute[n] = median(r.via);
      ctx.detail(`aggregator_commits_per_min_${n}a`, { agents: n, minutes, rowsPerAgent, viaAggregator: r.via, direct: r.direct, ms: r.minuteMs });
      figures.push(figure(`aggregator_commits_per_min_${n}a`, median(r.via), report, r.via));
      figures.push(figure(`direct_commits_per_min_${n}a`, median(r.direct), report, r.direct));
    }
    // One partition (`web`) behind the aggregator: one commit per tick whatever the number of agents. 1.5 leaves
    // room for a tick whose rows split into two units, and fails at once if commits follow the agents (50x).
    const growth = perMinute[50]! / perMinute[1]!;
    figures.push(figure('aggregator_commits_50a_vs_1a', growth, le(1.5), [growth]));
    return figures;
  },
};
