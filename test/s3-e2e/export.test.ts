/**
 * Issue 4 through the real kernel: the `lake` sink (format-parquet → s3) loaded
 * from a config file, rows ingested as NDJSON, exported to a real s3rver behind
 * a fault proxy, every object decoded. @ref LLP 0007
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { loadConfig } from '../../kernel/config/load.js';
import { firstN, s3ErrorResponse } from '../support/fault-proxy.js';
import {
  assertExactlyOnce,
  captureLines,
  events,
  forwardedWrites,
  ingest,
  isComplete,
  isCreate,
  isPart,
  isPutObject,
  lakeSink,
  listKeys,
  openKernel,
  partitionStatus,
  readLake,
  startStack,
  useCredentials,
  writeConfig,
} from './helpers.js';

useCredentials();

test('ingest → export: objects under hyp/events/source=<src>/ decode to exactly the rows; a tick with nothing new sends nothing', { timeout: 30_000 }, async (t) => {
  const { s3, proxy, dir } = await startStack(t);
  const path = await writeConfig(dir, proxy.endpoint);

  // The sink entry of issue 4 is accepted as written.
  const loaded = await loadConfig(path);
  assert.deepEqual(loaded.config.sinks.lake, { ...lakeSink(proxy.endpoint), minRows: 1, unit: {}, writerConfig: {}, keys: {}, transforms: [] });

  const k = await openKernel(path);
  t.after(() => k.close());
  assert.equal((await k.sink('lake')).kind, 'blob');
  // A partition value that is not path-safe: it is encoded into one key segment.
  const APP = 'app/ios 17';
  const web = events(1, 25);
  const app = events(101, 17);
  await ingest(k, 'web', web);
  await ingest(k, APP, app);
  assert.equal(proxy.log.length, 0, 'ingest does not touch the store');

  const [first] = await k.export('lake');
  assert.equal(first?.failed, 0, JSON.stringify(first?.partitions.map((p) => p.error?.message)));
  assert.equal(first?.rows, 42);
  assert.equal(first?.units, 2);

  const objects = await readLake(s3);
  assert.deepEqual(
    objects.map((o) => o.key.replace(/\d+-\d+/, 'S-U')),
    ['hyp/events/source=app%2Fios%2017/events.S-U.parquet', 'hyp/events/source=web/events.S-U.parquet'],
  );
  const sWeb = await partitionStatus(k, 'web');
  const sApp = await partitionStatus(k, APP);
  assertExactlyOnce(objects, { web, [APP]: app }, { web: sWeb.watermark, [APP]: sApp.watermark });
  for (const [s, n] of [
    [sWeb, 25],
    [sApp, 17],
  ] as const) {
    assert.equal(s.intent, null);
    assert.equal(s.pendingRows, 0);
    assert.equal(s.exportedRows, n);
    assert.equal(s.lastError, null);
    assert.equal(s.watermark, s.highWater);
  }
  // Each object went up once, as a single conditional PutObject (the blobs are small).
  const puts = forwardedWrites(proxy);
  assert.deepEqual(puts.map((l) => l.req.key).sort(), objects.map((o) => o.key).sort());
  assert.ok(puts.every((l) => isPutObject(l) && l.req.headers['if-none-match'] === '*'), 'PutObject with If-None-Match: *');

  // Nothing new: not one request reaches the store, no object appears.
  const before = proxy.log.length;
  const keysBefore = await listKeys(s3);
  const [idle] = await k.export('lake');
  assert.deepEqual([idle?.rows, idle?.bytes, idle?.units, idle?.failed], [0, 0, 0, 0]);
  const sent = proxy.log.slice(before);
  assert.equal(sent.filter((l) => l.req.method === 'PUT' || l.req.method === 'POST').length, 0, 'no PUT/POST on a tick with nothing new');
  assert.deepEqual(
    sent.map((l) => `${l.req.method} ${l.req.url}`),
    [],
    'a tick with nothing new sends no request at all',
  );
  assert.deepEqual(await listKeys(s3), keysBefore, 'no new object');

  // N new rows in one partition: one new object there, nothing sent for the other.
  const more = events(26, 5);
  await ingest(k, 'web', more);
  const mark = proxy.log.length;
  const [next] = await k.export('lake');
  assert.deepEqual([next?.rows, next?.units, next?.failed], [5, 1, 0]);
  assert.equal(proxy.log.slice(mark).filter((l) => l.req.key.includes('source=app')).length, 0, 'nothing sent for the other partition');
  const after = await readLake(s3);
  assert.equal(after.length, 3);
  assertExactlyOnce(after, { web: [...web, ...more], [APP]: app }, { web: (await partitionStatus(k, 'web')).watermark, [APP]: sApp.watermark });
});

test('a unit larger than partSize goes up as a multipart upload and decodes to its rows', { timeout: 30_000 }, async (t) => {
  const { s3, proxy, dir } = await startStack(t);
  const partSize = 64 * 1024;
  const path = await writeConfig(dir, proxy.endpoint, { config: { partSize } });
  const k = await openKernel(path);
  t.after(() => k.close());
  const rows = events(1, 3000, 100);
  await ingest(k, 'web', rows);

  const [r] = await k.export('lake');
  assert.equal(r?.failed, 0, JSON.stringify(r?.partitions.map((p) => p.error?.message)));
  assert.equal(r?.units, 1);
  assert.ok((r?.bytes ?? 0) > 2 * partSize, `the unit spans at least three parts (${r?.bytes} bytes)`);

  const objects = await readLake(s3);
  assert.equal(objects.length, 1);
  assertExactlyOnce(objects, { web: rows }, { web: (await partitionStatus(k, 'web')).watermark });
  const key = objects[0]!.key;
  const onKey = proxy.log.filter((l) => l.req.key === key);
  assert.equal(onKey.filter(isPutObject).length, 0, 'no single PutObject');
  assert.equal(onKey.filter(isCreate).length, 1, 'one CreateMultipartUpload');
  assert.equal(onKey.filter(isPart).length, Math.ceil((r?.bytes ?? 0) / partSize), 'one UploadPart per partSize bytes');
  const complete = onKey.filter(isComplete);
  assert.equal(complete.length, 1, 'one CompleteMultipartUpload');
  assert.equal(complete[0]?.req.headers['if-none-match'], '*', 'the completion carries If-None-Match: *');
  assert.deepEqual(await s3.pendingUploads('lake'), [], 'no upload left pending');
});

test('a throttling store (503 SlowDown, Retry-After: 1) is ridden out: one object per unit, no duplicate', { timeout: 30_000 }, async (t) => {
  const throttled = 4;
  const { s3, proxy, dir } = await startStack(
    t,
    firstN(throttled, () => true, s3ErrorResponse(503, 'SlowDown', 'Please reduce your request rate.', { 'retry-after': '1' })),
  );
  // Units of at most 40 rows: web is cut into 3 units, app into 2.
  const path = await writeConfig(dir, proxy.endpoint, { unit: { maxRows: 40 } });
  const logs = captureLines();
  const k = await openKernel(path, logs);
  t.after(() => k.close());
  const web = events(1, 100);
  const app = events(201, 50);
  await ingest(k, 'web', web);
  await ingest(k, 'app', app);

  const t0 = Date.now();
  const [r] = await k.export('lake');
  const took = Date.now() - t0;
  assert.equal(r?.failed, 0, JSON.stringify(r?.partitions.map((p) => p.error?.message)));
  assert.equal(r?.units, 5);
  assert.equal(r?.rows, 150);
  assert.equal(proxy.log.filter((l) => l.action === 'respond').length, throttled, 'the store did throttle');
  assert.ok(took >= 950, `Retry-After was honoured (took ${took} ms)`);
  assert.match(logs.text(), /retrying after a passing fault/);

  const objects = await readLake(s3);
  assert.equal(objects.length, 5, 'one object per unit');
  assertExactlyOnce(
    objects,
    { web, app },
    { web: (await partitionStatus(k, 'web')).watermark, app: (await partitionStatus(k, 'app')).watermark },
  );
  const puts = forwardedWrites(proxy).map((l) => l.req.key);
  assert.deepEqual(puts.sort(), objects.map((o) => o.key).sort(), 'each object was written once');
});
