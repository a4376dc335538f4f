/**
 * Nothing secret reaches an error or a log line: not the secret key, not the
 * session token, not the access key id, not the request signature, even when
 * the store echoes them back in its error body.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { inspect } from 'node:util';
import { isHypsinkError } from '../../types/index.js';
import { type FaultProxy, firstN, s3ErrorResponse, startFaultProxy } from '../support/fault-proxy.js';
import { type TestS3Server, startS3Server, useS3rverCredentials } from '../support/s3server.js';
import { type CapturedLog, KEY, OPTS, baseConfig, bodyOf, bytes, makeDestination } from './helpers.js';

const ACCESS_KEY_ID = 'HYPSINKFAKEKEYID7731';
const SECRET = 'hypsink-secret-0d5f9c1e-DO-NOT-LOG';
const SESSION_TOKEN = 'hypsink-session-token-a8b7c6-DO-NOT-LOG';

let s3: TestS3Server;
let proxy: FaultProxy;
const signal = new AbortController().signal;

function useFakeCredentials(): void {
  process.env.AWS_ACCESS_KEY_ID = ACCESS_KEY_ID;
  process.env.AWS_SECRET_ACCESS_KEY = SECRET;
  process.env.AWS_SESSION_TOKEN = SESSION_TOKEN;
}

before(async () => {
  useS3rverCredentials();
  s3 = await startS3Server({ buckets: ['lake'] });
  proxy = await startFaultProxy({ target: s3.endpoint });
});
after(async () => {
  useS3rverCredentials();
  await proxy.stop();
  await s3.stop();
});

/** Every form in which an error or a log may be shown or shipped. */
function renderings(e: unknown, log: CapturedLog): string[] {
  const out = [inspect(e, { depth: Number.POSITIVE_INFINITY, showHidden: true }), log.text()];
  if (e instanceof Error) {
    out.push(e.message, String(e.stack));
    out.push(JSON.stringify(e, Object.getOwnPropertyNames(e)));
    let c: unknown = e.cause;
    while (c) {
      out.push(inspect(c, { depth: Number.POSITIVE_INFINITY, showHidden: true }));
      if (c instanceof Error) out.push(JSON.stringify(c, Object.getOwnPropertyNames(c)));
      c = c instanceof Error ? c.cause : undefined;
    }
  }
  return out;
}

function signaturesSeen(): string[] {
  return proxy.log
    .map((l) => /Signature=([0-9a-f]+)/.exec(String(l.req.headers.authorization ?? ''))?.[1])
    .filter((s): s is string => typeof s === 'string');
}

function assertNoSecrets(e: unknown, log: CapturedLog): void {
  const sigs = signaturesSeen();
  assert.ok(sigs.length > 0, 'requests were signed (the test sees their signatures)');
  for (const text of renderings(e, log)) {
    for (const secret of [ACCESS_KEY_ID, SECRET, SESSION_TOKEN, ...sigs]) {
      assert.ok(!text.includes(secret), `a secret leaked: ${secret.slice(0, 6)}… in ${text.slice(0, 300)}`);
    }
  }
}

test('an unknown access key (the store echoes it in its 403 body): AUTH error, no secret anywhere', async () => {
  useFakeCredentials();
  // Through the proxy only to see the signatures; s3rver itself refuses the key.
  const { dest, log } = makeDestination(baseConfig(proxy.endpoint, { prefix: 's1' }));
  let caught: unknown;
  try {
    await dest.putIfAbsent(KEY, bodyOf(bytes(100)), { ...OPTS, signal });
  } catch (e) {
    caught = e;
  }
  assert.ok(isHypsinkError(caught));
  assert.equal(caught.code, 'HYPSINK_ERR_AUTH');
  assert.match(caught.message, /InvalidAccessKeyId/);
  assertNoSecrets(caught, log);
  await dest.close();
});

test('a store whose error message echoes the Authorization header and token: redacted', async () => {
  useFakeCredentials();
  proxy.setRule((r) => {
    if (r.method !== 'PUT') return undefined;
    const echoed = `Bad request ${String(r.headers.authorization)} token=${String(r.headers['x-amz-security-token'])} X-Amz-Security-Token=${String(r.headers['x-amz-security-token'])}`;
    return s3ErrorResponse(400, 'InvalidRequest', echoed);
  });
  const { dest, log } = makeDestination(baseConfig(proxy.endpoint, { prefix: 's2', createIfAbsent: 'header' }));
  let caught: unknown;
  try {
    await dest.putIfAbsent(KEY, bodyOf(bytes(100)), { ...OPTS, signal });
  } catch (e) {
    caught = e;
  }
  proxy.setRule(undefined);
  assert.ok(isHypsinkError(caught));
  assert.equal(caught.code, 'HYPSINK_ERR_DESTINATION');
  assert.match(caught.message, /InvalidRequest/);
  assert.match(caught.message, /\[redacted\]/, 'the echoed material was redacted, not dropped silently');
  assertNoSecrets(caught, log);
  await dest.close();
});

test('retry warnings and the final retryable error carry no secret', async () => {
  useFakeCredentials();
  proxy.setRule(
    firstN(
      10,
      (r) => r.method === 'PUT',
      s3ErrorResponse(503, 'SlowDown', `Reduce your request rate (Credential=${ACCESS_KEY_ID}/x, secret ${SECRET})`),
    ),
  );
  const { dest, log } = makeDestination(
    baseConfig(proxy.endpoint, { prefix: 's3', createIfAbsent: 'header', retry: { attempts: 3, baseMs: 5, maxMs: 20 } }),
  );
  let caught: unknown;
  try {
    await dest.putIfAbsent(KEY, bodyOf(bytes(100)), { ...OPTS, signal });
  } catch (e) {
    caught = e;
  }
  proxy.setRule(undefined);
  assert.ok(isHypsinkError(caught));
  assert.equal(caught.code, 'HYPSINK_ERR_RETRYABLE');
  assert.equal(log.entries.filter((x) => x.level === 'warn').length, 2, 'the retries were logged');
  assertNoSecrets(caught, log);
  await dest.close();
});
