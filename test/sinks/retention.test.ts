/**
 * Retention and compaction against exporting sinks (LLP 0006): retention keeps
 * every row above the lowest watermark of the sinks exporting the dataset; only
 * the hard cap prunes unexported rows, and that gap is counted per sink and
 * partition, shown in status, logged and announced — and the next export
 * delivers exactly the rest. Compaction and a front-prune of exported rows
 * between exports keep every row exactly once.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import type { GapEvent } from '../../types/hooks.js';
import {
  archive,
  assertExactlyOnce,
  cli,
  eventLines,
  ingest,
  ingestText,
  openKernel,
  partitionStatus,
  range,
  readExports,
  sampleConfig,
  writeConfig,
  cliStatus,
} from '../support/kernel.js';
import { tempDir } from '../support/tmp.js';

const status = cliStatus;

async function maintain(config: string, ...flags: string[]): Promise<string> {
  const r = await cli('maintain', ...flags, '--config', config);
  assert.equal(r.code, 0, r.err);
  return r.out;
}

/** The sample config plus a second local-fs sink "mirror" on the same dataset. */
function twoSinks() {
  const cfg = sampleConfig();
  cfg.sinks.mirror = { ...archive(cfg), config: { dir: 'mirror' } };
  return cfg;
}

test('ack-coupled maxRows: rows the sink has not exported are kept; once exported they are pruned', async () => {
  const dir = tempDir();
  const cfg = sampleConfig();
  cfg.maintenance = { retention: { maxRows: 5 } };
  const config = await writeConfig(dir, cfg);
  const { k } = await openKernel(config);
  const web = k.cache.partition('events', 'web');
  try {
    await ingest(k, 'web', 1, 10);
    assert.match(await maintain(config, '--retention'), /retention pruned 0 row/);
    assert.equal((await k.cache.storage.stats(web)).rows, 10, 'nothing pruned before the export');
    assert.equal(partitionStatus(await status(config), 'archive', 'web').pendingRows, 10);

    await k.export();
    assert.match(await maintain(config, '--retention'), /retention pruned 5 row/);
    assert.equal((await k.cache.storage.stats(web)).rows, 5);
    const s = partitionStatus(await status(config), 'archive', 'web');
    assert.deepEqual([s.pendingRows, s.exportedRows, s.gapRows, s.watermark], [0, 10, 0, s.highWater]);

    await ingest(k, 'web', 11, 2);
    assert.equal((await k.export())[0]!.rows, 2);
    assertExactlyOnce(await readExports(join(dir, 'exports')), { web: range(1, 12) });
  } finally {
    await k.close();
  }
});

test('ack-coupled maxAge: old rows are kept until exported', async () => {
  const dir = tempDir();
  const cfg = sampleConfig();
  cfg.maintenance = { retention: { maxAge: '1d' } };
  const config = await writeConfig(dir, cfg);
  const { k } = await openKernel(config);
  const web = k.cache.partition('events', 'web');
  try {
    // Timestamps from 2020: all past maxAge.
    const old = eventLines(1, 6).replaceAll('"2026-', '"2020-');
    assert.equal((await ingestText(k, 'web', old)).accepted, 6);
    assert.match(await maintain(config, '--retention'), /pruned 0 row/);
    assert.equal((await k.cache.storage.stats(web)).rows, 6);
    await k.export();
    assert.match(await maintain(config, '--retention'), /pruned 6 row/);
    assert.equal((await k.cache.storage.stats(web)).rows, 0);
    assert.equal((await k.export())[0]!.rows, 0, 'nothing re-exported after the prune');
    assertExactlyOnce(await readExports(join(dir, 'exports')), { web: range(1, 6) });
  } finally {
    await k.close();
  }
});

