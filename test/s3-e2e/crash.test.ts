/**
 * Crashes at the S3 sink's durable boundaries, in the real CLI (`hypsink export`
 * in a child process that SIGKILLs itself at the named fault point), then new
 * rows, then recovery in a fresh process: every row lands in exactly one object,
 * no intent stays open, no multipart upload stays pending.
 * @ref LLP 0005 (write-ahead intent), LLP 0007 (S3 commit rule)
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { enforceIfNoneMatch } from '../support/fault-proxy.js';
import {
  assertExactlyOnce,
  cliExport,
  describeRun,
  events,
  getObject,
  ingestWith,
  isComplete,
  isWrite,
  listKeys,
  readLake,
  startStack,
  statusOf,
  useCredentials,
  writeConfig,
} from './helpers.js';

useCredentials();

// auto: the HeadObject pre-check finds the committed unit. header: only If-None-Match, on a store
// that enforces it (the proxy answers 412 as AWS S3 does): the 412 is the "already committed" answer.
for (const mode of ['auto', 'header'] as const) {
  test(`crash at export.afterShip (object committed, watermark not written), createIfAbsent ${mode}: recovery re-ships nothing and exports the new rows once`, { timeout: 60_000 }, async (t) => {
    const { s3, proxy, dir } = await startStack(t);
    proxy.setRule(enforceIfNoneMatch((bucket, key) => s3.objectExists(bucket, key)));
    const path = await writeConfig(dir, proxy.endpoint, { config: { createIfAbsent: mode } });
    const first = events(1, 30);
    await ingestWith(path, 'web', first);

    const crashed = await cliExport(path, { HYPSINK_FAULT: 'export.afterShip' });
    assert.equal(crashed.signal, 'SIGKILL', `the export died at the fault point\n${describeRun(crashed)}`);
    const mid = await statusOf(path, 'web');
    assert.equal(mid.watermark, null, 'the watermark did not advance');
    assert.ok(mid.intent, 'the intent is still open');
    assert.equal(mid.intent.since, null);
    const shipped = `hyp/${mid.intent.unit}`;
    assert.deepEqual(await listKeys(s3), [shipped], 'the unit was committed under the intent key before the crash');
    const committed = await getObject(s3, shipped);

    const more = events(31, 20);
    await ingestWith(path, 'web', more);
    const mark = proxy.log.length;
    const recovered = await cliExport(path);
    assert.equal(recovered.code, 0, describeRun(recovered));
    const report = JSON.parse(recovered.stdout) as { sinks: { units: number; partitions: { error: string | null }[] }[] };
    assert.equal(report.sinks[0]?.partitions[0]?.error, null);
    assert.equal(report.sinks[0]?.units, 2, 'the open unit, then the new rows');
    const rewrites = proxy.log.slice(mark).filter((l) => l.req.key === shipped && isWrite(l));
    if (mode === 'auto') assert.deepEqual(rewrites, [], 'the committed unit was recognised by HEAD, not written again');
    else assert.deepEqual(rewrites.map((l) => l.action), ['respond'], 'one conditional PUT, refused with 412 by the store');
    assert.equal(Buffer.compare(await getObject(s3, shipped), committed), 0, 'the committed object is unchanged');

    const end = await statusOf(path, 'web');
    assert.equal(end.intent, null, 'no open intent');
    assert.equal(end.pendingRows, 0);
    assert.equal(end.exportedRows, 50);
    const objects = await readLake(s3);
    assert.equal(objects.length, 2);
    assert.equal(objects[0]?.key, shipped);
    assertExactlyOnce(objects, { web: [...first, ...more] }, { web: end.watermark });
    assert.deepEqual(await s3.pendingUploads('lake'), []);
  });
}

test('crash at export.afterIntent on the 2nd unit (intent durable, nothing shipped): recovery ships that unit under its key, then the rest, once', { timeout: 60_000 }, async (t) => {
  const { s3, proxy, dir } = await startStack(t);
  const path = await writeConfig(dir, proxy.endpoint, { unit: { maxRows: 40 } });
  const first = events(1, 100);
  await ingestWith(path, 'web', first);

  const crashed = await cliExport(path, { HYPSINK_FAULT: 'export.afterIntent', HYPSINK_FAULT_AT: '2' });
  assert.equal(crashed.signal, 'SIGKILL', `the export died at the fault point\n${describeRun(crashed)}`);
  const mid = await statusOf(path, 'web');
  assert.ok(mid.intent, 'the second unit is the open intent');
  // The intent's write carried the first unit's advance (LLP 0005 step 2).
  assert.notEqual(mid.watermark, null, 'the first unit advanced the watermark');
  assert.equal(mid.intent.since, mid.watermark, 'the intent starts at the watermark');
  assert.equal(mid.exportedRows, 40);
  const before = await listKeys(s3);
  assert.equal(before.length, 1, 'only the first unit was shipped');
  assert.ok(!before.includes(`hyp/${mid.intent.unit}`), 'nothing shipped for the open intent');

  const more = events(101, 30);
  await ingestWith(path, 'web', more);
  const recovered = await cliExport(path);
  assert.equal(recovered.code, 0, describeRun(recovered));

  const end = await statusOf(path, 'web');
  assert.equal(end.intent, null, 'no open intent');
  assert.equal(end.pendingRows, 0);
  assert.equal(end.exportedRows, 130);
  const objects = await readLake(s3);
  assert.ok(
    objects.some((o) => o.key === `hyp/${mid.intent!.unit}`),
    'the open unit was shipped under the key fixed in its intent',
  );
  assert.ok(objects.every((o) => o.rows.length <= 40), 'units respect the 40-row bound');
  assertExactlyOnce(objects, { web: [...first, ...more] }, { web: end.watermark });
  const puts = proxy.log.filter((l) => l.req.method === 'PUT').map((l) => l.req.key);
  assert.deepEqual(puts.sort(), objects.map((o) => o.key).sort(), 'each object was written once, across both processes');
  assert.deepEqual(await s3.pendingUploads('lake'), []);
});

test('crash at s3.afterParts (parts uploaded, completion not sent): no object, then recovery commits once and leaves no pending upload', { timeout: 60_000 }, async (t) => {
  const { s3, proxy, dir } = await startStack(t);
  const partSize = 64 * 1024;
  const path = await writeConfig(dir, proxy.endpoint, { config: { partSize } });
  const first = events(1, 3000, 100);
  await ingestWith(path, 'web', first);

  const crashed = await cliExport(path, { HYPSINK_FAULT: 's3.afterParts' });
  assert.equal(crashed.signal, 'SIGKILL', `the export died at the fault point\n${describeRun(crashed)}`);
  const mid = await statusOf(path, 'web');
  assert.equal(mid.watermark, null);
  assert.ok(mid.intent, 'the intent is open');
  const key = `hyp/${mid.intent.unit}`;
  assert.ok(proxy.log.filter((l) => l.req.key === key && l.req.query.has('partNumber')).length >= 2, 'several parts were uploaded');
  assert.equal(proxy.log.filter(isComplete).length, 0, 'the upload was never completed');
  assert.deepEqual(await listKeys(s3), [], 'no object, not even a partial one');
  const pending = await s3.pendingUploads('lake');
  assert.deepEqual(
    pending.map((u) => u.key),
    [key],
    'the crash left exactly one pending upload, under the intent key',
  );

  const more = events(3001, 500, 100);
  await ingestWith(path, 'web', more);
  const mark = proxy.log.length;
  const recovered = await cliExport(path);
  assert.equal(recovered.code, 0, describeRun(recovered));
  assert.ok(
    proxy.log.slice(mark).some((l) => l.req.method === 'DELETE' && l.req.key === key && l.req.query.get('uploadId') === pending[0]?.uploadId),
    'the stale upload was aborted',
  );
  assert.deepEqual(await s3.pendingUploads('lake'), [], 'no pending multipart upload');

  const end = await statusOf(path, 'web');
  assert.equal(end.intent, null, 'no open intent');
  assert.equal(end.pendingRows, 0);
  assert.equal(end.exportedRows, 3500);
  const objects = await readLake(s3);
  assert.equal(objects[0]?.key, key, 'the crashed unit committed under its intent key');
  assertExactlyOnce(objects, { web: [...first, ...more] }, { web: end.watermark });
});
