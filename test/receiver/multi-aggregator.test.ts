/**
 * Several aggregators behind one address (issue 27, LLP 0080): three agents'
 * forward sinks POST to a loopback proxy in front of two `hypsink receiver
 * --config` child processes, each with its own cache and its own local-fs
 * lake folder (read together by DuckDB). The proxy throws away the answer of
 * some POSTs (a reset after the aggregator answered) and sends the client's
 * retry to the other aggregator; an aggregator that dies also moves its
 * clients to the other one. Without claims this stores rows twice; with the
 * shared claim table in PostgreSQL every row is in the lake once, across a
 * SIGKILL at each of the claim's fault points and a database that is
 * unreachable for a while. @ref LLP 0080
 */
import assert from 'node:assert/strict';
import { promises as fsp } from 'node:fs';
import * as http from 'node:http';
import * as net from 'node:net';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { DuckDBInstance } from '@duckdb/node-api';
import { cli, eventLines, exportLake, type Json, openKernel, type OpenKernel, withKernel, writeConfig, ingestText } from '../support/kernel.js';
import { freePort, testPg } from '../support/pg.js';
import { AGENT_EVENTS as EVENTS, type Aggregator, RECEIVED, ingest as post, spawnAggregator, stopChild, tempDir, tokenOf } from './helpers.js';

const AGENTS = ['a1', 'a2', 'a3'] as const;
/** The claim's lease: short, so a batch claimed by an aggregator that died is taken over within the test. */
const LEASE_MS = 1500;

let pgStarted = false;
after(async () => {
  // The shared embedded PostgreSQL keeps the process alive until stopped.
  if (pgStarted) await (await testPg()).stop();
});

/** A loopback TCP forwarder to PostgreSQL that can be switched off: the claim database unreachable. */
async function pgGate(target: URL): Promise<{ url: string; down(): void; up(): void; close(): Promise<void> }> {
  let open = true;
  const sockets = new Set<net.Socket>();
  const server = net.createServer((inbound) => {
    if (!open) return inbound.destroy();
    const outbound = net.connect(Number(target.port), target.hostname);
    for (const s of [inbound, outbound]) {
      sockets.add(s);
      s.on('close', () => sockets.delete(s));
      s.on('error', () => undefined);
    }
    inbound.pipe(outbound).pipe(inbound);
    inbound.on('close', () => outbound.destroy());
    outbound.on('close', () => inbound.destroy());
  });
  await new Promise<void>((ok) => server.listen(0, '127.0.0.1', ok));
  const u = new URL(target.toString());
  u.hostname = '127.0.0.1';
  u.port = String((server.address() as net.AddressInfo).port);
  return {
    url: u.toString(),
    down() {
      open = false;
      for (const s of sockets) s.destroy();
    },
    up() {
      open = true;
    },
    close: () => new Promise((ok) => server.close(() => ok())),
  };
}

/**
 * The address the agents know: each client (by its token) is sent to one of
 * the aggregators; the answer of every third POST of a client is thrown away
 * after the aggregator gave it (the socket reset), and an aggregator that
 * cannot be reached resets the client's socket too; either way the client's
 * next POST, its retry, goes to the other aggregator.
 */
async function switchingProxy(upstreams: readonly number[]): Promise<{ url: string; lostAnswers: () => number; close(): Promise<void> }> {
  const target = new Map<string, number>();
  const posts = new Map<string, number>();
  let lost = 0;
  const server = http.createServer((req, res) => {
    const who = req.headers.authorization ?? '';
    if (!target.has(who)) target.set(who, target.size % upstreams.length);
    const switchOver = () => target.set(who, (target.get(who)! + 1) % upstreams.length);
    const n = (posts.get(who) ?? 0) + 1;
    if (req.method === 'POST') posts.set(who, n);
    const up = http.request({ host: '127.0.0.1', port: upstreams[target.get(who)!], path: req.url, method: req.method, headers: req.headers, agent: false }, (answer) => {
      const chunks: Buffer[] = [];
      answer.on('data', (c: Buffer) => chunks.push(c));
      answer.on('end', () => {
        if (req.method === 'POST' && n % 3 === 1) {
          // The aggregator answered; the client never hears it.
          lost++;
          switchOver();
          return req.socket.destroy();
        }
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        res.end(Buffer.concat(chunks));
      });
      answer.on('error', () => req.socket.destroy());
    });
    up.on('error', () => {
      switchOver();
      req.socket.destroy();
    });
    req.pipe(up);
  });
  await new Promise<void>((ok) => server.listen(0, '127.0.0.1', ok));
  return {
    url: `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`,
    lostAnswers: () => lost,
    close: () =>
      new Promise((ok) => {
        server.closeAllConnections();
        server.close(() => ok());
      }),
  };
}

