/**
 * The TCP fault proxy (test/support/tcp-proxy.ts) in front of the test
 * PostgreSQL does what each rule says: the simulation's connection drops are
 * only as good as this.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import pg from 'pg';
import { testPg, type TestPg } from '../support/pg.js';
import { startTcpProxy, type TcpProxy } from '../support/tcp-proxy.js';

let server: TestPg;
let url: string;
let proxy: TcpProxy;

before(async () => {
  server = await testPg();
  url = await server.database('tcpproxy');
  const u = new URL(url);
  proxy = await startTcpProxy({ target: { host: u.hostname, port: Number(u.port) } });
  await server.query('CREATE TABLE t (n integer NOT NULL)', [], url);
});
after(async () => {
  await proxy.stop();
  await server.stop();
});

/** A client that reaches the server through the proxy. */
function viaProxy(): pg.Client {
  const u = new URL(url);
  u.host = `${proxy.host}:${proxy.port}`;
  const c = new pg.Client({ connectionString: u.toString() });
  c.on('error', () => undefined);
  return c;
}

const count = async () => Number((await server.query<{ n: string }>('SELECT count(*)::text AS n FROM t', [], url)).rows[0]!.n);

test('pass forwards both ways; delay still answers', async () => {
  proxy.setRule({ kind: 'pass' });
  const c = viaProxy();
  await c.connect();
  assert.equal((await c.query('SELECT 41 + 1 AS x')).rows[0].x, 42);
  proxy.setRule({ kind: 'delay', ms: 5 });
  assert.equal((await c.query('SELECT 2 AS x')).rows[0].x, 2);
  proxy.setRule(undefined);
  await c.end();
});

test('refuse: a new connection is reset, an open one still works', async () => {
  proxy.setRule(undefined);
  const open = viaProxy();
  await open.connect();
  proxy.setRule({ kind: 'refuse' });
  const refused = proxy.stats.refused;
  const fresh = viaProxy();
  await assert.rejects(fresh.connect());
  assert.equal(proxy.stats.refused, refused + 1);
  assert.equal((await open.query('SELECT 1 AS x')).rows[0].x, 1);
  proxy.setRule(undefined);
  await open.end();
});

test('dropAll ends every open connection now', async () => {
  proxy.setRule(undefined);
  const a = viaProxy();
  const b = viaProxy();
  await a.connect();
  await b.connect();
  const ended = Promise.all([a, b].map((c) => new Promise<void>((ok) => c.once('end', () => ok()))));
  assert.ok(proxy.dropAll() >= 2);
  await ended;
  await assert.rejects(a.query('SELECT 1'));
});

test('drop at a text: the statement never reaches the server, the transaction rolls back', async () => {
  proxy.setRule(undefined);
  const before = await count();
  const c = viaProxy();
  await c.connect();
  await c.query('BEGIN');
  await c.query('SELECT pg_advisory_xact_lock(4711)');
  await c.query('INSERT INTO t VALUES (1)');
  proxy.setRule({ kind: 'drop', afterBytes: 0, at: ['COMMIT\0'] });
  await assert.rejects(c.query('COMMIT'));
  assert.equal(proxy.rule.kind, 'pass', 'one shot');
  // The proxy closed the server's side too: its session ended and let go of the lock (else this waits).
  await server.query('SELECT pg_advisory_lock(4711)', [], url);
  assert.equal(await count(), before);
});

test('drop after N bytes of a text: mid-statement, nothing of it runs', async () => {
  proxy.setRule(undefined);
  const before = await count();
  const c = viaProxy();
  await c.connect();
  proxy.setRule({ kind: 'drop', afterBytes: 12, at: ['INSERT INTO t'] });
  await assert.rejects(c.query('INSERT INTO t SELECT generate_series(1, 5)'));
  assert.equal(await count(), before);
});

test('drop after N bytes from the clients, counted from the rule', async () => {
  proxy.setRule(undefined);
  const c = viaProxy();
  await c.connect();
  const sent = proxy.stats.bytesFromClients;
  proxy.setRule({ kind: 'drop', afterBytes: 30 });
  await assert.rejects(c.query(`SELECT '${'x'.repeat(100)}' AS x`));
  assert.equal(proxy.stats.bytesFromClients - sent, 30);
});

test('loseAnswer at COMMIT: the server commits, the client never hears of it', async () => {
  proxy.setRule(undefined);
  const before = await count();
  const c = viaProxy();
  await c.connect();
  await c.query('BEGIN');
  await c.query('INSERT INTO t VALUES (7)');
  proxy.setRule({ kind: 'loseAnswer', at: ['COMMIT\0'] });
  await assert.rejects(c.query('COMMIT'));
  assert.equal(await count(), before + 1);
});
