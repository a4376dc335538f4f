/**
 * Output types engines read right (issue 28): DuckDB, a reader we did not
 * write, reads every blob format our sinks write (Parquet, JSONL) and the
 * Iceberg writer's data files, and finds TIMESTAMP WITH TIME ZONE for
 * timestamps, JSON for JSON columns (Parquet's JSON logical type), BIGINT for
 * INT64 (JSONL too, beyond ±2^53), and NOT NULL columns as required fields
 * (`parquet_schema()`'s repetition: DuckDB's DESCRIBE says `null: YES` for
 * every Parquet column, required or not). A partition holding a blob in the
 * layout written before (ms, no zone, optional, plain strings) keeps reading:
 * DuckDB reads the folder, `verify` finds it whole.
 * @ref LLP 0069
 */
import assert from 'node:assert/strict';
import { promises as fsp, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { type DuckDBConnection, DuckDBInstance } from '@duckdb/node-api';
import { Field, makeData, RecordBatch, Schema, Struct, Table, TimeUnit, TimestampMillisecond, type Timestamp, tableFromIPC, tableToIPC } from 'apache-arrow';
import * as pw from 'parquet-wasm/node';
import { digestFile, recordPath } from '../../plugins/local-fs/src/files.js';
import { type Json, ingestText, openKernel, walkFiles, writeConfig } from '../support/kernel.js';
import { tempDir } from '../support/tmp.js';

const BIG = [9_007_199_254_740_993n, -9_007_199_254_740_993n, 9_223_372_036_854_775_807n];
const T0 = Date.UTC(2026, 0, 1);

/** Rows `from`..`from+n-1`: `big` alternates small numbers and INT64 beyond ±2^53 (row form: decimal strings). */
function lines(from: number, n: number): string {
  let s = '';
  for (let id = from; id < from + n; id++) {
    const big = id % 2 === 0 ? BIG[id % BIG.length]!.toString() : id * 7;
    s += `${JSON.stringify({ id, ts: new Date(T0 + id * 1000).toISOString(), kind: `k${id % 3}`, note: id % 4 === 0 ? null : `n${id}`, big, payload: { id, tags: ['a', id] } })}\n`;
  }
  return s;
}

const bigOf = (id: number): string => (id % 2 === 0 ? BIG[id % BIG.length]!.toString() : String(id * 7));

async function setup(): Promise<{ dir: string; config: string }> {
  const dir = tempDir('hypsink-engines-');
  const config = await writeConfig(dir, {
    cache: { root: '.hypsink/cache' },
    datasets: {
      events: {
        columns: [
          { name: 'id', type: 'INT64', nullable: false },
          { name: 'ts', type: 'TIMESTAMP', nullable: false },
          { name: 'kind', type: 'STRING', nullable: false },
          { name: 'note', type: 'STRING', nullable: true },
          { name: 'big', type: 'INT64', nullable: true },
          { name: 'payload', type: 'JSON', nullable: true },
        ],
        timestampColumn: 'ts',
      },
    },
    sinks: {
      parquet: { writer: '@hypsink/format-parquet', destination: '@hypsink/local-fs', datasets: ['events'], config: { dir: 'parquet' } },
      jsonl: { writer: '@hypsink/format-jsonl', destination: '@hypsink/local-fs', datasets: ['events'], config: { dir: 'jsonl' } },
      lake: { writer: '@hypsink/format-iceberg', destination: '@hypsink/local-fs', datasets: ['events'], config: { dir: 'lake' } },
    },
  });
  return { dir, config };
}

async function exportRows(config: string, from: number, n: number, sink?: string): Promise<void> {
  const { k } = await openKernel(config);
  try {
    if (n > 0) assert.equal((await ingestText(k, 'h1', lines(from, n))).rejected, 0);
    for (const t of await k.export(sink)) for (const p of t.partitions) assert.equal(p.error, null, `${t.sink}: ${JSON.stringify(p.error)}`);
  } finally {
    await k.close();
  }
}

async function duck<T>(fn: (c: DuckDBConnection) => Promise<T>): Promise<T> {
  const db = await DuckDBInstance.create(':memory:');
  const c = await db.connect();
  try {
    return await fn(c);
  } finally {
    c.closeSync();
    db.closeSync();
  }
}

const rows = async (c: DuckDBConnection, sql: string) => (await c.runAndReadAll(sql)).getRowObjects();
const q = (path: string) => `'${path.replace(/'/g, "''")}'`;

/** Column → DuckDB type, from DESCRIBE. */
async function described(c: DuckDBConnection, from: string): Promise<Record<string, string>> {
  return Object.fromEntries((await rows(c, `DESCRIBE SELECT * FROM ${from}`)).map((r) => [String(r.column_name), String(r.column_type)]));
}

/** Column → [repetition, logical type], from the file's own Parquet schema. */
async function parquetSchema(c: DuckDBConnection, path: string): Promise<Record<string, [string, string]>> {
  const out: Record<string, [string, string]> = {};
  for (const r of await rows(c, `SELECT name, repetition_type, logical_type FROM parquet_schema(${q(path)}) WHERE type IS NOT NULL`)) {
    out[String(r.name)] = [String(r.repetition_type), String(r.logical_type)];
  }
  return out;
}

/** Column → the encodings of its chunks, from the file's footer as DuckDB reads it. */
async function encodings(c: DuckDBConnection, path: string): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  for (const r of await rows(c, `SELECT path_in_schema AS name, string_agg(DISTINCT encodings, '|') AS enc FROM parquet_metadata(${q(path)}) GROUP BY 1`)) {
    out[String(r.name)] = String(r.enc);
  }
  return out;
}