async function lakeIds(lakes: readonly string[]): Promise<number[]> {
  const files: string[] = [];
  for (const dir of lakes) {
    for (const e of await fsp.readdir(dir, { recursive: true, withFileTypes: true }).catch(() => [])) {
      if (e.isFile() && e.name.endsWith('.parquet')) files.push(join(e.parentPath, e.name));
    }
  }
  if (files.length === 0) return [];
  const db = await DuckDBInstance.create(':memory:');
  const c = await db.connect();
  try {
    const rows = (await c.runAndReadAll(`SELECT id::BIGINT AS id FROM read_parquet(${JSON.stringify(files)}) ORDER BY id`)).getRowObjects();
    return rows.map((r) => Number(r.id));
  } finally {
    c.closeSync();
    db.closeSync();
  }
}

interface Fleet {
  readonly dir: string;
  readonly names: readonly string[];
  readonly configs: readonly string[];
  readonly lakes: readonly string[];
  readonly ports: readonly number[];
  readonly agents: OpenKernel[];
  readonly proxy: Awaited<ReturnType<typeof switchingProxy>>;
  readonly aggs: (Aggregator | null)[];
  start(i: number, env?: Record<string, string>): Promise<Aggregator>;
  pending(): Promise<number>;
  close(): Promise<void>;
}

/** Two aggregators (ports fixed, so a restart takes its place behind the proxy) and three agents behind the proxy. */
async function fleet(claims: { url: string } | null): Promise<Fleet> {
  const { dir, cleanup } = await tempDir('multi-agg');
  const tokens = join(dir, 'tokens');
  await fsp.writeFile(tokens, AGENTS.map((a) => `${a} ${tokenOf(a)}\n`).join(''), { mode: 0o600 });
  const names = ['agg-a', 'agg-b'];
  const configs: string[] = [];
  const lakes: string[] = [];
  const ports: number[] = [];
  for (const name of names) {
    lakes.push(join(dir, `lake-${name}`));
    ports.push(await freePort());
    configs.push(
      await writeConfig(
        dir,
        {
          cache: { root: join(dir, name, 'cache') },
          state: { dir: join(dir, name, 'state') },
          datasets: { events: RECEIVED },
          sinks: { lake: { writer: '@hypsink/format-parquet', destination: '@hypsink/local-fs', datasets: ['events'], schedule: '* * * * *', config: { dir: lakes.at(-1) } } },
        },
        `${name}.config.json`,
      ),
    );
  }
  const proxy = await switchingProxy(ports);
  const agents: OpenKernel[] = [];
  for (const a of AGENTS) {
    process.env[`MULTI_${a.toUpperCase()}_TOKEN`] = tokenOf(a);
    const cfg: Json = {
      cache: { root: join(dir, a, 'cache') },
      state: { dir: join(dir, a, 'state') },
      datasets: { events: EVENTS },
      sinks: {
        central: {
          plugin: '@hypsink/forward',
          datasets: ['events'],
          schedule: '* * * * *',
          unit: { maxRows: 10 },
          config: { url: proxy.url, token: `\${MULTI_${a.toUpperCase()}_TOKEN}`, timeoutMs: 10_000, ladderMs: [100], maxInlineWaitMs: 20_000, retry: { attempts: 3, baseMs: 20, maxMs: 50 } },
        },
      },
    };
    await fsp.mkdir(join(dir, a), { recursive: true });
    agents.push(await openKernel(await writeConfig(join(dir, a), cfg)));
  }
  const aggs: (Aggregator | null)[] = [null, null];
  const args = (i: number) => [
    '--config',
    configs[i]!,
    '--tokens-file',
    tokens,
    '--port',
    String(ports[i]),
    ...(claims ? ['--aggregator-name', names[i]!, '--claim-lease-ms', String(LEASE_MS), '--settle-every-ms', '300'] : []),
  ];
  const f: Fleet = {
    dir,
    names,
    configs,
    lakes,
    ports,
    agents,
    proxy,
    aggs,
    async start(i, env = {}) {
      const a = await spawnAggregator(args(i), { ...(claims ? { HYPSINK_CLAIMS_URL: claims.url } : {}), ...env });
      aggs[i] = a;
      return a;
    },
    async pending() {
      let n = 0;
      for (const { k } of agents) for (const s of (await k.status()).sinks) for (const p of s.partitions) n += p.pendingRows;
      return n;
    },
    async close() {
      for (const a of aggs) if (a) await stopChild(a);
      for (const { k } of agents) await k.close();
      await proxy.close();
      await cleanup();
    },
  };
  return f;
}

