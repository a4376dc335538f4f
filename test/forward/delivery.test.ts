import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { readStored, type Receiver, startReceiver, storedRows } from '../../fixtures/receiver/server.js';
import type { HypsinkError, Row } from '../../types/index.js';
import { spawnReceiver, tempDir } from '../receiver/helpers.js';
import { deadPort, fastConfig, type Loaded, loadForward, makeUnit, partition, rowsFrom } from './helpers.js';

const TOKEN = 'fwd-delivery-token-7f3a9c';

describe('forward → receiver delivery', () => {
  let r: Receiver;
  let dir: string;
  let cleanup: () => Promise<void>;
  let f: Loaded;

  before(async () => {
    ({ dir, cleanup } = await tempDir('fwd-delivery'));
    r = await startReceiver({ port: 0, dataDir: dir, token: TOKEN });
    f = await loadForward();
  });
  after(async () => {
    await f.hooks.shutdown.promise();
    await r.close();
    await cleanup();
  });

  test('every row of every unit reaches the receiver exactly once, in order', async () => {
    const s = f.build(fastConfig(r.url, { token: TOKEN }));
    const p = partition('activity', 'laptop 1/ü');
    const all = rowsFrom(0, 250, { kind: 'click', at: '2026-01-01T00:00:00.000Z' });
    let since: number | null = null;
    for (let i = 0; i < all.length; i += 100) {
      const rows = all.slice(i, i + 100);
      const unit = makeUnit({ shipper: s, partition: p, rows, since });
      const res = await s.ship(unit);
      assert.deepEqual(res, {
        rows: rows.length,
        bytes: Buffer.byteLength(rows.map((x) => `${JSON.stringify(x)}\n`).join('')),
        duplicate: false,
      });
      since = (since ?? 0) + rows.length;
    }
    const stored = await readStored(dir);
    assert.deepEqual(storedRows(stored, 'activity', 'laptop 1/ü'), all);
    const ids = stored.ledger.filter((e) => e.source === 'laptop 1/ü').map((e) => e.id);
    assert.equal(ids.length, 3);
    assert.match(ids[0]!, /^hfw1-start-100-/);
    assert.match(ids[2]!, /^hfw1-200-250-/);
  });

  test('re-shipping a unit id stores nothing and reports duplicate', async () => {
    const s = f.build(fastConfig(r.url, { token: TOKEN }));
    const p = partition('activity', 'dup-host');
    const unit = makeUnit({ shipper: s, partition: p, rows: rowsFrom(0, 10), since: null });
    assert.equal((await s.ship(unit)).duplicate, false);
    const again = await s.ship(unit);
    assert.deepEqual(again, { rows: 10, bytes: again.bytes, duplicate: true });
    // A retry after a restart: a new shipper derives the same id for the same range.
    const s2 = f.build(fastConfig(r.url, { token: TOKEN }));
    const retry = makeUnit({ shipper: s2, partition: p, rows: rowsFrom(0, 10), since: null });
    assert.equal(retry.id, unit.id);
    assert.equal((await s2.ship(retry)).duplicate, true);
    assert.equal(storedRows(await readStored(dir), 'activity', 'dup-host').length, 10);
  });

  test('internal _hyp_ columns never leave, even if a row carries them', async () => {
    const s = f.build(fastConfig(r.url, { token: TOKEN }));
    const rows: Row[] = [
      { a: 1, _hyp_ingest_seq: '5', _hyp_cache_row_id: 'x' },
      { a: 2, big: 2n ** 64n },
    ];
    await s.ship(makeUnit({ shipper: s, partition: partition('activity', 'strip'), rows, since: 4 }));
    assert.deepEqual(storedRows(await readStored(dir), 'activity', 'strip'), [
      { a: 1 },
      { a: 2, big: '18446744073709551616' },
    ]);
  });

  test('awkward dataset and source names arrive intact (".." is not resolved away)', async () => {
    const s = f.build(fastConfig(r.url, { token: TOKEN }));
    for (const [dataset, source] of [
      ['..', '../x'],
      ['.', '%2F'],
      ['a b/c', 'source=weird&x'],
    ] as const) {
      await s.ship(makeUnit({ shipper: s, partition: partition(dataset, source), rows: [{ d: dataset }], since: null }));
      assert.deepEqual(storedRows(await readStored(dir), dataset, source), [{ d: dataset }], `${dataset} ${source}`);
    }
  });

  test('a unit whose rows were all pruned since planning sends nothing', async () => {
    const s = f.build(fastConfig(r.url, { token: TOKEN }));
    const before = r.stats().requests;
    const res = await s.ship(makeUnit({ shipper: s, partition: partition('activity', 'empty'), rows: [], since: 9 }));
    assert.deepEqual(res, { rows: 0, bytes: 0, duplicate: false });
    assert.equal(r.stats().requests, before);
  });

  test('a 400 is a non-retryable destination error carrying the receiver message', async () => {
    const s = f.build(fastConfig(r.url, { token: TOKEN }));
    const unit = makeUnit({ shipper: s, partition: partition('activity', 'bad'), rows: [{ a: 1 }], since: null, id: 'x'.repeat(300) });
    await assert.rejects(s.ship(unit), (e: HypsinkError & { status?: number; tooLarge?: boolean }) => {
      assert.equal(e.code, 'HYPSINK_ERR_DESTINATION');
      assert.equal(e.retryable, false);
      assert.equal(e.status, 400);
      assert.equal(e.tooLarge, false);
      assert.match(e.message, /HTTP 400\): X-Hyp-Batch-Id must be 1-256 visible ASCII characters/);
      return true;
    });
  });

  test('ships of many partitions at once all land once', async () => {
    const s = f.build(fastConfig(r.url, { token: TOKEN }));
    await Promise.all(
      Array.from({ length: 12 }, (_, i) =>
        s.ship(makeUnit({ shipper: s, partition: partition('fan', `h${i}`), rows: rowsFrom(i * 10, 10), since: null })),
      ),
    );
    const stored = await readStored(dir);
    for (let i = 0; i < 12; i++) assert.deepEqual(storedRows(stored, 'fan', `h${i}`), rowsFrom(i * 10, 10));
  });
});

