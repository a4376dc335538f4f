/**
 * The table a dataset's rows go to: made in the configured schema (quoted
 * names, so a schema or table of any spelling works), widened when the
 * dataset gains a nullable column (config changed between runs, as an
 * operator would), and with createTable:false only checked: a missing table,
 * a column of another type, a missing column or a NOT NULL column the
 * dataset cannot fill stop the sink with HYPSINK_ERR_DESTINATION naming the
 * table and column, and write nothing.
 */
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { eventLines, ingestText, type Json, writeConfig } from '../support/kernel.js';
import { testPg } from '../support/pg.js';
import { EVENTS, pgConfig, type PgWorkspace, pgWorkspace } from './helpers.js';

after(async () => (await testPg()).stop());

const tablesIn = async (w: PgWorkspace, schema: string) =>
  (await w.query('SELECT table_name FROM information_schema.tables WHERE table_schema = $1 ORDER BY table_name', [schema])).map((r) => r.table_name);

/** One export of `w` with `rows` of source "h" ingested first; the partition's report. */
async function exportOnce(w: PgWorkspace, from: number, n: number) {
  const { k } = await w.open();
  try {
    await ingestText(k, 'h', eventLines(from, n));
    const [t] = await k.export('warehouse');
    const st = await k.status();
    return { report: t!.partitions[0]!, local: st.sinks[0]!.partitions[0]! };
  } finally {
    await k.close();
  }
}

test('config.schema and config.table: every table of the sink is in that schema, under quoted names', async () => {
  const pg = await testPg();
  const url = await pg.database('pgschema');
  await pg.query('CREATE SCHEMA "Ops Data"', [], url);
  const w = await pgWorkspace({ url, sink: { schema: 'Ops Data', table: 'Events 2026' } });
  const { report } = await exportOnce(w, 1, 5);
  assert.equal(report.error, null);
  assert.deepEqual(await tablesIn(w, 'Ops Data'), ['Events 2026', 'hypsink_rejected', 'hypsink_units', 'hypsink_watermarks']);
  assert.deepEqual(await tablesIn(w, 'public'), []);
  assert.deepEqual((await w.query('SELECT id::int FROM "Ops Data"."Events 2026" ORDER BY id')).map((r) => r.id), [1, 2, 3, 4, 5]);
  const wm = await w.query('SELECT target FROM "Ops Data".hypsink_watermarks');
  assert.deepEqual(wm.map((r) => r.target), ['Ops Data.Events 2026']);
});

test('a schema that does not exist: HYPSINK_ERR_DESTINATION naming it, nothing written', async () => {
  const w = await pgWorkspace({ sink: { schema: 'nowhere' } });
  const { report, local } = await exportOnce(w, 1, 5);
  assert.equal(report.error?.code, 'HYPSINK_ERR_DESTINATION', String(report.error));
  assert.match(report.error!.message, /^sink "warehouse": postgres:\/\/postgres@[^ ]+: schema "nowhere" does not exist \(SQLSTATE 3F000\); create it \(CREATE SCHEMA nowhere\) or set config\.schema to one that exists/);
  assert.equal(local.watermark, null);
});

test('a nullable column added to the dataset is added to the table; rows before it read null', async () => {
  const w = await pgWorkspace();
  assert.equal((await exportOnce(w, 1, 3)).report.error, null);
  const wider = {
    ...EVENTS,
    columns: [...EVENTS.columns, { name: 'extra', type: 'STRING', nullable: true }, { name: 'score', type: 'DOUBLE', nullable: true }],
  };
  await writeConfig(w.dir, pgConfig(w.url, { datasets: { events: wider } }));
  const { k } = await w.open();
  try {
    await ingestText(k, 'h', eventLines(4, 2, (id) => ({ extra: `x${id}`, score: id / 4 })));
    const [t] = await k.export('warehouse');
    assert.equal(t!.failed, 0, String(t!.partitions[0]!.error));
  } finally {
    await k.close();
  }
  const cols = await w.query("SELECT column_name, data_type, is_nullable FROM information_schema.columns WHERE table_name = 'events' ORDER BY ordinal_position");
  assert.deepEqual(
    cols.map((c) => `${c.column_name} ${c.data_type} ${c.is_nullable}`),
    ['source text NO', 'id bigint NO', 'ts timestamp with time zone NO', 'msg text YES', 'extra text YES', 'score double precision YES'],
  );
  assert.deepEqual(
    (await w.rows()).map((r) => [Number(r.id), r.extra, r.score]),
    [
      [1, null, null],
      [2, null, null],
      [3, null, null],
      [4, 'x4', 1],
      [5, 'x5', 1.25],
    ],
  );
});

