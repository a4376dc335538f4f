/**
 * The CLI end to end, as a user runs it: `node bin/hypsink.js` from a temp
 * folder holding `hypsink.config.json` (no --config): ingest an NDJSON file,
 * export Parquet files holding each row once, a second export writes nothing,
 * `status --json` agrees. `init` writes a starter config that loads and runs.
 */
import assert from 'node:assert/strict';
import { promises as fsp, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { loadConfig } from '../../kernel/config/load.js';
import {
  assertExactlyOnce,
  assertStatusShape,
  eventLines,
  type ExportedFile,
  openKernel,
  partitionStatus,
  range,
  readExports,
  runBin,
  SAMPLE_CONFIG_TEXT,
  writeConfig,
} from '../support/kernel.js';
import { tempDir } from '../support/tmp.js';

interface ExportJson {
  sinks: { name: string; rows: number; bytes: number; units: number; partitions: { source: string; rows: number }[] }[];
}

test('ingest → export → export again → status, through bin/hypsink.js in a temp folder', async () => {
  const dir = tempDir();
  await writeConfig(dir, SAMPLE_CONFIG_TEXT);
  await fsp.writeFile(join(dir, 'f.ndjson'), eventLines(1, 25));
  await fsp.writeFile(join(dir, 'g.ndjson'), eventLines(26, 5));

  const ing = await runBin(['ingest', 'events', '--source', 'web', '--file', 'f.ndjson'], { cwd: dir });
  assert.equal(ing.code, 0, ing.stderr);
  assert.match(ing.stdout, /ingested 25 row\(s\) into events\/source=web/);

  const e1 = await runBin(['export'], { cwd: dir });
  assert.equal(e1.code, 0, e1.stderr);
  assert.match(e1.stdout, /archive.*events.*web.*25/, 'the export table shows the rows');
  const files1 = await readExports(join(dir, 'exports'));
  assert.equal(files1.length, 1);
  assert.match(files1[0]!.rel, /^events\/source=web\/events\.0-\d+\.parquet$/);
  assertExactlyOnce(files1, { web: range(1, 25) });
  assert.deepEqual(files1[0]!.columns, ['id', 'ts', 'msg']);
  assert.deepEqual(files1[0]!.rows[0], { id: 1, ts: Date.UTC(2026, 0, 1, 0, 0, 1), msg: 'm1' });

  const e2 = await runBin(['export', '--json'], { cwd: dir });
  assert.equal(e2.code, 0, e2.stderr);
  const j2 = JSON.parse(e2.stdout) as ExportJson;
  assert.deepEqual(
    j2.sinks.map((s) => [s.name, s.rows, s.bytes, s.units]),
    [['archive', 0, 0, 0]],
  );
  const files2 = await readExports(join(dir, 'exports'));
  assert.deepEqual(
    files2.map((f: ExportedFile) => f.rel),
    files1.map((f) => f.rel),
    'a second export writes no file',
  );

  const st = await runBin(['status', '--json'], { cwd: dir });
  assert.equal(st.code, 0, st.stderr);
  const s = assertStatusShape(st.stdout);
  const p = partitionStatus(s, 'archive', 'web');
  assert.deepEqual([p.exportedRows, p.pendingRows, p.intent, p.gapRows, p.lastError], [25, 0, null, 0, null]);
  assert.equal(p.watermark, p.highWater);
  assert.ok(p.watermark !== null && files1[0]!.name.endsWith(`-${p.watermark}.parquet`), 'the file ends at the watermark');

  // The human status is a table naming the partition.
  const table = await runBin(['status'], { cwd: dir });
  assert.equal(table.code, 0);
  assert.match(table.stdout, /archive.*events.*web/);

  // More rows: exactly those in exactly one new file.
  assert.equal((await runBin(['ingest', 'events', '--source', 'web', '--file', 'g.ndjson'], { cwd: dir })).code, 0);
  const e3 = await runBin(['export', '--json'], { cwd: dir });
  assert.equal((JSON.parse(e3.stdout) as ExportJson).sinks[0]!.rows, 5);
  const files3 = await readExports(join(dir, 'exports'));
  const fresh = files3.filter((f) => !files1.some((g) => g.rel === f.rel));
  assert.equal(fresh.length, 1);
  assert.deepEqual(
    fresh[0]!.rows.map((r) => r.id),
    range(26, 5),
  );
  assertExactlyOnce(files3, { web: range(1, 30) });
});

test('init writes a starter config that loads, refuses to overwrite, and runs', async () => {
  const dir = tempDir();
  const r = await runBin(['init'], { cwd: dir });
  assert.equal(r.code, 0, r.stderr);
  assert.deepEqual(readdirSync(dir), ['hypsink.config.json']);
  const again = await runBin(['init'], { cwd: dir });
  assert.equal(again.code, 2);
  assert.match(again.stderr, /already exists; pass --force/);

  const loaded = await loadConfig(undefined, dir);
  assert.equal(loaded.file, join(dir, 'hypsink.config.json'));
  assert.deepEqual(Object.keys(loaded.config.sinks), ['archive']);
  const { k } = await openKernel(join(dir, 'hypsink.config.json'));
  try {
    const ds = Object.keys(loaded.config.datasets)[0]!;
    assert.equal(ds, 'events');
    assert.deepEqual((await k.status()).sinks.map((s) => s.name), ['archive']);
  } finally {
    await k.close();
  }
});
