/**
 * `hypsink receiver --config` (issue 27): agents' forward sinks → the
 * receiver, which ingests each batch into its own cache under the client's
 * identity and exports it with its own sinks (here local-fs Parquet, read back
 * with DuckDB). The receiver is a real child process, killed once (SIGKILL, at
 * the named point between the cache ingest and the ledger line) and restarted;
 * every agent row arrives exactly once, attributed to its client, and a
 * client's claim to be another is overwritten. Backpressure: a cache over its
 * size answers 429 with Retry-After. @ref LLP 0074
 */
import assert from 'node:assert/strict';
import { promises as fsp } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { DuckDBInstance } from '@duckdb/node-api';
import { type Json, openKernel, writeConfig, ingest as ingestRows } from '../support/kernel.js';
import { freePort } from '../support/pg.js';
import { AGENT_EVENTS as EVENTS, RECEIVED, ingest as post, spawnAggregator as startReceiver, stopChild as stop, tempDir, tokenOf } from './helpers.js';


const AGENTS = ['a1', 'a2', 'a3'] as const;

async function duck<T>(fn: (sql: (q: string) => Promise<Record<string, unknown>[]>) => Promise<T>): Promise<T> {
  const db = await DuckDBInstance.create(':memory:');
  const c = await db.connect();
  try {
    return await fn(async (q) => (await c.runAndReadAll(q)).getRowObjects() as Record<string, unknown>[]);
  } finally {
    c.closeSync();
    db.closeSync();
  }
}

async function parquetFiles(dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const e of await fsp.readdir(dir, { recursive: true, withFileTypes: true }).catch(() => [])) {
    if (e.isFile() && e.name.endsWith('.parquet')) out.push(join(e.parentPath, e.name));
  }
  return out;
}

