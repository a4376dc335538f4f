/**
 * `hypsink verify` of the forward sink against the reference receiver over
 * HTTP: the sink reads its batches back from `GET /v1/ledger` (its client's
 * entries only) and the chain of batch ranges is checked against the
 * watermark. A whole chain passes; a ledger entry removed while the receiver
 * is stopped is a hole naming the batches around it.
 * @ref LLP 0037, LLP 0038
 */
import assert from 'node:assert/strict';
import { promises as fsp } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { LEDGER_FILE, startReceiver } from '../../fixtures/receiver/server.js';
import { cli } from '../support/kernel.js';
import { batchRange, e2eConfig, ingest, TOKEN, withKernel, workspace } from './helpers.js';

test('verify over the receiver: whole chain, then a ledger entry removed is a hole', { timeout: 60_000 }, async (t) => {
  const ws = await workspace('verify');
  t.after(() => ws.cleanup());
  let r = await startReceiver({ port: 0, dataDir: ws.recv, token: TOKEN });
  t.after(() => r.close());
  const path = await ws.writeConfig(e2eConfig(r.url, { unit: { maxRows: 5 } }));
  await withKernel(path, async ({ k }) => {
    await ingest(k, 'web', 1, 17);
    const [rep] = await k.export('central');
    assert.equal(rep?.failed, 0);
    assert.equal(rep?.units, 4);
  });
  const ok = await cli('verify', '--config', path);
  assert.equal(ok.code, 0, ok.out + ok.err);
  assert.match(ok.out, /sink "central": 4 units over 1 partition, chain whole to the watermark/);

  // The ledger edited while the receiver is stopped: its second batch is no longer recorded.
  const port = r.port;
  await r.close();
  const ledger = join(ws.recv, LEDGER_FILE);
  const lines = (await fsp.readFile(ledger, 'utf8')).split('\n').filter((l) => l !== '');
  assert.equal(lines.length, 4);
  const ids = lines.map((l) => (JSON.parse(l) as { id: string }).id);
  await fsp.writeFile(ledger, `${[lines[0], lines[2], lines[3]].join('\n')}\n`);
  r = await startReceiver({ port, dataDir: ws.recv, token: TOKEN });

  const bad = await cli('verify', '--json', '--config', path);
  assert.equal(bad.code, 1, bad.out + bad.err);
  const j = JSON.parse(bad.out) as { ok: boolean; sinks: { name: string; units: number; findings: { problem: string; partition: string; message: string }[] }[] };
  assert.equal(j.ok, false);
  assert.equal(j.sinks[0]!.units, 3);
  const gone = batchRange(ids[1]!);
  assert.deepEqual(
    j.sinks[0]!.findings.map((f) => [f.problem, f.partition]),
    [['hole', 'events/source=web']],
  );
  assert.match(j.sinks[0]!.findings[0]!.message, new RegExp(`^hole \\(${gone.since}, ${gone.until}\\]: no unit holds these seqs \\(between ${ids[0]} and ${ids[2]}\\)`));

  // Another token: the receiver refuses it, and verify says so (exit 1, AUTH).
  process.env.HYPSINK_TOKEN = 'not-the-token-0123456789';
  try {
    const refused = await cli('verify', '--config', path);
    assert.equal(refused.code, 1);
    assert.match(refused.err, /HYPSINK_ERR_AUTH: sink "central": the receiver refused the token reading its ledger/);
  } finally {
    process.env.HYPSINK_TOKEN = TOKEN;
  }
});
