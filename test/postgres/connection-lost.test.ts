/**
 * The Postgres sink when its connection is lost (through the TCP fault proxy,
 * test/support/tcp-proxy.ts): mid-COPY, before COMMIT reaches the server, after
 * COMMIT with its answer lost, and idle between ticks. Each time the attempt
 * fails, never the process, and the unit's rows land exactly once.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { eventLines, ingestText } from '../support/kernel.js';
import { testPg, type TestPg } from '../support/pg.js';
import { startTcpProxy, type TcpProxy, type TcpRule } from '../support/tcp-proxy.js';
import { pgWorkspace } from './helpers.js';

let server: TestPg;
let proxy: TcpProxy;

before(async () => {
  server = await testPg();
  const u = new URL(server.adminUrl);
  proxy = await startTcpProxy({ target: { host: u.hostname, port: Number(u.port) } });
});
after(async () => {
  await proxy.stop();
  await server.stop();
});

/** A workspace whose sink reaches its fresh database through the proxy; reads go direct. */
async function throughProxy() {
  const direct = await server.database('lost');
  const u = new URL(direct);
  u.host = `${proxy.host}:${proxy.port}`;
  const w = await pgWorkspace({ url: u.toString(), unit: { maxRows: 25 }, sink: { retry: { attempts: 3, baseMs: 5, maxMs: 20 } } });
  const ids = async () => (await server.query<{ id: string }>('SELECT id::text AS id FROM events ORDER BY events.id', [], direct)).rows.map((r) => Number(r.id));
  const until = async () => (await server.query<{ until: string }>('SELECT until::text AS until FROM hypsink_watermarks', [], direct)).rows.map((r) => r.until);
  return { w, ids, until };
}

const upTo = (n: number) => Array.from({ length: n }, (_, i) => i + 1);

async function exportUnder(rule: TcpRule): Promise<void> {
  proxy.setRule(undefined);
  const { w, ids, until } = await throughProxy();
  const { k } = await w.open();
  try {
    await ingestText(k, 'host', eventLines(1, 30));
    // The first unit lands on a fresh connection; the rule meets the second.
    const [first] = await k.export('warehouse');
    assert.equal(first!.rows, 30);
    await ingestText(k, 'host', eventLines(31, 30));
    proxy.setRule(rule);
    const drops = proxy.stats.drops;
    const [r] = await k.export('warehouse');
    assert.equal(proxy.stats.drops, drops + 1, 'the rule fired');
    assert.equal(r!.failed, 0, JSON.stringify(r!.partitions.map((p) => p.error?.message)));
    assert.equal(r!.rows, 30);
    assert.deepEqual(await ids(), upTo(60));
    const st = await k.status();
    assert.deepEqual(await until(), [st.sinks[0]!.partitions[0]!.watermark]);
  } finally {
    proxy.setRule(undefined);
    await k.close();
  }
}

test('a connection lost mid-COPY fails the attempt, not the process; the retry lands the unit once', () =>
  exportUnder({ kind: 'drop', at: ['COPY '], afterBytes: 90 }));

test('a COMMIT that never reached the server: the retry writes the unit', () => exportUnder({ kind: 'drop', at: ['COPY ', 'COMMIT\0'], afterBytes: 0 }));

test("a COMMIT whose answer was lost: the retry finds the unit committed and writes nothing twice", () =>
  exportUnder({ kind: 'loseAnswer', at: ['COPY ', 'COMMIT\0'] }));

test('idle connections dropped between ticks: the next tick connects anew', async () => {
  proxy.setRule(undefined);
  const { w, ids } = await throughProxy();
  const { k } = await w.open();
  try {
    await ingestText(k, 'host', eventLines(1, 10));
    await k.export('warehouse');
    assert.ok(proxy.dropAll() > 0, 'the pool kept a connection');
    await ingestText(k, 'host', eventLines(11, 10));
    const [r] = await k.export('warehouse');
    assert.equal(r!.failed, 0);
    assert.deepEqual(await ids(), upTo(20));
  } finally {
    await k.close();
  }
});

test('validate --connect: a connection lost after login is a failed check, not a dead process', async () => {
  proxy.setRule(undefined);
  const { w } = await throughProxy();
  const { k } = await w.open();
  try {
    proxy.setRule({ kind: 'drop', at: ['current_user'], afterBytes: 0 });
    const [c] = await k.checkConnections();
    assert.equal(c!.ok, false);
    assert.match(!c!.ok ? c!.error.message : '', /sink "warehouse": .*Connection terminated/);
  } finally {
    proxy.setRule(undefined);
    await k.close();
  }
});
