/**
 * `hypsink receiver --max-body-bytes` (issue 12: the fixture had the limit, the
 * CLI did not): a body over it is refused with 413, a batch already stored is
 * answered as a duplicate (the same body) or 409 (another body), and a bad value
 * is a usage error naming the flag (issue 18: `--rate abc` was NaN, no limit).
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

test('receiver --max-body-bytes: 413 past the limit, a stored batch a duplicate, another body under its id a 409', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'hypsink-recv-cli-'));
  const child = spawn(process.execPath, [BIN, 'receiver', '--port', '0', '--data', dir, '--max-body-bytes', '200', '--insecure-no-auth'], {
    env: { ...process.env, HYPSINK_LOG_LEVEL: 'warn', HYPSINK_TOKEN: '' },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  try {
    const url = await new Promise<string>((res, rej) => {
      createInterface({ input: child.stdout! }).on('line', (l) => {
        const m = /listening on (http:\/\/\S+)/.exec(l);
        if (m) assert.match(l, /AUTH IS OFF/, 'the start line says auth is off');
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
    const again = await ingest(url, { ...base, id: 'b-small', body: small });
    assert.equal(again.status, 200, 'a stored batch is a duplicate');
    assert.match(again.text, /"duplicate":true/);
    const other = await ingest(url, { ...base, id: 'b-small', body: big });
    assert.equal(other.status, 409, 'another body under a stored id is never a silent duplicate');
  } finally {
    child.kill('SIGTERM');
    await new Promise((r) => child.once('exit', r));
    await rm(dir, { recursive: true, force: true });
  }
});

test('receiver: a bad flag value is exit 2 naming the flag', async () => {
  const cases: [string[], RegExp][] = [
    [['--max-body-bytes', 'lots'], /--max-body-bytes must be a whole number >= 1, not "lots"/],
    [['--max-inflight', 'abc'], /--max-inflight must be a whole number >= 1, not "abc"/],
    [['--rate', 'abc'], /--rate must be a number of requests per second > 0, not "abc"/],
    [['--body-timeout-ms', '-5'], /--body-timeout-ms must be a whole number >= 1, not "-5"/],
    [['--max-depth', '2.5'], /--max-depth must be a whole number >= 1, not "2.5"/],
  ];
  for (const [flags, re] of cases) {
    const r = await runBin(['receiver', '--port', '0', '--data', tmpdir(), '--insecure-no-auth', ...flags]);
    assert.equal(r.code, 2, r.stderr);
    assert.match(r.stderr, re);
  }
  const port = await runBin(['receiver', '--port', 'x', '--data', tmpdir(), '--insecure-no-auth']);
  assert.equal(port.code, 2, port.stderr);
  assert.match(port.stderr, /--port must be a whole number from 0 to 65535/);
});

test('receiver: no token, no tokens file and no --insecure-no-auth refuses to start (exit 2)', async () => {
  const r = await runBin(['receiver', '--port', '0', '--data', tmpdir()], { env: { HYPSINK_TOKEN: '' } });
  assert.equal(r.code, 2, r.stderr);
  assert.match(r.stderr, /HYPSINK_ERR_CONFIG: receiver: no auth configured: pass a token .*--tokens-file.*--insecure-no-auth/);
});