/** id → [epoch ms of ts, big as text], read back through DuckDB. */
async function values(c: DuckDBConnection, from: string): Promise<Map<number, [number, string]>> {
  const out = new Map<number, [number, string]>();
  for (const r of await rows(c, `SELECT id, epoch_ms(ts)::BIGINT AS ms, big::VARCHAR AS big FROM ${from}`)) out.set(Number(r.id), [Number(r.ms), String(r.big)]);
  return out;
}

function assertValues(got: Map<number, [number, string]>, ids: number[]): void {
  assert.deepEqual([...got.keys()].sort((a, b) => a - b), ids);
  for (const id of ids) assert.deepEqual(got.get(id), [T0 + id * 1000, bigOf(id)], `row ${id}`);
}

const ids = (from: number, n: number) => Array.from({ length: n }, (_, i) => from + i);

test('DuckDB reads every output format with the types the dataset declares', async () => {
  const { dir, config } = await setup();
  await exportRows(config, 1, 12);
  const files = await walkFiles(dir, '.hypsink-tmp');
  const parquet = files.filter((f) => f.startsWith(join(dir, 'parquet')) && f.endsWith('.parquet'));
  const jsonl = files.filter((f) => f.startsWith(join(dir, 'jsonl')) && f.endsWith('.jsonl'));
  const iceberg = files.filter((f) => f.startsWith(join(dir, 'lake')) && f.includes('/data/') && f.endsWith('.parquet'));
  assert.equal(parquet.length, 1);
  assert.equal(jsonl.length, 1);
  assert.ok(iceberg.length >= 1);
  await duck(async (c) => {
    // Parquet blob: zone-aware µs timestamps, JSON, BIGINT, NOT NULL as required.
    const p = parquet[0]!;
    assert.deepEqual(await described(c, `read_parquet(${q(p)}, hive_partitioning = false)`), {
      id: 'BIGINT',
      ts: 'TIMESTAMP WITH TIME ZONE',
      kind: 'VARCHAR',
      note: 'VARCHAR',
      big: 'BIGINT',
      payload: 'JSON',
    });
    const ps = await parquetSchema(c, p);
    assert.deepEqual(
      Object.fromEntries(Object.entries(ps).map(([k, v]) => [k, v[0]])),
      { id: 'REQUIRED', ts: 'REQUIRED', kind: 'REQUIRED', note: 'OPTIONAL', big: 'OPTIONAL', payload: 'OPTIONAL' },
    );
    assert.match(ps.ts![1], /isAdjustedToUTC=1/);
    assert.match(ps.ts![1], /MICROS=MicroSeconds\(\)/);
    assert.match(ps.payload![1], /JsonType/);
    assertValues(await values(c, `read_parquet(${q(p)}, hive_partitioning = false)`), ids(1, 12));
    const payload = await rows(c, `SELECT payload->>'$.tags[1]' AS t FROM read_parquet(${q(p)}, hive_partitioning = false) WHERE id = 5`);
    assert.equal(payload[0]!.t, '5');

    // JSONL blob: INT64 is a JSON integer with all its digits, so the column is BIGINT, not JSON.
    const j = jsonl[0]!;
    const jt = await described(c, `read_json_auto(${q(j)}, hive_partitioning = false)`);
    assert.equal(jt.id, 'BIGINT');
    // DuckDB's JSON reader takes a non-negative integer as unsigned and a negative one as signed,
    // so a column of both signs is its 128-bit integer: an integer still, every value exact.
    assert.equal(jt.big, 'HUGEINT');
    // JSON has no timestamp type: ISO-8601 in UTC, which DuckDB reads as a timestamp of that instant.
    assert.equal(jt.ts, 'TIMESTAMP');
    assertValues(await values(c, `read_json_auto(${q(j)}, hive_partitioning = false)`), ids(1, 12));

    // Iceberg data files: timestamptz in µs, long, and the table's required fields as REQUIRED.
    for (const f of iceberg) {
      const t = await described(c, `read_parquet(${q(f)}, hive_partitioning = false)`);
      assert.equal(t.ts, 'TIMESTAMP WITH TIME ZONE', f);
      assert.equal(t.id, 'BIGINT', f);
      assert.equal(t.big, 'BIGINT', f);
      // Iceberg has no JSON type: a JSON column is a string field of the table.
      assert.equal(t.payload, 'VARCHAR', f);
      const s = await parquetSchema(c, f);
      for (const col of ['id', 'ts', 'kind']) assert.equal(s[col]![0], 'REQUIRED', `${f}: ${col}`);
      for (const col of ['note', 'big', 'payload']) assert.equal(s[col]![0], 'OPTIONAL', `${f}: ${col}`);
    }
    assertValues(await values(c, `read_parquet([${iceberg.map(q).join(', ')}], hive_partitioning = false)`), ids(1, 12));

    // Numbers are never dictionary-encoded (a dictionary of them is built, found too large and
    // dropped); INT64 and TIMESTAMP are delta-encoded, strings keep their dictionary. @ref LLP 0075
    for (const f of [p, ...iceberg]) {
      const enc = await encodings(c, f);
      for (const col of ['id', 'ts', 'big']) {
        assert.match(enc[col]!, /DELTA_BINARY_PACKED/, `${f}: ${col}`);
        assert.doesNotMatch(enc[col]!, /DICTIONARY/, `${f}: ${col}`);
      }
      assert.match(enc.kind!, /DICTIONARY/, `${f}: kind`);
    }
  });
  // The table's schema says the same as its files.
  const meta = (await fsp.readdir(join(dir, 'lake', 'events', 'metadata'))).filter((n) => n.endsWith('.metadata.json')).sort();
  const m = JSON.parse(readFileSync(join(dir, 'lake', 'events', 'metadata', meta.at(-1)!), 'utf8')) as { schemas: { 'schema-id': number; fields: Json[] }[]; 'current-schema-id': number };
  const fields = m.schemas.find((s) => s['schema-id'] === m['current-schema-id'])!.fields;
  assert.deepEqual(
    Object.fromEntries(fields.map((f) => [f.name, f.required])),
    { source: true, id: true, ts: true, kind: true, note: false, big: false, payload: false },
  );
});

