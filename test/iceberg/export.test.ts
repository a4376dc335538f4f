/**
 * The Iceberg writer end to end (issue 14): the real kernel from a config file,
 * tables on real disk and on s3rver over loopback, read back by icebird (a
 * reader we did not write, over HTTP) and every Avro file decoded by avsc and
 * checked against the spec's manifest schemas; data files' field ids read by
 * hyparquet. Exactly once across repeated exports and a replayed older head,
 * schema evolution, a type change refused, a zombie writer refused, snapshot
 * expiry, and `verify`.
 * @ref LLP 0051, LLP 0052, LLP 0053
 */
import assert from 'node:assert/strict';
import { cpSync, promises as fsp, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { S3Client } from '@aws-sdk/client-s3';
import { parquetMetadata } from 'hyparquet';
import { DuckDBInstance } from '@duckdb/node-api';
import { eventLines, FIXTURE_PLUGINS, ingestText, type Json, openKernel, sampleConfig, writeConfig, withKernel as run } from '../support/kernel.js';
import { avroFilesOf, avroFilesOfS3, checkAvroFiles, fileRoute, readIcebergTable, s3Route, serveDir, startConditionalS3 } from '../support/iceberg.js';
import { throwingAt } from '../support/fault.js';
import { S3RVER_ACCESS_KEY_ID } from '../support/s3server.js';
import { tempDir } from '../support/tmp.js';

type Conditional = Awaited<ReturnType<typeof startConditionalS3>>;
let s3: Conditional;
before(async () => {
  s3 = await startConditionalS3({ buckets: ['lake'] });
  process.env.AWS_ACCESS_KEY_ID = S3RVER_ACCESS_KEY_ID;
  process.env.AWS_SECRET_ACCESS_KEY = 'S3RVER';
  process.env.AWS_EC2_METADATA_DISABLED = 'true';
});
after(() => s3.stop());

interface Setup {
  readonly dir: string;
  readonly config: string;
  /** The table's folder on disk (local-fs). */
  readonly table: string;
}

/** A config with the `lake` Iceberg sink over local-fs (or over s3rver with `s3Prefix`). */
async function setup(opts: { s3Prefix?: string; writerConfig?: Json; extra?: (c: ReturnType<typeof sampleConfig>) => void } = {}): Promise<Setup> {
  const dir = tempDir('hypsink-iceberg-');
  const c = sampleConfig();
  delete (c.sinks as Record<string, unknown>).archive;
  c.sinks.lake = {
    writer: '@hypsink/format-iceberg',
    datasets: ['events'],
    ...(opts.s3Prefix
      ? { destination: '@hypsink/s3', config: { bucket: 'lake', prefix: opts.s3Prefix, region: 'us-east-1', endpoint: s3.endpoint, forcePathStyle: true } }
      : { destination: '@hypsink/local-fs', config: { dir: 'lake' } }),
    ...(opts.writerConfig ? { writerConfig: opts.writerConfig } : {}),
  };
  opts.extra?.(c);
  return { dir, config: await writeConfig(dir, c), table: join(dir, 'lake', 'events') };
}

async function ingestAndExport(config: string, source: string, from: number, n: number, extra?: (id: number) => Json): Promise<void> {
  await run(config, async (k) => {
    const r = await ingestText(k, source, eventLines(from, n, extra));
    assert.equal(r.rejected, 0, JSON.stringify(r));
    const e = await k.export('lake');
    for (const p of e[0]!.partitions) assert.equal(p.error, null, JSON.stringify(p.error));
  });
}

/** The local table read by icebird over a loopback file server. */
async function readLocal(s: Setup, metadataFileName?: string) {
  const srv = await serveDir(s.dir);
  try {
    return await readIcebergTable({ tableUrl: `file://${s.table}`, route: fileRoute(s.dir, srv.url), ...(metadataFileName ? { metadataFileName } : {}) });
  } finally {
    await srv.close();
  }
}

/** Each id once: the ids of `rows` sorted, against `want`. */
function assertIds(rows: Record<string, unknown>[], want: number[], what: string): void {
  const got = rows.map((r) => Number(r.id)).sort((a, b) => a - b);
  assert.equal(new Set(got).size, got.length, `${what}: ${got.length - new Set(got).size} duplicate row(s)`);
  assert.deepEqual(got, [...want].sort((a, b) => a - b), `${what}: the table's ids differ from the rows exported`);
}

const range = (from: number, n: number) => Array.from({ length: n }, (_, i) => from + i);

function metadataFiles(s: Setup): string[] {
  return readdirSync(join(s.table, 'metadata')).filter((n) => n.endsWith('.metadata.json'));
}

function headOf(s: Setup): { version: number; metadata: Json } {
  const v = Math.max(...metadataFiles(s).map((n) => Number(/^v(\d+)/.exec(n)![1])));
  return { version: v, metadata: JSON.parse(readFileSync(join(s.table, 'metadata', `v${v}.metadata.json`), 'utf8')) as Json };
}

test('local-fs: every row once, read by icebird; the spec files decode with avsc; field ids in the Parquet; summaries name writer, partition and range', async () => {
  const s = await setup();
  await ingestAndExport(s.config, 'web', 1, 120);
  await run(s.config, async (k) => {
    await ingestText(k, 'app', eventLines(1000, 30));
    await ingestText(k, 'web', eventLines(121, 80));
    await k.export('lake');
  });
  const { rows, metadata } = await readLocal(s);
  assertIds(rows, [...range(1, 200), ...range(1000, 30)], 'local table');
  assert.deepEqual(Object.keys(rows[0]!).sort(), ['id', 'msg', 'source', 'ts']);
  assert.ok(rows.every((r) => (r.source === 'app') === Number(r.id) >= 1000), 'source column');
  const r7 = rows.find((r) => Number(r.id) === 7)!;
  assert.equal((r7.ts as Date).toISOString(), new Date(Date.UTC(2026, 0, 1) + 7000).toISOString());
  assert.equal(r7.msg, 'm7');
  assert.equal(metadata['format-version'], 2);
  // Three units, three snapshots, each naming its writer, partition and range.
  const snaps = metadata.snapshots as { summary: Record<string, string> }[];
  const marks = snaps.map((x) => `${x.summary['hypsink.partition']} (${x.summary['hypsink.since']}, ${x.summary['hypsink.until']}]`).sort();
  assert.equal(snaps.length, 3);
  assert.equal(new Set(marks).size, 3, marks.join(', '));
  assert.equal(new Set(snaps.map((x) => x.summary['hypsink.writer'])).size, 1);
  assert.equal(readFileSync(join(s.table, 'metadata', 'version-hint.text'), 'utf8').trim(), String(headOf(s).version));

  const { manifests, lists } = await checkAvroFiles(await avroFilesOf(s.table), { requireMetrics: true });
  assert.equal(manifests.length, 3);
  // A commit that lost a race to the same sink's other partition leaves its manifest list unreferenced (LLP 0051).
  const referenced = new Set(snaps.map((x) => (x as unknown as { 'manifest-list': string })['manifest-list']));
  assert.equal(referenced.size, 3);
  assert.ok(lists.length >= 3);
  const files = manifests.flatMap((m) => m.entries.map((e) => e.data_file));
  assert.equal(files.reduce((n, f) => n + Number(f.record_count), 0), 230);
  for (const f of files) {
    assert.match(f.file_path, /^file:\/\/\//);
    assert.equal(f.partition.source === 'app' || f.partition.source === 'web', true);
    assert.equal(typeof f.partition.ts_day, 'number');
  }
  // Lower and upper bounds of id (field 2) bracket the file's ids: engines prune on them.
  const web = files.find((f) => f.partition.source === 'web' && Number(f.record_count) === 120)!;
  const bounds = web as unknown as { lower_bounds: { key: number; value: Buffer }[]; upper_bounds: { key: number; value: Buffer }[] };
  assert.equal(bounds.lower_bounds.find((x) => x.key === 2)!.value.readBigInt64LE(0), 1n);
  assert.equal(bounds.upper_bounds.find((x) => x.key === 2)!.value.readBigInt64LE(0), 120n);

  // The data files carry the table's field ids and no internal column.
  const parquet = readFileSync(new URL(web.file_path));
  const md = parquetMetadata(parquet.buffer.slice(parquet.byteOffset, parquet.byteOffset + parquet.byteLength));
  const cols = md.schema.slice(1).map((c) => [c.name, c.field_id]);
  assert.deepEqual(cols, [
    ['source', 1],
    ['id', 2],
    ['ts', 3],
    ['msg', 4],
  ]);
  assert.equal(
    md.schema.some((c) => c.name.startsWith('_hyp_')),
    false,
  );
  const verified = await run(s.config, (k) => k.verify('lake'));
  assert.equal(verified.ok, true, JSON.stringify(verified));
});

test('S3 (s3rver, If-None-Match enforced): every row once, read by icebird over HTTP; the Avro files check', async () => {
  const prefix = `t${Date.now()}`;
  const s = await setup({ s3Prefix: prefix });
  await ingestAndExport(s.config, 'web', 1, 50);
  await ingestAndExport(s.config, 'web', 51, 50);
  const { rows } = await readIcebergTable({ tableUrl: `s3://lake/${prefix}/events`, route: s3Route(s3.s3.endpoint) });
  assertIds(rows, range(1, 100), 's3 table');
  const client = new S3Client({ endpoint: s3.s3.endpoint, forcePathStyle: true, region: 'us-east-1', credentials: { accessKeyId: S3RVER_ACCESS_KEY_ID, secretAccessKey: 'S3RVER' } });
  const { manifests } = await checkAvroFiles(await avroFilesOfS3(client, 'lake', `${prefix}/events`), { requireMetrics: true });
  assert.equal(manifests.length, 2);
  assert.ok(manifests.every((m) => m.entries.every((e) => e.data_file.file_path.startsWith(`s3://lake/${prefix}/events/data/`))));
  client.destroy();
  const verified = await run(s.config, (k) => k.verify('lake'));
  assert.equal(verified.ok, true, JSON.stringify(verified));
});

test('rows over several days: one data file per day, each in its day partition, every row once', async () => {
  const s = await setup();
  // 3 rows a day (8 h apart) for 4 days.
  const lines = range(1, 12)
    .map((id) => JSON.stringify({ id, ts: new Date(Date.UTC(2026, 2, 1) + id * 8 * 3_600_000).toISOString(), msg: `m${id}` }))
    .join('\n');
  await run(s.config, async (k) => {
    await ingestText(k, 'web', `${lines}\n`);
    await k.export('lake');
  });
  const { rows } = await readLocal(s);
  assertIds(rows, range(1, 12), 'multi-day table');
  const days = readdirSync(join(s.table, 'data', 'source=web')).sort();
  assert.deepEqual(days, ['ts_day=2026-03-01', 'ts_day=2026-03-02', 'ts_day=2026-03-03', 'ts_day=2026-03-04', 'ts_day=2026-03-05']);
  const { manifests } = await checkAvroFiles(await avroFilesOf(s.table));
  assert.equal(manifests.length, 1);
  assert.equal(manifests[0]!.entries.length, days.length);
});

test('days on both sides of the epoch and far from it: each row in its day partition, the first row\'s day first (LLP 0095)', async () => {
  const s = await setup();
  // The first row's day (1969-12-31, a millisecond before the epoch) names the first file; its
  // milliseconds are negative, so a day taken from the column's 32-bit halves must carry the sign.
  const stamps = ['1969-12-31T23:59:59.999Z', '1970-01-01T00:00:00.000Z', '1900-06-01T12:00:00.000Z', '2500-01-01T23:59:59.999Z', '1969-12-31T00:00:00.000Z', '2026-03-01T00:00:00.001Z'];
  const lines = stamps.map((ts, i) => JSON.stringify({ id: i + 1, ts, msg: `m${i + 1}` })).join('\n');
  await run(s.config, async (k) => {
    const r = await ingestText(k, 'web', `${lines}\n`);
    assert.equal(r.rejected, 0, JSON.stringify(r));
    const e = await k.export('lake');
    for (const p of e[0]!.partitions) assert.equal(p.error, null, JSON.stringify(p.error));
  });
  const { rows } = await readLocal(s);
  assertIds(rows, range(1, stamps.length), 'epoch table');
  const data = join(s.table, 'data', 'source=web');
  const days = readdirSync(data).sort();
  assert.deepEqual(days, ['ts_day=1900-06-01', 'ts_day=1969-12-31', 'ts_day=1970-01-01', 'ts_day=2026-03-01', 'ts_day=2500-01-01']);
  // local-fs keeps a commit record for each data file (its digest, for verify), none for the table's
  // metadata, manifests and lists, put exclusive: nothing would read one (LLP 0095).
  const commits = join(s.dir, 'lake', '.hypsink-tmp', 'commits');
  const recorded = readdirSync(commits).map((n) => (JSON.parse(readFileSync(join(commits, n), 'utf8')) as { key: string }).key).sort();
  const dataFiles = days.map((day) => `events/data/source=web/${day}/${readdirSync(join(data, day))[0]}`).sort();
  assert.deepEqual(recorded, dataFiles);
  // Each day's file holds that day's rows (read by DuckDB, not by us).
  const db = await DuckDBInstance.create(':memory:');
  const c = await db.connect();
  const byDay = new Map<string, number[]>();
  for (const [i, ts] of stamps.entries()) {
    const day = `ts_day=${ts.slice(0, 10)}`;
    byDay.set(day, [...(byDay.get(day) ?? []), i + 1]);
  }
  try {
    for (const day of days) {
      const files = readdirSync(join(data, day));
      assert.equal(files.length, 1, day);
      const ids = (await c.runAndReadAll(`SELECT id FROM '${join(data, day, files[0]!)}' ORDER BY id`)).getRowObjects().map((r) => Number(r.id));
      assert.deepEqual(ids, byDay.get(day), day);
    }
  } finally {
    c.closeSync();
    db.closeSync();
  }
});

test('schema evolution: a nullable column added to the dataset is a new field; older files read it as null; a changed type is refused', async () => {
  const s = await setup();
  await ingestAndExport(s.config, 'web', 1, 10);
  const c = JSON.parse(await fsp.readFile(s.config, 'utf8'));
  c.datasets.events.columns.push({ name: 'level', type: 'STRING', nullable: true });
  await fsp.writeFile(s.config, JSON.stringify(c));
  await ingestAndExport(s.config, 'web', 11, 10, (id) => ({ level: `L${id}` }));
  const { rows, metadata } = await readLocal(s);
  assertIds(rows, range(1, 20), 'evolved table');
  for (const r of rows) assert.equal(r.level ?? null, Number(r.id) > 10 ? `L${r.id}` : null, `row ${r.id}`);
  const schemas = metadata.schemas as { 'schema-id': number; fields: { id: number; name: string }[] }[];
  assert.equal(schemas.length, 2);
  assert.deepEqual(schemas[1]!.fields.find((f) => f.name === 'level')!.id, 5);

  // msg becomes INT64: Iceberg cannot read the old files' strings as longs. Refused, nothing committed.
  const before = metadataFiles(s).length;
  const d = JSON.parse(await fsp.readFile(s.config, 'utf8'));
  d.datasets.events.columns = d.datasets.events.columns.map((x: Json) => (x.name === 'msg' ? { ...x, type: 'INT64' } : x));
  await fsp.writeFile(s.config, JSON.stringify(d));
  const err = await run(s.config, async (k) => {
    await ingestText(k, 'web', `${JSON.stringify({ id: 21, ts: '2026-01-01T00:00:00Z', msg: 5 })}\n`);
    const e = await k.export('lake');
    return e[0]!.partitions.find((p) => p.error)?.error;
  });
  assert.match(String(err?.message), /column "msg" is string in the table .* and INT64/);
  assert.equal(metadataFiles(s).length, before);
});

test('a replayed older head (a rollback): the writer neither commits an advanced unit again nor skips one, and an open intent is committed once', async () => {
  const s = await setup();
  await ingestAndExport(s.config, 'web', 1, 10); // v2: unit 1
  await ingestAndExport(s.config, 'web', 11, 10); // v3: unit 2
  await ingestAndExport(s.config, 'web', 21, 10); // v4: unit 3
  // The table goes back to v2's state, as a rollback writes it: a new version with v2's contents.
  const v2 = readFileSync(join(s.table, 'metadata', 'v2.metadata.json'));
  await fsp.writeFile(join(s.table, 'metadata', 'v5.metadata.json'), v2);
  const { k, logs } = await openKernel(s.config);
  try {
    await ingestText(k, 'web', eventLines(31, 10));
    await k.export('lake');
  } finally {
    await k.close();
  }
  // Said, not silent: the rolled-back unit's rows are out of the table.
  assert.ok(logs.some((l) => String(l.msg).includes('the table no longer holds this writer\'s unit ending at seq 30')), JSON.stringify(logs.filter((l) => Number(l.level) >= 40)));
  let { rows } = await readLocal(s);
  // Units 2 and 3 stay rolled back (the operator's choice); unit 4 lands once, after unit 1.
  assertIds(rows, [...range(1, 10), ...range(31, 10)], 'after the rollback');
  // verify reads the units from the snapshots: the rolled-back ones are a hole before the watermark.
  const v = await run(s.config, (k) => k.verify('lake'));
  assert.equal(v.ok, false);
  assert.match(JSON.stringify(v.sinks[0]!.findings), /\(10, 30\]|10.*30/);

  // Unit 5 fails right after its commit (the watermark not advanced): an open intent.
  await throwingAt('iceberg.afterCommit', () =>
    run(s.config, async (k) => {
      await ingestText(k, 'web', eventLines(41, 10));
      const e = await k.export('lake');
      assert.match(String(e[0]!.partitions[0]!.error?.message), /injected failure at fault point iceberg.afterCommit/);
    }),
  );
  // The retry finds unit 5's own snapshot: committed, not again.
  await run(s.config, (k) => k.export('lake'));
  ({ rows } = await readLocal(s));
  assertIds(rows, [...range(1, 10), ...range(31, 10), ...range(41, 10)], 'after the retry');

  // Unit 6 fails after its commit too; then the head is replayed to before it: the retry commits it once.
  await throwingAt('iceberg.afterCommit', () =>
    run(s.config, async (k) => {
      await ingestText(k, 'web', eventLines(51, 10));
      await k.export('lake');
    }),
  );
  const head = headOf(s);
  const older = readFileSync(join(s.table, 'metadata', `v${head.version - 1}.metadata.json`));
  await fsp.writeFile(join(s.table, 'metadata', `v${head.version + 1}.metadata.json`), older);
  await run(s.config, (k) => k.export('lake'));
  ({ rows } = await readLocal(s));
  assertIds(rows, [...range(1, 10), ...range(31, 10), ...range(41, 10), ...range(51, 10)], 'after the second rollback');
});

test('a second process with this cache identity (a copied cache folder) is refused by the snapshot check (HYPSINK_ERR_CONFLICT), nothing committed twice', async () => {
  const s = await setup({ extra: (c) => ((c.cache as Json).root = 'cache') });
  await run(s.config, async (k) => {
    await ingestText(k, 'web', eventLines(1, 10));
  });
  // The copy: same cache id, same sink; it goes on with rows of its own.
  const twin = tempDir('hypsink-iceberg-twin-');
  cpSync(join(s.dir, 'cache'), join(twin, 'cache'), { recursive: true });
  const tc = JSON.parse(await fsp.readFile(s.config, 'utf8'));
  tc.sinks.lake.config.dir = join(s.dir, 'lake');
  const twinConfig = await writeConfig(twin, tc);
  await run(s.config, (k) => k.export('lake'));
  const err = await run(twinConfig, async (k) => {
    // Told (wrongly) that the original stopped: the copy's own check is passed, the table's must hold. @ref LLP 0055
    await k.identityMoved();
    await ingestText(k, 'web', eventLines(11, 5));
    const e = await k.export('lake');
    return e[0]!.partitions.find((p) => p.error)?.error;
  });
  // The one refusal of other rows under this cache's identity (LLP 0058): the twin's (0, 15] overlaps the committed (0, 10].
  assert.equal(err?.code, 'HYPSINK_ERR_CONFLICT', String(err?.message));
  assert.match(String(err?.message), /unit \(start, 10\] with digest u1-.*a copy of another/);
  const { rows } = await readLocal(s);
  assertIds(rows, range(1, 10), 'after the twin');
});

test('maintain expires old snapshots but keeps the newest of every writer and partition (an open intent finds it); the table reads whole; no live file removed', async () => {
  const s = await setup({ writerConfig: { maxSnapshotAgeMs: 1, minSnapshotsToKeep: 1 } });
  for (let i = 0; i < 3; i++) await ingestAndExport(s.config, 'web', 1 + i * 10, 10);
  // web's fourth unit commits, then fails before its watermark moves: an open intent.
  await throwingAt('iceberg.afterCommit', () =>
    run(s.config, async (k) => {
      await ingestText(k, 'web', eventLines(31, 10));
      await k.export('lake');
    }),
  );
  await ingestAndExport(s.config, 'app', 100, 5); // the current snapshot is app's now
  const dataBefore = (await fsp.readdir(join(s.table, 'data'), { recursive: true })).filter((n) => String(n).endsWith('.parquet')).length;
  const lists = () => readdirSync(join(s.table, 'metadata')).filter((n) => n.startsWith('snap-')).length;
  const listsBefore = lists();
  const r = await run(s.config, (k) => k.maintain({ tables: true }));
  assert.match(r.tables[0]!.done, /3 snapshot\(s\) expired, 2 kept; 3 file\(s\) removed/);
  const m = headOf(s).metadata;
  const kept = (m.snapshots as { summary: Record<string, string> }[]).map((x) => `${x.summary['hypsink.partition']}:${x.summary['hypsink.until']}`);
  assert.equal(kept.length, 2, kept.join(', '));
  assert.equal(lists(), listsBefore - 3);
  const dataAfter = (await fsp.readdir(join(s.table, 'data'), { recursive: true })).filter((n) => String(n).endsWith('.parquet')).length;
  assert.equal(dataAfter, dataBefore);
  let { rows } = await readLocal(s);
  assertIds(rows, [...range(1, 40), ...range(100, 5)], 'after expiry');
  // The open intent's retry finds its snapshot (kept): advanced, not committed again. Then one more unit.
  await ingestAndExport(s.config, 'web', 41, 10);
  ({ rows } = await readLocal(s));
  assertIds(rows, [...range(1, 50), ...range(100, 5)], 'after expiry and the retry');
  await checkAvroFiles(await avroFilesOf(s.table));
});

test('config: keys.time with the table writer is refused, naming the sink; an unknown writerConfig key too', async () => {
  const s = await setup({ extra: (c) => ((c.sinks.lake as Json).keys = { time: 'day' }) });
  await assert.rejects(() => run(s.config, (k) => k.validate()), /keys.time does not apply to the table writer @hypsink\/format-iceberg/);
  const t = await setup({ writerConfig: { tabel: 'x' } });
  await assert.rejects(() => run(t.config, (k) => k.validate()), /writerConfig.tabel.*table/s);
  // A destination without get/replace/list/locate cannot hold a table: refused when the sink is built.
  const u = await setup({
    extra: (c) => {
      c.plugins = [join(FIXTURE_PLUGINS, 'put-only-destination')];
      Object.assign(c.sinks.lake as Json, { destination: 'test-put-only-destination', config: {} });
    },
  });
  await assert.rejects(() => run(u.config, (k) => k.validate()), /needs a destination that can get, replace, list and locate blobs, and test-put-only-destination cannot/);
});
