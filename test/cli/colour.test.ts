/**
 * Colour is for a person at a terminal: the tables `status` and `export` print
 * carry ANSI colour under a pseudo-terminal (util-linux `script`), none into a
 * pipe, and none at a terminal when NO_COLOR is set (no-color.org).
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { test } from 'node:test';
import { colourful } from '../../kernel/cli/render.js';
import { BIN, cli, eventLines, REPO, runBin, sampleConfig, writeConfig } from '../support/kernel.js';
import { tempDir } from '../support/tmp.js';
import { promises as fsp } from 'node:fs';
import { join } from 'node:path';

const ESC = '\u001b[';

async function configWithRows(): Promise<string> {
  const dir = tempDir();
  const config = await writeConfig(dir, sampleConfig());
  await fsp.writeFile(join(dir, 'rows.ndjson'), eventLines(1, 2));
  const r = await cli('ingest', 'events', '--source', 'web', '--file', join(dir, 'rows.ndjson'), '--config', config);
  assert.equal(r.code, 0, r.err);
  return config;
}

/**
 * `hypsink status` with its stdout on a pseudo-terminal. TERM is unset and CI
 * set, as on a CI runner: colour must follow hypsink's own rule, not a colour
 * library's guess from TERM or CI (that guess is what failed CI at stop 21).
 */
function statusOnTty(config: string, env: Record<string, string | undefined>): string {
  const quote = (s: string) => `'${s.replaceAll("'", "'\\''")}'`;
  const cmd = [process.execPath, BIN, 'status', '--config', config].map(quote).join(' ');
  const r = spawnSync('script', ['-qec', cmd, '/dev/null'], { cwd: REPO, env: { ...process.env, TERM: undefined, CI: 'true', ...env }, encoding: 'utf8', timeout: 60_000 });
  assert.equal(r.status, 0, `${r.stdout}${r.stderr}`);
  assert.match(r.stdout, /web/, 'the table was printed');
  return r.stdout;
}

test('colourful: a TTY without NO_COLOR (or with it empty) only', () => {
  assert.equal(colourful({ isTTY: true }, {}), true);
  assert.equal(colourful({ isTTY: true }, { NO_COLOR: '' }), true);
  assert.equal(colourful({ isTTY: true }, { NO_COLOR: '1' }), false);
  assert.equal(colourful({ isTTY: false }, {}), false);
  assert.equal(colourful({}, {}), false);
});

test('status into a pipe has no colour; at a terminal it has, unless NO_COLOR is set', async () => {
  const config = await configWithRows();
  const piped = await runBin(['status', '--config', config]);
  assert.equal(piped.code, 0, piped.stderr);
  assert.match(piped.stdout, /web/);
  assert.ok(!piped.stdout.includes(ESC), `no escape sequence into a pipe: ${JSON.stringify(piped.stdout.slice(0, 120))}`);
  assert.ok(statusOnTty(config, { NO_COLOR: undefined }).includes(ESC), 'colour at a terminal');
  assert.ok(!statusOnTty(config, { NO_COLOR: '1' }).includes(ESC), 'no colour with NO_COLOR');
});
