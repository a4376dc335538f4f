/**
 * The forward sink names each batch's unit digest (`X-Hyp-Unit-Digest`); the
 * receiver keeps it with the batch. A batch id the receiver holds with other
 * content is the refusal every sink gives (unitConflict,
 * HYPSINK_ERR_CONFLICT), naming the sink, the partition, the range and both
 * digests; the inventory shows each batch's recorded digest.
 * @ref LLP 0054: a unit is known by its content
 * @ref LLP 0060: the forward sink's unit digest
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { readStored, startReceiver, storedRows } from '../../fixtures/receiver/server.js';
import { type HeldUnit, type HypsinkError, isHypsinkError } from '../../types/index.js';
import { ingest as rawIngest, tempDir } from '../receiver/helpers.js';
import { fastConfig, loadForward, makeUnit, partition, rowsFrom } from './helpers.js';

const TOKEN = 'fwd-conflict-token-5b1e0d';
const D_A = `u1-${'A'.repeat(43)}`;
const D_B = `u1-${'B'.repeat(43)}`;

async function held(units: AsyncIterable<HeldUnit>): Promise<[string, string | null | undefined][]> {
  const out: [string, string | null | undefined][] = [];
  for await (const u of units) out.push([u.id, u.digest]);
  return out;
}

test('a batch id held with another unit digest: HYPSINK_ERR_CONFLICT naming sink, partition, range and both digests; nothing stored', async (t) => {
  const { dir, cleanup } = await tempDir('fwd-conflict');
  t.after(cleanup);
  const r = await startReceiver({ port: 0, dataDir: dir, token: TOKEN });
  t.after(() => r.close());
  const f = await loadForward();
  t.after(() => f.hooks.shutdown.promise());
  const s = f.build(fastConfig(r.url, { token: TOKEN }));
  const p = partition('events', 'web');

  const a = makeUnit({ shipper: s, partition: p, rows: rowsFrom(0, 4), since: null, digest: D_A });
  assert.equal((await s.ship(a)).duplicate, false);
  assert.equal((await readStored(dir)).ledger[0]!.unitDigest, D_A, 'the batch is ledgered with its unit digest');
  // The same unit again (a crash-retry): a duplicate.
  assert.equal((await s.ship(a)).duplicate, true);

  // The same label with other rows: a copy of the cache handing out the same seqs.
  const b = makeUnit({ shipper: s, partition: p, rows: rowsFrom(100, 4), since: null, digest: D_B });
  assert.equal(b.id, a.id, 'the same label gives the same batch id');
  const e = await s.ship(b).then(
    () => assert.fail('the other unit under a held id was accepted'),
    (err: unknown) => err as HypsinkError,
  );
  assert.ok(isHypsinkError(e), String(e));
  assert.equal(e.code, 'HYPSINK_ERR_CONFLICT', e.message);
  assert.equal(
    e.message.split(': the destination has')[0],
    `sink "central": unit (start, 4] of events/source=web (digest ${D_B}) is not what the receiver at ${r.url} (batch ${a.id}) holds under its name (the same range with digest ${D_A})`,
  );
  assert.match(e.message, /hypsink identity --copy/);
  assert.ok(!e.message.includes(TOKEN));
  assert.deepEqual(
    storedRows(await readStored(dir), 'events', 'web').map((x) => x.n),
    [0, 1, 2, 3],
    "the receiver holds the first unit's rows once and none of the second's",
  );

  // The same unit digest sent as other bytes is no copy: the rows are there; a destination error says what differs.
  const reserialized = makeUnit({ shipper: s, partition: p, rows: rowsFrom(0, 4, { extra: null }), since: null, digest: D_A });
  const same = await s.ship(reserialized).then(
    () => assert.fail('other bytes under a held id were accepted'),
    (err: unknown) => err as HypsinkError,
  );
  assert.equal(same.code, 'HYPSINK_ERR_DESTINATION', same.message);
  assert.match(same.message, /it holds this unit \(the same unit digest\) under the id, sent as other bytes/);
  // The id held for another partition (never one of this sink's ids there) stays a destination error.
  const moved = makeUnit({ shipper: s, partition: partition('events', 'elsewhere'), rows: rowsFrom(0, 4), since: null, id: a.id, digest: D_A });
  const elsewhere = await s.ship(moved).then(
    () => assert.fail('a held id for another partition was accepted'),
    (err: unknown) => err as HypsinkError,
  );
  assert.equal(elsewhere.code, 'HYPSINK_ERR_DESTINATION', elsewhere.message);
  assert.match(elsewhere.message, /another dataset or source/);

  // What verify reads: each batch with the unit digest it was stored with.
  const next = makeUnit({ shipper: s, partition: p, rows: rowsFrom(4, 2), since: 4, digest: D_B });
  await s.ship(next);
  assert.deepEqual(await held(s.inventory!(p, { signal: new AbortController().signal })), [
    [a.id, D_A],
    [next.id, D_B],
  ]);
});

test('a batch stored without a unit digest (before them): the same body is a duplicate, another is HYPSINK_ERR_CONFLICT with no recorded digest; its held unit shows null', async (t) => {
  const { dir, cleanup } = await tempDir('fwd-conflict-legacy');
  t.after(cleanup);
  const r = await startReceiver({ port: 0, dataDir: dir, token: TOKEN });
  t.after(() => r.close());
  const f = await loadForward();
  t.after(() => f.hooks.shutdown.promise());
  const s = f.build(fastConfig(r.url, { token: TOKEN }));
  const p = partition('events', 'old');
  const a = makeUnit({ shipper: s, partition: p, rows: rowsFrom(0, 3), since: null, digest: D_A });
  // As a forward sink from before unit digests sent it: the same id, partition and body, no X-Hyp-Unit-Digest.
  const body = rowsFrom(0, 3)
    .map((x) => `${JSON.stringify(x)}\n`)
    .join('');
  const old = await rawIngest(r.url, { id: a.id, token: TOKEN, dataset: 'events', source: 'old', body });
  assert.deepEqual(old.json, { stored: 3 });

  assert.equal((await s.ship(a)).duplicate, true, 'the same body under the id: the unit is there');
  const b = makeUnit({ shipper: s, partition: p, rows: rowsFrom(50, 3), since: null, digest: D_B });
  const e = await s.ship(b).then(
    () => assert.fail('another body under a held id was accepted'),
    (err: unknown) => err as HypsinkError,
  );
  assert.equal(e.code, 'HYPSINK_ERR_CONFLICT', e.message);
  assert.match(e.message, /holds under its name \(the same range with no recorded digest\)/);
  assert.deepEqual(await held(s.inventory!(p, { signal: new AbortController().signal })), [[a.id, null]]);
  assert.equal(storedRows(await readStored(dir), 'events', 'old').length, 3);
});

test('a receiver that echoes the token as a unit digest never gets it into the conflict or the inventory', async (t) => {
  const http = await import('node:http');
  const token = 'echoed-digest-token-QQQ-777';
  const f = await loadForward();
  t.after(() => f.hooks.shutdown.promise());
  let id = '';
  const server = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(req.method === 'POST' ? 409 : 200, { 'content-type': 'application/json' });
      const echoed = String(req.headers.authorization).slice('Bearer '.length);
      if (req.method === 'POST') res.end(JSON.stringify({ error: `stored as ${echoed}`, conflict: 'unit', unitDigest: echoed }));
      else res.end(JSON.stringify({ entries: [{ id, rows: 1, unitDigest: echoed }], next: null }));
    });
  });
  await new Promise<void>((x) => server.listen(0, '127.0.0.1', () => x()));
  t.after(() => new Promise((x) => server.close(x)));
  const s = f.build(fastConfig(`http://127.0.0.1:${(server.address() as { port: number }).port}`, { token }));
  const p = partition('events', 'echo');
  const unit = makeUnit({ shipper: s, partition: p, rows: rowsFrom(0, 1), since: null, digest: D_A });
  id = unit.id;
  const e = await s.ship(unit).then(
    () => assert.fail('a 409 was taken for delivered'),
    (err: unknown) => err as HypsinkError,
  );
  assert.equal(e.code, 'HYPSINK_ERR_CONFLICT');
  assert.match(e.message, /the same range with no recorded digest/);
  assert.ok(!e.message.includes(token));
  assert.deepEqual(await held(s.inventory!(p, { signal: new AbortController().signal })), [[id, null]]);
});