/** A unit's blob rewritten as the Parquet encoder wrote it before LLP 0069: the cache's batches as they are. */
function oldLayout(bytes: Uint8Array): Uint8Array {
  const t = tableFromIPC(pw.readParquet(bytes).intoIPCStream());
  const fields = t.schema.fields.map((f) => new Field(f.name, f.name === 'ts' ? new TimestampMillisecond() : f.type, true));
  const schema = new Schema(fields);
  const batches = t.batches.map((b) => {
    const children = b.data.children.map((d, i) => {
      if (fields[i]!.name !== 'ts') return d;
      const per = (d.type as Timestamp).unit === TimeUnit.MICROSECOND ? 1000n : 1n;
      const ms = new BigInt64Array(d.length);
      for (let r = 0; r < d.length; r++) ms[r] = (d.values as BigInt64Array)[r]! / per;
      return makeData({ type: new TimestampMillisecond(), length: d.length, nullCount: 0, data: ms });
    });
    return new RecordBatch(schema, makeData({ type: new Struct(schema.fields), length: b.numRows, nullCount: 0, children }));
  });
  return pw.writeParquet(pw.Table.fromIPCStream(tableToIPC(new Table(batches), 'stream')), new pw.WriterPropertiesBuilder().setCompression(pw.Compression.ZSTD).build());
}

