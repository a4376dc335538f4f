/**
 * The Iceberg writer under real crashes. For every fault point named
 * `iceberg.*` in kernel/fault.ts (discovered, so a new point gets the generic
 * case and fails it if that never reaches it), on local-fs (real disk) and on
 * S3 (s3rver behind an atomic If-None-Match front): the CLI exports in a child
 * process that SIGKILLs itself at the point; the test asserts it died so, adds
 * rows, exports again (the recorded intent must finish the same unit, once),
 * adds rows, exports again, and reads the table back with icebird and every
 * Avro file with avsc. Oracle: every ingested id exactly once in the table, no
 * `_hyp_` column, one snapshot per unit with distinct (writer, partition,
 * since, until), the watermark at the high water and no intent left.
 * Also: a unit spanning days (one data file a day) killed between two files,
 * and HYPSINK_FAULT_ACTION=throw after the manifest list and after the commit
 * (the same kernel goes on; the unit must not be committed twice).
 * @ref LLP 0051, LLP 0052
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { after, before, describe, it } from 'node:test';
import { S3Client } from '@aws-sdk/client-s3';
import { FAULT_POINTS, resetFaultHits } from '../../kernel/fault.js';
import { avroFilesOf, avroFilesOfS3, type ConditionalS3, checkAvroFiles, fileRoute, readIcebergTable, s3Route, serveDir, startConditionalS3 } from '../support/iceberg.js';
import type { Hypsink } from '../../kernel/runtime.js';
import type { TickReport } from '../../kernel/sinks/driver.js';
import { ingestText, type Json, openKernel, partitionStatus, runBin, sampleConfig, writeConfig } from '../support/kernel.js';
import { S3RVER_ACCESS_KEY_ID } from '../support/s3server.js';
import { tempDir } from '../support/tmp.js';

process.env.HYPSINK_LOG_LEVEL ??= 'warn';

const POINTS = Object.keys(FAULT_POINTS).filter((p) => p.startsWith('iceberg.'));
/** Points of `maintain --tables` (compaction, LLP 0078): crashed in a maintain, not an export. */
const MAINTAIN_POINTS = new Set(['iceberg.afterCompactFiles', 'iceberg.afterReplaceCommit']);
const SECRET = 'icebergCrashSecret0000000000000000000000';
// The S3 plugin takes the AWS default chain: s3rver's account, for this process and its children.
process.env.AWS_ACCESS_KEY_ID = S3RVER_ACCESS_KEY_ID;
process.env.AWS_SECRET_ACCESS_KEY = SECRET;
process.env.AWS_EC2_METADATA_DISABLED = 'true';
delete process.env.AWS_PROFILE;
delete process.env.AWS_SESSION_TOKEN;
const SOURCES = ['web', 'app'];
const HOUR = 3_600_000;
const T0 = Date.UTC(2026, 2, 1, 1, 0, 0);

type Dest = 'local-fs' | 's3';

interface Case {
  readonly point: string;
  readonly dest: Dest;
  /** HYPSINK_FAULT_AT. */
  readonly at: number;
  /** Rows 12 hours apart: a unit spans three days, one data file a day. */
  readonly days?: boolean;
  /** HYPSINK_FAULT_ACTION=throw in the test's own kernel, which then goes on. */
  readonly throw?: boolean;
  /** The point is `maintain --tables`'s: the child compacts the table rather than exports. */
  readonly maintain?: boolean;
}

const DESTS: Dest[] = ['local-fs', 's3'];
const CASES: Case[] = [
  ...POINTS.flatMap((point) => DESTS.map((dest): Case => ({ point, dest, at: 1, ...(MAINTAIN_POINTS.has(point) ? { maintain: true } : {}) }))),
  // Between the first and second, and the second and third, of a unit's three day files.
  ...DESTS.flatMap((dest): Case[] => [1, 2].map((at) => ({ point: 'iceberg.afterDataFile', dest, at, days: true }))),
  ...['iceberg.afterManifestList', 'iceberg.afterCommit'].flatMap((point) => DESTS.map((dest): Case => ({ point, dest, at: 1, throw: true }))),
];
const caseName = (c: Case) => `${c.point} × ${c.dest}${c.maintain ? ' (maintain --tables)' : ''}${c.at > 1 ? ` (at ${c.at})` : ''}${c.days ? ', a unit over days' : ''}${c.throw ? ' (throw)' : ''}`;

let s3: ConditionalS3;
before(async () => {
  s3 = await startConditionalS3({ buckets: ['lake'] });
});
after(async () => {
  await s3.stop();
});

let caseNo = 0;

interface Setup {
  readonly dir: string;
  readonly config: string;
  /** The S3 prefix of this case (one s3rver for all). */
  readonly prefix: string;
  readonly dest: Dest;
}

