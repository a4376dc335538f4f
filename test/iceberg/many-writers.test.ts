/**
 * Many writers, one Iceberg table: WRITERS child processes, each with a cache
 * and config of its own (so a writer identity of its own), export at the same
 * time to one table, on local disk (one absolute `config.dir`) and on S3
 * (s3rver behind the atomic If-None-Match front). Each child runs the real CLI
 * (`main`, test/fixtures/cli-steps.ts): ROUNDS rounds of ingesting new rows
 * into SOURCES sources, an export, and a compaction of its cache, then a last
 * export. Units are small (`unit.maxRows`), so there are many commits and
 * they race. The table is then read back by icebird (not our reader): every
 * id exactly once; every Avro file checked against the v2 spec by avsc; lost
 * races did happen (the proof that re-basing ran); and no two snapshots name
 * one (writer, partition, since, until).
 * @ref LLP 0051 (the commit protocol), LLP 0052 (the recovery rule)
 */
import assert from 'node:assert/strict';
import { promises as fsp } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { pathToFileURL } from 'node:url';
import { EVENTS_DATASET, useCredentials } from '../s3-e2e/helpers.js';
import { type AvroFile, avroFilesOf, checkAvroFiles, fileRoute, readIcebergTable, s3Route, serveDir, startConditionalS3 } from '../support/iceberg.js';
import { STEPS_CHILD, type StepResult } from '../support/kernel.js';
import { runNode } from '../support/proc.js';
import { tempDir } from '../support/tmp.js';

const WRITERS = 5;
const ROUNDS = 3;
const SOURCES = ['a', 'b', 'c'];
const ROWS_PER_ROUND = 120; // per source
const MAX_UNIT_ROWS = 30;
const T0 = Date.parse('2026-03-01T00:00:00.000Z');

/** Writer k's ids: k*1e6 + i, so no two writers share one. */
const idOf = (k: number, source: number, round: number, i: number) => k * 1_000_000 + source * 100_000 + round * ROWS_PER_ROUND + i;

function rowsText(k: number, s: number, round: number): string {
  let out = '';
  for (let i = 0; i < ROWS_PER_ROUND; i++) {
    const id = idOf(k, s, round, i);
    // Timestamps spread over several days, so units write more than one data file.
    out += `${JSON.stringify({ id, ts: new Date(T0 + (id % 400_000) * 1000).toISOString(), msg: i % 7 === 0 ? null : `w${k}:${id}` })}\n`;
  }
  return out;
}

function expectedIds(): Set<string> {
  const want = new Set<string>();
  for (let k = 0; k < WRITERS; k++) for (let s = 0; s < SOURCES.length; s++) for (let r = 0; r < ROUNDS; r++) for (let i = 0; i < ROWS_PER_ROUND; i++) want.add(String(idOf(k, s, r, i)));
  return want;
}

type Destination = { destination: '@hypsink/local-fs'; config: { dir: string } } | { destination: '@hypsink/s3'; config: Record<string, unknown> };

/** Writer k's workspace: its config (own cache and state) and its row files; returns the steps its child runs. */
async function workspace(root: string, k: number, dest: Destination): Promise<string[][]> {
  const dir = join(root, `w${k}`);
  await fsp.mkdir(dir, { recursive: true });
  const config = {
    cache: { root: join(dir, 'cache'), lockWaitMs: 10_000 },
    state: { dir: join(dir, 'state') },
    driver: { lockWaitMs: 10_000 },
    datasets: { events: EVENTS_DATASET },
    sinks: {
      lake: {
        writer: '@hypsink/format-iceberg',
        destination: dest.destination,
        datasets: ['events'],
        config: dest.config,
        unit: { maxRows: MAX_UNIT_ROWS },
        // More attempts than the default: with this many writers and tiny units a unit can lose many races in a row.
        // Manifests merge after a few units (LLP 0072), so racing writers merge the same parent's manifests and re-base their merges.
        writerConfig: { commitAttempts: 200, manifestMinCountToMerge: 4 },
      },
    },
  };
  const cfg = join(dir, 'hypsink.config.json');
  await fsp.writeFile(cfg, JSON.stringify(config, null, 1));
  const steps: string[][] = [];
  for (let r = 0; r < ROUNDS; r++) {
    for (const [s, source] of SOURCES.entries()) {
      const file = join(dir, `rows-${r}-${source}.ndjson`);
      await fsp.writeFile(file, rowsText(k, s, r));
      steps.push(['ingest', 'events', '--source', source, '--file', file, '--json', '--config', cfg]);
    }
    steps.push(['export', '--sink', 'lake', '--json', '--config', cfg]);
    // The cache is compacted between exports: the next export reads compacted files.
    steps.push(['maintain', '--compact', '--config', cfg]);
  }
  steps.push(['export', '--sink', 'lake', '--json', '--config', cfg]);
  steps.push(['status', '--json', '--config', cfg]);
  return steps;
}

