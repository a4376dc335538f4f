import assert from 'node:assert/strict';
import { test } from 'node:test';
import { type ReceiverOptions, readStored, startReceiver, storedRows } from '../../fixtures/receiver/server.js';
import { parseRetryAfter } from '../../plugins/forward/src/backoff.js';
import type { HypsinkError } from '../../types/index.js';
import { tempDir } from '../receiver/helpers.js';
import { fastConfig, type Loaded, loadForward, makeUnit, partition, rowsFrom } from './helpers.js';

async function withReceiver(
  opts: Omit<ReceiverOptions, 'port' | 'dataDir'>,
  fn: (r: Awaited<ReturnType<typeof startReceiver>>, f: Loaded, dir: string) => Promise<void>,
): Promise<void> {
  const { dir, cleanup } = await tempDir('fwd-bp');
  const r = await startReceiver({ port: 0, dataDir: dir, insecureNoAuth: true, ...opts });
  const f = await loadForward();
  try {
    await fn(r, f, dir);
  } finally {
    await f.hooks.shutdown.promise();
    await r.close();
    await cleanup();
  }
}

/** The waits the shipper logged, in order. */
function waits(f: Loaded): { waitMs: number; from: string }[] {
  return f.log.lines
    .map((l) => JSON.parse(l) as { obj: { waitMs?: number; from?: string } })
    .filter((l) => l.obj.from !== undefined)
    .map((l) => ({ waitMs: l.obj.waitMs!, from: l.obj.from! }));
}

test('parseRetryAfter: positive delta-seconds and future HTTP-dates only', () => {
  const now = Date.parse('2026-01-01T00:00:00Z');
  assert.equal(parseRetryAfter('3', now), 3000);
  assert.equal(parseRetryAfter(' 120 ', now), 120_000);
  assert.equal(parseRetryAfter('Thu, 01 Jan 2026 00:00:05 GMT', now), 5000);
  assert.equal(parseRetryAfter('Thursday, 01-Jan-26 00:00:07 GMT', now), 7000);
  assert.equal(parseRetryAfter('Thu Jan  1 00:00:09 2026', now), 9000);
  for (const bad of [undefined, '', '0', '-5', '1.5', 'soon', 'Wed, 31 Dec 2025 23:59:00 GMT', '1e3', 'NaN']) {
    assert.equal(parseRetryAfter(bad, now), undefined, String(bad));
  }
});

test('a rate-limited receiver (429, Retry-After: 1) is ridden out with no duplicates and no loss', async () => {
  await withReceiver({ rate: 8, burst: 4, retryAfterSeconds: 1 }, async (r, f, dir) => {
    const s = f.build(fastConfig(r.url));
    const units = Array.from({ length: 10 }, (_, i) =>
      makeUnit({ shipper: s, partition: partition('activity', `host-${i}`), rows: rowsFrom(i * 100, 25), since: null }),
    );
    const results = await Promise.all(units.map((u) => s.ship(u)));
    assert.ok(results.every((x) => x.rows === 25 && !x.duplicate));
    assert.ok((r.stats().byStatus['429'] ?? 0) > 0, 'the receiver did push back');
    const stored = await readStored(dir);
    for (let i = 0; i < 10; i++) assert.deepEqual(storedRows(stored, 'activity', `host-${i}`), rowsFrom(i * 100, 25));
    assert.equal(stored.rowCount, 250);
    assert.ok(waits(f).every((w) => w.from === 'retry-after' && w.waitMs === 1000));
  });
});

test('503 with a positive Retry-After is honoured, and the same body is re-sent', async () => {
  await withReceiver({ chaos: { throttleFirst: { count: 2, status: 503, retryAfter: '1' } } }, async (r, f, dir) => {
    const s = f.build(fastConfig(r.url));
    const unit = makeUnit({ shipper: s, partition: partition('activity', 'p503'), rows: rowsFrom(0, 5), since: null });
    const t0 = performance.now();
    assert.equal((await s.ship(unit)).duplicate, false);
    const elapsed = performance.now() - t0;
    assert.ok(elapsed >= 1900 && elapsed < 4000, `two 1 s waits, took ${elapsed}`);
    assert.equal(unit.readCount(), 1, 'the body is built once and re-sent, not re-read');
    assert.deepEqual(storedRows(await readStored(dir), 'activity', 'p503'), rowsFrom(0, 5));
  });
});

test('absent, garbage, zero and past Retry-After fall back to the ladder (last step repeats)', async () => {
  for (const retryAfter of [null, 'soon', '0', 'Mon, 01 Jan 2001 00:00:00 GMT']) {
    await withReceiver({ chaos: { throttleFirst: { count: 3, retryAfter } } }, async (r, f, dir) => {
      const s = f.build(fastConfig(r.url, { ladderMs: [50, 100] }));
      const t0 = performance.now();
      await s.ship(makeUnit({ shipper: s, partition: partition('activity', 'lad'), rows: rowsFrom(0, 3), since: null }));
      const elapsed = performance.now() - t0;
      assert.deepEqual(
        waits(f),
        [
          { waitMs: 50, from: 'ladder' },
          { waitMs: 100, from: 'ladder' },
          { waitMs: 100, from: 'ladder' },
        ],
        String(retryAfter),
      );
      assert.ok(elapsed >= 245 && elapsed < 900, `ladder waits 250 ms, took ${elapsed}`);
      assert.equal(storedRows(await readStored(dir), 'activity', 'lad').length, 3);
    });
  }
});

