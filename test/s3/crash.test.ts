/**
 * A crash inside a multipart upload (SIGKILL at the s3.afterParts fault point):
 * no object and one pending upload are left; the retry commits the same key and
 * reaps the pending upload. @ref LLP 0007
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { after, before, test } from 'node:test';
import { S3_FAULT_POINTS } from '../../plugins/s3/src/index.js';
import { type TestS3Server, startS3Server, useS3rverCredentials } from '../support/s3server.js';
import { KEY, OPTS, bodyOf, bytes, baseConfig, makeDestination, readObject } from './helpers.js';

useS3rverCredentials();
let s3: TestS3Server;
before(async () => {
  s3 = await startS3Server({ buckets: ['lake'] });
});
after(async () => {
  await s3.stop();
});

function runChild(fault: string): Promise<{ code: number | null; signal: NodeJS.Signals | null; out: string }> {
  const child = spawn(process.execPath, ['--import', 'tsx', fileURLToPath(new URL('./crash-child.ts', import.meta.url))], {
    env: { ...process.env, S3_ENDPOINT: s3.endpoint, HYPSINK_FAULT: fault },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let out = '';
  child.stdout.on('data', (c: Buffer) => {
    out += c.toString();
  });
  return new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal, out })));
}

test('s3.afterParts is a declared fault point', () => {
  assert.ok('s3.afterParts' in S3_FAULT_POINTS);
});

test('crash after the parts, before the completion: nothing visible; the retry commits once and reaps the upload', async () => {
  const crashed = await runChild('s3.afterParts');
  assert.equal(crashed.signal, 'SIGKILL', 'the child died at the fault point');
  assert.equal(await s3.objectExists('lake', `crash/${KEY}`), false, 'no partial object under the key');
  const pending = await s3.pendingUploads('lake');
  assert.equal(pending.length, 1, 'the crash left one pending upload');
  assert.equal(pending[0]?.key, `crash/${KEY}`);

  // The kernel's recovery re-ships the same key (LLP 0005).
  const { dest } = makeDestination(baseConfig(s3.endpoint, { prefix: 'crash', partSize: 64 * 1024 }));
  const body = bytes(200 * 1024, 42);
  const r = await dest.putIfAbsent(KEY, bodyOf(body), { ...OPTS, signal: new AbortController().signal });
  assert.deepEqual(r, { created: true, bytes: body.length });
  assert.equal(Buffer.compare((await readObject(s3.endpoint, 'lake', `crash/${KEY}`))!, body), 0);
  assert.deepEqual(await s3.pendingUploads('lake'), [], 'the stale upload was aborted');
  await dest.close();

  // And a further crash-free run of the child finds the key committed.
  const again = await runChild('none');
  assert.equal(again.code, 0);
  assert.deepEqual(JSON.parse(again.out), { created: false, bytes: 0, digest: null });
});