interface ChildRun {
  readonly k: number;
  readonly steps: StepResult[];
  readonly text: string;
}

/** All writers' children at once; each must finish every step with exit 0. */
async function runWriters(root: string, dest: Destination): Promise<ChildRun[]> {
  const plans = await Promise.all(Array.from({ length: WRITERS }, (_, k) => workspace(root, k, dest)));
  const runs = await Promise.all(
    plans.map(async (steps, k) => {
      const r = await runNode(['--import', 'tsx', STEPS_CHILD, JSON.stringify(steps)], { env: { HYPSINK_LOG_LEVEL: 'warn' }, killAfterMs: 300_000 });
      const done = r.stdout
        .split('\n')
        .filter((l) => l.startsWith('{'))
        .map((l) => JSON.parse(l) as StepResult);
      return { k, steps: done, text: `writer ${k}: exit ${r.code ?? r.signal}\n--- stdout\n${r.stdout.slice(-4000)}\n--- stderr\n${r.stderr.slice(-4000)}`, code: r.code, want: steps.length };
    }),
  );
  for (const r of runs) {
    assert.equal(r.code, 0, r.text);
    assert.equal(r.steps.length, r.want, r.text);
    for (const s of r.steps) assert.equal(s.code, 0, `writer ${r.k}: ${s.args.join(' ')} exited ${s.code}\n${s.out}\n${s.err}`);
  }
  return runs;
}

/** Every writer exported everything: its last status shows no pending rows. */
function assertDrained(runs: readonly ChildRun[]): void {
  for (const r of runs) {
    const status = JSON.parse(r.steps.at(-1)!.out) as { sinks: { partitions: { source: string; pendingRows: number; lastError: string | null }[] }[] };
    for (const p of status.sinks[0]!.partitions) {
      assert.equal(p.pendingRows, 0, `writer ${r.k} source ${p.source}: ${p.pendingRows} row(s) left pending (${p.lastError ?? 'no error'})`);
    }
  }
}

/** The table as icebird reads it, and its Avro files as avsc reads them, checked. */
async function assertTable(rows: Record<string, unknown>[], metadata: { snapshots?: readonly Record<string, unknown>[] }, avro: readonly AvroFile[]): Promise<void> {
  const want = expectedIds();
  const seen = new Map<string, number>();
  for (const row of rows) {
    const id = String(row.id);
    seen.set(id, (seen.get(id) ?? 0) + 1);
  }
  const dup = [...seen].filter(([, n]) => n > 1).map(([id, n]) => `${id}×${n}`);
  assert.deepEqual(dup.slice(0, 20), [], `${dup.length} id(s) in the table more than once`);
  const missing = [...want].filter((id) => !seen.has(id));
  assert.deepEqual(missing.slice(0, 20), [], `${missing.length} id(s) never reached the table`);
  const extra = [...seen.keys()].filter((id) => !want.has(id));
  assert.deepEqual(extra.slice(0, 20), [], 'ids in the table that no writer ingested');
  assert.equal(rows.length, want.size);

  // No two snapshots commit one unit, and every writer and source is there.
  const snapshots = metadata.snapshots ?? [];
  const marks = snapshots.map((s) => {
    const m = s.summary as Record<string, string>;
    return `${m['hypsink.writer']}|${m['hypsink.partition']}|${m['hypsink.since']}|${m['hypsink.until']}`;
  });
  assert.equal(new Set(marks).size, marks.length, 'two snapshots name the same (writer, partition, since, until)');
  assert.equal(new Set(snapshots.map((s) => (s.summary as Record<string, string>)['hypsink.writer'])).size, WRITERS, 'every writer committed');
  assert.equal(
    snapshots.reduce((n, s) => n + Number((s.summary as Record<string, string>)['added-records']), 0),
    want.size,
    'the snapshots add up to the rows',
  );

  const { lists, manifests } = await checkAvroFiles(avro, { requireMetrics: true });
  assert.ok(manifests.length >= snapshots.length, `${manifests.length} manifests for ${snapshots.length} snapshots`);
  assert.ok(lists.length >= snapshots.length);
}