async function setup(dest: Dest): Promise<Setup> {
  const dir = tempDir('hypsink-iceberg-crash-');
  const prefix = `case${++caseNo}-${process.pid}`;
  const c = sampleConfig();
  delete c.sinks.archive;
  c.sinks.lake = {
    writer: '@hypsink/format-iceberg',
    destination: dest === 'local-fs' ? '@hypsink/local-fs' : '@hypsink/s3',
    datasets: ['events'],
    // Two units a partition per export: the crash hits one of several.
    unit: { maxRows: 5 },
    // Manifests merge at almost every commit (LLP 0072): a crash hits merged lists too.
    // And a partition's data files compact once there are two (LLP 0078), for the maintain cases.
    writerConfig: { manifestMinCountToMerge: 2, compactMinFiles: 2 },
    config:
      dest === 'local-fs'
        ? { dir: 'lake' }
        : { bucket: 'lake', prefix, region: 'us-east-1', endpoint: s3.endpoint, forcePathStyle: true, retry: { attempts: 3, baseMs: 10, maxMs: 500 } },
  } satisfies Json;
  return { dir, config: await writeConfig(dir, c), prefix, dest };
}

/** Rows `from`..`from+n-1`: a second apart, or 12 hours apart when `days` (a unit of 5 spans three days). */
function rows(from: number, n: number, days: boolean): string {
  let s = '';
  for (let id = from; id < from + n; id++) {
    s += `${JSON.stringify({ id, ts: new Date(T0 + id * (days ? 12 * HOUR : 1000)).toISOString(), msg: id % 4 === 0 ? null : `m${id}` })}\n`;
  }
  return s;
}

/** Ids are global and ascending: each batch gives `web` the first n, `app` the next n. */
class Ledger {
  next = 1;
  readonly ids: number[] = [];
  readonly sourceOf = new Map<number, string>();
  constructor(private readonly days: boolean) {}
  async ingest(k: Hypsink, n: number): Promise<void> {
    for (const [j, source] of SOURCES.entries()) {
      const r = await ingestText(k, source, rows(this.next + j * n, n, this.days));
      assert.equal(r.rejected, 0, JSON.stringify(r));
      assert.equal(r.accepted, n);
      for (let id = this.next + j * n; id < this.next + (j + 1) * n; id++) {
        this.ids.push(id);
        this.sourceOf.set(id, source);
      }
    }
    this.next += n * SOURCES.length;
  }
}

async function withKernel<T>(config: string, fn: (k: Hypsink) => Promise<T>): Promise<T> {
  const { k } = await openKernel(config);
  try {
    return await fn(k);
  } finally {
    await k.close();
  }
}

async function exportLake(k: Hypsink): Promise<TickReport> {
  const [r] = await k.export('lake');
  assert.ok(r, 'a report for the lake');
  return r;
}

/** The table, read back: rows through icebird, every Avro file of metadata/ through avsc. */
async function readTable(s: Setup) {
  if (s.dest === 'local-fs') {
    const root = join(s.dir, 'lake');
    const served = await serveDir(root);
    try {
      const table = join(root, 'events');
      const read = await readIcebergTable({ tableUrl: pathToFileURL(table).href, route: fileRoute(root, served.url) });
      return { ...read, avro: await checkAvroFiles(await avroFilesOf(table)) };
    } finally {
      await served.close();
    }
  }
  const read = await readIcebergTable({ tableUrl: `s3://lake/${s.prefix}/events`, route: s3Route(s3.s3.endpoint) });
  const client = new S3Client({ region: 'us-east-1', endpoint: s3.s3.endpoint, forcePathStyle: true, credentials: { accessKeyId: S3RVER_ACCESS_KEY_ID, secretAccessKey: SECRET } });
  try {
    return { ...read, avro: await checkAvroFiles(await avroFilesOfS3(client, 'lake', `${s.prefix}/events`)) };
  } finally {
    client.destroy();
  }
}

