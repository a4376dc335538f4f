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

test("a forward sink whose url changed is refused before anything is sent", async () => {
  const dir = tempDir();
  const c = sampleConfig();
  c.sinks = { central: { plugin: '@hypsink/forward', datasets: ['events'], config: { url: 'http://127.0.0.1:9/', retry: { attempts: 1, baseMs: 1, maxMs: 1 } } } };
  let config = await writeConfig(dir, c);
  const { k } = await openKernel(config);
  try {
    await ingest(k, 'web', 1, 3);
  } finally {
    await k.close();
  }
  const first = await cli('export', '--config', config);
  assert.match(first.err, /HYPSINK_ERR_RETRYABLE/, 'nothing listens there: the first tick fails, but records where the sink sends');
  c.sinks.central!.config = { url: 'http://127.0.0.1:10/', retry: { attempts: 1, baseMs: 1, maxMs: 1 } };
  config = await writeConfig(dir, c);
  const moved = await cli('export', '--config', config);
  assert.equal(moved.code, 2, moved.err);
  assert.match(moved.err, /belong to forward http:\/\/127\.0\.0\.1:9, .*now points it at forward http:\/\/127\.0\.0\.1:10/);
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