test('the ack floor is the lowest watermark over the sinks of the dataset', async () => {
  const dir = tempDir();
  const cfg = twoSinks();
  cfg.maintenance = { retention: { maxRows: 2 } };
  const config = await writeConfig(dir, cfg);
  const { k } = await openKernel(config);
  const web = k.cache.partition('events', 'web');
  try {
    await ingest(k, 'web', 1, 4);
    await k.export('mirror'); // mirror has rows 1..4
    await ingest(k, 'web', 5, 6);
    await k.export('archive'); // archive has rows 1..10
    const r = await k.maintain({ retention: true });
    assert.equal(r.retention[0]!.prunedRows, 4, 'only what mirror (the lower watermark) has');
    assert.equal(r.retention[0]!.forcedRows, 0);
    assert.equal((await k.cache.storage.stats(web)).rows, 6);
    await k.export('mirror');
    assert.equal((await k.maintain({ retention: true })).retention[0]!.prunedRows, 4, 'now down to maxRows');
    assertExactlyOnce(await readExports(join(dir, 'exports')), { web: range(1, 10) });
    assertExactlyOnce(await readExports(join(dir, 'mirror')), { web: range(1, 10) });
  } finally {
    await k.close();
  }
});

test('hard cap: a forced prune of unexported rows is a gap — status, hook, warn log — and the next export delivers exactly the rest', async () => {
  const dir = tempDir();
  const cfg = twoSinks();
  cfg.maintenance = { retention: { hardMaxRows: 4 } };
  const config = await writeConfig(dir, cfg);
  const { k, logs } = await openKernel(config);
  const gaps: GapEvent[] = [];
  k.hooks.gapDetected.tapPromise('test', async (ev) => {
    gaps.push(ev);
  });
  try {
    await ingest(k, 'web', 1, 3);
    await k.export('mirror'); // mirror has rows 1..3, archive nothing
    await ingest(k, 'web', 4, 7); // 10 rows committed
    await ingest(k, 'app', 1, 2); // under the cap: untouched

    const r = await maintain(config, '--retention');
    assert.match(r, /pruned 6 row\(s\) \(6 before every sink had them: gap\)/);
    const before = await status(config);
    assert.equal(partitionStatus(before, 'archive', 'web').gapRows, 6, 'archive had none of rows 1..6');
    assert.equal(partitionStatus(before, 'mirror', 'web').gapRows, 3, 'mirror misses rows 4..6 only');
    assert.equal(partitionStatus(before, 'archive', 'app').gapRows, 0);
    assert.equal(partitionStatus(before, 'archive', 'web').pendingRows, 4);

    const ticks = await k.export();
    assert.deepEqual(
      ticks.map((t) => [t.sink, t.rows]),
      [
        ['archive', 6],
        ['mirror', 6],
      ],
    );
    const webGaps = (sink: string) => ticks.find((t) => t.sink === sink)!.partitions.find((p) => p.partition.source === 'web')!.gapRows;
    assert.equal(webGaps('archive'), 6);
    assert.equal(webGaps('mirror'), 3);
    assert.deepEqual(
      gaps.map((g) => [g.sink, g.partition.dataset, g.partition.source, g.rows]),
      [
        ['archive', 'events', 'web', 6],
        ['mirror', 'events', 'web', 3],
      ],
      'gapDetected fired once per sink × partition with the gap',
    );
    const warned = logs.filter((l) => l.level === 40 && l.gapRows !== undefined).map((l) => [l.sink, l.source, l.gapRows]);
    assert.deepEqual(warned, [
      ['archive', 'web', 6],
      ['mirror', 'web', 3],
    ]);

    assertExactlyOnce(await readExports(join(dir, 'exports')), { web: range(7, 4), app: [1, 2] });
    assertExactlyOnce(await readExports(join(dir, 'mirror')), { web: [1, 2, 3, 7, 8, 9, 10], app: [1, 2] });
    const after = await status(config);
    for (const [sink, gap] of [
      ['archive', 6],
      ['mirror', 3],
    ] as const) {
      const p = partitionStatus(after, sink, 'web');
      assert.equal(p.gapRows, gap, `${sink}: the gap stays reported`);
      assert.equal(p.exportedRows + p.gapRows, 10, `${sink}: delivered + gap = committed`);
      assert.deepEqual([p.pendingRows, p.intent, p.watermark], [0, null, p.highWater]);
    }

    // Counted once: a later tick neither re-counts nor re-announces it.
    await ingest(k, 'web', 11, 1);
    await k.export();
    assert.equal(gaps.length, 2);
    assert.equal(partitionStatus(await status(config), 'archive', 'web').gapRows, 6);
  } finally {
    await k.close();
  }
});