/** The exactly-once oracle over the table and the cache's status. */
async function assertTable(s: Setup, k: Hypsink, ledger: Ledger): Promise<Awaited<ReturnType<typeof readTable>>> {
  const read = await readTable(s);
  const { rows: got, metadata, avro } = read;
  for (const r of got) {
    const hyp = Object.keys(r).filter((k) => k.startsWith('_hyp_'));
    assert.deepEqual(hyp, [], 'no internal column in the table');
  }
  const counts = new Map<number, number>();
  for (const r of got) counts.set(Number(r.id), (counts.get(Number(r.id)) ?? 0) + 1);
  const dup = [...counts].filter(([, n]) => n > 1).map(([id]) => id);
  assert.deepEqual(dup, [], 'ids in the table more than once');
  const missing = ledger.ids.filter((id) => !counts.has(id));
  assert.deepEqual(missing, [], 'ingested ids missing from the table');
  assert.equal(got.length, ledger.ids.length, 'the table holds only ingested rows');
  // Each row's source column names the partition it was ingested to.
  for (const r of got) assert.equal(r.source, ledger.sourceOf.get(Number(r.id)), `row ${String(r.id)}'s source`);

  const all = (metadata.snapshots ?? []) as { 'snapshot-id': number; summary: Record<string, string> }[];
  // A compaction's replace snapshot names no unit (LLP 0078); every other is a unit's.
  const snapshots = all.filter((x) => x.summary.operation !== 'replace');
  const marks = snapshots.map((x) => ['writer', 'partition', 'since', 'until'].map((k) => x.summary[`hypsink.${k}`]).join(' | '));
  assert.equal(new Set(marks).size, marks.length, `one snapshot per unit: ${marks.join('; ')}`);
  for (const x of snapshots) for (const k of ['writer', 'partition', 'since', 'until']) assert.ok(x.summary[`hypsink.${k}`], `snapshot ${x['snapshot-id']} has hypsink.${k}`);
  // Per partition the committed ranges chain from 0 without gap or overlap.
  const byPartition = new Map<string, [bigint, bigint][]>();
  for (const x of snapshots) {
    const p = x.summary['hypsink.partition']!;
    byPartition.set(p, [...(byPartition.get(p) ?? []), [BigInt(x.summary['hypsink.since']!), BigInt(x.summary['hypsink.until']!)]]);
  }
  assert.equal(byPartition.size, SOURCES.length, `snapshots of every partition: ${[...byPartition.keys()].join(', ')}`);
  for (const [p, ranges] of byPartition) {
    ranges.sort((a, b) => (a[0] < b[0] ? -1 : 1));
    let at = 0n;
    for (const [since, until] of ranges) {
      assert.equal(since, at, `partition ${p}: ranges chain (${ranges.map((r) => r.join('-')).join(', ')})`);
      at = until;
    }
  }
  // The manifest list of the current snapshot names every unit's data files (manifests merged: LLP 0072, so fewer manifests than units); the Avro files all read as v2.
  assert.ok(avro.lists.length >= snapshots.length, 'a manifest list per snapshot');
  const current = avro.lists.find((l) => l.meta['snapshot-id'] === String(metadata['current-snapshot-id']));
  assert.ok(current, 'the current snapshot has its manifest list');
  assert.ok(current.manifests.length <= snapshots.length, 'the current manifest list holds at most one manifest per unit');
  const live = current.manifests.reduce((n, m) => n + Number(m.added_files_count) + Number(m.existing_files_count), 0);
  const head = all.find((x) => x['snapshot-id'] === metadata['current-snapshot-id'])!;
  assert.equal(live, Number(head.summary['total-data-files']), 'the current manifests name every data file the snapshots added, once');

  const status = await k.status();
  for (const source of SOURCES) {
    const p = partitionStatus(status, 'lake', source);
    assert.equal(p.intent, null, `${source}: no open intent`);
    assert.equal(p.pendingRows, 0, `${source}: nothing pending`);
    assert.equal(p.watermark, p.highWater, `${source}: the watermark at the high water`);
  }
  return read;
}

async function crashCase(c: Case): Promise<void> {
  const s = await setup(c.dest);
  const ledger = new Ledger(c.days ?? false);
  await withKernel(s.config, (k) => ledger.ingest(k, 8));
  const crashed = await runBin(['export', '--sink', 'lake', '--json', '--config', s.config], { env: { HYPSINK_FAULT: c.point, HYPSINK_FAULT_AT: String(c.at) } });
  assert.equal(crashed.signal, 'SIGKILL', `the export was killed at ${c.point} (exit ${crashed.code}): ${crashed.stderr}`);
  // The restart: a kernel in this process (another process than the dead one).
  await withKernel(s.config, async (k) => {
    // New rows before the retry: only the recorded intent keeps the unit the one that was in flight.
    await ledger.ingest(k, 3);
    assert.equal((await exportLake(k)).failed, 0, 'the retry exports');
    await ledger.ingest(k, 4);
    assert.equal((await exportLake(k)).failed, 0, 'a later export');
    const { metadata } = await assertTable(s, k, ledger);
    if (c.days) {
      const files = (metadata.snapshots ?? []).map((x) => Number((x.summary as Record<string, string>)['added-data-files']));
      assert.ok(files.some((n) => n >= 3), `a unit of three days' rows is three data files (added-data-files: ${files.join(', ')})`);
    }
  });
}