/** Each agent ingests `n` rows of source `web`, ids from `wave * 1000 + agent * 100`. */
async function ingestWave(f: Fleet, wave: number, n: number): Promise<number[]> {
  const ids: number[] = [];
  for (const [i, { k }] of f.agents.entries()) {
    const from = wave * 1000 + (i + 1) * 100;
    const r = await ingestText(k, 'web', eventLines(from, n));
    assert.equal(r.accepted, n);
    for (let j = 0; j < n; j++) ids.push(from + j);
  }
  return ids;
}

/** The aggregators stopped gracefully, then each cache's sink `lake` exported once; the ids in both lakes. */
async function exportAll(f: Fleet): Promise<number[]> {
  for (const [i, a] of f.aggs.entries()) {
    if (!a) continue;
    await stopChild(a);
    assert.equal(await a.exited, 0, `aggregator ${f.names[i]} stops gracefully:\n${a.stderr()}`);
    f.aggs[i] = null;
  }
  for (const cfg of f.configs) await exportLake(cfg);
  return lakeIds(f.lakes);
}

test('without claims, a retry the proxy sends to the other aggregator stores its rows twice (the rule LLP 0080 answers)', async () => {
  const f = await fleet(null);
  try {
    await f.start(0);
    await f.start(1);
    const sent = await ingestWave(f, 1, 30);
    for (let round = 0; round < 10 && (await f.pending()) > 0; round++) await Promise.all(f.agents.map(({ k }) => k.export()));
    assert.equal(await f.pending(), 0, 'every agent row was acknowledged');
    assert.ok(f.proxy.lostAnswers() > 0, 'the proxy threw answers away');
    const ids = await exportAll(f);
    assert.deepEqual([...new Set(ids)].sort((a, b) => a - b), sent, 'every row arrived');
    assert.ok(ids.length > sent.length, `rows stored twice: ${ids.length} rows in the lakes for ${sent.length} sent`);
  } finally {
    await f.close();
  }
});

