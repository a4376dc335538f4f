/**
 * "Also seen" in issue 12: a sink whose destination changed (`dir`, `bucket`,
 * `prefix`, `url`) used to carry on from its old watermark, so the new
 * destination silently got only the new rows. A sink's watermarks know which
 * destination they belong to: on a change the export is refused, saying how to
 * start the new destination from scratch or to accept the move.
 * @ref LLP 0022: a watermark knows its destination
 */
import assert from 'node:assert/strict';
import { rename } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { assertExactlyOnce, cli, cliStatus, ingest, openKernel, partitionStatus, range, readExports, sampleConfig, walkFiles, writeConfig } from '../support/kernel.js';
import { tempDir } from '../support/tmp.js';
import { throwingAt } from '../support/fault.js';
import { loadConfig } from '../../kernel/config/load.js';
import { SinkState } from '../../kernel/sinks/states.js';

async function movedDir(): Promise<{ dir: string; config: string }> {
  const dir = tempDir();
  const c = sampleConfig();
  let config = await writeConfig(dir, c);
  const { k } = await openKernel(config);
  try {
    await ingest(k, 'web', 1, 10);
    await ingest(k, 'app', 1, 2);
    assert.equal((await k.export())[0]!.rows, 12);
    await ingest(k, 'web', 11, 5);
  } finally {
    await k.close();
  }
  c.sinks.archive!.config = { dir: 'exports-new' };
  config = await writeConfig(dir, c);
  const r = await cli('export', '--config', config);
  assert.equal(r.code, 2, `a moved destination is refused: ${r.out}${r.err}`);
  assert.match(r.err, /HYPSINK_ERR_CONFIG/);
  assert.ok(r.err.includes(join(dir, 'exports')) && r.err.includes(join(dir, 'exports-new')), `names both: ${r.err}`);
  assert.match(r.err, /hypsink forget archive --yes/);
  assert.match(r.err, /hypsink accept-destination archive/);
  assert.deepEqual(await walkFiles(join(dir, 'exports-new')), [], 'nothing written to the new destination');
  const p = partitionStatus(await cliStatus(config), 'archive', 'web');
  assert.match(p.lastError ?? '', /HYPSINK_ERR_CONFIG/);
  return { dir, config };
}

test('a blob sink whose dir changed is refused; the data moved and the move accepted, it goes on exactly once', async () => {
  const { dir, config } = await movedDir();
  await rename(join(dir, 'exports'), join(dir, 'exports-new'));
  const a = await cli('accept-destination', 'archive', '--config', config);
  assert.equal(a.code, 0, a.err);
  assert.match(a.out, /now belong to/);
  assert.equal((await cli('export', '--config', config)).code, 0);
  assertExactlyOnce(await readExports(join(dir, 'exports-new')), { web: range(1, 15), app: range(1, 2) });
  // A partition with nothing new since the refusal no longer shows it as its last error.
  assert.equal(partitionStatus(await cliStatus(config), 'archive', 'app').lastError, null);
});

test('a blob sink whose dir changed, forgotten: the new destination starts from the oldest row in the cache', async () => {
  const { dir, config } = await movedDir();
  const f = await cli('forget', 'archive', '--yes', '--config', config);
  assert.equal(f.code, 0, f.err);
  assert.match(f.out, /still configured/);
  assert.equal((await cli('export', '--config', config)).code, 0);
  assertExactlyOnce(await readExports(join(dir, 'exports-new')), { web: range(1, 15), app: range(1, 2) });
  assertExactlyOnce(await readExports(join(dir, 'exports')), { web: range(1, 10), app: range(1, 2) });
  const p = partitionStatus(await cliStatus(config), 'archive', 'web');
  assert.deepEqual([p.exportedRows, p.pendingRows, p.gapRows, p.committedRows, p.lastError], [15, 0, 0, 15, null]);
});

