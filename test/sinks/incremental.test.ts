/**
 * Incremental export through the real kernel and local-fs/Parquet sink: nothing
 * new writes nothing; N new rows land as exactly N rows in exactly the new
 * files; units bounded by `unit.maxRows` chain by name; the small-file policy
 * holds rows back; a nullable column added to the schema exports as null for
 * older rows. `status --json` is read through the CLI's own entry point.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import {
  archive,
  assertExactlyOnce,
  eventLines,
  type ExportedFile,
  ingest,
  ingestText,
  openKernel,
  partitionStatus,
  range,
  readExports,
  STATUS_PARTITION_KEYS,
  sampleConfig,
  unitRange,
  writeConfig,
  cliStatus,
} from '../support/kernel.js';
import { tempDir } from '../support/tmp.js';

const names = (fs: readonly ExportedFile[]) => fs.map((f) => f.rel);

const status = cliStatus;

test('a tick with nothing new writes nothing; N new rows → exactly N rows in exactly the new files; status --json', async () => {
  const dir = tempDir();
  const config = await writeConfig(dir, sampleConfig());
  const exports = join(dir, 'exports');
  const { k } = await openKernel(config);
  const odd = 'eu/web 1.ü'; // a source value that is not a safe path segment, shown as ingested
  try {
    await ingest(k, 'web', 1, 10);
    await ingest(k, odd, 1, 3);
    const [t1] = await k.export();
    assert.equal(t1!.rows, 13);
    assert.equal(t1!.units, 2);
    const files1 = await readExports(exports);
    assert.equal(files1.length, 2);
    assertExactlyOnce(files1, { web: range(1, 10), [odd]: range(1, 3) });

    const [t2] = await k.export();
    assert.deepEqual([t2!.rows, t2!.bytes, t2!.units], [0, 0, 0], 'nothing new: no bytes');
    assert.deepEqual(names(await readExports(exports)), names(files1), 'nothing new: no file');

    let s = await status(config);
    assert.equal(s.sinks.length, 1);
    assert.deepEqual(
      { name: s.sinks[0]!.name, kind: s.sinks[0]!.kind },
      { name: 'archive', kind: 'blob' },
    );
    const web = partitionStatus(s, 'archive', 'web');
    // The documented fields, exactly (status may add others).
    const { lastExportAt, ...rest } = Object.fromEntries(STATUS_PARTITION_KEYS.map((key) => [key, web[key]])) as unknown as typeof web;
    assert.ok(Date.now() - Date.parse(lastExportAt!) < 60_000, 'lastExportAt is recent');
    assert.equal(rest.watermark, rest.highWater);
    assert.deepEqual(rest, {
      dataset: 'events',
      source: 'web',
      watermark: rest.highWater,
      highWater: rest.highWater,
      pendingRows: 0,
      exportedRows: 10,
      intent: null,
      gapRows: 0,
      lastError: null,
    });
    assert.equal(partitionStatus(s, 'archive', odd).exportedRows, 3, 'the source is reported as ingested');

    // New rows wait as pending until the next tick.
    await ingest(k, 'web', 11, 7);
    s = await status(config);
    const pending = partitionStatus(s, 'archive', 'web');
    assert.equal(pending.watermark, web.watermark);
    assert.ok(BigInt(pending.highWater!) > BigInt(web.highWater!));
    assert.equal(pending.pendingRows, 7);
    assert.equal(pending.exportedRows, 10);

    const [t3] = await k.export();
    assert.equal(t3!.rows, 7);
    const files3 = await readExports(exports);
    const fresh = files3.filter((f) => !names(files1).includes(f.rel));
    assert.equal(fresh.length, 1, 'one new file');
    assert.deepEqual(
      fresh.flatMap((f) => f.rows.map((r) => r.id)),
      range(11, 7),
      'exactly the new rows, in order',
    );
    assert.deepEqual(Object.keys(fresh[0]!.rows[0]!), ['id', 'ts', 'msg'], 'user columns only');
    assert.equal(fresh[0]!.rows[0]!.ts, Date.UTC(2026, 0, 1) + 11_000, 'timestamp exported as written');
    assertExactlyOnce(files3, { web: range(1, 17), [odd]: range(1, 3) });
    const after = partitionStatus(await status(config), 'archive', 'web');
    assert.deepEqual([after.pendingRows, after.exportedRows, after.watermark], [0, 17, after.highWater]);
  } finally {
    await k.close();
  }
});

test('units bounded by unit.maxRows: several files whose <dataset>.<since>-<until> names chain', async () => {
  const dir = tempDir();
  const cfg = sampleConfig();
  archive(cfg).unit = { maxRows: 4 };
  const config = await writeConfig(dir, cfg);
  const { k } = await openKernel(config);
  try {
    await ingest(k, 'web', 1, 10);
    const [t] = await k.export();
    assert.equal(t!.units, 3);
    await ingest(k, 'web', 11, 5);
    await k.export();
    const files = await readExports(join(dir, 'exports'));
    assertExactlyOnce(files, { web: range(1, 15) });
    const units = files.map((f) => ({ ...unitRange(f.name), rows: f.rows.map((r) => r.id as number) })).sort((a, b) => a.since - b.since);
    assert.deepEqual(
      units.map((u) => u.rows.length),
      [4, 4, 2, 4, 1],
      'cut at 4 rows; the second tick starts a fresh unit',
    );
    assert.equal(units[0]!.since, 0);
    for (let i = 1; i < units.length; i++) assert.equal(units[i]!.since, units[i - 1]!.until, 'each since is the previous until');
    const hw = partitionStatus(await status(config), 'archive', 'web').highWater;
    assert.equal(String(units[units.length - 1]!.until), hw);
    // Rows are in seq order across the chain.
    assert.deepEqual(
      units.flatMap((u) => u.rows),
      range(1, 15),
    );
    for (const f of files) assert.ok(f.rel.startsWith('events/source=web/events.'), f.rel);
  } finally {
    await k.close();
  }
});

test('small-file policy: below minRows and within maxDelay nothing is written; minRows reached exports', async () => {
  const dir = tempDir();
  const cfg = sampleConfig();
  Object.assign(archive(cfg), { minRows: 5, maxDelay: '1h' });
  const config = await writeConfig(dir, cfg);
  const exports = join(dir, 'exports');
  const { k } = await openKernel(config);
  try {
    await ingest(k, 'web', 1, 3);
    const [t1] = await k.export();
    assert.equal(t1!.rows, 0);
    assert.equal(t1!.partitions[0]!.waiting, true, 'reported as waiting');
    assert.deepEqual(await readExports(exports), [], 'no small file');
    const s = partitionStatus(await status(config), 'archive', 'web');
    assert.deepEqual([s.watermark, s.pendingRows, s.intent], [null, 3, null], 'rows wait in the cache, no intent');

    await ingest(k, 'web', 4, 1);
    assert.equal((await k.export())[0]!.rows, 0, '4 < minRows still waits');
    await ingest(k, 'web', 5, 2);
    const [t2] = await k.export();
    assert.equal(t2!.rows, 6);
    const files = await readExports(exports);
    assert.equal(files.length, 1, 'one file once minRows is reached');
    assertExactlyOnce(files, { web: range(1, 6) });
  } finally {
    await k.close();
  }
});

test('small-file policy: maxDelay passed exports what is pending; the defaults export every tick', async () => {
  const dir = tempDir();
  const cfg = sampleConfig();
  Object.assign(archive(cfg), { minRows: 1000, maxDelay: '1500ms' }); // wide: a loaded machine is slow
  cfg.sinks.eager = { ...archive(cfg), minRows: undefined, maxDelay: undefined, config: { dir: 'eager' } };
  const config = await writeConfig(dir, cfg);
  const { k } = await openKernel(config);
  try {
    await ingest(k, 'web', 1, 2);
    assert.equal((await k.export('archive'))[0]!.rows, 0, 'young and few: waits');
    assert.equal((await k.export('eager'))[0]!.rows, 2, 'defaults: exported at once');
    await new Promise((r) => setTimeout(r, 1600));
    const [t] = await k.export('archive');
    assert.equal(t!.rows, 2, 'the oldest row waited past maxDelay');
    assertExactlyOnce(await readExports(join(dir, 'exports')), { web: [1, 2] });
    await ingest(k, 'web', 3, 1);
    assert.equal((await k.export('eager'))[0]!.rows, 1, 'defaults: one row is a unit');
    assert.equal((await k.export('archive'))[0]!.rows, 0, 'the new row waits again');
    assertExactlyOnce(await readExports(join(dir, 'eager')), { web: [1, 2, 3] });
  } finally {
    await k.close();
  }
});

test('schema evolution: a nullable column added after some rows were exported exports as null for older rows', async () => {
  const dir = tempDir();
  const cfg = sampleConfig();
  const config = await writeConfig(dir, cfg);
  let { k } = await openKernel(config);
  try {
    await ingest(k, 'web', 1, 3);
    await k.export();
    await ingest(k, 'web', 4, 2); // committed under the old schema, not yet exported
  } finally {
    await k.close();
  }
  (cfg.datasets.events!.columns as unknown[]).push({ name: 'level', type: 'STRING', nullable: true });
  await writeConfig(dir, cfg);
  ({ k } = await openKernel(config));
  try {
    const r = await ingestText(k, 'web', eventLines(6, 2, () => ({ level: 'warn' })));
    assert.equal(r.accepted, 2);
    await k.export();
  } finally {
    await k.close();
  }
  const files = await readExports(join(dir, 'exports'));
  assertExactlyOnce(files, { web: range(1, 7) });
  const old = files.find((f) => f.rows.some((r) => r.id === 1))!;
  assert.deepEqual(old.columns, ['id', 'ts', 'msg'], 'the file exported before the change is as it was');
  const fresh = files.find((f) => f.rows.some((r) => r.id === 4))!;
  assert.deepEqual(fresh.columns, ['id', 'ts', 'msg', 'level']);
  assert.deepEqual(
    fresh.rows.map((r) => [r.id, r.level]),
    [
      [4, null],
      [5, null],
      [6, 'warn'],
      [7, 'warn'],
    ],
  );
});

test('small-file policy counts every pending row, not just the first unit (minRows above unit.maxRows)', async () => {
  const dir = tempDir();
  const cfg = sampleConfig();
  Object.assign(archive(cfg), { minRows: 5, maxDelay: '1h', unit: { maxRows: 3 } });
  const config = await writeConfig(dir, cfg);
  const { k } = await openKernel(config);
  try {
    await ingest(k, 'web', 1, 4);
    assert.equal((await k.export())[0]!.rows, 0, '4 pending < minRows 5: waits');
    await ingest(k, 'web', 5, 6);
    const [t] = await k.export();
    assert.deepEqual([t!.rows, t!.units], [10, 4], '10 pending ≥ minRows: exported in units of 3');
    assertExactlyOnce(await readExports(join(dir, 'exports')), { web: range(1, 10) });
  } finally {
    await k.close();
  }
});
