/**
 * The commit rule against a real S3-compatible server (s3rver over loopback):
 * exact bytes, create-if-absent on both the HeadObject path and the 412 path,
 * multipart for large blobs; the unit digest stored as the object's metadata
 * and returned when the key is found taken, on every path. @ref LLP 0007,
 * LLP 0054, LLP 0057
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { type FaultProxy, enforceIfNoneMatch, startFaultProxy } from '../support/fault-proxy.js';
import { type TestS3Server, startS3Server, useS3rverCredentials } from '../support/s3server.js';
import { KEY, OPTS, baseConfig, bodyOf, bytes, headObject, makeDestination, readObject } from './helpers.js';

useS3rverCredentials();

let s3: TestS3Server;
let proxy: FaultProxy;
const signal = new AbortController().signal;

before(async () => {
  s3 = await startS3Server({ buckets: ['lake'] });
  // Emulates a store that enforces If-None-Match (AWS S3); s3rver itself does not.
  proxy = await startFaultProxy({ target: s3.endpoint, rule: enforceIfNoneMatch((b, k) => s3.objectExists(b, k)) });
});
after(async () => {
  await proxy.stop();
  await s3.stop();
});

function requestsFor(objectKey: string) {
  return proxy.log.filter((l) => l.req.key === objectKey);
}

describe('small blobs', () => {
  test('a put creates the object with exactly the body bytes, under prefix/key', async () => {
    const { dest } = makeDestination(baseConfig(s3.endpoint));
    const body = bytes(10_000, 7);
    const r = await dest.putIfAbsent(KEY, bodyOf(body, 1000), { ...OPTS, signal });
    assert.deepEqual(r, { created: true, bytes: body.length });
    assert.equal(dest.describe(KEY), `s3://lake/hyp/${KEY}`);
    const got = await readObject(s3.endpoint, 'lake', `hyp/${KEY}`);
    assert.ok(got);
    assert.equal(Buffer.compare(got, body), 0);
    await dest.close();
  });

  test('prefix and key slashes are normalized: no doubled or leading slash', async () => {
    const { dest } = makeDestination(baseConfig(s3.endpoint, { prefix: '/exports//hyp/' }));
    assert.equal(dest.describe(`/${KEY}`), `s3://lake/exports/hyp/${KEY}`);
    const r = await dest.putIfAbsent(`/${KEY}`, bodyOf(Buffer.from('x')), { ...OPTS, signal });
    assert.equal(r.created, true);
    assert.ok(await s3.objectExists('lake', `exports/hyp/${KEY}`));
    await dest.close();
    const { dest: bare } = makeDestination(baseConfig(s3.endpoint, { prefix: '' }));
    assert.equal(bare.describe(KEY), `s3://lake/${KEY}`);
    await bare.close();
  });

  test('an empty body commits an empty object', async () => {
    const { dest } = makeDestination(baseConfig(s3.endpoint, { prefix: 'empty' }));
    const r = await dest.putIfAbsent(KEY, bodyOf(Buffer.alloc(0)), { ...OPTS, signal });
    assert.deepEqual(r, { created: true, bytes: 0 });
    const got = await readObject(s3.endpoint, 'lake', `empty/${KEY}`);
    assert.equal(got?.length, 0);
    await dest.close();
  });

  for (const mode of ['head', 'auto'] as const) {
    test(`HeadObject path (createIfAbsent: ${mode}): a second put of the key is created:false and changes nothing`, async () => {
      // Straight to s3rver, which ignores If-None-Match: only the pre-check protects the key.
      const prefix = `head-${mode}`;
      const { dest } = makeDestination(baseConfig(s3.endpoint, { prefix, createIfAbsent: mode }));
      const first = bytes(5000, 1);
      assert.deepEqual(await dest.putIfAbsent(KEY, bodyOf(first), { ...OPTS, signal }), { created: true, bytes: 5000 });
      let pulled = 0;
      async function* second() {
        pulled++;
        yield Buffer.from('a different body that must not land');
      }
      const r = await dest.putIfAbsent(KEY, second(), { ...OPTS, signal });
      // Put without a digest: the object there has none recorded.
      assert.deepEqual(r, { created: false, bytes: 0, digest: null });
      assert.equal(pulled, 0, 'the body of an already-committed unit is not even read');
      const got = await readObject(s3.endpoint, 'lake', `${prefix}/${KEY}`);
      assert.equal(Buffer.compare(got!, first), 0);
      await dest.close();
    });
  }

  test('412 path (createIfAbsent: header): the conditional PUT is refused, created:false, object unchanged', async () => {
    const prefix = 'hdr';
    const { dest } = makeDestination(baseConfig(proxy.endpoint, { prefix, createIfAbsent: 'header' }));
    const first = bytes(3000, 2);
    assert.equal((await dest.putIfAbsent(KEY, bodyOf(first), { ...OPTS, signal })).created, true);
    const r = await dest.putIfAbsent(KEY, bodyOf(Buffer.from('second body')), { ...OPTS, signal });
    assert.equal(r.created, false);
    const got = await readObject(s3.endpoint, 'lake', `${prefix}/${KEY}`);
    assert.equal(Buffer.compare(got!, first), 0);
    const puts = requestsFor(`${prefix}/${KEY}`).filter((l) => l.req.method === 'PUT');
    assert.equal(puts.length, 2);
    assert.ok(puts.every((l) => l.req.headers['if-none-match'] === '*'), 'every PUT carries If-None-Match: *');
    assert.equal(puts[1]?.action, 'respond', 'the second PUT was answered 412 by the store');
    // No pre-check in header mode; one HEAD after the 412 reads the digest of the object there (LLP 0054).
    assert.deepEqual(
      requestsFor(`${prefix}/${KEY}`).map((l) => l.req.method),
      ['PUT', 'PUT', 'HEAD'],
    );
    assert.equal(r.digest, null, 'put without a digest');
    await dest.close();
  });

  test('auto mode sends both: HEAD first, then a conditional PUT', async () => {
    const prefix = 'auto-wire';
    const { dest } = makeDestination(baseConfig(proxy.endpoint, { prefix }));
    await dest.putIfAbsent(KEY, bodyOf(Buffer.from('abc')), { ...OPTS, signal });
    const seen = requestsFor(`${prefix}/${KEY}`).map((l) => `${l.req.method}${l.req.headers['if-none-match'] ? '+INM' : ''}`);
    assert.deepEqual(seen, ['HEAD', 'PUT+INM']);
    await dest.close();
  });

  test('head mode sends no If-None-Match (for stores that reject it)', async () => {
    const prefix = 'head-wire';
    const { dest } = makeDestination(baseConfig(proxy.endpoint, { prefix, createIfAbsent: 'head' }));
    await dest.putIfAbsent(KEY, bodyOf(Buffer.from('abc')), { ...OPTS, signal });
    const seen = requestsFor(`${prefix}/${KEY}`).map((l) => `${l.req.method}${l.req.headers['if-none-match'] ? '+INM' : ''}`);
    assert.deepEqual(seen, ['HEAD', 'PUT']);
    await dest.close();
  });
});

describe('large blobs (multipart)', () => {
  const partSize = 64 * 1024;

  test('a ~300 KiB body with 64 KiB parts goes multipart and equals the body', async () => {
    const prefix = 'mp';
    const { dest } = makeDestination(baseConfig(proxy.endpoint, { prefix, partSize }));
    const body = bytes(300 * 1024 + 123, 3);
    const r = await dest.putIfAbsent(KEY, bodyOf(body, 10_000), { ...OPTS, signal });
    assert.deepEqual(r, { created: true, bytes: body.length });
    const got = await readObject(s3.endpoint, 'lake', `${prefix}/${KEY}`);
    assert.equal(got?.length, body.length);
    assert.equal(Buffer.compare(got!, body), 0);
    const reqs = requestsFor(`${prefix}/${KEY}`);
    const partPuts = reqs.filter((l) => l.req.method === 'PUT' && l.req.query.has('partNumber'));
    assert.equal(partPuts.length, 5, '4 full parts + 1 tail');
    const complete = reqs.find((l) => l.req.method === 'POST' && l.req.query.has('uploadId'));
    assert.equal(complete?.req.headers['if-none-match'], '*', 'the completion carries If-None-Match: *');
    assert.deepEqual(await s3.pendingUploads('lake'), []);
    await dest.close();
  });

  test('a body of exactly one part size is a single PutObject', async () => {
    const prefix = 'onepart';
    const { dest } = makeDestination(baseConfig(proxy.endpoint, { prefix, partSize }));
    const body = bytes(partSize, 4);
    assert.equal((await dest.putIfAbsent(KEY, bodyOf(body, 4096), { ...OPTS, signal })).created, true);
    const reqs = requestsFor(`${prefix}/${KEY}`);
    assert.equal(reqs.filter((l) => l.req.query.has('uploads') || l.req.query.has('uploadId')).length, 0);
    assert.equal(Buffer.compare((await readObject(s3.endpoint, 'lake', `${prefix}/${KEY}`))!, body), 0);
    await dest.close();
  });

  test('412 on CompleteMultipartUpload: created:false, object unchanged, the upload is aborted', async () => {
    const prefix = 'mp412';
    const { dest } = makeDestination(baseConfig(proxy.endpoint, { prefix, partSize, createIfAbsent: 'header' }));
    const first = bytes(200 * 1024, 5);
    assert.equal((await dest.putIfAbsent(KEY, bodyOf(first), { ...OPTS, signal })).created, true);
    const r = await dest.putIfAbsent(KEY, bodyOf(bytes(200 * 1024, 6)), { ...OPTS, signal });
    assert.equal(r.created, false);
    assert.equal(Buffer.compare((await readObject(s3.endpoint, 'lake', `${prefix}/${KEY}`))!, first), 0);
    const completes = requestsFor(`${prefix}/${KEY}`).filter((l) => l.req.method === 'POST' && l.req.query.has('uploadId'));
    assert.deepEqual(
      completes.map((l) => l.action),
      ['forward', 'respond'],
      'the second completion was refused with 412',
    );
    assert.deepEqual(await s3.pendingUploads('lake'), [], 'the refused upload was aborted');
    await dest.close();
  });

  test('HeadObject path on multipart: a committed key is not uploaded again', async () => {
    const prefix = 'mphead';
    const { dest } = makeDestination(baseConfig(s3.endpoint, { prefix, partSize, createIfAbsent: 'head' }));
    const first = bytes(150 * 1024, 8);
    assert.equal((await dest.putIfAbsent(KEY, bodyOf(first), { ...OPTS, signal })).created, true);
    assert.deepEqual(await dest.putIfAbsent(KEY, bodyOf(bytes(150 * 1024, 9)), { ...OPTS, signal }), {
      created: false,
      bytes: 0,
      digest: null,
    });
    assert.equal(Buffer.compare((await readObject(s3.endpoint, 'lake', `${prefix}/${KEY}`))!, first), 0);
    await dest.close();
  });
});

describe('the unit digest (LLP 0054)', () => {
  const D1 = 'u1-AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA';
  const D2 = 'u1-BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB';
  const partSize = 64 * 1024;
  const cases = [
    // [name, store, mode, size]: every way a taken key is found, single and multipart.
    ['HEAD pre-check (auto), single PutObject', 's3rver', 'auto', 3000],
    ['HEAD pre-check (head), multipart', 's3rver', 'head', 150 * 1024],
    ['412 on PutObject (header)', 'proxy', 'header', 3000],
    ['412 on CompleteMultipartUpload (header)', 'proxy', 'header', 150 * 1024],
  ] as const;
  for (const [name, store, mode, size] of cases) {
    test(`${name}: stored as x-amz-meta-hypsink-digest; the taken key answers the digest recorded there, and digestOf reads it`, async () => {
      const prefix = `dg-${mode}-${size}`;
      const { dest } = makeDestination(baseConfig(store === 'proxy' ? proxy.endpoint : s3.endpoint, { prefix, partSize, createIfAbsent: mode }));
      const first = bytes(size, 11);
      assert.equal((await dest.putIfAbsent(KEY, bodyOf(first), { ...OPTS, signal, digest: D1 })).created, true);
      // The metadata as any S3 client sees it.
      const head = await headObject(s3.endpoint, 'lake', `${prefix}/${KEY}`);
      assert.equal(head.Metadata?.['hypsink-digest'], D1);
      // Another unit's put of the key: not created, the digest of what is there.
      const other = await dest.putIfAbsent(KEY, bodyOf(bytes(size, 12)), { ...OPTS, signal, digest: D2 });
      assert.equal(other.created, false);
      assert.equal(other.digest, D1);
      // The same unit again (a crash retry): the same digest, which the kernel takes as its own.
      const again = await dest.putIfAbsent(KEY, bodyOf(first), { ...OPTS, signal, digest: D1 });
      assert.deepEqual([again.created, again.digest], [false, D1]);
      assert.equal(Buffer.compare((await readObject(s3.endpoint, 'lake', `${prefix}/${KEY}`))!, first), 0, 'never overwritten');
      assert.equal(await dest.digestOf!(KEY, { signal }), D1);
      assert.equal(await dest.digestOf!('events/none.parquet', { signal }), null, 'no object: no digest');
      assert.deepEqual(await s3.pendingUploads('lake'), []);
      await dest.close();
    });
  }

  test('an object put before digests (no metadata) answers null: taken by its name, as before', async () => {
    const prefix = 'dg-legacy';
    const { dest } = makeDestination(baseConfig(s3.endpoint, { prefix }));
    assert.equal((await dest.putIfAbsent(KEY, bodyOf(Buffer.from('old')), { ...OPTS, signal })).created, true);
    const r = await dest.putIfAbsent(KEY, bodyOf(Buffer.from('new')), { ...OPTS, signal, digest: D2 });
    assert.deepEqual(r, { created: false, bytes: 0, digest: null });
    assert.equal(await dest.digestOf!(KEY, { signal }), null);
    await dest.close();
  });
});
