/**
 * Issue 28, a newcomer's friction: the hint "Fix the named field in the config
 * file" followed messages it does not fit — a --config file that does not
 * exist, `init` over an existing file. Each error gets the hint that fits; a
 * field of the config still gets the field's hint.
 * @ref LLP 0070
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import { cli, sampleConfig, writeConfig } from '../support/kernel.js';
import { tempDir } from '../support/tmp.js';

const FIELD_HINT = /Fix the named field in the config file/;

/** The `→` line under the coded error line. */
function hintOf(err: string): string {
  const line = err.split('\n').find((l) => l.startsWith('  → '));
  assert.ok(line, `a hint line: ${err}`);
  return line;
}

test('a --config file that does not exist: the hint is about the path, not a field', async () => {
  const dir = tempDir();
  const r = await cli('status', '--config', join(dir, 'missing.json'));
  assert.equal(r.code, 2, r.err);
  assert.match(r.err, /missing\.json does not exist/);
  assert.doesNotMatch(hintOf(r.err), FIELD_HINT);
  assert.match(hintOf(r.err), /path of a config file that exists, or write one with "hypsink init --config .*missing\.json"/);
});

test('init over an existing file: the hint is --force', async () => {
  const dir = tempDir();
  const path = join(dir, 'hypsink.config.json');
  assert.equal((await cli('init', '--config', path)).code, 0);
  const r = await cli('init', '--config', path);
  assert.equal(r.code, 2, r.err);
  assert.match(r.err, /already exists/);
  assert.doesNotMatch(hintOf(r.err), FIELD_HINT);
  assert.match(hintOf(r.err), /--force/);
});

test('not JSON, and an unset environment variable: hints about the JSON and the environment', async () => {
  const dir = tempDir();
  const broken = await writeConfig(dir, '{ "datasets": { }, }', 'broken.json');
  const json = await cli('status', '--config', broken);
  assert.equal(json.code, 2, json.err);
  assert.match(json.err, /not valid JSON at line 1/);
  assert.match(hintOf(json.err), /Fix the JSON at the line and column named/);
  const c = sampleConfig();
  // biome-ignore lint/suspicious/noTemplateCurlyInString: the config's ${VAR} syntax
  c.cache = { root: '${HYPSINK_TEST_UNSET_ROOT}' };
  const env = await cli('status', '--config', await writeConfig(dir, c, 'env.json'));
  assert.equal(env.code, 2, env.err);
  assert.match(env.err, /environment variable HYPSINK_TEST_UNSET_ROOT is not set/);
  assert.match(hintOf(env.err), /Set HYPSINK_TEST_UNSET_ROOT/);
});

test('a field of the config keeps the field hint', async () => {
  const dir = tempDir();
  const c = sampleConfig();
  c.sinks.archive!.datasets = ['nope'];
  const r = await cli('status', '--config', await writeConfig(dir, c));
  assert.equal(r.code, 2, r.err);
  assert.match(r.err, /unknown dataset "nope"/);
  assert.match(hintOf(r.err), FIELD_HINT);
});
