/**
 * The watermark protocol under real crashes (LLP 0005). A child process ingests
 * two partitions and exports; it SIGKILLs itself at a named fault point (the
 * test fails if it was not killed: the point was never reached). New rows are
 * ingested before the retry — the case the write-ahead intent exists for: the
 * unit committed, its watermark write was lost, and a plan made now would cut a
 * different unit. Another process then exports again. Oracle, from the files
 * themselves (decoded with parquet-wasm): every ingested row exactly once, no
 * internal column, no temp file left, unit names chained, and `status --json`
 * with no open intent and the watermark at the high water.
 */
import assert from 'node:assert/strict';
import { promises as fsp } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import {
  archive,
  assertExactlyOnce,
  assertStatusShape,
  type CliResult,
  cli,
  eventLines,
  type ExportedFile,
  partitionStatus,
  range,
  readExports,
  runSteps,
  sampleConfig,
  tempFiles,
  unitRange,
  writeConfig,
} from '../support/kernel.js';
import { tempDir } from '../support/tmp.js';

process.env.HYPSINK_LOG_LEVEL ??= 'warn';

type Point = 'export.afterIntent' | 'export.afterShip' | 'export.afterAdvance' | 'localfs.afterTemp' | 'localfs.afterRecord' | 'localfs.afterLink';

interface Case {
  readonly point: Point;
  /**
   * HYPSINK_FAULT_AT: 2 crashes the second unit of the tick (units of 6 rows, one partition at a
   * time): 10 rows make a full unit and a partial one, which new rows would extend if the retry
   * re-planned it instead of finishing the intent.
   */
  readonly at: 1 | 2;
  /** Ingest new rows before the retry (default true). */
  readonly newRows?: boolean;
}

const POINTS: Point[] = ['export.afterIntent', 'export.afterShip', 'export.afterAdvance', 'localfs.afterTemp', 'localfs.afterRecord', 'localfs.afterLink'];
const CASES: Case[] = [
  ...POINTS.flatMap((point) => [
    { point, at: 1 as const },
    { point, at: 2 as const },
  ]),
  // The retry finds every unit committed and writes nothing new: temp files of the dead writer must still go.
  { point: 'localfs.afterLink', at: 1, newRows: false },
];
const SOURCES = ['app', 'web'];

interface WatermarkFile {
  continuation: { seq: string } | null;
  intent: { since: string | null; until: string; unit: string } | null;
}

async function watermarks(dir: string): Promise<WatermarkFile[]> {
  const wdir = join(dir, '.hypsink/state/sinks/archive/watermarks/events');
  // Only the records: a write of another partition's record that the kill cut short leaves its temp file here.
  const names = (await fsp.readdir(wdir).catch(() => [] as string[])).filter((n) => n.endsWith('.json'));
  return Promise.all(names.map(async (n) => JSON.parse(await fsp.readFile(join(wdir, n), 'utf8')) as WatermarkFile));
}

const exists = (p: string) =>
  fsp.access(p).then(
    () => true,
    () => false,
  );

/** What the crash left: proves the child died where the point says. */
async function assertCrashState(c: Case, dir: string): Promise<void> {
  const exports = join(dir, 'exports');
  const marks = await watermarks(dir);
  const intents = marks.flatMap((m) => (m.intent ? [m.intent] : []));
  const unitExists = await Promise.all(intents.map((i) => exists(join(exports, i.unit))));
  switch (c.point) {
    case 'export.afterIntent':
      assert.ok(intents.length > 0, 'an intent is durable');
      assert.ok(
        unitExists.some((x) => !x),
        'some open intent has shipped nothing yet',
      );
      break;
    case 'export.afterShip':
    case 'localfs.afterLink':
      // The unit is committed under its key, the watermark still at its since: the lost advance.
      assert.ok(
        unitExists.some((x) => x),
        'an open intent whose blob is already committed',
      );
      break;
    case 'export.afterAdvance':
      assert.ok(
        marks.some((m) => m.continuation !== null),
        'a watermark advanced',
      );
      break;
    case 'localfs.afterTemp':
      assert.ok(
        unitExists.some((x) => !x),
        'the unit being written is not linked',
      );
      break;
    case 'localfs.afterRecord': {
      // local-fs's commit record names the unit being written (LLP 0028); the blob is not linked.
      const cdir = join(exports, '.hypsink-tmp/commits');
      const keys = await Promise.all((await fsp.readdir(cdir)).map(async (n) => (JSON.parse(await fsp.readFile(join(cdir, n), 'utf8')) as { key: string }).key));
      assert.ok(
        intents.some((i, n) => keys.includes(i.unit) && !unitExists[n]),
        `a commit record names an open intent's unit, not linked (records ${keys.join(', ')})`,
      );
      break;
    }
  }
  if (c.point.startsWith('localfs.')) assert.ok((await tempFiles(exports)).length > 0, 'the crash left a temp file');
  if (c.at === 2) {
    const done = marks.filter((m) => m.continuation !== null);
    assert.ok(done.length > 0, 'the first unit of the tick advanced before the second crashed');
  }
}

