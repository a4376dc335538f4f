/**
 * Store faults seen through the kernel: the partition fails with the right
 * code, `status` shows it (naming bucket and key, never a secret), the
 * watermark stays put, nothing partial is left in the store, and the next
 * export once the store is healthy is exactly once. @ref LLP 0007 §4
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { firstN, s3ErrorResponse } from '../support/fault-proxy.js';
import {
  FAST_RETRY,
  assertExactlyOnce,
  assertNoSecret,
  captureLines,
  events,
  forwardedWrites,
  ingest,
  isPutObject,
  listKeys,
  openKernel,
  partitionStatus,
  readLake,
  startStack,
  useCredentials,
  writeConfig,
} from './helpers.js';

useCredentials();

const KEY_IN_MESSAGE = /s3:\/\/lake\/hyp\/events\/source=web\/events\.0-\d+\.parquet/;

test('a multipart upload interrupted beyond the retry budget is aborted; the partition fails, the watermark stays; the next export is exactly once', { timeout: 30_000 }, async (t) => {
  const { s3, proxy, dir } = await startStack(t);
  const partSize = 64 * 1024;
  const path = await writeConfig(dir, proxy.endpoint, { config: { partSize, retry: FAST_RETRY } });
  const logs = captureLines();
  const k = await openKernel(path, logs);
  t.after(() => k.close());
  const rows = events(1, 3000, 100);
  await ingest(k, 'web', rows);

  // Every try of part 2 loses its connection mid-body.
  const part2 = (r: { method: string; query: URLSearchParams }) => r.method === 'PUT' && r.query.get('partNumber') === '2';
  proxy.setRule((r) => (part2(r) ? { kind: 'drop', afterBytes: 1000 } : undefined));
  const [failed] = await k.export('lake');
  assert.equal(failed?.failed, 1, 'the partition failed');
  assert.equal(failed?.units, 0);
  const err = failed?.partitions[0]?.error;
  assert.equal(err?.code, 'HYPSINK_ERR_RETRYABLE');
  assert.equal(err?.retryable, true);
  assert.equal(proxy.log.filter((l) => part2(l.req)).length, FAST_RETRY.attempts, 'part 2 was tried the whole budget');
  assert.ok(proxy.log.some((l) => l.req.method === 'DELETE' && l.req.query.has('uploadId') && l.action === 'forward'), 'an abort reached the store');
  assert.deepEqual(await s3.pendingUploads('lake'), [], 'the interrupted upload was aborted');
  assert.deepEqual(await listKeys(s3), [], 'no object, not even a partial one');

  const mid = await partitionStatus(k, 'web');
  assert.equal(mid.watermark, null, 'the watermark did not advance');
  assert.equal(mid.exportedRows, 0);
  assert.ok(mid.intent, 'the unit stays open as the intent');
  assert.ok(mid.lastError?.startsWith('HYPSINK_ERR_RETRYABLE: '), `lastError: ${mid.lastError}`);
  assert.match(mid.lastError ?? '', KEY_IN_MESSAGE, 'lastError names bucket and key');
  assert.match(mid.lastError ?? '', /UploadPart #2/);
  assertNoSecret(JSON.stringify(mid), 'status');
  assertNoSecret(logs.text(), 'the logs');

  proxy.setRule(undefined);
  const [ok] = await k.export('lake');
  assert.equal(ok?.failed, 0, ok?.partitions[0]?.error?.message);
  assert.equal(ok?.units, 1);
  const end = await partitionStatus(k, 'web');
  assert.equal(end.intent, null);
  assert.equal(end.lastError, null, 'a success clears lastError');
  assert.equal(end.exportedRows, rows.length);
  const objects = await readLake(s3);
  assert.equal(objects.length, 1);
  assert.equal(objects[0]?.key, `hyp/${mid.intent.unit}`, 'committed under the key fixed before the failure');
  assertExactlyOnce(objects, { web: rows }, { web: end.watermark });
  assert.deepEqual(await s3.pendingUploads('lake'), []);
});

test('5xx beyond the retry budget: retryable failure, watermark unchanged; after recovery the next export is exactly once', { timeout: 30_000 }, async (t) => {
  const { s3, proxy, dir } = await startStack(t);
  const path = await writeConfig(dir, proxy.endpoint, { config: { retry: FAST_RETRY } });
  const k = await openKernel(path);
  t.after(() => k.close());
  const first = events(1, 20);
  await ingest(k, 'web', first);

  proxy.setRule((r) => (r.method === 'PUT' ? s3ErrorResponse(500, 'InternalError', 'We encountered an internal error. Please try again.') : undefined));
  const [failed] = await k.export('lake');
  assert.equal(failed?.failed, 1);
  const err = failed?.partitions[0]?.error;
  assert.equal(err?.code, 'HYPSINK_ERR_RETRYABLE');
  assert.equal(err?.retryable, true);
  assert.match(err?.message ?? '', KEY_IN_MESSAGE);
  assert.equal(proxy.log.filter(isPutObject).length, FAST_RETRY.attempts, 'the PUT was tried the whole budget');
  assert.equal(forwardedWrites(proxy).length, 0);
  const mid = await partitionStatus(k, 'web');
  assert.equal(mid.watermark, null, 'the watermark did not advance');
  assert.ok(mid.intent, 'the unit stays open as the intent');
  assert.ok(mid.lastError?.startsWith('HYPSINK_ERR_RETRYABLE: '), `lastError: ${mid.lastError}`);
  assert.match(mid.lastError ?? '', /HTTP 500 InternalError/);
  assert.deepEqual(await listKeys(s3), []);

  // The store recovers; new rows arrived meanwhile.
  proxy.setRule(undefined);
  const more = events(21, 10);
  await ingest(k, 'web', more);
  const [ok] = await k.export('lake');
  assert.equal(ok?.failed, 0, ok?.partitions[0]?.error?.message);
  const end = await partitionStatus(k, 'web');
  assert.equal(end.intent, null);
  assert.equal(end.lastError, null);
  assert.equal(end.exportedRows, 30);
  const objects = await readLake(s3);
  assert.equal(objects[0]?.key, `hyp/${mid.intent.unit}`, 'the failed unit went up under its intent key');
  assert.equal(objects.length, 2);
  assertExactlyOnce(objects, { web: [...first, ...more] }, { web: end.watermark });
  assert.equal(forwardedWrites(proxy).length, 2, 'one write per object');
});

test('a lost acknowledgement (PUT committed, 500 answered): no second PUT, the unit counts once, the watermark advances', { timeout: 30_000 }, async (t) => {
  const { s3, proxy, dir } = await startStack(t);
  proxy.setRule(firstN(1, (r) => r.method === 'PUT', { kind: 'forwardThenRespond', status: 500, body: '' }));
  const path = await writeConfig(dir, proxy.endpoint, { config: { retry: FAST_RETRY } });
  const k = await openKernel(path);
  t.after(() => k.close());
  const rows = events(1, 12);
  await ingest(k, 'web', rows);

  const [r] = await k.export('lake');
  assert.equal(r?.failed, 0, r?.partitions[0]?.error?.message);
  assert.equal(proxy.log.filter(isPutObject).length, 1, 'the retry looked (HEAD) and did not PUT again');
  const s = await partitionStatus(k, 'web');
  assert.equal(s.intent, null);
  assert.equal(s.exportedRows, 12, 'rows of a unit the store already had are counted once');
  assertExactlyOnce(await readLake(s3), { web: rows }, { web: s.watermark });
});

test('403 from the store for one partition: HYPSINK_ERR_AUTH in its status lastError, not retried; the other partition exports', { timeout: 30_000 }, async (t) => {
  const { s3, proxy, dir } = await startStack(t, (r) =>
    r.key.includes('/source=app/') ? s3ErrorResponse(403, 'AccessDenied', 'Access Denied') : undefined,
  );
  const path = await writeConfig(dir, proxy.endpoint, { config: { retry: FAST_RETRY } });
  const logs = captureLines();
  const k = await openKernel(path, logs);
  t.after(() => k.close());
  const web = events(1, 10);
  await ingest(k, 'web', web);
  await ingest(k, 'app', events(11, 10));

  const [r] = await k.export('lake');
  assert.equal(r?.failed, 1, 'one partition failed');
  const app = r?.partitions.find((p) => p.partition.source === 'app');
  assert.equal(app?.error?.code, 'HYPSINK_ERR_AUTH');
  assert.equal(app?.error?.retryable, false);
  assert.equal(r?.partitions.find((p) => p.partition.source === 'web')?.error, null, 'the other partition is not held back');
  assert.equal(proxy.log.filter((l) => isPutObject(l) && l.req.key.includes('/source=app/')).length, 1, 'a refusal is not retried');

  const s = await partitionStatus(k, 'app');
  assert.ok(s.lastError?.startsWith('HYPSINK_ERR_AUTH: '), `lastError: ${s.lastError}`);
  assert.match(s.lastError ?? '', /s3:\/\/lake\/hyp\/events\/source=app\/events\.\d+-\d+\.parquet/);
  assert.match(s.lastError ?? '', /credentials/);
  assert.equal(s.watermark, null, 'the watermark did not advance');
  assert.equal(s.pendingRows, 10);
  assertNoSecret(JSON.stringify(s), 'status');
  assertNoSecret(logs.text(), 'the logs');
  const w = await partitionStatus(k, 'web');
  assert.equal(w.lastError, null);
  assertExactlyOnce(await readLake(s3), { web, app: [] }, { web: w.watermark });
});

test('a missing bucket: the partition fails with an error naming the bucket, watermark unchanged', { timeout: 30_000 }, async (t) => {
  const { s3, proxy, dir } = await startStack(t);
  const path = await writeConfig(dir, proxy.endpoint, { config: { bucket: 'no-such-lake', retry: FAST_RETRY } });
  const k = await openKernel(path);
  t.after(() => k.close());
  await ingest(k, 'web', events(1, 10));

  const [r] = await k.export('lake');
  assert.equal(r?.failed, 1);
  const err = r?.partitions[0]?.error;
  assert.equal(err?.code, 'HYPSINK_ERR_DESTINATION');
  assert.equal(err?.retryable, false);
  const s = await partitionStatus(k, 'web');
  assert.ok(s.lastError?.startsWith('HYPSINK_ERR_DESTINATION: '), `lastError: ${s.lastError}`);
  assert.match(s.lastError ?? '', /bucket "no-such-lake" does not exist/);
  assert.match(s.lastError ?? '', /s3:\/\/no-such-lake\/hyp\/events\/source=web\//);
  assert.equal(s.watermark, null);
  assert.deepEqual(await listKeys(s3), [], 'nothing went to the bucket that exists either');
});
