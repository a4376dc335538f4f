/**
 * `hypsink receiver --max-body-bytes` (issue 12: the fixture had the limit, the
 * CLI did not): a body over it is refused with 413, a batch already stored is
 * answered as a duplicate at any size, and a bad value is a usage error.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { test } from 'node:test';
import { ingest } from '../receiver/helpers.js';
import { BIN, runBin } from '../support/kernel.js';

test('receiver --max-body-bytes: 413 past the limit, a stored batch a duplicate at any size', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'hypsink-recv-cli-'));
  const child = spawn(process.execPath, [BIN, 'receiver', '--port', '0', '--data', dir, '--max-body-bytes', '200'], {
    env: { ...process.env, HYPSINK_LOG_LEVEL: 'warn', HYPSINK_TOKEN: '' },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  try {
    const url = await new Promise<string>((res, rej) => {
      createInterface({ input: child.stdout! }).on('line', (l) => {
        const m = /listening on (http:\/\/\S+)/.exec(l);
        if (m) res(m[1]!);
      });
      child.once('exit', () => rej(new Error('the receiver exited before listening')));
    });
    const line = (id: number) => `${JSON.stringify({ id, msg: 'x'.repeat(40) })}\n`;
    const small = line(1) + line(2);
    const big = small + line(3) + line(4) + line(5);
    assert.ok(Buffer.byteLength(small) <= 200 && Buffer.byteLength(big) > 200);
    const base = { dataset: 'events', source: 'web' };
    assert.equal((await ingest(url, { ...base, id: 'b-small', body: small })).status, 200);
    const refused = await ingest(url, { ...base, id: 'b-big', body: big });
    assert.equal(refused.status, 413, refused.text);
    const again = await ingest(url, { ...base, id: 'b-small', body: big });
    assert.equal(again.status, 200, 'a stored batch is a duplicate, however large its body now');
    assert.match(again.text, /"duplicate":true/);
  } finally {
    child.kill('SIGTERM');
    await new Promise((r) => child.once('exit', r));
    await rm(dir, { recursive: true, force: true });
  }
});

test('receiver --max-body-bytes with a bad value is exit 2', async () => {
  const r = await runBin(['receiver', '--port', '0', '--data', tmpdir(), '--max-body-bytes', 'lots']);
  assert.equal(r.code, 2, r.stderr);
  assert.match(r.stderr, /--max-body-bytes must be a positive whole number of bytes/);
});
