/**
 * No secret in logs or output: the real CLI, distinctive fake credentials in
 * the environment (where the AWS default chain finds them), debug logging, and
 * a store that fails — by refusing the key, and by echoing the signed request
 * back in its 5xx error bodies. stdout and stderr are searched for the secret
 * access key and the access key id. @ref LLP 0007 §4
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { TestContext } from 'node:test';
import { s3ErrorResponse } from '../support/fault-proxy.js';
import { FAST_RETRY, assertNoSecret, cliExport, describeRun, events, ingestWith, runCli, startStack, useCredentials, writeConfig } from './helpers.js';

useCredentials();

const FAKE_KEY_ID = 'AKIAE2EFAKEKEY7Q3XZ9';
const FAKE_SECRET = 'e2eFakeSecret+kV9qR2wX7zN4mB8cJ5hT1yL6pD3sG0';
const FAKE_ENV = { AWS_ACCESS_KEY_ID: FAKE_KEY_ID, AWS_SECRET_ACCESS_KEY: FAKE_SECRET, HYPSINK_LOG_LEVEL: 'debug' };

function assertClean(text: string, what: string): void {
  assertNoSecret(text, what, FAKE_KEY_ID, FAKE_SECRET);
}

async function statusJson(t: TestContext, path: string): Promise<{ lastError: string | null; watermark: string | null }> {
  const st = await runCli(['status', '--json', '--config', path], FAKE_ENV);
  assert.equal(st.code, 0, describeRun(st));
  assertClean(st.stdout + st.stderr, 'hypsink status');
  const p = (JSON.parse(st.stdout) as { sinks: { partitions: { lastError: string | null; watermark: string | null }[] }[] }).sinks[0]
    ?.partitions[0];
  assert.ok(p, `status has the partition: ${st.stdout}`);
  t.diagnostic(`status lastError: ${p.lastError}`);
  return p;
}

test('the store refuses the fake key: exit 1, HYPSINK_ERR_AUTH, and neither the secret nor the key id in stdout or stderr', { timeout: 60_000 }, async (t) => {
  const { s3, dir } = await startStack(t);
  // Straight at s3rver: it answers InvalidAccessKeyId with a body that echoes the key id.
  const path = await writeConfig(dir, s3.endpoint, { config: { retry: FAST_RETRY } });
  await ingestWith(path, 'web', events(1, 10));

  const run = await runCli(['export', '--config', path], FAKE_ENV);
  assert.equal(run.code, 1, describeRun(run));
  assert.match(run.stderr, /HYPSINK_ERR_AUTH/, 'the failure is shown as an auth error');
  assert.match(run.stderr, /s3:\/\/lake\/hyp\/events\/source=web\//, 'naming bucket and key');
  assert.match(run.stderr, /InvalidAccessKeyId/, 'with what the store said');
  assertClean(run.stdout + run.stderr, 'hypsink export');

  const p = await statusJson(t, path);
  assert.match(p.lastError ?? '', /^HYPSINK_ERR_AUTH: /);
  assert.equal(p.watermark, null);
});

test('a failing store that echoes the signed request in its 5xx bodies: retries are logged, nothing secret is', { timeout: 60_000 }, async (t) => {
  // HEAD answers have no body: those go on to s3rver (which refuses the fake key; the plugin then
  // lets the conditional PUT decide), and every PUT gets the echoing 500.
  const echo = (r: { method: string; headers: Record<string, string | string[] | undefined> }) =>
    r.method === 'HEAD'
      ? undefined
      : s3ErrorResponse(
      500,
      'InternalError',
      `failed: authorization=${String(r.headers.authorization)} x-amz-content-sha256=${String(r.headers['x-amz-content-sha256'])}`,
    );
  const { proxy, dir } = await startStack(t, echo);
  const path = await writeConfig(dir, proxy.endpoint, { config: { retry: FAST_RETRY } });
  await ingestWith(path, 'web', events(1, 10));

  const run = await cliExport(path, FAKE_ENV);
  assert.equal(run.code, 1, describeRun(run));
  assert.equal(proxy.log.filter((l) => l.req.method === 'PUT').length, FAST_RETRY.attempts, 'the PUT was tried the whole budget');
  assert.ok(
    proxy.log.some((l) => String(l.req.headers.authorization).includes(FAKE_KEY_ID)),
    'the requests were signed with the fake key (the echo carried it)',
  );
  const report = JSON.parse(run.stdout) as { sinks: { partitions: { error: string | null }[] }[] };
  assert.match(report.sinks[0]?.partitions[0]?.error ?? '', /^HYPSINK_ERR_RETRYABLE: .*HTTP 500 InternalError/);
  assert.match(run.stderr, /retrying after a passing fault/, 'the retries were logged');
  assertClean(run.stdout + run.stderr, 'hypsink export --json');

  const p = await statusJson(t, path);
  assert.match(p.lastError ?? '', /^HYPSINK_ERR_RETRYABLE: /);
});
