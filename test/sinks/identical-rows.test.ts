/**
 * Hole 5 of issue 12: two identical rows ingested separately are two rows.
 * Compaction must never change what a sink will receive: a sink that exported
 * before the compaction and a sink that exports after it hold the same rows,
 * and each one's exported + gap + pending equals committed.
 * @ref LLP 0020: compaction keeps every committed row
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import { cli, cliStatus, eventLines, ingestText, openKernel, partitionStatus, readExports, sampleConfig, writeConfig } from '../support/kernel.js';
import { tempDir } from '../support/tmp.js';

test('identical rows from two ingests: both sinks get both, before and after compaction; counts agree', async () => {
  const dir = tempDir();
  const c = sampleConfig();
  c.sinks.early = { ...c.sinks.archive, config: { dir: 'early' } };
  c.sinks.late = { ...c.sinks.archive, config: { dir: 'late' } };
  delete c.sinks.archive;
  c.maintenance = { compaction: { minFiles: 2 } };
  const config = await writeConfig(dir, c);
  const { k } = await openKernel(config);
  try {
    // The host records the same event content twice (two real events that look alike).
    await ingestText(k, 'web', eventLines(1, 3));
    await ingestText(k, 'web', eventLines(2, 1));
  } finally {
    await k.close();
  }
  assert.equal((await cli('export', '--sink', 'early', '--config', config)).code, 0);
  const compacted = await cli('maintain', '--compact', '--config', config);
  assert.equal(compacted.code, 0, compacted.err);
  assert.match(compacted.out, /compacted 1 partition/);
  assert.equal((await cli('export', '--sink', 'late', '--config', config)).code, 0);

  const ids = async (sub: string) => (await readExports(join(dir, sub))).flatMap((f) => f.rows.map((r) => Number(r.id))).sort();
  assert.deepEqual(await ids('early'), [1, 2, 2, 3], 'exported before the compaction: both copies');
  assert.deepEqual(await ids('late'), [1, 2, 2, 3], 'exported after the compaction: the same rows');
  const s = await cliStatus(config);
  for (const sink of ['early', 'late']) {
    const p = partitionStatus(s, sink, 'web');
    assert.deepEqual(
      { exported: p.exportedRows, gap: p.gapRows, pending: p.pendingRows, committed: p.committedRows },
      { exported: 4, gap: 0, pending: 0, committed: 4 },
      `${sink}: exported + gap + pending = committed`,
    );
  }
});

test('maintain --compact without a compaction config compacts partitions of 2 files or more (the documented default)', async () => {
  const dir = tempDir();
  const config = await writeConfig(dir, sampleConfig());
  const { k } = await openKernel(config);
  try {
    await ingestText(k, 'web', eventLines(1, 3));
    await ingestText(k, 'web', eventLines(4, 3));
  } finally {
    await k.close();
  }
  const r = await cli('maintain', '--compact', '--config', config);
  assert.equal(r.code, 0, r.err);
  assert.match(r.out, /compacted 1 partition/);
});
