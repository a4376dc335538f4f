/**
 * The receiver keeps the unit digest a sender names with each batch
 * (`X-Hyp-Unit-Digest`) in its ledger entry, shows it back in GET /v1/ledger,
 * and refuses a known batch id named with another unit digest (409, reason
 * `unit`, the stored digest), before any byte of the body is read. Entries
 * without one (stored before, or by a sender that names none) are compared by
 * body as before.
 * @ref LLP 0060: the unit digest in the receiver's ledger
 * @ref LLP 0027: a batch id names one body
 */
import assert from 'node:assert/strict';
import { mkdir, writeFile } from 'node:fs/promises';
import * as http from 'node:http';
import * as path from 'node:path';
import { test } from 'node:test';
import { readStored, startReceiver, storedRows } from '../../fixtures/receiver/server.js';
import { ingest, ndjson, type Reply, tempDir } from './helpers.js';

const TOKEN = 'unit-digest-token-0123456789abcdef';
const D1 = `u1-${'a'.repeat(43)}`;
const D2 = `u1-${'b'.repeat(43)}`;

async function ledgerPage(url: string): Promise<{ id: string; unitDigest: unknown }[]> {
  const res = await fetch(`${url}/v1/ledger?dataset=activity&source=src`, { headers: { authorization: `Bearer ${TOKEN}` } });
  assert.equal(res.status, 200);
  return ((await res.json()) as { entries: { id: string; unitDigest: unknown }[] }).entries.map((e) => ({ id: e.id, unitDigest: e.unitDigest }));
}

test('a batch id names one unit: another unit digest is a 409 naming the stored one, answered before the body', { timeout: 30_000 }, async (t) => {
  const { dir, cleanup } = await tempDir('rcv-unit-digest');
  t.after(cleanup);
  const r = await startReceiver({ port: 0, dataDir: dir, token: TOKEN });
  t.after(() => r.close());
  const unit = (d: string) => ({ 'x-hyp-unit-digest': d });

  assert.deepEqual((await ingest(r.url, { id: 'u-1', token: TOKEN, body: ndjson(3), headers: unit(D1) })).json, { stored: 3 });
  assert.equal((await readStored(dir)).ledger[0]!.unitDigest, D1, 'the ledger line keeps the unit digest');
  // A crash-retry: the same id, unit and body.
  assert.deepEqual((await ingest(r.url, { id: 'u-1', token: TOKEN, body: ndjson(3), headers: unit(D1) })).json, { duplicate: true });

  // Other rows under the id (a copied cache): refused while the last byte of the body is still held back.
  let release = () => {};
  const held = new Promise<void>((resolve) => {
    release = resolve;
  });
  const other = await ingest(r.url, { id: 'u-1', token: TOKEN, body: ndjson(3, 100), headers: unit(D2), hold: () => held });
  release();
  assert.equal(other.status, 409, other.text);
  assert.equal(other.json?.conflict, 'unit');
  assert.equal(other.json?.unitDigest, D1);
  assert.match(String(other.json?.error), /^batch id u-1 was stored as another unit \(unit digest u1-a{43}\)/);
  // The same bytes under another unit digest are still another unit.
  const sameBody = await ingest(r.url, { id: 'u-1', token: TOKEN, body: ndjson(3), headers: unit(D2) });
  assert.equal(sameBody.status, 409);
  assert.equal(sameBody.json?.conflict, 'unit');
  // The same unit digest with other bytes: the body still names the batch (LLP 0027).
  const otherBytes = await ingest(r.url, { id: 'u-1', token: TOKEN, body: ndjson(3, 7), headers: unit(D1) });
  assert.equal(otherBytes.status, 409);
  assert.deepEqual([otherBytes.json?.conflict, otherBytes.json?.unitDigest], ['body', D1]);
  // A sender that names no unit digest is compared by body, as before.
  assert.deepEqual((await ingest(r.url, { id: 'u-1', token: TOKEN, body: ndjson(3) })).json, { duplicate: true });

  // A batch stored without a unit digest: compared by body whatever digest is named later.
  assert.deepEqual((await ingest(r.url, { id: 'u-2', token: TOKEN, body: ndjson(2, 10) })).json, { stored: 2 });
  assert.deepEqual((await ingest(r.url, { id: 'u-2', token: TOKEN, body: ndjson(2, 10), headers: unit(D2) })).json, { duplicate: true });
  const noneStored = await ingest(r.url, { id: 'u-2', token: TOKEN, body: ndjson(2, 20), headers: unit(D2) });
  assert.equal(noneStored.status, 409);
  assert.deepEqual([noneStored.json?.conflict, noneStored.json?.unitDigest], ['body', null]);

  assert.deepEqual(await ledgerPage(r.url), [
    { id: 'u-1', unitDigest: D1 },
    { id: 'u-2', unitDigest: null },
  ]);
  assert.deepEqual(
    storedRows(await readStored(dir), 'activity', 'src').map((x) => x.n),
    [0, 1, 2, 10, 11],
    'every refused body stored nothing',
  );
});

