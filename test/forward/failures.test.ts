import assert from 'node:assert/strict';
import { test } from 'node:test';
import { inspect } from 'node:util';
import { readStored, startReceiver } from '../../fixtures/receiver/server.js';
import { ForwardError, isTooLarge } from '../../plugins/forward/src/index.js';
import type { HypsinkError } from '../../types/index.js';
import { tempDir } from '../receiver/helpers.js';
import { deadPort, fastConfig, loadForward, makeUnit, partition, rowsFrom } from './helpers.js';

const RECEIVER_TOKEN = 'receiver-side-token-5d1e';
const WRONG_TOKEN = 'client-wrong-token-SECRET-9b2c';

/** Everything an operator could ever see of an error. */
function everything(e: unknown): string {
  return `${String(e)}\n${inspect(e, { depth: 10, showHidden: true })}\n${JSON.stringify(e)}`;
}

test('401: an AUTH error telling what to check, and the token appears nowhere', async () => {
  const { dir, cleanup } = await tempDir('fwd-auth');
  const r = await startReceiver({ port: 0, dataDir: dir, token: RECEIVER_TOKEN });
  const f = await loadForward();
  try {
    const s = f.build(fastConfig(r.url, { token: WRONG_TOKEN }), 'central');
    const unit = makeUnit({ shipper: s, partition: partition('activity', 'a'), rows: rowsFrom(0, 3), since: null });
    let err: unknown;
    await assert.rejects(
      s.ship(unit).catch((e) => {
        err = e;
        throw e;
      }),
      (e: HypsinkError & { status?: number }) => {
        assert.ok(e instanceof ForwardError);
        assert.equal(e.code, 'HYPSINK_ERR_AUTH');
        assert.equal(e.retryable, false);
        assert.equal(e.status, 401);
        assert.equal(
          e.message,
          'sink "central": the receiver rejected the token (HTTP 401); check config.token / HYPSINK_TOKEN',
        );
        return true;
      },
    );
    assert.ok(!everything(err).includes(WRONG_TOKEN));
    assert.ok(!f.log.text.includes(WRONG_TOKEN));

    const noToken = f.build(fastConfig(r.url));
    await assert.rejects(
      noToken.ship(makeUnit({ shipper: noToken, partition: partition('activity', 'a'), rows: rowsFrom(0, 1), since: null })),
      /requires a token \(HTTP 401\); set config\.token/,
    );
    assert.equal((await readStored(dir)).rowCount, 0);
  } finally {
    await f.hooks.shutdown.promise();
    await r.close();
    await cleanup();
  }
});

test('413: a DESTINATION error with tooLarge, so the kernel can halve the unit', async () => {
  const { dir, cleanup } = await tempDir('fwd-413');
  const r = await startReceiver({ port: 0, dataDir: dir, insecureNoAuth: true, maxBodyBytes: 1000 });
  const f = await loadForward();
  try {
    const s = f.build(fastConfig(r.url));
    const big = makeUnit({ shipper: s, partition: partition('activity', 'big'), rows: rowsFrom(0, 100, { pad: 'x'.repeat(20) }), since: null });
    await assert.rejects(s.ship(big), (e: ForwardError) => {
      assert.equal(e.code, 'HYPSINK_ERR_DESTINATION');
      assert.equal(e.tooLarge, true);
      assert.equal(isTooLarge(e), true);
      assert.equal(e.retryable, false);
      assert.equal(e.status, 413);
      assert.equal(e.batchId, big.id);
      assert.match(e.message, /too large \(HTTP 413, 100 rows, \d+ bytes\): body of \d+ bytes exceeds the limit of 1000/);
      return true;
    });
    // A body far past the limit: the receiver answers before reading it, the client still gets the 413.
    const huge = makeUnit({ shipper: s, partition: partition('activity', 'big'), rows: rowsFrom(0, 20_000, { pad: 'y'.repeat(100) }), since: null });
    await assert.rejects(s.ship(huge), (e: ForwardError) => e.tooLarge && e.status === 413);
    // Halved, it fits.
    const half = makeUnit({ shipper: s, partition: partition('activity', 'big'), rows: rowsFrom(0, 10, { pad: 'x'.repeat(20) }), since: null });
    assert.equal((await s.ship(half)).rows, 10);
  } finally {
    await f.hooks.shutdown.promise();
    await r.close();
    await cleanup();
  }
});

