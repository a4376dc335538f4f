/**
 * Faults between the destination and a real store: throttling, 5xx, dropped
 * connections, timeouts, refused connections, auth, a missing bucket, aborts.
 * The fault proxy is a real HTTP server in front of s3rver. @ref LLP 0007
 */
import assert from 'node:assert/strict';
import { createServer } from 'node:net';
import { after, before, beforeEach, describe, test } from 'node:test';
import { isHypsinkError } from '../../types/index.js';
import { type FaultProxy, anyOf, firstN, s3ErrorResponse, startFaultProxy } from '../support/fault-proxy.js';
import { type TestS3Server, startS3Server, useS3rverCredentials } from '../support/s3server.js';
import { KEY, OPTS, baseConfig, bodyOf, bytes, makeDestination, readObject } from './helpers.js';

useS3rverCredentials();

let s3: TestS3Server;
let proxy: FaultProxy;
const signal = new AbortController().signal;

before(async () => {
  s3 = await startS3Server({ buckets: ['lake'] });
  proxy = await startFaultProxy({ target: s3.endpoint });
});
after(async () => {
  await proxy.stop();
  await s3.stop();
});
beforeEach(() => proxy.setRule(undefined));

const isPut = (prefix: string) => (r: { method: string; key: string; query: URLSearchParams }) =>
  r.method === 'PUT' && r.key.startsWith(`${prefix}/`) && !r.query.has('uploadId');
const isPart = (prefix: string, n: number) => (r: { method: string; key: string; query: URLSearchParams }) =>
  r.method === 'PUT' && r.key.startsWith(`${prefix}/`) && r.query.get('partNumber') === String(n);

async function rejects(p: Promise<unknown>) {
  try {
    await p;
  } catch (e) {
    assert.ok(isHypsinkError(e), `expected a HypsinkError, got ${String(e)}`);
    return e;
  }
  assert.fail('expected the put to fail');
}