test('with claims: every row once across lost answers, a SIGKILL at each claim fault point, and the claim database unreachable', async (t) => {
  pgStarted = true;
  const pg = await testPg();
  const db = await pg.database('claims');
  const gate = await pgGate(new URL(db));
  const f = await fleet({ url: gate.url });
  try {
    // Each armed run dies at its second batch there; then the next of its list runs (the last unarmed).
    const armed: Record<string, string>[][] = [
      [{ HYPSINK_FAULT: 'receiver.afterClaim', HYPSINK_FAULT_AT: '2' }, { HYPSINK_FAULT: 'receiver.afterStored', HYPSINK_FAULT_AT: '2' }],
      [{ HYPSINK_FAULT: 'receiver.afterHold', HYPSINK_FAULT_AT: '2' }],
    ];
    const died: string[] = [];
    const armedNow = [false, false];
    const armedAt: (string | undefined)[] = [undefined, undefined];
    const startNext = async (i: number) => {
      const env = armed[i]!.shift() ?? {};
      armedNow[i] = env.HYPSINK_FAULT !== undefined;
      armedAt[i] = env.HYPSINK_FAULT;
      return f.start(i, env);
    };
    /** What the restart's settlement (before it listens) did with the batches the dead run left held. */
    const settledAtStart = async (a: Aggregator): Promise<{ released: number; dropped: number }> => {
      for (let i = 0; i < 50; i++) {
        for (const line of a.stderr().split('\n')) {
          if (!line.includes('held batches settled')) continue;
          const o = JSON.parse(line) as { released: number; dropped: number };
          return { released: o.released, dropped: o.dropped };
        }
        // stderr is another pipe than the "listening" line's: let it arrive.
        await new Promise((r) => setTimeout(r, 100));
      }
      return { released: 0, dropped: 0 };
    };
    // A dead aggregator is restarted at once (its settlement runs before it listens), so the client's retry
    // that the proxy sends to the other one meets a live aggregator, and its own next batches find it back.
    const problems: string[] = [];
    let restarts: Promise<void> = Promise.resolve();
    let stopping = false;
    const watch = (i: number, a: Aggregator) => {
      void a.exited.then(() => {
        if (stopping) return;
        restarts = restarts.then(async () => {
          if (a.child.signalCode !== 'SIGKILL') problems.push(`aggregator ${f.names[i]} died on its own:\n${a.stderr()}`);
          const point = armedAt[i]!;
          died.push(`${f.names[i]} at ${point}`);
          const next = await startNext(i);
          watch(i, next);
          // Killed after the stored update: its restart releases the batch; after the held spool: it drops it.
          const settled = point === 'receiver.afterStored' || point === 'receiver.afterHold' ? await settledAtStart(next) : null;
          if (point === 'receiver.afterStored' && !(settled!.released >= 1)) problems.push(`the restart after ${point} released nothing: ${JSON.stringify(settled)}`);
          if (point === 'receiver.afterHold' && !(settled!.dropped >= 1)) problems.push(`the restart after ${point} dropped nothing: ${JSON.stringify(settled)}`);
        });
      });
    };
    watch(0, await startNext(0));
    watch(1, await startNext(1));
    const sent: number[] = [];
    for (let wave = 1; wave <= 6 && armedNow.some(Boolean); wave++) {
      sent.push(...(await ingestWave(f, wave, 30)));
      for (let round = 0; round < 20 && (await f.pending()) > 0; round++) {
        await Promise.all(f.agents.map(({ k }) => k.export()));
        await restarts;
      }
      assert.equal(await f.pending(), 0, `wave ${wave}: every agent row was acknowledged`);
    }
    stopping = true;
    await restarts;
    assert.deepEqual(problems, []);
    assert.equal(died.length, 3, `each armed aggregator died at its fault point (${died.join(', ')})`);
    assert.ok(f.proxy.lostAnswers() > 0, 'the proxy threw answers away');

    // The claim database unreachable: 503 with Retry-After, nothing stored; reachable again: stored once.
    const row = `${JSON.stringify({ id: 99001, ts: '2026-01-01T00:00:00.000Z', msg: 'while the database was down' })}\n`;
    const batch = { dataset: 'events', source: 'web', id: 'db-down-1', body: row, token: tokenOf('a1') };
    gate.down();
    const refused = await post(f.aggs[0]!.url, batch);
    assert.equal(refused.status, 503, refused.text);
    assert.ok(refused.headers['retry-after'], 'a 503 says when to retry');
    assert.doesNotMatch(refused.text + f.aggs[0]!.stderr(), new RegExp(new URL(db).password || 'no-password-in-url'), 'no password in an answer or a log');
    gate.up();
    const stored = await post(f.aggs[0]!.url, batch);
    assert.deepEqual([stored.status, stored.json], [200, { stored: 1 }], stored.text);
    const elsewhere = await post(f.aggs[1]!.url, batch);
    assert.deepEqual([elsewhere.status, elsewhere.json], [200, { duplicate: true }], `the other aggregator answers from the claim: ${elsewhere.text}`);
    const other = await post(f.aggs[1]!.url, { ...batch, body: row.replace('99001', '99002') });
    assert.equal(other.status, 409, `another body under a claimed id: ${other.text}`);
    sent.push(99001);

    const ids = await exportAll(f);
    t.diagnostic(`deaths: ${died.join(', ')}; answers thrown away: ${f.proxy.lostAnswers()}; rows in the lakes: ${ids.length}, sent: ${sent.length}`);
    for (const cfg of f.configs) {
      await withKernel(cfg, async (k) => assert.deepEqual(await k.cache.heldSpools(), [], `${cfg}: no batch is held back once settled`));
    }
    assert.equal(ids.length, new Set(ids).size, `no row twice: ${ids.length} rows in the lakes, ${new Set(ids).size} distinct`);
    assert.deepEqual(ids, [...sent].sort((a, b) => a - b), 'every row once');
    const claims = await pg.query<{ state: string; n: string }>('SELECT state, count(*)::text AS n FROM hyp_claims GROUP BY state ORDER BY state', [], db);
    assert.ok(claims.rows.every((r) => r.state === 'stored' || r.state === 'claimed'), JSON.stringify(claims.rows));
  } finally {
    await f.close();
    await gate.close();
  }
});

test('claims are an aggregator\'s: refused without --config, the URL\'s password never shown', async () => {
  const { dir, cleanup } = await tempDir('claims-usage');
  try {
    const r = await cli('receiver', '--port', '0', '--data', dir, '--insecure-no-auth', '--claims', 'postgres://hyp:s3cr3t-pw@127.0.0.1:1/fleet');
    assert.equal(r.code, 2, r.err);
    assert.match(r.err, /claims \(--claims or HYPSINK_CLAIMS_URL\) are for an aggregator: give --config <file> too/);
    assert.doesNotMatch(r.out + r.err, /s3cr3t-pw/);
  } finally {
    await cleanup();
  }
});