test('connection refused: retried with backoff within the budget, then a retryable error', async () => {
  const port = await deadPort();
  const f = await loadForward();
  const token = 'refused-case-token-XYZ123';
  const s = f.build(fastConfig(`http://127.0.0.1:${port}`, { token, retry: { attempts: 4, baseMs: 20, maxMs: 40 } }));
  const t0 = performance.now();
  let err: unknown;
  await assert.rejects(
    s
      .ship(makeUnit({ shipper: s, partition: partition('activity', 'down'), rows: rowsFrom(0, 2), since: null }))
      .catch((e) => {
        err = e;
        throw e;
      }),
    (e: ForwardError) => {
      assert.equal(e.code, 'HYPSINK_ERR_RETRYABLE');
      assert.equal(e.retryable, true);
      assert.equal(e.status, undefined);
      assert.match(e.message, /after 4 tries: ECONNREFUSED/);
      assert.match(e.message, new RegExp(`http://127\\.0\\.0\\.1:${port}/v1/ingest/activity`));
      assert.equal((e.cause as { code?: string }).code, 'ECONNREFUSED');
      // Nothing answered: the next step is the receiver or the url, not only waiting.
      assert.match(e.hint, new RegExp(`nothing answers at http://127\\.0\\.0\\.1:${port}: check that the receiver is running and that the sink's config\\.url is right`));
      assert.match(e.hint, /retried/);
      return true;
    },
  );
  const elapsed = performance.now() - t0;
  // Three backoffs of 10-20, 20-40, 20-40 ms.
  assert.ok(elapsed >= 45 && elapsed < 1500, String(elapsed));
  const retries = f.log.lines.filter((l) => l.includes('delivery failed; retrying'));
  assert.equal(retries.length, 3);
  assert.ok(!everything(err).includes(token) && !f.log.text.includes(token));
  await s.close();
});

test('a receiver that echoes the token back never gets it into a message or a log', async () => {
  // A 500 whose body contains the token: transient, logged and then thrown.
  const http = await import('node:http');
  const token = 'echoed-token-QQQ-777';
  const server = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(500, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: `bad auth header: ${req.headers.authorization}` }));
    });
  });
  await new Promise<void>((x) => server.listen(0, '127.0.0.1', () => x()));
  const port = (server.address() as { port: number }).port;
  const f = await loadForward();
  try {
    const s = f.build(fastConfig(`http://127.0.0.1:${port}`, { token, retry: { attempts: 2, baseMs: 5, maxMs: 5 } }));
    let err: unknown;
    await s
      .ship(makeUnit({ shipper: s, partition: partition('activity', 'echo'), rows: rowsFrom(0, 1), since: null }))
      .catch((e) => {
        err = e;
      });
    assert.equal((err as HypsinkError).code, 'HYPSINK_ERR_RETRYABLE');
    assert.match((err as Error).message, /HTTP 500: bad auth header: Bearer \[redacted\]/);
    assert.ok(!everything(err).includes(token));
    assert.ok(f.log.text.includes('[redacted]') && !f.log.text.includes(token));
    await s.close();
  } finally {
    await f.hooks.shutdown.promise();
    await new Promise((x) => server.close(x));
  }
});

test('a receiver that comes up mid-unit is reached by a retry: delivered once', async () => {
  const { dir, cleanup } = await tempDir('fwd-5xx');
  // The receiver restarts mid-unit: the first POST hits nothing, the retry hits the new process.
  const port = await deadPort();
  const f = await loadForward();
  const s = f.build(fastConfig(`http://127.0.0.1:${port}`, { retry: { attempts: 5, baseMs: 150, maxMs: 300 } }));
  const shipping = s.ship(makeUnit({ shipper: s, partition: partition('activity', 'late'), rows: rowsFrom(0, 4), since: null }));
  await new Promise((x) => setTimeout(x, 40));
  const r = await startReceiver({ port, dataDir: dir, insecureNoAuth: true });
  try {
    assert.deepEqual(await shipping, { rows: 4, bytes: (await shipping).bytes, duplicate: false });
    assert.equal((await readStored(dir)).rowCount, 4);
  } finally {
    await s.close();
    await r.close();
    await cleanup();
  }
});