test('a forward url that never answered is corrected in the config: its unit was withdrawn, so the new url is taken (issue 28)', async () => {
  const dir = tempDir();
  const c = sampleConfig();
  const central = (port: number) => ({ plugin: '@hypsink/forward', datasets: ['events'], config: { url: `http://127.0.0.1:${port}/`, retry: { attempts: 1, baseMs: 1, maxMs: 1 } } });
  c.sinks = { central: central(9) };
  let config = await writeConfig(dir, c);
  const { k } = await openKernel(config);
  try {
    await ingest(k, 'web', 1, 3);
  } finally {
    await k.close();
  }
  const first = await cli('export', '--config', config);
  assert.match(first.err, /HYPSINK_ERR_RETRYABLE/, 'nothing listens there: the first tick fails');
  const stateDir = (await loadConfig(config)).stateDir;
  const wm = await SinkState.of(stateDir, 'central').watermarks.list();
  assert.equal(wm.length, 1);
  assert.deepEqual([wm[0]!.record.intent, wm[0]!.record.next ?? null], [null, null], 'the unit nothing of which was sent is withdrawn');
  c.sinks.central = central(10);
  config = await writeConfig(dir, c);
  const moved = await cli('export', '--config', config);
  assert.doesNotMatch(moved.err, /HYPSINK_ERR_CONFIG/, 'the corrected url is not refused');
  assert.match(moved.err, /could not deliver batch .* to http:\/\/127\.0\.0\.1:10\/v1\/ingest\/events/, "the new url is tried");
  assert.equal((await SinkState.of(stateDir, 'central').read())?.destination, 'forward http://127.0.0.1:10');
});

test('a destination a unit was planned for stays locked though no watermark moved: that unit may be there (simulation seed 169)', async () => {
  const dir = tempDir();
  const c = sampleConfig();
  let config = await writeConfig(dir, c);
  const { k } = await openKernel(config);
  try {
    await ingest(k, 'web', 1, 4);
    // The unit reaches the folder; the watermark never moves over it.
    await throwingAt('export.afterShip', () => k.export()).catch(() => undefined);
  } finally {
    await k.close();
  }
  assert.notDeepEqual(await walkFiles(join(dir, 'exports')), [], 'the unit is at the old destination');
  c.sinks.archive!.config = { dir: 'exports-new' };
  config = await writeConfig(dir, c);
  const r = await cli('export', '--config', config);
  assert.equal(r.code, 2, r.err);
  assert.match(r.err, /its watermarks belong to .*exports, but the config now points it at .*exports-new/);
  assert.match(r.err, /→ Once the rows exported so far are at .*run "hypsink accept-destination archive"/);
  assert.doesNotMatch(r.err, /Fix the named field/);
  assert.deepEqual(await walkFiles(join(dir, 'exports-new')), [], 'nothing written to the new destination');
});

test('a sink forgotten while it still points at its destination is refused there: no row delivered twice', async () => {
  const dir = tempDir();
  const config = await writeConfig(dir, sampleConfig());
  const { k } = await openKernel(config);
  try {
    await ingest(k, 'web', 1, 6);
    assert.equal((await k.export())[0]!.rows, 6);
  } finally {
    await k.close();
  }
  assert.equal((await cli('forget', 'archive', '--yes', '--config', config)).code, 0);
  const r = await cli('export', '--config', config);
  assert.equal(r.code, 2, r.out);
  assert.match(r.err, /was forgotten .* still holds what it delivered then/);
  assertExactlyOnce(await readExports(join(dir, 'exports')), { web: range(1, 6) });
  // The operator empties the folder and says so: everything is exported there again, once.
  await rename(join(dir, 'exports'), join(dir, 'exports-old'));
  assert.equal((await cli('accept-destination', 'archive', '--config', config)).code, 0);
  assert.equal((await cli('export', '--config', config)).code, 0);
  assertExactlyOnce(await readExports(join(dir, 'exports')), { web: range(1, 6) });
});
