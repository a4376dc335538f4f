/**
 * Hole 2 of issue 12: a forward unit stored by the receiver, then a crash before
 * the watermark moves. After the restart its body is rebuilt from the cache, as
 * it was (its columns are fixed with its intent: LLP 0030), but a proxy in front
 * of the receiver has had its body limit lowered below it and refuses it as too
 * large (HTTP 413). A unit read
 * back from disk keeps its identity: it is never re-planned smaller under new
 * batch ids (which would store every row twice); the export fails naming the
 * limit, and once the limit is lifted the same batch id is acknowledged.
 * @ref LLP 0018: the two kernel rules
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { readStored, startReceiver } from '../../fixtures/receiver/server.js';
import { startFaultProxy } from '../support/fault-proxy.js';
import { e2eConfig, ingestWith, partitionStatus, runCli, statusOf, TOKEN, workspace } from './helpers.js';

test('a recovered forward unit refused as too large keeps its batch id: no row stored twice', async () => {
  const ws = await workspace('recovered-413');
  const r = await startReceiver({ port: 0, dataDir: ws.recv, token: TOKEN });
  let limit: number | null = null;
  const proxy = await startFaultProxy({
    target: r.url,
    // A proxy whose body limit was lowered: bodies over `limit` bytes are refused before the receiver.
    rule: (req) => (limit !== null && Number(req.headers['content-length']) > limit ? { kind: 'respond', status: 413, body: '{"error":"body too large for the proxy"}' } : undefined),
  });
  try {
    await ws.writeConfig(e2eConfig(proxy.endpoint, { unit: { maxRows: 50 } }));
    await ingestWith(ws.configPath, { alpha: [1, 20] });

    // The unit reaches the receiver; the exporter dies before its watermark moves.
    const crashed = await runCli(['export', '--config', ws.configPath], { HYPSINK_FAULT: 'export.afterShip' });
    assert.equal(crashed.signal, 'SIGKILL', crashed.stderr);
    const stored = await readStored(ws.recv);
    assert.equal(stored.ledger.length, 1);
    const unit = stored.ledger[0]!.id;
    const sent = Number(proxy.log.find((x) => x.req.method === 'POST')!.req.headers['content-length']);

    // The proxy's limit is lowered below the body first sent.
    limit = sent - 1;
    const refused = await runCli(['export', '--config', ws.configPath]);
    assert.equal(refused.code, 1, refused.stderr);
    assert.match(refused.stderr, /HYPSINK_ERR_DESTINATION/);
    assert.match(refused.stderr, /too large/);
    assert.match(refused.stderr, /limit/, 'the error says what to do: raise the limit');
    assert.ok(refused.stderr.includes(unit), 'the error names the recorded unit');
    let after = await readStored(ws.recv);
    assert.deepEqual(after.ledger.map((e) => e.id), [unit], 'nothing stored under a new batch id');
    assert.equal(after.rowCount, 20);
    assert.equal(partitionStatus(await statusOf(ws.configPath), 'alpha').intent?.unit, unit, 'the intent keeps its id');

    // The limit is lifted: the same batch id is re-sent, acknowledged as a duplicate, and the watermark moves.
    limit = null;
    const done = await runCli(['export', '--config', ws.configPath]);
    assert.equal(done.code, 0, done.stderr);
    after = await readStored(ws.recv);
    assert.deepEqual(after.ledger.map((e) => e.id), [unit]);
    const got = (after.rows.events?.alpha ?? []).map((row) => Number(row.id));
    assert.deepEqual(got, Array.from({ length: 20 }, (_, i) => i + 1), 'every row stored once');
    const st = partitionStatus(await statusOf(ws.configPath), 'alpha');
    assert.deepEqual([st.exportedRows, st.pendingRows, st.intent, st.lastError], [20, 0, null, null]);
  } finally {
    await proxy.stop();
    await r.close();
    await ws.cleanup();
  }
});