for (const [what, ddl, pattern] of [
  ['the table is missing', null, /table public\.events does not exist and config\.createTable is false/],
  ['a column has another type', 'CREATE TABLE events (source text NOT NULL, id text NOT NULL, ts timestamptz NOT NULL, msg text)', /column "id" of table public\.events is text, but the dataset's INT64 column goes to bigint/],
  ['a column is missing', 'CREATE TABLE events (source text NOT NULL, id bigint NOT NULL, ts timestamptz NOT NULL)', /table public\.events has no column "msg" \(text\)/],
  ['the source column is missing', 'CREATE TABLE events (id bigint NOT NULL, ts timestamptz NOT NULL, msg text)', /table public\.events has no column "source" \(text NOT NULL\)/],
  [
    'a NOT NULL column the dataset does not have',
    'CREATE TABLE events (source text NOT NULL, id bigint NOT NULL, ts timestamptz NOT NULL, msg text, region text NOT NULL)',
    /table public\.events has a NOT NULL column "region" without a default/,
  ],
] as const) {
  test(`createTable: false and ${what}: HYPSINK_ERR_DESTINATION naming it, nothing written`, async () => {
    const w = await pgWorkspace({ sink: { createTable: false } });
    if (ddl) await w.query(ddl);
    const { report, local } = await exportOnce(w, 1, 5);
    assert.equal(report.error?.code, 'HYPSINK_ERR_DESTINATION', String(report.error));
    assert.match(report.error!.message, /^sink "warehouse": /);
    assert.match(report.error!.message, pattern);
    assert.equal(local.watermark, null, 'the local watermark did not move');
    assert.match(String(local.lastError), /^HYPSINK_ERR_DESTINATION: /, 'status shows the error');
    assert.deepEqual(await w.query('SELECT * FROM hypsink_watermarks'), [], 'no watermark row');
    if (ddl) assert.deepEqual(await w.query('SELECT * FROM events'), []);
    else assert.deepEqual(await tablesIn(w, 'public'), ['hypsink_rejected', 'hypsink_units', 'hypsink_watermarks'], 'only its own tables are made');
  });
}

test('createTable: false and a table that fits, with a nullable column and a defaulted one the dataset lacks: rows land', async () => {
  const w = await pgWorkspace({ sink: { createTable: false } });
  await w.query("CREATE TABLE events (region text DEFAULT 'eu' NOT NULL, source text NOT NULL, id bigint NOT NULL, ts timestamptz NOT NULL, msg text, note text)");
  const { report } = await exportOnce(w, 1, 3);
  assert.equal(report.error, null, String(report.error));
  assert.deepEqual(
    (await w.rows()).map((r) => [r.region, r.source, Number(r.id), r.msg, r.note]),
    [
      ['eu', 'h', 1, 'm1', null],
      ['eu', 'h', 2, 'm2', null],
      ['eu', 'h', 3, 'm3', null],
    ],
  );
});

test('createTable: false and a table made by hand with an identity key, a domain-typed column and a timestamp with a precision: rows land (LLP 0092)', async () => {
  const w = await pgWorkspace({ sink: { createTable: false } });
  await w.query('CREATE DOMAIN event_id AS bigint NOT NULL CHECK (VALUE > 0)');
  await w.query('CREATE TABLE events (k bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, source text NOT NULL, id event_id, ts timestamptz(3) NOT NULL, msg text)');
  const { report } = await exportOnce(w, 1, 3);
  assert.equal(report.error, null, String(report.error));
  assert.deepEqual(
    (await w.query('SELECT k::int, id::int, msg FROM events ORDER BY k')).map((r) => [r.k, r.id, r.msg]),
    [
      [1, 1, 'm1'],
      [2, 2, 'm2'],
      [3, 3, 'm3'],
    ],
  );
});

test('createTable: false and a column typed by a domain over another type: refused naming the column and its base type (LLP 0092)', async () => {
  const w = await pgWorkspace({ sink: { createTable: false } });
  await w.query('CREATE DOMAIN label AS integer');
  await w.query('CREATE TABLE events (source text NOT NULL, id bigint NOT NULL, ts timestamptz NOT NULL, msg label)');
  const { report } = await exportOnce(w, 1, 2);
  assert.equal(report.error?.code, 'HYPSINK_ERR_DESTINATION');
  assert.match(report.error!.message, /column "msg" of table public\.events is integer, but the dataset's STRING column goes to text/);
});

test('createTable: false and a column the dataset gained: HYPSINK_ERR_DESTINATION naming the column, the table unchanged', async () => {
  const w = await pgWorkspace({ sink: { createTable: false } });
  await w.query('CREATE TABLE events (source text NOT NULL, id bigint NOT NULL, ts timestamptz NOT NULL, msg text)');
  assert.equal((await exportOnce(w, 1, 2)).report.error, null);
  const wider: Json = { ...EVENTS, columns: [...EVENTS.columns, { name: 'extra', type: 'JSON', nullable: true }] };
  await writeConfig(w.dir, pgConfig(w.url, { datasets: { events: wider }, sink: { createTable: false } }));
  const { report, local } = await exportOnce(w, 3, 2);
  assert.equal(report.error?.code, 'HYPSINK_ERR_DESTINATION');
  assert.match(report.error!.message, /table public\.events has no column "extra" \(jsonb\), which the dataset has; add it, or set config\.createTable to true/);
  assert.equal((await w.rows()).length, 2);
  assert.equal((await w.query("SELECT count(*)::int AS n FROM information_schema.columns WHERE table_name = 'events'"))[0]!.n, 4);
  assert.notEqual(local.watermark, null);
});