test('a timed-out POST that the receiver stored anyway is retried under the same id: stored once', async () => {
  const { dir, cleanup } = await tempDir('fwd-timeout');
  // The first request is held 600 ms after its body arrives, then stored; the client gives up at 200 ms.
  const r = await startReceiver({ port: 0, dataDir: dir, insecureNoAuth: true, chaos: { delayFirst: { count: 1, ms: 600 } } });
  const f = await loadForward();
  try {
    const s = f.build(fastConfig(r.url, { timeoutMs: 200, retry: { attempts: 5, baseMs: 300, maxMs: 600 } }));
    const unit = makeUnit({ shipper: s, partition: partition('activity', 'slow'), rows: rowsFrom(0, 20), since: null });
    const res = await s.ship(unit);
    assert.equal(res.rows, 20);
    await new Promise((x) => setTimeout(x, 700)); // let the held first request finish storing
    const stored = await readStored(dir);
    assert.deepEqual(storedRows(stored, 'activity', 'slow'), rowsFrom(0, 20));
    assert.equal(stored.ledger.length, 1);
    assert.ok(r.stats().duplicates >= 1, 'one of the two POSTs was answered as a duplicate');
    assert.match(f.log.text, /ETIMEDOUT/);
    await s.close();
  } finally {
    await r.close();
    await cleanup();
  }
});

test('the receiver dies between its data append and its ledger line: the kernel-style retry stores once', async () => {
  const { dir, cleanup } = await tempDir('fwd-crash');
  const port = await deadPort();
  const f = await loadForward();
  try {
    const a = await spawnReceiver(['--data', dir, '--port', String(port)], { HYPSINK_FAULT: 'receiver.afterData' });
    const s = f.build(fastConfig(a.url, { retry: { attempts: 2, baseMs: 10, maxMs: 20 } }));
    const unit = makeUnit({ shipper: s, partition: partition('activity', 'crash'), rows: rowsFrom(0, 30), since: null });
    await assert.rejects(s.ship(unit), (e: HypsinkError) => e.code === 'HYPSINK_ERR_RETRYABLE' && e.retryable);
    assert.equal((await a.exited).signal, 'SIGKILL');
    assert.ok((await readStored(dir)).unledgeredBytes > 0, 'the rows reached the data file, not the ledger');

    const b = await spawnReceiver(['--data', dir, '--port', String(port)]);
    try {
      // The kernel re-ships the recorded intent: same range, same id.
      const first = await s.ship(unit);
      assert.equal(first.duplicate, false, 'the un-ledgered tail was cut at startup, so the rows are new');
      assert.equal((await s.ship(unit)).duplicate, true);
      const stored = await readStored(dir);
      assert.deepEqual(storedRows(stored, 'activity', 'crash'), rowsFrom(0, 30));
      assert.equal(stored.unledgeredBytes, 0);
    } finally {
      b.child.kill('SIGTERM');
      await b.exited;
    }
  } finally {
    await f.hooks.shutdown.promise();
    await cleanup();
  }
});
