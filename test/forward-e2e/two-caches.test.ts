/**
 * Two hosts' caches forward the same sink and source names to one receiver:
 * their batch ids must differ (each cache has its own id, mixed into every
 * batch id), or the receiver drops the second cache's rows as duplicates.
 * @ref LLP 0021: the cache's id in forwarded batch ids
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { readStored, startReceiver } from '../../fixtures/receiver/server.js';
import { e2eConfig, ids, ingestWith, runCli, TOKEN, workspace } from './helpers.js';

test('two caches, one receiver, the same sink and source names: every row of both stored once', async () => {
  const a = await workspace('two-caches-a');
  const b = await workspace('two-caches-b');
  const r = await startReceiver({ port: 0, dataDir: a.recv, token: TOKEN });
  try {
    for (const [ws, from] of [[a, 1], [b, 101]] as const) {
      await ws.writeConfig(e2eConfig(r.url));
      // The same shape on both hosts: the same seq ranges, so the same batch ids but for the cache.
      await ingestWith(ws.configPath, { web: [from, 5] });
      const out = await runCli(['export', '--config', ws.configPath]);
      assert.equal(out.code, 0, out.stderr);
    }
    const stored = await readStored(a.recv);
    assert.equal(new Set(stored.ledger.map((e) => e.id)).size, 2, 'two batches, two ids');
    const got = (stored.rows.events?.web ?? []).map((row) => Number(row.id)).sort((x, y) => x - y);
    assert.deepEqual(got, [...ids(1, 5), ...ids(101, 5)]);
  } finally {
    await r.close();
    await a.cleanup();
    await b.cleanup();
  }
});