describe('interrupted multipart uploads leave nothing behind', () => {
  const partSize = 64 * 1024;

  test('the body iterator throws midway: the producer error surfaces, no object, no pending upload', async () => {
    const prefix = 'int-body';
    const { dest } = makeDestination(baseConfig(proxy.endpoint, { prefix, partSize }));
    async function* failing() {
      yield bytes(100 * 1024, 1);
      yield bytes(100 * 1024, 2);
      throw new Error('encoder exploded');
    }
    await assert.rejects(dest.putIfAbsent(KEY, failing(), { ...OPTS, signal }), /encoder exploded/);
    assert.ok(
      proxy.log.some((l) => l.req.key === `${prefix}/${KEY}` && l.req.query.has('partNumber')),
      'parts were uploaded before the failure',
    );
    assert.ok(proxy.log.some((l) => l.req.method === 'DELETE' && l.req.key === `${prefix}/${KEY}`), 'an abort was sent');
    assert.equal(await s3.objectExists('lake', `${prefix}/${KEY}`), false);
    assert.deepEqual(await s3.pendingUploads('lake'), []);
    await dest.close();
  });

  test('the store drops the connection on every try of part 2: retryable error, no object, no pending upload', async () => {
    const prefix = 'int-drop';
    proxy.setRule((r) => (isPart(prefix, 2)(r) ? { kind: 'drop', afterBytes: 1000 } : undefined));
    const { dest } = makeDestination(baseConfig(proxy.endpoint, { prefix, partSize, retry: { attempts: 3, baseMs: 5, maxMs: 50 } }));
    const e = await rejects(dest.putIfAbsent(KEY, bodyOf(bytes(300 * 1024, 3)), { ...OPTS, signal }));
    assert.equal(e.code, 'HYPSINK_ERR_RETRYABLE');
    assert.equal(e.retryable, true);
    assert.match(e.message, /UploadPart #2/);
    assert.match(e.message, new RegExp(`s3://lake/${prefix}/activity/source=web/activity\\.100-200\\.parquet`));
    assert.equal(proxy.log.filter((l) => isPart(prefix, 2)(l.req)).length, 3, 'the part was tried the budgeted 3 times');
    assert.equal(await s3.objectExists('lake', `${prefix}/${KEY}`), false);
    assert.deepEqual(await s3.pendingUploads('lake'), []);
    await dest.close();
  });

  test('the unit signal aborts a slow part: HYPSINK_ERR_ABORTED promptly, upload aborted anyway', async () => {
    const prefix = 'int-signal';
    proxy.setRule((r) => (isPart(prefix, 2)(r) ? { kind: 'delay', ms: 5_000 } : undefined));
    const { dest } = makeDestination(baseConfig(proxy.endpoint, { prefix, partSize }));
    const ac = new AbortController();
    setTimeout(() => ac.abort(new Error('shutdown')), 300);
    const t0 = Date.now();
    const e = await rejects(dest.putIfAbsent(KEY, bodyOf(bytes(300 * 1024, 4)), { ...OPTS, signal: ac.signal }));
    assert.equal(e.code, 'HYPSINK_ERR_ABORTED');
    assert.ok(Date.now() - t0 < 3_000, 'did not wait for the slow store');
    assert.equal(await s3.objectExists('lake', `${prefix}/${KEY}`), false);
    assert.deepEqual(await s3.pendingUploads('lake'), []);
    await dest.close();
  });

  test('an upload left pending by a crashed earlier attempt is reaped by the next one', async () => {
    const prefix = 'reap';
    // A first attempt whose AbortMultipartUpload never reaches the store (as after a crash).
    proxy.setRule(
      anyOf(
        (r) => (isPart(prefix, 2)(r) ? s3ErrorResponse(400, 'InvalidArgument', 'bad part') : undefined),
        (r) => (r.method === 'DELETE' ? { kind: 'drop' } : undefined),
      ),
    );
    const { dest } = makeDestination(baseConfig(proxy.endpoint, { prefix, partSize, retry: { attempts: 1, baseMs: 1, maxMs: 1 } }));
    const e = await rejects(dest.putIfAbsent(KEY, bodyOf(bytes(200 * 1024, 5)), { ...OPTS, signal }));
    assert.equal(e.code, 'HYPSINK_ERR_DESTINATION');
    assert.equal((await s3.pendingUploads('lake')).length, 1, 'the first attempt left an upload pending');
    proxy.setRule(undefined);
    const body = bytes(200 * 1024, 6);
    assert.equal((await dest.putIfAbsent(KEY, bodyOf(body), { ...OPTS, signal })).created, true);
    assert.deepEqual(await s3.pendingUploads('lake'), [], 'the retry reaped the stale upload');
    assert.equal(Buffer.compare((await readObject(s3.endpoint, 'lake', `${prefix}/${KEY}`))!, body), 0);
    await dest.close();
  });
});

describe('passing faults are ridden out inside the budget', () => {
  for (const target of ['PUTs', 'requests'] as const) {
    test(`503 SlowDown + Retry-After: 1 on the first 2 ${target}: one object, exact bytes, Retry-After honoured`, async () => {
      const prefix = `throttle-${target}`;
      const onKey = (r: { key: string }) => r.key.startsWith(`${prefix}/`);
      const match = target === 'PUTs' ? isPut(prefix) : onKey;
      proxy.setRule(firstN(2, match, s3ErrorResponse(503, 'SlowDown', 'Please reduce your request rate.', { 'retry-after': '1' })));
      const { dest, log } = makeDestination(baseConfig(proxy.endpoint, { prefix }));
      const body = bytes(20_000, 7);
      const t0 = Date.now();
      const r = await dest.putIfAbsent(KEY, bodyOf(body), { ...OPTS, signal });
      const took = Date.now() - t0;
      assert.deepEqual(r, { created: true, bytes: body.length });
      assert.ok(took >= 1_900, `waited the two Retry-After seconds (took ${took} ms)`);
      const seen = proxy.log.filter((l) => onKey(l.req)).map((l) => `${l.req.method} ${l.action}`);
      assert.deepEqual(
        seen,
        target === 'PUTs'
          ? ['HEAD forward', 'PUT respond', 'HEAD forward', 'PUT respond', 'HEAD forward', 'PUT forward']
          : ['HEAD respond', 'HEAD respond', 'HEAD forward', 'PUT forward'],
      );
      assert.equal(proxy.log.filter((l) => isPut(prefix)(l.req) && l.action === 'forward').length, 1, 'one PUT reached the store');
      assert.equal(Buffer.compare((await readObject(s3.endpoint, 'lake', `${prefix}/${KEY}`))!, body), 0);
      assert.equal(log.entries.filter((x) => x.level === 'warn').length, 2, 'each retry is logged');
      await dest.close();
    });
  }

  test('a lost acknowledgement (PUT committed, 500 returned): the retry finds the key, no duplicate, no error', async () => {
    const prefix = 'lostack';
    proxy.setRule(firstN(1, isPut(prefix), { kind: 'forwardThenRespond', status: 500, body: '' }));
    const { dest } = makeDestination(baseConfig(proxy.endpoint, { prefix }));
    const body = bytes(4000, 8);
    const r = await dest.putIfAbsent(KEY, bodyOf(body), { ...OPTS, signal });
    // The first try committed; the retry's HeadObject sees it and does not write again.
    assert.equal(r.created, false);
    assert.equal(proxy.log.filter((l) => isPut(prefix)(l.req)).length, 1, 'no second PUT');
    assert.equal(Buffer.compare((await readObject(s3.endpoint, 'lake', `${prefix}/${KEY}`))!, body), 0);
    await dest.close();
  });

  test('a slow answer beyond requestTimeoutMs is a timeout, retried', async () => {
    const prefix = 'slow';
    proxy.setRule(firstN(1, isPut(prefix), { kind: 'delay', ms: 1_500 }));
    const { dest } = makeDestination(baseConfig(proxy.endpoint, { prefix, requestTimeoutMs: 400 }));
    const body = bytes(1000, 9);
    assert.equal((await dest.putIfAbsent(KEY, bodyOf(body), { ...OPTS, signal })).bytes, 1000);
    assert.ok(proxy.log.filter((l) => isPut(prefix)(l.req) || (l.req.method === 'HEAD' && l.req.key.startsWith(prefix))).length >= 3);
    assert.equal(Buffer.compare((await readObject(s3.endpoint, 'lake', `${prefix}/${KEY}`))!, body), 0);
    await dest.close();
  });

  test('a lost CreateMultipartUpload answer: the orphaned upload is aborted once the blob commits', async () => {
    const prefix = 'lostcreate';
    proxy.setRule(
      firstN(
        1,
        (r) => r.method === 'POST' && r.key.startsWith(`${prefix}/`) && r.query.has('uploads'),
        { kind: 'forwardThenRespond', status: 500, body: '' },
      ),
    );
    const { dest } = makeDestination(baseConfig(proxy.endpoint, { prefix, partSize: 64 * 1024 }));
    const body = bytes(150 * 1024, 11);
    assert.equal((await dest.putIfAbsent(KEY, bodyOf(body), { ...OPTS, signal })).created, true);
    assert.equal(
      proxy.log.filter((l) => l.req.method === 'POST' && l.req.key.startsWith(`${prefix}/`) && l.req.query.has('uploads')).length,
      2,
      'the create was retried (the store holds two uploads at that point)',
    );
    assert.deepEqual(await s3.pendingUploads('lake'), []);
    assert.equal(Buffer.compare((await readObject(s3.endpoint, 'lake', `${prefix}/${KEY}`))!, body), 0);
    await dest.close();
  });

  test('a multipart part that fails once with 500 is retried; the object is whole', async () => {
    const prefix = 'part500';
    proxy.setRule(firstN(1, isPart(prefix, 3), s3ErrorResponse(500, 'InternalError', 'We encountered an internal error.')));
    const { dest } = makeDestination(baseConfig(proxy.endpoint, { prefix, partSize: 64 * 1024 }));
    const body = bytes(260 * 1024, 10);
    assert.equal((await dest.putIfAbsent(KEY, bodyOf(body), { ...OPTS, signal })).created, true);
    assert.equal(proxy.log.filter((l) => isPart(prefix, 3)(l.req)).length, 2);
    assert.equal(Buffer.compare((await readObject(s3.endpoint, 'lake', `${prefix}/${KEY}`))!, body), 0);
    assert.deepEqual(await s3.pendingUploads('lake'), []);
    await dest.close();
  });
});

describe('faults beyond the budget are classified', () => {
  test('5xx beyond the budget: HYPSINK_ERR_RETRYABLE naming bucket and key, after exactly `attempts` tries', async () => {
    const prefix = 'five';
    proxy.setRule((r) => (isPut(prefix)(r) ? s3ErrorResponse(500, 'InternalError', 'We encountered an internal error.') : undefined));
    const { dest } = makeDestination(baseConfig(proxy.endpoint, { prefix, retry: { attempts: 3, baseMs: 5, maxMs: 50 } }));
    const e = await rejects(dest.putIfAbsent(KEY, bodyOf(bytes(100)), { ...OPTS, signal }));
    assert.equal(e.code, 'HYPSINK_ERR_RETRYABLE');
    assert.equal(e.retryable, true);
    assert.ok(e.message.includes(`s3://lake/${prefix}/${KEY}`), e.message);
    assert.match(e.message, /sink "lake"/);
    assert.match(e.message, /3 attempts/);
    assert.match(e.message, /HTTP 500 InternalError/);
    assert.match(e.message, /retried on a later tick/);
    assert.equal(proxy.log.filter((l) => isPut(prefix)(l.req)).length, 3);
    assert.equal(e.unsent, false, 'the store answered: the unit may not be called unsent (LLP 0070)');
    assert.equal(await s3.objectExists('lake', `${prefix}/${KEY}`), false);
    await dest.close();
  });

  test('a Retry-After longer than retry.maxMs ends the budget at once and is passed on as retryAfterMs', async () => {
    const prefix = 'longwait';
    proxy.setRule((r) => (isPut(prefix)(r) ? s3ErrorResponse(503, 'SlowDown', 'Slow down', { 'retry-after': '120' }) : undefined));
    const { dest } = makeDestination(baseConfig(proxy.endpoint, { prefix }));
    const e = await rejects(dest.putIfAbsent(KEY, bodyOf(bytes(100)), { ...OPTS, signal }));
    assert.equal(e.code, 'HYPSINK_ERR_RETRYABLE');
    assert.equal(e.retryAfterMs, 120_000);
    assert.equal(proxy.log.filter((l) => isPut(prefix)(l.req)).length, 1);
    await dest.close();
  });

  test('the retry sleep is abortable by the signal', async () => {
    const prefix = 'sleepabort';
    proxy.setRule((r) => (isPut(prefix)(r) ? s3ErrorResponse(503, 'SlowDown', 'Slow down', { 'retry-after': '10' }) : undefined));
    const { dest } = makeDestination(baseConfig(proxy.endpoint, { prefix, retry: { attempts: 5, baseMs: 10, maxMs: 60_000 } }));
    const ac = new AbortController();
    setTimeout(() => ac.abort(), 300);
    const t0 = Date.now();
    const e = await rejects(dest.putIfAbsent(KEY, bodyOf(bytes(100)), { ...OPTS, signal: ac.signal }));
    assert.equal(e.code, 'HYPSINK_ERR_ABORTED');
    assert.ok(Date.now() - t0 < 3_000);
    await dest.close();
  });

  test('connection refused: HYPSINK_ERR_RETRYABLE that points at config.endpoint', async () => {
    const port = await new Promise<number>((resolve) => {
      const srv = createServer();
      srv.listen(0, '127.0.0.1', () => {
        const p = (srv.address() as { port: number }).port;
        srv.close(() => resolve(p));
      });
    });
    const { dest } = makeDestination(baseConfig(`http://127.0.0.1:${port}`, { retry: { attempts: 2, baseMs: 5, maxMs: 50 } }));
    const e = await rejects(dest.putIfAbsent(KEY, bodyOf(bytes(100)), { ...OPTS, signal }));
    assert.equal(e.code, 'HYPSINK_ERR_RETRYABLE');
    assert.match(e.message, /ECONNREFUSED/);
    assert.match(e.message, /config\.endpoint/);
    assert.ok(e.message.includes(`s3://lake/hyp/${KEY}`));
    assert.equal(e.unsent, true, 'no request reached a store: nothing of the unit was sent (LLP 0070)');
    await dest.close();
  });

  test('a connection dropped after the request went out, every try: the unit is not unsent (it may be stored)', async () => {
    const prefix = 'dropall';
    // No HeadObject first ("header"): the PUTs are the only requests, and each one reaches the store's side.
    proxy.setRule((r) => (isPut(prefix)(r) ? { kind: 'drop' } : undefined));
    const { dest } = makeDestination(baseConfig(proxy.endpoint, { prefix, createIfAbsent: 'header', retry: { attempts: 2, baseMs: 5, maxMs: 50 } }));
    const e = await rejects(dest.putIfAbsent(KEY, bodyOf(bytes(100)), { ...OPTS, signal }));
    assert.equal(e.code, 'HYPSINK_ERR_RETRYABLE');
    assert.equal(proxy.log.filter((l) => isPut(prefix)(l.req)).length, 2);
    assert.equal(e.unsent, false, 'a request reached a connection: the unit may not be called unsent (LLP 0070)');
    await dest.close();
  });

  test('missing bucket: HYPSINK_ERR_DESTINATION, not retryable, naming the bucket', async () => {
    const { dest } = makeDestination(baseConfig(s3.endpoint, { bucket: 'no-such-lake' }));
    const e = await rejects(dest.putIfAbsent(KEY, bodyOf(bytes(100)), { ...OPTS, signal }));
    assert.equal(e.code, 'HYPSINK_ERR_DESTINATION');
    assert.equal(e.retryable, false);
    assert.match(e.message, /bucket "no-such-lake" does not exist/);
    assert.ok(e.message.includes(`s3://no-such-lake/hyp/${KEY}`));
    assert.match(e.message, /Create the bucket/);
    await dest.close();
  });

  for (const mode of ['auto', 'head', 'header'] as const) {
    test(`403 from the store (${mode}): HYPSINK_ERR_AUTH, not retried`, async () => {
      const prefix = `denied-${mode}`;
      proxy.setRule((r) => (r.key.startsWith(`${prefix}/`) ? s3ErrorResponse(403, 'AccessDenied', 'Access Denied') : undefined));
      const { dest } = makeDestination(baseConfig(proxy.endpoint, { prefix, createIfAbsent: mode }));
      const e = await rejects(dest.putIfAbsent(KEY, bodyOf(bytes(100)), { ...OPTS, signal }));
      assert.equal(e.code, 'HYPSINK_ERR_AUTH');
      assert.equal(e.retryable, false);
      assert.ok(e.message.includes(`s3://lake/${prefix}/${KEY}`));
      assert.match(e.message, /credentials/);
      // auto: the HEAD's 403 may only mean "no s3:ListBucket", so the conditional PUT decides.
      const expected = mode === 'head' ? ['HEAD'] : mode === 'header' ? ['PUT'] : ['HEAD', 'PUT'];
      assert.deepEqual(
        proxy.log.filter((l) => l.req.key.startsWith(`${prefix}/`)).map((l) => l.req.method),
        expected,
      );
      await dest.close();
    });
  }

  test('a store that rejects If-None-Match (501): DESTINATION error suggesting createIfAbsent "head"', async () => {
    const prefix = 'noinm';
    proxy.setRule((r) =>
      isPut(prefix)(r) && r.headers['if-none-match']
        ? s3ErrorResponse(501, 'NotImplemented', 'A header you provided implies functionality that is not implemented')
        : undefined,
    );
    const { dest } = makeDestination(baseConfig(proxy.endpoint, { prefix }));
    const e = await rejects(dest.putIfAbsent(KEY, bodyOf(bytes(100)), { ...OPTS, signal }));
    assert.equal(e.code, 'HYPSINK_ERR_DESTINATION');
    assert.match(e.message, /createIfAbsent to "head"/);
    const { dest: headOnly } = makeDestination(baseConfig(proxy.endpoint, { prefix, createIfAbsent: 'head' }));
    assert.equal((await headOnly.putIfAbsent(KEY, bodyOf(bytes(100)), { ...OPTS, signal })).created, true);
    await dest.close();
    await headOnly.close();
  });
});
