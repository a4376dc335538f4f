/**
 * The table the sink makes from the dataset schema, by the type map
 * (INT64 bigint, DOUBLE double precision, STRING text, BOOLEAN boolean,
 * TIMESTAMP timestamptz, JSON jsonb), and every type's values read back from
 * PostgreSQL exactly as they were ingested: INT64 past 2^53 and at both ends,
 * doubles at the ends of their range and -0, strings with what COPY's text
 * format must escape, timestamps before 1970 and at the millisecond, JSON of
 * every shape, and nulls in each column. The rows span several units and two
 * sources. Read back with SQL casts to text where a JavaScript value could
 * hide a difference.
 *
 * NaN and ±Infinity are not here: the cache refuses them at ingest (a DOUBLE
 * must be finite: kernel/ingest/normalize.ts), so no unit ever carries one.
 */
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { ingestText, type Json } from '../support/kernel.js';
import { testPg } from '../support/pg.js';
import { pgWorkspace } from './helpers.js';

after(async () => (await testPg()).stop());

const TYPES = {
  columns: [
    { name: 'id', type: 'INT64', nullable: false },
    { name: 'ts', type: 'TIMESTAMP', nullable: false },
    { name: 'n', type: 'INT64', nullable: true },
    { name: 'd', type: 'DOUBLE', nullable: true },
    { name: 's', type: 'STRING', nullable: true },
    { name: 'b', type: 'BOOLEAN', nullable: true },
    { name: 't', type: 'TIMESTAMP', nullable: true },
    { name: 'j', type: 'JSON', nullable: true },
  ],
  timestampColumn: 'ts',
};

/** Each column's values as ingested (NDJSON); what PostgreSQL must hold is `want`. */
const N: unknown[] = [0, 1, -1, 2 ** 53 - 1, -(2 ** 53 - 1), '9007199254740993', '-9007199254740993', '9223372036854775807', '-9223372036854775808', '1234567890123456789', null];
const D: number[] = [0, -0, 0.1, 1 / 3, 5e-324, 1.7976931348623157e308, -2.2250738585072014e-308, 1e21, 123456789.12345679, -1.5e-10];
const S: string[] = [
  '',
  'tab\there',
  'line\nbreak',
  'crlf\r\n',
  'back\\slash',
  '\\N',
  '\\.',
  'ends with a backslash \\',
  '\\t is not a tab',
  'unicode é ü 中文 🎉 \u200d',
  'vt\u000bff\u000c',
  'quotes " and \' and ,;|',
  'x'.repeat(200_000),
];
const B = [true, false];
const T: (string | number)[] = [
  '1970-01-01T00:00:00.000Z',
  '1969-12-31T23:59:59.999Z',
  '1900-02-28T12:34:56.789Z',
  '2026-11-29T10:57:09.123Z',
  '9999-12-31T23:59:59.999Z',
  '0100-01-01T00:00:00.000Z',
  1_000_000_000_001,
  // Ingested as epoch ms: past year 9999, and before year 1 (PostgreSQL holds 4713 BC to 294276 AD).
  Date.UTC(12345, 6, 7, 8, 9, 10, 11),
  Date.UTC(-99, 0, 1),
  Date.parse('0000-06-15T12:00:00.000Z'),
  Date.parse('-004712-11-24T00:00:00.000Z'),
];
const J: unknown[] = [{ a: 1, b: [1, 2, { c: null }] }, [], 'a string', 42, -0.5, true, { 'tab\tkey': 'new\nline "q" \\ é 🎉' }, { b: 1, a: 2 }, [[[]]], { nested: { deep: { deeper: [1, 'two', false] } } }];

/** A JSON value with its object keys in jsonb's order (shorter first, then bytewise), as jsonb gives it back. */
function sorted(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(sorted);
  if (v === null || typeof v !== 'object') return v;
  const keys = Object.keys(v).sort((a, b) => Buffer.byteLength(a) - Buffer.byteLength(b) || Buffer.compare(Buffer.from(a), Buffer.from(b)));
  return Object.fromEntries(keys.map((k) => [k, sorted((v as Json)[k])]));
}

const ROWS = Math.max(N.length, D.length, S.length, B.length, T.length, J.length) + 3;

function row(i: number): Json {
  const at = <T>(xs: readonly T[]) => (i < xs.length ? xs[i] : null);
  return { id: i + 1, ts: new Date(Date.UTC(2026, 0, 1) + i * 1000).toISOString(), n: at(N), d: at(D), s: at(S), b: at(B), t: at(T), j: at(J) };
}