test('agents forward to `receiver --config`: each row lands in the lake once, under its client, across a SIGKILL of the receiver', async () => {
  const { dir, cleanup } = await tempDir('aggregator');
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const lake = join(dir, 'lake');
  const tokens = join(dir, 'tokens');
  await fsp.writeFile(tokens, AGENTS.map((a) => `${a} ${tokenOf(a)}\n`).join(''), { mode: 0o600 });
  const recvConfig = await writeConfig(
    dir,
    {
      cache: { root: join(dir, 'recv-cache') },
      state: { dir: join(dir, 'recv-state') },
      datasets: { events: RECEIVED },
      sinks: { lake: { writer: '@hypsink/format-parquet', destination: '@hypsink/local-fs', datasets: ['events'], schedule: '* * * * *', config: { dir: lake } } },
    },
    'receiver.config.json',
  );
  const recvArgs = ['--config', recvConfig, '--tokens-file', tokens, '--port', String(port)];
  // The first run dies at the second batch it ingests: its rows durable in the cache, no ledger line, no answer.
  let recv = await startReceiver(recvArgs, { HYPSINK_FAULT: 'receiver.afterData', HYPSINK_FAULT_AT: '2' });
  const agents: Awaited<ReturnType<typeof openKernel>>[] = [];
  try {
    for (const a of AGENTS) {
      process.env[`AGENT_${a.toUpperCase()}_TOKEN`] = tokenOf(a);
      const cfg: Json = {
        cache: { root: join(dir, a, 'cache') },
        state: { dir: join(dir, a, 'state') },
        datasets: { events: EVENTS },
        sinks: {
          central: {
            plugin: '@hypsink/forward',
            datasets: ['events'],
            schedule: '* * * * *',
            unit: { maxRows: 20 },
            config: { url, token: `\${AGENT_${a.toUpperCase()}_TOKEN}`, timeoutMs: 5000, ladderMs: [50], retry: { attempts: 2, baseMs: 20, maxMs: 40 } },
          },
        },
      };
      await fsp.mkdir(join(dir, a), { recursive: true });
      agents.push(await openKernel(await writeConfig(join(dir, a), cfg)));
    }
    // Every agent sends rows of source `web` (the same partition name from every client) and of its own host.
    const base = (i: number) => (i + 1) * 1000;
    for (const [i, { k }] of agents.entries()) {
      await ingestRows(k, 'web', base(i), 30);
      await ingestRows(k, `host-${AGENTS[i]}`, base(i) + 100, 25);
    }
    const total = AGENTS.length * 55;
    const pending = async () => {
      let n = 0;
      for (const { k } of agents) for (const s of (await k.status()).sinks) for (const p of s.partitions) n += p.pendingRows;
      return n;
    };
    // Export until the first receiver dies (its fault point), then restart it and export until nothing is pending.
    // The agents export at once: the receiver ingests their batches concurrently into one cache.
    await Promise.all(agents.map(({ k }) => k.export()));
    assert.equal(await recv.exited, null, 'the first receiver died at its fault point (SIGKILL)');
    assert.equal(recv.child.signalCode, 'SIGKILL');
    recv = await startReceiver(recvArgs);
    for (let round = 0; round < 20 && (await pending()) > 0; round++) await Promise.all(agents.map(({ k }) => k.export()));
    assert.equal(await pending(), 0, 'every agent row was acknowledged by the receiver');

    // A hostile client: a3 claims its rows are a1's.
    const forged = [1, 2].map((n) => JSON.stringify({ id: 9000 + n, ts: '2026-01-01T00:00:00.000Z', msg: 'forged', hyp_client: 'a1' })).join('\n');
    const r = await post(recv.url, { dataset: 'events', source: 'web', id: 'forged-1', body: `${forged}\n`, token: tokenOf('a3') });
    assert.equal(r.status, 200, r.text);

    // The receiver's own sink exports on its schedule (each minute) and at start: restart it (a graceful stop
    // this time) so its first tick comes now, and wait, bounded, for every row.
    await stop(recv);
    assert.equal(await recv.exited, 0, `a graceful stop drains the sinks and exits 0 (${recv.child.signalCode}):\n${recv.stderr()}`);
    recv = await startReceiver(recvArgs);
    const want = total + 2;
    const count = async () => {
      const files = await parquetFiles(lake);
      if (files.length === 0) return 0;
      return duck(async (sql) => Number((await sql(`SELECT count(*) AS n FROM read_parquet(${JSON.stringify(files)})`))[0]!.n));
    };
    const deadline = Date.now() + 120_000;
    while ((await count()) < want && Date.now() < deadline) await new Promise((res) => setTimeout(res, 200));
    await stop(recv);
    const files = await parquetFiles(lake);
    await duck(async (sql) => {
      const from = `read_parquet(${JSON.stringify(files)})`;
      const rows = await sql(`SELECT id::BIGINT AS id, hyp_client AS client, msg FROM ${from} ORDER BY id`);
      assert.equal(rows.length, want, `every row once: ${rows.length} rows in the lake, ${want} sent`);
      const ids = rows.map((x) => Number(x.id));
      assert.equal(new Set(ids).size, ids.length, 'no row twice');
      for (const row of rows) {
        const id = Number(row.id);
        const expected = id >= 9000 ? 'a3' : AGENTS[Math.floor(id / 1000) - 1];
        assert.equal(row.client, expected, `row ${id} is attributed to ${expected}`);
      }
      const perSource = await sql(`SELECT source, count(*)::BIGINT AS n FROM ${from} GROUP BY source ORDER BY source`);
      assert.deepEqual(
        perSource.map((x) => [x.source, Number(x.n)]),
        [['host-a1', 25], ['host-a2', 25], ['host-a3', 25], ['web', 92]],
        "each row keeps its agent's source",
      );
    });
  } finally {
    for (const { k } of agents) await k.close();
    await stop(recv);
    await cleanup();
  }
});