test('a future HTTP-date Retry-After is honoured', async () => {
  const when = new Date(Math.ceil(Date.now() / 1000) * 1000 + 1000).toUTCString();
  await withReceiver({ chaos: { throttleFirst: { count: 1, retryAfter: when } } }, async (r, f) => {
    const s = f.build(fastConfig(r.url));
    await s.ship(makeUnit({ shipper: s, partition: partition('activity', 'date'), rows: rowsFrom(0, 1), since: null }));
    const [w] = waits(f);
    assert.equal(w?.from, 'retry-after');
    assert.ok(w!.waitMs > 0 && w!.waitMs <= 2000, String(w?.waitMs));
  });
});

test('the inline wait bound gives a retryable error carrying the next wait, and stores nothing', async () => {
  await withReceiver({ chaos: { throttleFirst: { count: 1000, retryAfter: 'x' } } }, async (r, f, dir) => {
    const s = f.build(fastConfig(r.url, { ladderMs: [40, 80], maxInlineWaitMs: 250 }));
    const t0 = performance.now();
    await assert.rejects(
      s.ship(makeUnit({ shipper: s, partition: partition('activity', 'bound'), rows: rowsFrom(0, 2), since: null })),
      (e: HypsinkError & { status?: number }) => {
        assert.equal(e.code, 'HYPSINK_ERR_RETRYABLE');
        assert.equal(e.retryable, true);
        assert.equal(e.status, 429);
        assert.equal(e.retryAfterMs, 80);
        assert.match(e.message, /still busy \(HTTP 429\).*config\.maxInlineWaitMs \(250 ms\)/);
        return true;
      },
    );
    const elapsed = performance.now() - t0;
    // 40 + 80 + 80 = 200 waited; the next 80 would pass 250.
    assert.ok(elapsed >= 195 && elapsed < 800, String(elapsed));
    assert.equal((await readStored(dir)).rowCount, 0);
  });
});

test('a Retry-After beyond the inline budget hands back at once, with retryAfterMs', async () => {
  await withReceiver({ chaos: { throttleFirst: { count: 1, retryAfter: '120' } } }, async (r, f) => {
    const s = f.build(fastConfig(r.url, { maxInlineWaitMs: 60_000 }));
    const t0 = performance.now();
    await assert.rejects(
      s.ship(makeUnit({ shipper: s, partition: partition('activity', 'far'), rows: rowsFrom(0, 1), since: null })),
      (e: HypsinkError) => e.code === 'HYPSINK_ERR_RETRYABLE' && e.retryAfterMs === 120_000,
    );
    assert.ok(performance.now() - t0 < 500);
  });
});

test('close() during a parked wait returns promptly and the ship fails ABORTED', async () => {
  await withReceiver({ chaos: { throttleFirst: { count: 1, retryAfter: '30' } } }, async (r, f, dir) => {
    const s = f.build(fastConfig(r.url, { maxInlineWaitMs: 120_000 }));
    const t0 = performance.now();
    const shipping = s.ship(
      makeUnit({ shipper: s, partition: partition('activity', 'park'), rows: rowsFrom(0, 1), since: null }),
    );
    while (waits(f).length === 0) await new Promise((x) => setTimeout(x, 5));
    const c0 = performance.now();
    await s.close();
    await assert.rejects(shipping, (e: HypsinkError) => {
      assert.equal(e.code, 'HYPSINK_ERR_ABORTED');
      assert.match(e.message, /re-sent under the same id/);
      return true;
    });
    assert.ok(performance.now() - c0 < 200, 'aborted at once');
    assert.ok(performance.now() - t0 < 2000, 'nowhere near the 30 s wait');
    assert.equal((await readStored(dir)).rowCount, 0);
  });
});

test("the unit's signal (shutdown) aborts a parked wait too", async () => {
  await withReceiver({ chaos: { throttleFirst: { count: 1, retryAfter: '30' } } }, async (r, f) => {
    const s = f.build(fastConfig(r.url, { maxInlineWaitMs: 120_000 }));
    const ac = new AbortController();
    const shipping = s.ship(
      makeUnit({ shipper: s, partition: partition('activity', 'sig'), rows: rowsFrom(0, 1), since: null, signal: ac.signal }),
    );
    while (waits(f).length === 0) await new Promise((x) => setTimeout(x, 5));
    const t0 = performance.now();
    ac.abort();
    await assert.rejects(shipping, (e: HypsinkError) => e.code === 'HYPSINK_ERR_ABORTED');
    assert.ok(performance.now() - t0 < 200);
    // The shipper itself is still usable for other units.
    const ok = await s.ship(makeUnit({ shipper: s, partition: partition('activity', 'sig2'), rows: rowsFrom(0, 1), since: null }));
    assert.equal(ok.rows, 1);
  });
});
