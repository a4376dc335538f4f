/**
 * Holes 3 and 4 of issue 12: rows retention takes from a sink that has not
 * exported them are that sink's gap, counted, never silent; and a sink absent
 * from the config for one maintenance run still holds its unexported rows,
 * because its watermarks are on disk, until the operator forgets it.
 * @ref LLP 0019: gaps are counted against every watermark on disk
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import { assertExactlyOnce, cli, cliStatus, ingest, openKernel, partitionStatus, range, readExports, sampleConfig, writeConfig } from '../support/kernel.js';
import { tempDir } from '../support/tmp.js';

const balance = (p: { exportedRows: number; gapRows: number; pendingRows: number; committedRows: number }) =>
  `exported ${p.exportedRows} + gap ${p.gapRows} + pending ${p.pendingRows} vs committed ${p.committedRows}`;

for (const [what, retention, pruned] of [
  ['the hard cap', { hardMaxRows: 10, ackCoupled: false }, 20],
  ['the row cap', { maxRows: 10, ackCoupled: false }, 20],
] as const) {
  test(`ackCoupled: false: rows ${what} prunes before the sink had them are its gap`, async () => {
    const dir = tempDir();
    const c = sampleConfig();
    c.maintenance = { retention };
    const config = await writeConfig(dir, c);
    const { k } = await openKernel(config);
    try {
      await ingest(k, 'web', 1, 30);
    } finally {
      await k.close();
    }
    const m = await cli('maintain', '--retention', '--config', config);
    assert.equal(m.code, 0, m.err);
    assert.match(m.out, new RegExp(`pruned ${pruned} row\\(s\\) \\(${pruned} before every sink had them: gap\\)`));
    let p = partitionStatus(await cliStatus(config), 'archive', 'web');
    assert.equal(p.gapRows, pruned, balance(p));
    assert.equal(p.exportedRows + p.gapRows + p.pendingRows, p.committedRows, balance(p));
    assert.equal((await cli('export', '--config', config)).code, 0);
    p = partitionStatus(await cliStatus(config), 'archive', 'web');
    assert.deepEqual([p.exportedRows, p.gapRows, p.pendingRows, p.committedRows], [30 - pruned, pruned, 0, 30]);
    assertExactlyOnce(await readExports(join(dir, 'exports')), { web: range(pruned + 1, 30 - pruned) });
  });
}

test('a sink left out of the config for one maintenance run keeps its rows; forgetting it lets them go', async () => {
  const dir = tempDir();
  const both = sampleConfig();
  both.maintenance = { retention: { maxRows: 5 } };
  both.sinks.spare = { ...both.sinks.archive, config: { dir: 'spare' } };
  const withBoth = await writeConfig(dir, both, 'both.json');
  const only = sampleConfig();
  only.maintenance = both.maintenance;
  const withoutSpare = await writeConfig(dir, only, 'only.json');

  const { k } = await openKernel(withBoth);
  try {
    await ingest(k, 'web', 1, 10);
  } finally {
    await k.close();
  }
  assert.equal((await cli('export', '--config', withBoth)).code, 0);
  // More rows; `spare` is commented out of the config while maintenance runs.
  const k2 = (await openKernel(withoutSpare)).k;
  try {
    await ingest(k2, 'web', 11, 10);
  } finally {
    await k2.close();
  }
  assert.equal((await cli('export', '--config', withoutSpare)).code, 0);
  const m = await cli('maintain', '--retention', '--config', withoutSpare);
  assert.equal(m.code, 0, m.err);
  assert.match(m.out, /pruned 10 row\(s\)/, 'only the rows both sinks have');
  const absent = (await cliStatus(withoutSpare)).absent.find((a) => a.name === 'spare');
  assert.ok(absent, 'status names the absent sink that holds rows');
  assert.equal(absent.partitions[0]!.pendingRows, 10);
  const table = await cli('status', '--config', withoutSpare);
  assert.match(table.out, /spare/);
  assert.match(table.out, /hypsink forget spare/, 'the table says how to let the rows go');

  // Back in the config: it gets every row it had not exported, with no gap.
  assert.equal((await cli('export', '--config', withBoth)).code, 0);
  assertExactlyOnce(await readExports(join(dir, 'spare')), { web: range(1, 20) });
  const p = partitionStatus(await cliStatus(withBoth), 'spare', 'web');
  assert.deepEqual([p.exportedRows, p.gapRows, p.pendingRows], [20, 0, 0], balance(p));

  // Left out again, with new rows, then forgotten: the dry run says what it drops, --yes drops it.
  const k3 = (await openKernel(withoutSpare)).k;
  try {
    await ingest(k3, 'web', 21, 10);
  } finally {
    await k3.close();
  }
  assert.equal((await cli('export', '--config', withoutSpare)).code, 0);
  const dry = await cli('forget', 'spare', '--config', withoutSpare);
  assert.equal(dry.code, 0, dry.err);
  assert.match(dry.out, /events\/source=web/);
  assert.match(dry.out, /10 row\(s\) it has not exported/);
  assert.match(dry.out, /--yes/);
  // 20 rows present, 15 past maxRows: only the 10 both sinks have go; spare's 10 stay.
  assert.match((await cli('maintain', '--retention', '--config', withoutSpare)).out, /pruned 10 row\(s\)/, 'the dry run dropped nothing');
  assert.match((await cli('maintain', '--retention', '--config', withoutSpare)).out, /pruned 0 row\(s\)/);
  const yes = await cli('forget', 'spare', '--yes', '--config', withoutSpare);
  assert.equal(yes.code, 0, yes.err);
  assert.match((await cli('maintain', '--retention', '--config', withoutSpare)).out, /pruned 5 row\(s\)/);
  assert.deepEqual((await cliStatus(withoutSpare)).absent, []);
});