test('a partition holding a blob of the older layout keeps reading: DuckDB reads the folder, verify finds every unit', async () => {
  const { dir, config } = await setup();
  await exportRows(config, 1, 6, 'parquet');
  // The first unit as the previous version wrote it: same key, same unit digest recorded, older types.
  const [first] = (await walkFiles(join(dir, 'parquet'), '.hypsink-tmp')).filter((f) => f.endsWith('.parquet'));
  const key = first!.slice(join(dir, 'parquet').length + 1);
  const commits = join(dir, 'parquet', '.hypsink-tmp', 'commits');
  const rec = JSON.parse(await fsp.readFile(recordPath(commits, key), 'utf8')) as Json;
  await fsp.writeFile(first!, oldLayout(await fsp.readFile(first!)));
  const d = (await digestFile(first!))!;
  await fsp.writeFile(recordPath(commits, key), JSON.stringify({ ...rec, size: d.size, sha256: d.sha256 }));
  await duck(async (c) => assert.equal((await described(c, `read_parquet(${q(first!)}, hive_partitioning = false)`)).ts, 'TIMESTAMP'));

  await exportRows(config, 7, 6, 'parquet');
  const all = (await walkFiles(join(dir, 'parquet'), '.hypsink-tmp')).filter((f) => f.endsWith('.parquet'));
  assert.equal(all.length, 2);
  await duck(async (c) => {
    // One glob over both layouts: DuckDB unifies the columns by name and reads every value. It casts the
    // old TIMESTAMP (UTC wall-clock time) to the new type in its session zone: UTC, as the README says.
    await c.run("SET TimeZone = 'UTC'");
    const glob = `read_parquet(${q(join(dir, 'parquet', '**', '*.parquet'))}, union_by_name = true, hive_partitioning = false)`;
    assertValues(await values(c, glob), ids(1, 12));
  });
  const { k } = await openKernel(config);
  try {
    const v = await k.verify('parquet');
    assert.equal(v.ok, true, JSON.stringify(v.sinks[0]?.findings));
    assert.equal(v.sinks[0]!.units, 2);
  } finally {
    await k.close();
  }
});

test('rows cached before a column was NOT NULL: that unit is written with the column optional, later units required', async () => {
  const { dir, config } = await setup();
  const c = JSON.parse(await fsp.readFile(config, 'utf8')) as { datasets: { events: { columns: Json[] } }; sinks: Record<string, Json> };
  delete c.sinks.jsonl;
  c.sinks.daily = { writer: '@hypsink/format-parquet', destination: '@hypsink/local-fs', datasets: ['events'], config: { dir: 'daily' }, keys: { time: 'day' } };
  const note = (nullable: boolean) => {
    c.datasets.events.columns = c.datasets.events.columns.map((x) => (x.name === 'note' ? { ...x, nullable } : x));
  };
  // Rows 1..6 cached while `note` was nullable (rows 4 has none), exported after it became NOT NULL.
  note(true);
  await writeConfig(dir, c);
  {
    const { k } = await openKernel(config);
    try {
      assert.equal((await ingestText(k, 'h1', lines(1, 6))).rejected, 0);
    } finally {
      await k.close();
    }
  }
  note(false);
  await writeConfig(dir, c);
  await exportRows(config, 0, 0);
  // Rows 9..11 ingested under NOT NULL (row 12 would have no note: 12 % 4 === 0).
  await exportRows(config, 9, 3);
  const repetition = async (sinkDir: string) => {
    const files = (await walkFiles(join(dir, sinkDir), '.hypsink-tmp')).filter((f) => f.endsWith('.parquet') && !f.includes('/metadata/'));
    return duck(async (d) => {
      const out: Record<string, string> = {};
      for (const f of files) out[f.slice(f.lastIndexOf('/') + 1).replace(/^[0-9a-f]+-/, '')] = (await parquetSchema(d, f)).note![0];
      return out;
    });
  };
  assert.deepEqual(await repetition('parquet'), { 'events.0-6.parquet': 'OPTIONAL', 'events.6-9.parquet': 'REQUIRED' });
  assert.deepEqual(await repetition('daily'), { 'events.0-6.parquet': 'OPTIONAL', 'events.6-9.parquet': 'REQUIRED' });
  // Iceberg: the table's field was made optional for the first unit and stays so (never made required again).
  assert.deepEqual(Object.values(await repetition('lake')), ['OPTIONAL', 'OPTIONAL']);
  await duck(async (d) => {
    const got = await rows(d, `SELECT count(*) AS n, count(note) AS notes FROM read_parquet(${q(join(dir, 'parquet', '**', '*.parquet'))}, hive_partitioning = false)`);
    assert.deepEqual([Number(got[0]!.n), Number(got[0]!.notes)], [9, 8]);
  });
});