const lines = (rows: Json[]) => rows.map((r) => `${JSON.stringify(r, (_k, v) => (Object.is(v, -0) ? '__NEGZERO__' : v)).replace('"__NEGZERO__"', '-0')}\n`).join('');

test('the table is made by the type map, and every value reads back exactly', async () => {
  const w = await pgWorkspace({ datasets: { events: TYPES }, unit: { maxRows: 4 } });
  const { k } = await w.open();
  try {
    const rows = Array.from({ length: ROWS }, (_, i) => row(i));
    for (const source of ['host-a', 'host-b']) {
      const r = await ingestText(k, source, lines(rows));
      assert.equal(r.accepted, ROWS, JSON.stringify(r));
    }
    const [t] = await k.export('warehouse');
    assert.equal(t!.failed, 0, String(t!.partitions.find((p) => p.error)?.error));
    assert.ok(t!.units >= 8, `several units (${t!.units})`);

    const cols = await w.query(
      "SELECT column_name, data_type, is_nullable FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'events' ORDER BY ordinal_position",
    );
    assert.deepEqual(
      cols.map((c) => `${c.column_name} ${c.data_type} ${c.is_nullable === 'YES' ? 'null' : 'not null'}`),
      [
        'source text not null',
        'id bigint not null',
        'ts timestamp with time zone not null',
        'n bigint null',
        'd double precision null',
        's text null',
        'b boolean null',
        't timestamp with time zone null',
        'j jsonb null',
      ],
    );

    const got = await w.query(
      `SELECT source, id::text AS id, n::text AS n, d, d::text AS dt, s, b, (extract(epoch FROM t) * 1000)::bigint::text AS t,
              (extract(epoch FROM ts) * 1000)::bigint::text AS ts, j, j IS NULL AS jnull FROM events ORDER BY source, id`,
    );
    assert.deepEqual(await w.query('SELECT row_json::json->>\'id\' AS id, reason FROM hypsink_rejected'), [], 'no row refused');
    assert.equal(got.length, 2 * ROWS);
    // Every difference, not just the first: a wrong value in one column must not hide another.
    const wrong: string[] = [];
    const same = (what: string, a: unknown, b: unknown, shown = a) => {
      if (!Object.is(a, b)) wrong.push(`${what}: got ${String(shown)}, ingested ${Object.is(b, -0) ? '-0' : String(b).slice(0, 60)}`);
    };
    for (const g of got) {
      const i = Number(g.id) - 1;
      const want = row(i);
      const where = `${g.source} row ${g.id}`;
      same(`${where} ts`, g.ts, String(Date.parse(want.ts as string)));
      same(`${where} n`, g.n, want.n === null ? null : String(want.n));
      same(`${where} d`, g.d, want.d, g.dt);
      same(`${where} s`, g.s, want.s, JSON.stringify(g.s)?.slice(0, 60));
      same(`${where} b`, g.b, want.b);
      same(`${where} t`, g.t, want.t === null ? null : String(typeof want.t === 'number' ? want.t : Date.parse(want.t as string)));
      if (want.j === null) same(`${where} j is SQL NULL`, g.jnull, true);
      else if (JSON.stringify(g.j) !== JSON.stringify(sorted(want.j))) wrong.push(`${where} j: got ${JSON.stringify(g.j)}, ingested ${JSON.stringify(want.j)}`);
    }
    assert.deepEqual(wrong, []);
  } finally {
    await k.close();
  }
});

test('a timestamp PostgreSQL cannot hold (before 4713 BC) goes to the dead letter, naming the column; the rest commit', async () => {
  const w = await pgWorkspace({ datasets: { events: TYPES } });
  const { k } = await w.open();
  try {
    const early = Date.parse('-004713-01-01T00:00:00.000Z');
    const rows = [row(0), { ...row(1), t: early }, row(2)];
    assert.equal((await ingestText(k, 'h', lines(rows))).accepted, 3);
    const [t] = await k.export('warehouse');
    assert.equal(t!.failed, 0);
    assert.deepEqual((await w.query('SELECT id::int FROM events ORDER BY id')).map((r) => r.id), [1, 3]);
    const dl = await w.query('SELECT reason, row_json FROM hypsink_rejected');
    assert.equal(dl.length, 1);
    assert.match(String(dl[0]!.reason), /column t\b/);
    assert.equal((dl[0]!.row_json as Json).id, 2);
  } finally {
    await k.close();
  }
});
