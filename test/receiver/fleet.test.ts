/**
 * Issue 27's fleet: twenty agents, each a cache of its own with its own token,
 * forward to one aggregator (`hypsink receiver --config`, a child process)
 * that exports to an Iceberg table on S3 (s3rver) and to PostgreSQL (embedded)
 * at each start and each minute. The aggregator dies by SIGKILL at its named point between
 * the cache ingest and the ledger line, and at random moments (during the
 * agents' POSTs, and its own Iceberg commits and PostgreSQL units after each restart); two agents
 * run as `hypsink export` processes and are SIGKILLed at random moments too.
 * At the end every agent row is in the table once (read by icebird) and in
 * PostgreSQL once (read by SQL), each under the client that sent it.
 * @ref LLP 0074
 */
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { promises as fsp } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { type ConditionalS3, readIcebergTable, s3Route, startConditionalS3 } from '../support/iceberg.js';
import { BIN, type Json, ingest as ingestRows, openKernel, writeConfig } from '../support/kernel.js';
import { freePort, testPg } from '../support/pg.js';
import { useS3rverCredentials } from '../support/s3server.js';
import { AGENT_EVENTS as EVENTS, type Aggregator, RECEIVED, spawnAggregator, stopChild, tempDir, tokenOf } from './helpers.js';

useS3rverCredentials();


const AGENTS = Array.from({ length: 20 }, (_, i) => `a${String(i + 1).padStart(2, '0')}`);
/** These run as `hypsink export` processes, so they can be SIGKILLed. */
const PROCESS_AGENTS = new Set(AGENTS.slice(-2));
const ROWS = 12; // per source; two sources per agent
const base = (i: number) => (i + 1) * 1000;
const envOf = (agent: string) => `FLEET_${agent.toUpperCase()}_TOKEN`;

/** The agent a row id came from, and the source it was sent under. */
function origin(id: number): { client: string; source: string } {
  const i = Math.floor(id / 1000) - 1;
  return { client: AGENTS[i]!, source: id % 1000 >= 500 ? `host-${AGENTS[i]}` : 'web' };
}

/** A small seeded generator: the kill moments differ per seed, and a failure names its seed. */
function lcg(seed: number): (lo: number, hi: number) => number {
  let x = seed >>> 0;
  return (lo, hi) => {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
    return lo + (x % (hi - lo + 1));
  };
}

