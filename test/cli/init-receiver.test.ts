/**
 * `hypsink init --receiver` (issue 27): the aggregator config it writes
 * validates, `hypsink receiver --config` starts with it (an Iceberg table on a
 * local path: no network) and stores an agent's batch in its cache under the
 * client's name; a second init refuses to overwrite the file.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { promises as fsp, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { test } from 'node:test';
import { loadConfig } from '../../kernel/config/load.js';
import { ingest as post } from '../receiver/helpers.js';
import { BIN, eventLines, openKernel, runBin } from '../support/kernel.js';
import { tempDir } from '../support/tmp.js';

const TOKEN = 'tok-laptop-1-Qz7Wm2Lx9Rv4Kp';

test('init --receiver writes an aggregator config that validates and that hypsink receiver --config runs; it refuses to overwrite it', async () => {
  const dir = tempDir();
  const r = await runBin(['init', '--receiver'], { cwd: dir });
  assert.equal(r.code, 0, r.stderr);
  assert.deepEqual(readdirSync(dir), ['aggregator.config.json']);
  const path = join(dir, 'aggregator.config.json');
  assert.match(r.stdout, /hypsink receiver --config .*aggregator\.config\.json --tokens-file receiver\.tokens/);
  const text = await fsp.readFile(path, 'utf8');
  assert.match(text, /--tokens-file receiver\.tokens/, 'the config says where the tokens file comes in');

  const valid = await runBin(['validate', '--config', path], { cwd: dir });
  assert.equal(valid.code, 0, valid.stderr + valid.stdout);
  const loaded = await loadConfig(path);
  const lake = loaded.config.sinks.lake!;
  assert.equal((lake as { writer?: string }).writer, '@hypsink/format-iceberg');
  assert.ok(
    loaded.config.datasets.events!.columns.some((c) => c.name === 'hyp_client' && c.type === 'STRING'),
    'the dataset declares the client column the receiver fills',
  );

  await fsp.writeFile(join(dir, 'receiver.tokens'), `laptop-1 ${TOKEN}\n`, { mode: 0o600 });
  const child = spawn(process.execPath, [BIN, 'receiver', '--config', path, '--tokens-file', 'receiver.tokens', '--port', '0'], {
    cwd: dir,
    env: { ...process.env, HYPSINK_LOG_LEVEL: 'warn', HYPSINK_TOKEN: '', HYPSINK_FAULT: '' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr!.on('data', (c: Buffer) => {
    stderr += c.toString();
  });
  const exited = once(child, 'exit');
  try {
    const url = await new Promise<string>((ok, bad) => {
      createInterface({ input: child.stdout! }).on('line', (l) => {
        const m = /listening on (http:\/\/\S+)/.exec(l);
        if (m) ok(m[1]!);
      });
      void exited.then(([code]) => bad(new Error(`hypsink receiver exited (${code}) before listening:\n${stderr}`)));
    });
    const stored = await post(url, { dataset: 'events', source: 'web', id: 'b1', token: TOKEN, body: eventLines(1, 3) });
    assert.equal(stored.status, 200, stored.text);
    assert.equal(stored.json?.stored, 3);
  } finally {
    child.kill('SIGTERM');
  }
  const [code] = await exited;
  assert.equal(code, 0, stderr);
  // The batch is in the aggregator's cache, waiting for the lake sink (minRows gathers agents' batches).
  const { k } = await openKernel(path);
  try {
    const p = (await k.status()).sinks.find((s) => s.name === 'lake')!.partitions;
    assert.deepEqual(
      p.map((x) => [x.source, x.pendingRows]),
      [['web', 3]],
    );
  } finally {
    await k.close();
  }

  const again = await runBin(['init', '--receiver'], { cwd: dir });
  assert.equal(again.code, 2);
  assert.match(again.stderr, /aggregator\.config\.json already exists; pass --force to overwrite it/);
  assert.match(again.stderr, /hypsink init --receiver --force/);
  assert.equal(await fsp.readFile(path, 'utf8'), text, 'the file is untouched');
});