/**
 * `*.avro` under the table's metadata/, read from s3rver's folder on disk
 * (`<key>._S3rver_object`): s3rver answers a ListObjectsV2 of this many
 * objects with 500 InternalError.
 */
async function avroFilesOfS3rver(directory: string, bucket: string, prefix: string): Promise<AvroFile[]> {
  const dir = join(directory, bucket, ...prefix.split('/'), 'metadata');
  const suffix = '._S3rver_object';
  const names = (await fsp.readdir(dir)).filter((n) => n.endsWith(`.avro${suffix}`)).sort();
  return Promise.all(names.map(async (n) => ({ name: `s3://${bucket}/${prefix}/metadata/${n.slice(0, -suffix.length)}`, bytes: await fsp.readFile(join(dir, n)) })));
}

/** Manifest lists written on a second or later attempt (`snap-<id>-<attempt>-<uuid>.avro`): each a lost race re-based. */
function rebasedLists(names: readonly string[]): number {
  return names.filter((n) => {
    const m = /snap-\d+-(\d+)-[0-9a-f-]+\.avro$/.exec(n);
    return m !== null && Number(m[1]) >= 2;
  }).length;
}

describe('many writers, one Iceberg table', { concurrency: false }, () => {
  test(`${WRITERS} processes on local disk (one shared config.dir)`, { timeout: 600_000 }, async () => {
    const root = tempDir('hypsink-ice-many-');
    const lake = join(root, 'lake');
    await fsp.mkdir(lake);
    const runs = await runWriters(root, { destination: '@hypsink/local-fs', config: { dir: lake } });
    assertDrained(runs);

    const table = join(lake, 'events');
    const served = await serveDir(lake);
    try {
      const { rows, metadata } = await readIcebergTable({ tableUrl: pathToFileURL(table).href, route: fileRoute(lake, served.url) });
      const avro = await avroFilesOf(table);
      await assertTable(rows, metadata, avro);
      const rebased = rebasedLists(avro.map((f) => f.name));
      // Versions taken by others while a unit was on its way: the commit races the test is about.
      assert.ok(rebased > 0, `no manifest list was ever re-based (${avro.length} Avro files): the writers never raced`);
      const versions = (await fsp.readdir(join(table, 'metadata'))).filter((n) => /^v\d+\.metadata\.json$/.test(n)).length;
      assert.equal(versions, 1 + (metadata.snapshots?.length ?? 0), 'one version to create the table, one per snapshot (schema evolution aside)');
      process.stdout.write(`# local: ${metadata.snapshots?.length} snapshots, ${versions} versions, ${rebased} re-based manifest list(s)\n`);
    } finally {
      await served.close();
    }
  });

  test(`${WRITERS} processes on S3 (If-None-Match front)`, { timeout: 600_000 }, async () => {
    useCredentials();
    const root = tempDir('hypsink-ice-many-s3-');
    const c = await startConditionalS3();
    try {
      const runs = await runWriters(root, {
        destination: '@hypsink/s3',
        config: { bucket: 'lake', prefix: 'hyp', region: 'us-east-1', endpoint: c.endpoint, forcePathStyle: true },
      });
      assertDrained(runs);
      const { rows, metadata } = await readIcebergTable({ tableUrl: 's3://lake/hyp/events', route: s3Route(c.s3.endpoint) });
      const avro = await avroFilesOfS3rver(c.s3.directory, 'lake', 'hyp/events');
      await assertTable(rows, metadata, avro);
      const refused = c.proxy.log.filter((l) => l.action === 'respond' && /\/metadata\/v\d+\.metadata\.json$/.test(l.req.key)).length;
      const rebased = rebasedLists(avro.map((f) => f.name));
      assert.ok(refused > 0, 'no metadata version create was ever refused (412): the writers never raced');
      assert.ok(rebased > 0, 'no manifest list was ever re-based');
      process.stdout.write(`# s3: ${metadata.snapshots?.length} snapshots, ${refused} refused version create(s), ${rebased} re-based manifest list(s)\n`);
    } finally {
      await c.stop();
    }
  });
});
