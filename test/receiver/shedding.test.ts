import assert from 'node:assert/strict';
import { test } from 'node:test';
import { readStored, startReceiver, storedRows } from '../../fixtures/receiver/server.js';
import { ingest, ndjson, spawnReceiver, tempDir } from './helpers.js';

test('rate limit: 429 with the configured Retry-After, and a later retry is stored', async () => {
  const { dir, cleanup } = await tempDir('rcv-rate');
  const r = await startReceiver({ port: 0, dataDir: dir, insecureNoAuth: true, rate: 2, burst: 2, retryAfterSeconds: 3 });
  try {
    const replies = await Promise.all(
      Array.from({ length: 6 }, (_, i) => ingest(r.url, { id: `rate-${i}`, body: ndjson(1, i) })),
    );
    const limited = replies.filter((x) => x.status === 429);
    assert.ok(limited.length >= 3, `expected most of 6 requests limited, got ${limited.length}`);
    for (const x of limited) assert.equal(x.headers['retry-after'], '3');
    assert.equal(replies.filter((x) => x.status === 200).length, 6 - limited.length);
    await new Promise((res) => setTimeout(res, 600));
    const retry = await ingest(r.url, { id: 'rate-retry', body: ndjson(1, 99) });
    assert.equal(retry.status, 200, 'the bucket refills');
    assert.equal(r.stats().byStatus['429'], limited.length);
    assert.equal(storedRows(await readStored(dir), 'activity', 'src').length, 6 - limited.length + 1);
  } finally {
    await r.close();
    await cleanup();
  }
});

test('max inflight: 503 with Retry-After while another request is being processed', async () => {
  const { dir, cleanup } = await tempDir('rcv-inflight');
  const r = await startReceiver({ port: 0, dataDir: dir, insecureNoAuth: true, maxInflight: 1, retryAfterSeconds: 2 });
  try {
    let release!: () => void;
    const held = new Promise<void>((res) => {
      release = res;
    });
    const slow = ingest(r.url, { id: 'slow-1', body: ndjson(3), hold: () => held });
    // Wait until the server has taken the slow request in.
    while (r.stats().inflight === 0) await new Promise((res) => setTimeout(res, 5));
    const busy = await ingest(r.url, { id: 'fast-1', body: ndjson(1) });
    assert.equal(busy.status, 503);
    assert.equal(busy.headers['retry-after'], '2');
    release();
    assert.deepEqual((await slow).json, { stored: 3 });
    const after = await ingest(r.url, { id: 'fast-1', body: ndjson(1) });
    assert.deepEqual(after.json, { stored: 1 }, 'a shed request leaves its id unspent');
  } finally {
    await r.close();
    await cleanup();
  }
});

test('main.ts: --max-inflight and --rate shed with --retry-after', async () => {
  const { dir, cleanup } = await tempDir('rcv-argv');
  const r = await spawnReceiver(['--data', dir, '--max-inflight', '1', '--rate', '2', '--retry-after', '2']);
  try {
    let release!: () => void;
    const held = new Promise<void>((res) => {
      release = res;
    });
    const slow = ingest(r.url, { id: 'argv-slow', body: ndjson(1), hold: () => held });
    await new Promise((res) => setTimeout(res, 300)); // the child has taken the slow request in
    const busy = await ingest(r.url, { id: 'argv-busy', body: ndjson(1) });
    assert.equal(busy.status, 503);
    assert.equal(busy.headers['retry-after'], '2');
    release();
    assert.equal((await slow).status, 200);
    const burst = [];
    for (let i = 0; i < 4; i++) burst.push(await ingest(r.url, { id: `argv-${i}`, body: ndjson(1) }));
    const limited = burst.filter((x) => x.status === 429);
    assert.ok(limited.length >= 1, 'the bucket of 2 ran dry');
    for (const x of limited) assert.equal(x.headers['retry-after'], '2');
  } finally {
    r.child.kill('SIGTERM');
    await r.exited;
    await cleanup();
  }
});
