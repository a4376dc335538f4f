/**
 * Two kernel behaviours found missing while proving issue 4 end to end: the
 * outbox honours a store's Retry-After, and writer options have their own
 * `writerConfig` beside the destination's strict `config`.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { s3ErrorResponse } from '../support/fault-proxy.js';
import { FAST_RETRY, events, ingest, openKernel, startStack, useCredentials, writeConfig } from './helpers.js';

useCredentials();

// LLP 0007 §4: the plugin ends its budget on a long Retry-After so that the kernel's outbox waits instead.
test('driver: a Retry-After the store sent defers the partition in the outbox (respectBackoff)', { timeout: 30_000 }, async (t) => {
  const { proxy, dir } = await startStack(t, (r) =>
    r.method === 'PUT' ? s3ErrorResponse(503, 'SlowDown', 'Please reduce your request rate.', { 'retry-after': '120' }) : undefined,
  );
  // A 1 ms outbox base, so only the store's Retry-After can explain a deferral.
  const path = await writeConfig(dir, proxy.endpoint, { config: { retry: FAST_RETRY }, driver: { outboxBaseMs: 1 } });
  const k = await openKernel(path);
  t.after(() => k.close());
  await ingest(k, 'web', events(1, 5));

  const first = await k.driver.tick(await k.sink('lake'), true);
  assert.equal(first.partitions[0]?.error?.retryAfterMs, 120_000, 'the plugin passed the Retry-After on');
  await new Promise((r) => setTimeout(r, 50));
  const mark = proxy.log.length;
  const second = await k.driver.tick(await k.sink('lake'), true);
  assert.equal(second.partitions[0]?.deferred, true, 'the partition waits for the Retry-After the store asked for');
  assert.equal(proxy.log.length - mark, 0, 'no request to a store that asked for 120 s of quiet');
});

// A blob sink's `config` belongs to its destination, `writerConfig` to its writer: @hypsink/s3
// validates its config strictly (a typo fails the load), so writer options must not share it.
test('config: a Parquet writer option is accepted on an S3 sink (writerConfig)', { timeout: 30_000 }, async (t) => {
  const { proxy, dir } = await startStack(t);
  const path = await writeConfig(dir, proxy.endpoint, { writerConfig: { compression: 'snappy' } });
  const k = await openKernel(path);
  await k.close();
});