test('X-Hyp-Unit-Digest twice, empty or with a space is a 400 and stores nothing', async (t) => {
  const { dir, cleanup } = await tempDir('rcv-unit-digest-bad');
  t.after(cleanup);
  const r = await startReceiver({ port: 0, dataDir: dir, token: TOKEN });
  t.after(() => r.close());
  for (const bad of ['', 'u1 with space', 'x'.repeat(129)]) {
    const res = await ingest(r.url, { id: 'bad-1', token: TOKEN, headers: { 'x-hyp-unit-digest': bad } });
    assert.equal(res.status, 400, JSON.stringify(bad));
    assert.match(String(res.json?.error), /X-Hyp-Unit-Digest must be sent at most once/);
  }
  const twice = await new Promise<Reply>((resolve, reject) => {
    const req = http.request(
      `${r.url}/v1/ingest/activity`,
      {
        method: 'POST',
        agent: false,
        headers: { 'content-type': 'application/x-ndjson', authorization: `Bearer ${TOKEN}`, 'x-hyp-partition': 'source=src', 'x-hyp-batch-id': 'bad-1', 'x-hyp-unit-digest': [D1, D2] },
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8').on('data', (d: string) => {
          text += d;
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, text, json: JSON.parse(text) }));
      },
    );
    req.on('error', reject);
    req.end('{"a":1}\n');
  });
  assert.equal(twice.status, 400, twice.text);
  assert.equal((await readStored(dir)).ledger.length, 0);
});

test('a ledger written before unit digests is read as it is: its entries show none and are compared by body', async (t) => {
  const { dir, cleanup } = await tempDir('rcv-unit-digest-legacy');
  t.after(cleanup);
  const body = ndjson(2);
  const line = {
    client: 'default',
    id: 'old-1',
    dataset: 'activity',
    source: 'src',
    rows: 2,
    at: new Date().toISOString(),
    file: 'activity/source=src.ndjson',
    offset: 0,
    bytes: body.length,
    digest: (await import('node:crypto')).createHash('sha256').update(body).digest('hex'),
    bodyBytes: body.length,
  };
  await mkdir(path.join(dir, 'activity'));
  await writeFile(path.join(dir, 'activity/source=src.ndjson'), body);
  await writeFile(path.join(dir, '_ledger.ndjson'), `${JSON.stringify(line)}\n`);
  const r = await startReceiver({ port: 0, dataDir: dir, token: TOKEN });
  t.after(() => r.close());
  assert.deepEqual(await ledgerPage(r.url), [{ id: 'old-1', unitDigest: null }]);
  assert.deepEqual((await ingest(r.url, { id: 'old-1', token: TOKEN, body, headers: { 'x-hyp-unit-digest': D1 } })).json, { duplicate: true });
  const other = await ingest(r.url, { id: 'old-1', token: TOKEN, body: ndjson(2, 5), headers: { 'x-hyp-unit-digest': D1 } });
  assert.equal(other.status, 409);
  assert.deepEqual([other.json?.conflict, other.json?.unitDigest], ['body', null]);
});