test('a forced prune above a partly exported watermark counts only the rows that sink never had', async () => {
  const dir = tempDir();
  const cfg = sampleConfig();
  cfg.maintenance = { retention: { hardMaxRows: 4 } };
  const config = await writeConfig(dir, cfg);
  const { k, logs } = await openKernel(config);
  try {
    await ingest(k, 'web', 1, 3);
    await k.export();
    await ingest(k, 'web', 4, 7);
    const r = await k.maintain({ retention: true });
    assert.deepEqual([r.retention[0]!.prunedRows, r.retention[0]!.forcedRows], [6, 3]);
    assert.ok(
      logs.some((l) => l.level === 40 && l.forcedRows === 3),
      'maintenance warns about the forced prune',
    );
    assert.equal(partitionStatus(await status(config), 'archive', 'web').gapRows, 3);
    const [t] = await k.export();
    assert.deepEqual([t!.rows, t!.partitions[0]!.gapRows], [4, 3]);
    assertExactlyOnce(await readExports(join(dir, 'exports')), { web: [1, 2, 3, 7, 8, 9, 10] });
    const p = partitionStatus(await status(config), 'archive', 'web');
    assert.equal(p.exportedRows + p.gapRows, 10);
  } finally {
    await k.close();
  }
});

test('exactly once across a compaction and a retention front-prune between exports', async () => {
  const dir = tempDir();
  const cfg = sampleConfig();
  cfg.maintenance = { retention: { maxRows: 8 }, compaction: { minFiles: 2 } };
  archive(cfg).unit = { maxRows: 3 };
  const config = await writeConfig(dir, cfg);
  const { k } = await openKernel(config);
  const web = k.cache.partition('events', 'web');
  try {
    await ingest(k, 'web', 1, 4);
    await ingest(k, 'web', 5, 4);
    await ingest(k, 'web', 9, 2);
    assert.equal((await k.export())[0]!.rows, 10);

    // New rows in several files, plus identical re-sends of a row already exported (5)
    // and of a row not yet exported (12): rows of their own, which compaction keeps (LLP 0020).
    await ingest(k, 'web', 11, 3);
    await ingestText(k, 'web', eventLines(14, 2) + eventLines(5, 1) + eventLines(12, 1));
    assert.equal((await k.cache.storage.stats(web)).files, 5);
    assert.match(await maintain(config, '--compact'), /compacted 1 partition/);
    const compacted = await k.cache.storage.stats(web);
    assert.equal(compacted.files, 1, 'one file after compaction');
    assert.equal(compacted.rows, 17, 'every committed row kept, identical ones included');
    const s = partitionStatus(await status(config), 'archive', 'web');
    assert.equal(s.pendingRows, 7, 'the watermark reads straight through the new generation');

    await ingest(k, 'web', 16, 5);
    // maxRows 8 of 22: the front-prune may only take rows 1..10, which every sink has.
    const r = await k.maintain({ retention: true });
    assert.deepEqual([r.retention[0]!.prunedRows, r.retention[0]!.forcedRows], [10, 0]);

    const [t] = await k.export();
    assert.equal(t!.rows, 12);
    const got = (await readExports(join(dir, 'exports'))).flatMap((f) => f.rows.map((row) => Number(row.id))).sort((a, b) => a - b);
    assert.deepEqual(got, [...range(1, 20), 5, 12].sort((a, b) => a - b), 'each committed row once: the re-sent 5 and 12 twice');
    const p = partitionStatus(await status(config), 'archive', 'web');
    assert.deepEqual([p.exportedRows, p.pendingRows, p.gapRows, p.watermark], [22, 0, 0, p.highWater]);
  } finally {
    await k.close();
  }
});
