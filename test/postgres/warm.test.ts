/**
 * The connection the Postgres sink opens ahead of its first unit (`warm`,
 * while the kernel digests the unit) is the one the unit ships on: one
 * session at the server for a whole export of three units, not one opened
 * by warm and another by the first ship beside it.
 * @ref LLP 0096
 */
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { eventLines, ingestText } from '../support/kernel.js';
import { testPg } from '../support/pg.js';
import { startTcpProxy } from '../support/tcp-proxy.js';
import { pgWorkspace } from './helpers.js';

after(async () => (await testPg()).stop());

test('warm: the connection opened ahead of the first unit is the one every unit ships on', async () => {
  const app = 'hypsink-warm-test';
  const server = await testPg();
  const direct = new URL(await server.database('warm'));
  // Every chunk 30 ms late each way: opening a session takes several round trips, so the first
  // unit's digest is done long before warm's connection is, and its ship asks for one meanwhile.
  const proxy = await startTcpProxy({ target: { host: direct.hostname, port: Number(direct.port) }, rule: { kind: 'delay', ms: 30 } });
  const url = new URL(direct);
  url.host = `${proxy.host}:${proxy.port}`;
  const w = await pgWorkspace({ url: url.toString(), sink: { applicationName: app }, unit: { maxRows: 100 } });
  const { k } = await w.open();
  try {
    await ingestText(k, 'web', eventLines(1, 300));
    const [t] = await k.export('warehouse');
    assert.equal(t!.partitions[0]!.error, null, String(t!.partitions[0]!.error));
    assert.equal(t!.partitions[0]!.units, 3);
    // The pool keeps its idle sessions (30 s): every session the export opened is still there.
    const sessions = await w.query('SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1 AND datname = current_database()', [app]);
    assert.deepEqual(sessions, [{ n: 1 }], 'one session for the whole export');
  } finally {
    await k.close();
    await proxy.stop();
  }
  assert.deepEqual((await server.query('SELECT count(*)::int AS n FROM events', [], direct.toString())).rows, [{ n: 300 }]);
});