test('receiver --config: a cache over --max-cache-bytes answers 429 with Retry-After, and nothing is stored', async () => {
  const { dir, cleanup } = await tempDir('aggregator-full');
  const tokens = join(dir, 'tokens');
  await fsp.writeFile(tokens, `a1 ${tokenOf('a1')}\n`, { mode: 0o600 });
  const cfg = await writeConfig(dir, {
    cache: { root: join(dir, 'cache') },
    state: { dir: join(dir, 'state') },
    datasets: { events: RECEIVED },
    sinks: { lake: { writer: '@hypsink/format-parquet', destination: '@hypsink/local-fs', datasets: ['events'], schedule: '0 0 1 1 *', config: { dir: join(dir, 'lake') } } },
  });
  const recv = await startReceiver(['--config', cfg, '--tokens-file', tokens, '--port', '0', '--max-cache-bytes', '1', '--retry-after', '7']);
  try {
    const body = `${JSON.stringify({ id: 1, ts: '2026-01-01T00:00:00.000Z', msg: 'x' })}\n`;
    const r = await post(recv.url, { dataset: 'events', source: 'web', id: 'b1', body, token: tokenOf('a1') });
    assert.equal(r.status, 429, r.text);
    assert.equal(r.headers['retry-after'], '7');
    assert.match(r.text, /cache/);
    await stop(recv);
    const { k } = await openKernel(cfg);
    try {
      const rows = (await k.status()).sinks.flatMap((s) => s.partitions).reduce((n, p) => n + p.pendingRows, 0);
      assert.equal(rows, 0, 'the refused batch added no row to the cache');
    } finally {
      await k.close();
    }
  } finally {
    await stop(recv);
    await cleanup();
  }
});

test('receiver --config: while a sink of its config is failing, a new batch is answered 503 with Retry-After', async () => {
  const { dir, cleanup } = await tempDir('aggregator-failing');
  const tokens = join(dir, 'tokens');
  await fsp.writeFile(tokens, `a1 ${tokenOf('a1')}\n`, { mode: 0o600 });
  // The sink's folder lies under a regular file: every export of it fails.
  await fsp.writeFile(join(dir, 'not-a-folder'), 'x');
  const cfg = await writeConfig(dir, {
    cache: { root: join(dir, 'cache') },
    state: { dir: join(dir, 'state') },
    datasets: { events: RECEIVED },
    sinks: { lake: { writer: '@hypsink/format-parquet', destination: '@hypsink/local-fs', datasets: ['events'], schedule: '0 0 1 1 *', config: { dir: join(dir, 'not-a-folder', 'lake') } } },
  });
  const args = ['--config', cfg, '--tokens-file', tokens, '--port', '0', '--retry-after', '3'];
  const line = (id: number) => `${JSON.stringify({ id, ts: '2026-01-01T00:00:00.000Z', msg: 'x' })}\n`;
  // The first run stores a batch; the sink's only tick ran at start, with nothing to export.
  let recv = await startReceiver(args);
  try {
    const first = await post(recv.url, { dataset: 'events', source: 'web', id: 'b1', body: line(1), token: tokenOf('a1') });
    assert.equal(first.status, 200, first.text);
    await stop(recv);
    // The second run's first tick tries to export that row and fails; from then on new batches are refused.
    recv = await startReceiver(args);
    let r = await post(recv.url, { dataset: 'events', source: 'web', id: 'b2', body: line(2), token: tokenOf('a1') });
    for (let n = 3; r.status === 200 && n < 200; n++) {
      await new Promise((res) => setTimeout(res, 100));
      r = await post(recv.url, { dataset: 'events', source: 'web', id: `b${n}`, body: line(n), token: tokenOf('a1') });
    }
    assert.equal(r.status, 503, r.text);
    assert.equal(r.headers['retry-after'], '3');
    assert.match(r.text, /sink \\"lake\\" is failing/);
    // A batch it stored is still answered as stored: re-sending it adds nothing.
    const again = await post(recv.url, { dataset: 'events', source: 'web', id: 'b1', body: line(1), token: tokenOf('a1') });
    assert.equal(again.status, 200, again.text);
    assert.match(again.text, /"duplicate":true/);
  } finally {
    await stop(recv);
    await cleanup();
  }
});

test('receiver --config: a dataset without the hyp_client column is refused at start, naming it', async () => {
  const { dir, cleanup } = await tempDir('aggregator-cfg');
  try {
    const cfg = await writeConfig(dir, {
      cache: { root: join(dir, 'cache') },
      datasets: { events: EVENTS },
      sinks: { lake: { writer: '@hypsink/format-parquet', destination: '@hypsink/local-fs', datasets: ['events'], schedule: '* * * * *', config: { dir: join(dir, 'lake') } } },
    });
    const recv = startReceiver(['--config', cfg, '--insecure-no-auth', '--port', '0']);
    await assert.rejects(recv, /dataset "events".*hyp_client/s);
  } finally {
    await cleanup();
  }
});