test('twenty agents through one aggregator into Iceberg on S3 and PostgreSQL: every row once, under its client, across SIGKILLs of the aggregator and of agents', { timeout: 600_000 }, async (t) => {
  const seed = Number(process.env.FLEET_SEED ?? Date.now() % 100_000);
  const rand = lcg(seed);
  const why = `(seed ${seed}; FLEET_SEED=${seed} repeats it)`;
  const { dir, cleanup } = await tempDir('fleet');
  const kernels = new Map<string, Awaited<ReturnType<typeof openKernel>>>();
  let recv: Aggregator | undefined;
  let s3: ConditionalS3 | undefined;
  // One teardown, the last made first (node:test runs its after hooks in the order they were added).
  t.after(async () => {
    if (recv) await stopChild(recv);
    for (const { k } of kernels.values()) await k.close();
    await s3?.stop();
    await cleanup();
    // The shared server, or this test process never ends.
    await (await testPg()).stop();
  });
  // S3 as AWS's is: one of two creates of a key wins (If-None-Match), which the table's commits rely on.
  s3 = await startConditionalS3({ buckets: ['lake'] });
  const pg = await testPg();
  const pgUrl = await pg.database('fleet');

  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const tokens = join(dir, 'tokens');
  await fsp.writeFile(tokens, AGENTS.map((a) => `${a} ${tokenOf(a)}\n`).join(''), { mode: 0o600 });
  const recvConfig = await writeConfig(
    dir,
    {
      cache: { root: join(dir, 'recv-cache') },
      state: { dir: join(dir, 'recv-state') },
      datasets: { events: RECEIVED },
      sinks: {
        lake: {
          writer: '@hypsink/format-iceberg',
          destination: '@hypsink/s3',
          datasets: ['events'],
          schedule: '* * * * *',
          config: { bucket: 'lake', prefix: 'fleet', region: 'us-east-1', endpoint: s3.endpoint, forcePathStyle: true, retry: { attempts: 3, baseMs: 10, maxMs: 200 } },
        },
        // biome-ignore lint/suspicious/noTemplateCurlyInString: the config's own ${ENV} reference, interpolated by the kernel
        warehouse: { plugin: '@hypsink/postgres', datasets: ['events'], schedule: '* * * * *', config: { url: '${FLEET_PG_URL}' } },
      },
    },
    'receiver.config.json',
  );
  const recvArgs = ['--config', recvConfig, '--tokens-file', tokens, '--port', String(port)];
  const recvEnv = { FLEET_PG_URL: pgUrl };
  const agentConfig = async (a: string) => {
    process.env[envOf(a)] = tokenOf(a);
    await fsp.mkdir(join(dir, a), { recursive: true });
    const cfg: Json = {
      cache: { root: join(dir, a, 'cache') },
      state: { dir: join(dir, a, 'state') },
      datasets: { events: EVENTS },
      sinks: {
        central: {
          plugin: '@hypsink/forward',
          datasets: ['events'],
          unit: { maxRows: 4 },
          config: { url, token: `\${${envOf(a)}}`, timeoutMs: 5000, ladderMs: [50], maxInlineWaitMs: 2000, retry: { attempts: 2, baseMs: 20, maxMs: 40 } },
        },
      },
    };
    return writeConfig(join(dir, a), cfg);
  };

  // Each agent's rows: source `web` (the same partition name from every client) and its own host.
  const configs = new Map<string, string>();
  for (const [i, a] of AGENTS.entries()) {
    const cfg = await agentConfig(a);
    configs.set(a, cfg);
    const opened = await openKernel(cfg);
    await ingestRows(opened.k, 'web', base(i), ROWS);
    await ingestRows(opened.k, `host-${a}`, base(i) + 500, ROWS);
    if (PROCESS_AGENTS.has(a)) await opened.k.close();
    else kernels.set(a, opened);
  }
  const total = AGENTS.length * ROWS * 2;

  const pending = async (): Promise<number> => {
    let n = 0;
    for (const a of AGENTS) {
      const live = kernels.get(a);
      const opened = live ?? (await openKernel(configs.get(a)!));
      try {
        for (const s of (await opened.k.status()).sinks) for (const p of s.partitions) n += p.pendingRows;
      } finally {
        if (!live) await opened.k.close();
      }
    }
    return n;
  };

  // The first aggregator dies at its fifth ingest: rows in its cache, no ledger line, no answer.
  recv = await spawnAggregator(recvArgs, { ...recvEnv, HYPSINK_FAULT: 'receiver.afterData', HYPSINK_FAULT_AT: '5' });
  let aggregatorKills = 0;
  let agentKills = 0;
  const exportProcess = (a: string): { child: ChildProcess; exited: Promise<NodeJS.Signals | null> } => {
    const child = spawn(process.execPath, [BIN, 'export', '--config', configs.get(a)!], { env: { ...process.env, HYPSINK_LOG_LEVEL: 'error' }, stdio: 'ignore' });
    return { child, exited: new Promise((r) => child.once('exit', (_code, signal) => r(signal))) };
  };

  for (let round = 0; round < 40 && (await pending()) > 0; round++) {
    const timers: NodeJS.Timeout[] = [];
    // Rounds 1 to 4: the aggregator is SIGKILLed at a random moment of the round.
    if (round >= 1 && round <= 4) {
      const victim = recv;
      timers.push(setTimeout(() => victim.child.kill('SIGKILL'), rand(20, 600)));
    }
    const procs = [...PROCESS_AGENTS].map((a) => exportProcess(a));
    // Rounds 0 and 2: one process agent is SIGKILLed mid-export.
    if (round === 0 || round === 2) {
      const victim = procs[rand(0, procs.length - 1)]!;
      timers.push(setTimeout(() => victim.child.kill('SIGKILL'), rand(100, 900)));
    }
    await Promise.all([...[...kernels.values()].map(({ k }) => k.export()), ...procs.map((p) => p.exited.then((sig) => void (sig === 'SIGKILL' && agentKills++)))]);
    for (const x of timers) clearTimeout(x);
    if (recv.child.exitCode !== null || recv.child.signalCode !== null) {
      assert.equal(recv.child.signalCode, 'SIGKILL', `the aggregator died by SIGKILL, not on its own:\n${recv.stderr()}`);
      aggregatorKills++;
      recv = await spawnAggregator(recvArgs, recvEnv);
    }
  }
  assert.equal(await pending(), 0, `every agent row was acknowledged by the aggregator ${why}`);
  assert.ok(aggregatorKills >= 2, `the aggregator was killed (${aggregatorKills} times) ${why}`);

  // The aggregator's sinks export at start and each minute: a graceful restart (its drain first) brings
  // the next tick now; then wait, bounded, for every row in both.
  const tableUrl = 's3://lake/fleet/events';
  const route = s3Route(s3.s3.endpoint);
  const lakeRows = async () => (await readIcebergTable({ tableUrl, route }).catch(() => ({ rows: [] as Record<string, unknown>[] }))).rows;
  const pgRows = async () => (await pg.query('SELECT id::bigint AS id, hyp_client, source FROM events ORDER BY id', [], pgUrl).catch(() => ({ rows: [] }))).rows as Record<string, unknown>[];
  await stopChild(recv);
  assert.equal(await recv.exited, 0, `a graceful stop exits 0:\n${recv.stderr()}`);
  recv = await spawnAggregator(recvArgs, recvEnv);
  const deadline = Date.now() + 180_000;
  while (Date.now() < deadline && ((await lakeRows()).length < total || (await pgRows()).length < total)) await new Promise((r) => setTimeout(r, 500));
  await stopChild(recv);
  assert.equal(await recv.exited, 0, `a graceful stop exits 0:\n${recv.stderr()}`);
  // What the aggregator's own status says of its sinks, for a failure's message.
  const agg = await openKernel(recvConfig);
  const sinks = (await agg.k.status()).sinks.map((x) => ({
    sink: x.name,
    partitions: x.partitions.map((p) => `${p.source}: exported ${p.exportedRows}, pending ${p.pendingRows}, gap ${p.gapRows}, error ${p.lastError}`),
  }));
  await agg.k.close();
  const said = `${why}\naggregator status: ${JSON.stringify(sinks, null, 1)}\nits stderr:\n${recv.stderr().slice(-4000)}`;

  for (const [where, rows] of [['Iceberg (icebird)', await lakeRows()], ['PostgreSQL', await pgRows()]] as const) {
    const ids = rows.map((r) => Number(r.id));
    assert.equal(rows.length, total, `${where}: ${rows.length} rows for ${total} sent ${said}`);
    assert.equal(new Set(ids).size, ids.length, `${where}: no row twice ${said}`);
    for (const r of rows) {
      const want = origin(Number(r.id));
      assert.deepEqual({ client: r.hyp_client, source: r.source }, want, `${where}: row ${r.id} under its client and source ${why}`);
    }
  }
  t.diagnostic(`seed ${seed}: aggregator SIGKILLs ${aggregatorKills} (the first at receiver.afterData), agent SIGKILLs ${agentKills}`);
});
