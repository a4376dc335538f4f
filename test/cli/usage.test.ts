/**
 * A mistake on the command line says so (HYPSINK_ERR_USAGE), shows the usage
 * and exits 2, and never points at the config file. Any failure, an error
 * hypsink has no code for included, is one coded line and a hint: a stack
 * trace only with HYPSINK_LOG_LEVEL=debug.
 */
import assert from 'node:assert/strict';
import { promises as fsp } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { test } from 'node:test';
import { runCli } from '../support/cli-child.js';
import { eventLines, runBin, sampleConfig, writeConfig } from '../support/kernel.js';
import { tempDir } from '../support/tmp.js';

const STACK = /^\s+at /m;

function assertUsage(r: { code: number | null; stderr: string }, what: RegExp, usage: RegExp): void {
  assert.equal(r.code, 2, r.stderr);
  const line = r.stderr.split('\n').find((l) => l.startsWith('hypsink: ')) ?? '';
  assert.match(line, /^hypsink: HYPSINK_ERR_USAGE: a command-line mistake: /, r.stderr);
  assert.match(line, what, r.stderr);
  assert.match(r.stderr, usage, 'the usage is shown');
  assert.match(r.stderr, /→ .*--help/, 'the hint says where the usage is');
  assert.doesNotMatch(r.stderr, /Fix the named field|in the config file/, 'a flag is not the config file');
  assert.doesNotMatch(r.stderr, STACK);
}

test('an unknown option, a missing argument, an unknown command, a bad number: a command-line mistake, the usage, exit 2', async () => {
  const dir = tempDir();
  assertUsage(await runBin(['export', '--bogus'], { cwd: dir }), /unknown option '--bogus'/, /Usage: hypsink export \[options\]/);
  assertUsage(await runBin(['forget'], { cwd: dir }), /missing required argument 'sink'/, /Usage: hypsink forget \[options\] <sink>/);
  assertUsage(await runBin(['ingest', 'events'], { cwd: dir }), /required option '--source <source>' not specified/, /Usage: hypsink ingest/);
  assertUsage(await runBin(['frob'], { cwd: dir }), /unknown command 'frob'/, /Usage: hypsink \[options\] \[command\]/);
  assertUsage(await runBin(['run', '--metrics-port', 'abc'], { cwd: dir }), /--metrics-port.*'abc'.*port number/, /Usage: hypsink run/);
  assertUsage(await runBin(['run', '--metrics-port', '70000'], { cwd: dir }), /--metrics-port.*'70000'/, /Usage: hypsink run/);
  const help = await runBin(['export', '--help'], { cwd: dir });
  assert.equal(help.code, 0);
  assert.match(help.stdout, /Usage: hypsink export/);
});

test('an error hypsink has no code for: HYPSINK_ERR_UNEXPECTED on one line, its stack only with HYPSINK_LOG_LEVEL=debug', async () => {
  const dir = tempDir();
  await fsp.writeFile(join(dir, 'plain'), 'a file, not a folder');
  const c = sampleConfig();
  c.cache = { root: 'plain/cache' };
  await writeConfig(dir, c);
  const r = await runBin(['status'], { cwd: dir });
  assert.equal(r.code, 1, r.stderr);
  const lines = r.stderr.trimEnd().split('\n');
  assert.equal(lines.length, 2, `one line and its hint: ${r.stderr}`);
  assert.match(lines[0]!, /^hypsink: HYPSINK_ERR_UNEXPECTED: ENOTDIR: not a directory, .*plain\/cache/);
  assert.match(lines[1]!, /→ .*HYPSINK_LOG_LEVEL=debug/);
  assert.doesNotMatch(r.stderr, STACK);

  const debug = await runBin(['status'], { cwd: dir, env: { HYPSINK_LOG_LEVEL: 'debug' } });
  assert.equal(debug.code, 1);
  assert.match(debug.stderr, /^hypsink: HYPSINK_ERR_UNEXPECTED: /m);
  assert.match(debug.stderr, STACK, 'debug shows the stack');
});

test('a hypsink error shows its stack only with HYPSINK_LOG_LEVEL=debug', async () => {
  const dir = tempDir();
  const r = await runBin(['export', '--sink', 'nope', '--config', await writeConfig(dir, sampleConfig())], { cwd: dir });
  assert.equal(r.code, 2);
  assert.doesNotMatch(r.stderr, STACK);
  const debug = await runBin(['export', '--sink', 'nope', '--config', join(dir, 'hypsink.config.json')], { cwd: dir, env: { HYPSINK_LOG_LEVEL: 'debug' } });
  assert.equal(debug.code, 2);
  assert.match(debug.stderr, STACK);
});

test('run with a metrics port already in use: HYPSINK_ERR_CONFIG naming the port and what to do, no stack, exit 2', async () => {
  const dir = tempDir();
  await writeConfig(dir, sampleConfig());
  await fsp.writeFile(join(dir, 'f.ndjson'), eventLines(1, 2));
  const taken = createServer();
  await new Promise<void>((ok) => taken.listen(0, '127.0.0.1', ok));
  const port = (taken.address() as { port: number }).port;
  try {
    const r = await runCli(['run', '--metrics-port', String(port)], { cwd: dir, asSelf: true });
    assert.equal(r.signal, null, `run ended by itself: ${r.stderr}`);
    assert.equal(r.code, 2, r.stderr);
    const lines = r.stderr.split('\n');
    const i = lines.findIndex((l) => l.startsWith('hypsink: '));
    assert.match(lines[i]!, new RegExp(`^hypsink: HYPSINK_ERR_CONFIG: metrics port ${port}: 127\\.0\\.0\\.1:${port} is already in use`));
    assert.match(lines[i + 1]!, /→ .*another --metrics-port/);
    assert.doesNotMatch(r.stderr, STACK);
    assert.doesNotMatch(r.stderr, /EADDRINUSE.*\n\s+at /);
  } finally {
    taken.close();
  }
});