/**
 * `maintain --tables` killed at a compaction point, after two exports left
 * small files in every partition: the table reads every row once (a crash
 * after the rewritten files leaves them unnamed; one after the replace commit
 * leaves the hint behind), the next maintain and exports go on, rows once.
 */
async function maintainCase(c: Case): Promise<void> {
  const s = await setup(c.dest);
  const ledger = new Ledger(false);
  await withKernel(s.config, async (k) => {
    for (const n of [8, 3]) {
      await ledger.ingest(k, n);
      assert.equal((await exportLake(k)).failed, 0, 'an export');
    }
  });
  const crashed = await runBin(['maintain', '--tables', '--config', s.config], { env: { HYPSINK_FAULT: c.point } });
  assert.equal(crashed.signal, 'SIGKILL', `maintain was killed at ${c.point} (exit ${crashed.code}): ${crashed.stderr}`);
  await withKernel(s.config, async (k) => {
    // Read through the hint (icebird), which a crash after the replace commit left on the version before: rows once either way.
    await assertTable(s, k, ledger);
    if (s.dest === 'local-fs') {
      // The newest version, past the hint: the replace is there exactly when the crash came after its commit.
      const md = join(s.dir, 'lake', 'events', 'metadata');
      const v = Math.max(...readdirSync(md).flatMap((n) => /^v(\d+)\.metadata\.json$/.exec(n)?.[1] ?? []).map(Number));
      const newest = JSON.parse(readFileSync(join(md, `v${v}.metadata.json`), 'utf8')) as { snapshots: { summary: Record<string, string> }[] };
      assert.equal(newest.snapshots.some((x) => x.summary.operation === 'replace'), c.point === 'iceberg.afterReplaceCommit', `${c.point}: a replace snapshot in v${v}`);
    }
    const [again] = (await k.maintain({ tables: true })).tables;
    assert.ok(again, 'maintain reports the lake');
    await ledger.ingest(k, 4);
    assert.equal((await exportLake(k)).failed, 0, 'an export after the compaction');
    const after = await assertTable(s, k, ledger);
    assert.ok(
      (after.metadata.snapshots ?? []).some((x) => (x.summary as Record<string, string>).operation === 'replace'),
      `a compaction committed (${again.done})`,
    );
  });
}

const FAULT_ENV = ['HYPSINK_FAULT', 'HYPSINK_FAULT_AT', 'HYPSINK_FAULT_ACTION'] as const;

/** The kernel of this process fails at the point (throw), then goes on: the unit must be committed once. */
async function throwCase(c: Case): Promise<void> {
  const s = await setup(c.dest);
  const ledger = new Ledger(false);
  await withKernel(s.config, async (k) => {
    await ledger.ingest(k, 8);
    resetFaultHits();
    Object.assign(process.env, { HYPSINK_FAULT: c.point, HYPSINK_FAULT_AT: '1', HYPSINK_FAULT_ACTION: 'throw' });
    let failed: TickReport;
    try {
      failed = await exportLake(k);
    } finally {
      for (const v of FAULT_ENV) delete process.env[v];
      resetFaultHits();
    }
    assert.ok(failed.failed > 0, `the injected failure failed a unit (${JSON.stringify(failed)})`);
    assert.equal((await exportLake(k)).failed, 0, 'the same kernel exports after the failure');
    await ledger.ingest(k, 4);
    assert.equal((await exportLake(k)).failed, 0, 'a later export');
  });
  // And another process: nothing left to commit, nothing committed twice.
  await withKernel(s.config, async (k) => {
    const again = await exportLake(k);
    assert.deepEqual([again.failed, again.units], [0, 0], 'a restart finds nothing to export');
    await assertTable(s, k, ledger);
  });
}

describe('iceberg crash cases', () => {
  it('discovers the iceberg fault points and has a kill case for each on both destinations', () => {
    assert.ok(POINTS.length >= 5, `iceberg points: ${POINTS.join(', ')}`);
    for (const p of POINTS) for (const d of DESTS) assert.ok(CASES.some((c) => c.point === p && c.dest === d && !c.throw), `${p} × ${d} has a kill case`);
  });
});
// Kill cases run a few at a time (children do the crashing; nothing here touches the fault env).
describe('kill at each point, restart', { concurrency: 3 }, () => {
  for (const c of CASES.filter((x) => !x.throw)) it(caseName(c), () => (c.maintain ? maintainCase(c) : crashCase(c)));
});
// Throw cases arm the fault point in this process: one at a time, after the others.
describe('throw at a point, the same kernel goes on', { concurrency: 1 }, () => {
  for (const c of CASES.filter((x) => x.throw)) it(caseName(c), () => throwCase(c));
});