function assertChained(files: readonly ExportedFile[], source: string, highWater: string | null): void {
  const units = files
    .filter((f) => f.source === source)
    .map((f) => ({ ...unitRange(f.name), rows: f.rows.length }))
    .sort((a, b) => a.since - b.since);
  assert.ok(units.length > 0);
  assert.equal(units[0]!.since, 0, 'the first unit starts at the beginning');
  for (let i = 1; i < units.length; i++) assert.equal(units[i]!.since, units[i - 1]!.until, `${source}: units chain`);
  assert.equal(String(units[units.length - 1]!.until), highWater, `${source}: the last unit ends at the high water`);
  for (const u of units) assert.ok(u.rows > 0, 'no empty unit');
}

async function crashCase(c: Case): Promise<void> {
  const dir = tempDir('hypsink-crash-');
  const cfg = sampleConfig();
  if (c.at === 2) {
    archive(cfg).unit = { maxRows: 6 };
    cfg.driver = { concurrency: 1 };
  }
  const config = await writeConfig(dir, cfg);
  const first = join(dir, 'first.ndjson');
  const second = join(dir, 'second.ndjson');
  await fsp.writeFile(first, eventLines(1, 10));
  await fsp.writeFile(second, eventLines(11, 5));
  const ingest = (file: string) => SOURCES.map((s) => ['ingest', 'events', '--source', s, '--file', file, '--config', config]);

  const crashed = await runSteps([...ingest(first), ['export', '--config', config]], {
    HYPSINK_FAULT: c.point,
    HYPSINK_FAULT_AT: String(c.at),
  });
  assert.equal(crashed.signal, 'SIGKILL', `the child must die at ${c.point} (exit ${crashed.code}): ${crashed.stderr}`);
  assert.deepEqual(
    crashed.steps.map((s) => s.code),
    [0, 0],
    'both ingests finished, the export did not',
  );
  await assertCrashState(c, dir);

  // The retry: the same CLI commands through `main`, in this process — one that never shared
  // memory with the crashed child (a child per retry would double the suite's process count).
  const newRows = c.newRows ?? true;
  const retry: CliResult[] = [];
  for (const args of [
    ...(newRows ? ingest(second) : []),
    ['export', '--json', '--config', config],
    ['export', '--json', '--config', config],
    ['status', '--json', '--config', config],
  ]) {
    retry.push(await cli(...args));
  }
  assert.ok(
    retry.every((r) => r.code === 0),
    JSON.stringify(retry.map((r) => r.err)),
  );
  const again = JSON.parse(retry[retry.length - 2]!.out) as { sinks: { rows: number; units: number; bytes: number }[] };
  assert.deepEqual(
    again.sinks.map((s) => [s.rows, s.units, s.bytes]),
    [[0, 0, 0]],
    'a second export after recovery writes nothing',
  );

  const st = assertStatusShape(retry[retry.length - 1]!.out);
  const files = await readExports(join(dir, 'exports'));
  const total = newRows ? 15 : 10;
  assertExactlyOnce(files, Object.fromEntries(SOURCES.map((s) => [s, range(1, total)])));
  for (const s of SOURCES) {
    const p = partitionStatus(st, 'archive', s);
    assert.equal(p.intent, null, `${s}: no open intent`);
    assert.equal(p.watermark, p.highWater, `${s}: watermark at the high water`);
    assert.equal(p.pendingRows, 0);
    assert.equal(p.exportedRows, total, `${s}: exported rows counted once each`);
    assert.equal(p.gapRows, 0);
    assert.equal(p.lastError, null);
    assertChained(files, s, p.highWater);
  }
  assert.deepEqual(await tempFiles(join(dir, 'exports')), [], 'no temp file left in .hypsink-tmp');
}

describe('crash matrix: SIGKILL at each export fault point, new rows, retry in a fresh process', { concurrency: 2 }, () => {
  for (const c of CASES) {
    const name = `${c.point} (${c.at === 1 ? '1st unit' : '2nd unit of the tick'}${c.newRows === false ? ', no new rows before the retry' : ''})`;
    it(name, () => crashCase(c));
  }
});
