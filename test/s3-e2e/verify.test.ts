/**
 * `hypsink verify` of the `lake` sink (format-parquet → s3) against a real
 * s3rver: the objects listed with ListObjectsV2 under the sink's prefix, row
 * counts read from each object's Parquet footer with ranged GetObjects. A whole
 * chain passes; a deleted object is a hole; an object replaced by one holding
 * other rows is a row-count finding naming its key.
 * @ref LLP 0037
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CopyObjectCommand, DeleteObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { cli } from '../support/kernel.js';
import { events, ingest, listKeys, openKernel, startStack, useCredentials, writeConfig } from './helpers.js';

useCredentials();

const range = (key: string) => {
  const m = /\.(\d+)-(\d+)\.parquet$/.exec(key);
  assert.ok(m, key);
  return { since: Number(m[1]), until: Number(m[2]) };
};

test('verify over s3: whole chain, then a deleted object (hole), a replaced one without our metadata (row count), and one copied with its digest (content)', { timeout: 60_000 }, async (t) => {
  const { s3, proxy, dir } = await startStack(t);
  const path = await writeConfig(dir, proxy.endpoint, { unit: { maxRows: 10 } });
  const k = await openKernel(path);
  try {
    await ingest(k, 'web', events(1, 25));
    await ingest(k, 'app', events(101, 4));
    const [r] = await k.export('lake');
    assert.equal(r?.failed, 0);
  } finally {
    await k.close();
  }
  const ok = await cli('verify', '--config', path);
  assert.equal(ok.code, 0, ok.out + ok.err);
  assert.match(ok.out, /sink "lake": 4 units over 2 partitions, chain whole to the watermark/);

  const web = (await listKeys(s3, 'hyp/events/source=web/')).sort((a, b) => range(a).since - range(b).since);
  const app = await listKeys(s3, 'hyp/events/source=app/');
  assert.equal(web.length, 3);
  const c = new S3Client({ region: 'us-east-1', endpoint: s3.endpoint, forcePathStyle: true });
  t.after(() => c.destroy());
  await c.send(new DeleteObjectCommand({ Bucket: 'lake', Key: web[1]! }));
  // REPLACE drops the copied object's metadata, digest included: only the row count can tell.
  await c.send(new CopyObjectCommand({ Bucket: 'lake', Key: web[2]!, CopySource: `lake/${app[0]!}`, MetadataDirective: 'REPLACE' }));

  const bad = await cli('verify', '--config', path);
  assert.equal(bad.code, 1, bad.out + bad.err);
  const { since, until } = range(web[1]!);
  const rel = (key: string) => key.replace(/^hyp\//, '').replace(/\./g, '\\.');
  assert.match(bad.out, new RegExp(`sink "lake": events/source=web: hole \\(${since}, ${until}\\]: no unit holds these seqs \\(between ${rel(web[0]!)} and ${rel(web[2]!)}\\)`));
  assert.match(bad.out, new RegExp(`sink "lake": ${rel(web[2]!)}: holds 4 rows, the cache holds 5 .*s3://lake/${web[2]!.replace(/\./g, '\\.')}`));
  assert.match(bad.out, /sink "lake": 3 units over 2 partitions, 2 findings/);
  assert.match(bad.err, /HYPSINK_ERR_VERIFY/);

  // The default COPY keeps the other unit's digest: a content finding, which says more than a row count.
  await c.send(new CopyObjectCommand({ Bucket: 'lake', Key: web[2]!, CopySource: `lake/${app[0]!}` }));
  const copied = await cli('verify', '--config', path);
  assert.equal(copied.code, 1, copied.out + copied.err);
  assert.match(copied.out, new RegExp(`sink "lake": ${rel(web[2]!)}: holds other rows than the cache holds for its range \\(20, 25\\]: recorded digest u1-\\S+, the cache's u1-`));
});
