/** The kernel's column-wise NDJSON bytes equal the UTF-8 of JSON.stringify of each row-form row. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { type Data, makeData, RecordBatch, Schema, Struct } from 'apache-arrow';
import { Cache } from '../../kernel/cache.js';
import { buildColumn, toRowValue, userSchema } from '../../kernel/store/columns.js';
import { batchToNdjsonBytes, NdjsonWriter } from '../../kernel/sinks/ndjson.js';
import type { ColumnSpec, DatasetSchema } from '../../types/schema.js';
import { collect } from '../support/datasets.js';
import { tempDir } from '../support/tmp.js';

const ALL: DatasetSchema = {
  columns: [
    { name: 'id', type: 'INT64', nullable: false },
    { name: 'big', type: 'INT64', nullable: true },
    { name: 'x', type: 'DOUBLE', nullable: true },
    { name: 's', type: 'STRING', nullable: true },
    { name: 'ok', type: 'BOOLEAN', nullable: true },
    { name: 'ts', type: 'TIMESTAMP', nullable: true },
    { name: 'j', type: 'JSON', nullable: true },
  ],
};
const NAMES = ['source', ...ALL.columns.map((c) => c.name)];

/** The reference: JSON.stringify of each row-form row, one line each, as UTF-8. */
function linesOf(rows: readonly unknown[]): Buffer {
  return Buffer.from(rows.map((r) => `${JSON.stringify(r)}\n`).join(''), 'utf8');
}

/** Rows through the cache (spool, Parquet), then both ways out of it: row form and NDJSON bytes. */
async function throughCache(rows: unknown[][], schema = ALL): Promise<{ got: Buffer; expected: Buffer; chunks: number }> {
  const cache = await Cache.open({ root: tempDir(), datasets: { all: schema } });
  try {
    await cache.appendRows({ dataset: 'all', id: 's' }, ['source', ...schema.columns.map((c) => c.name)], rows);
    await cache.flushTable({ dataset: 'all', id: 's' });
    const p = cache.partition('all', 'a');
    const expected = linesOf((await collect(cache.storage.readRowsSince(p))).map((r) => r.row));
    const parts: Uint8Array[] = [];
    for await (const b of cache.storage.readBatchesSince(p)) parts.push(batchToNdjsonBytes(b.batch, schema.columns));
    return { got: Buffer.concat(parts), expected, chunks: parts.length };
  } finally {
    await cache.close?.();
  }
}

/** A batch built in memory from row-form-ready values per column (see columns.ts buildColumn). */
function batchOf(cols: readonly ColumnSpec[], values: readonly (readonly unknown[])[]): RecordBatch {
  const schema = userSchema(cols);
  const children: Data[] = cols.map((c, i) => buildColumn(c.type, values[i]!));
  const length = values[0]?.length ?? 0;
  return new RecordBatch(schema, makeData({ type: new Struct(schema.fields), length, nullCount: 0, children }));
}

/** The row form of a batch, cell by cell, as the cache's readRowsSince builds it. */
function rowsOf(batch: RecordBatch, cols: readonly ColumnSpec[]): Record<string, unknown>[] {
  const out: Record<string, unknown>[] = [];
  for (let i = 0; i < batch.numRows; i++) {
    const row: Record<string, unknown> = {};
    for (const c of cols) row[c.name] = toRowValue(c.type, batch.getChild(c.name)?.get(i));
    out.push(row);
  }
  return out;
}

function assertSameBytes(got: Uint8Array, expected: Uint8Array): void {
  // Compare as text first: a failure then shows where the lines differ.
  assert.equal(Buffer.from(got).toString('utf8'), Buffer.from(expected).toString('utf8'));
  assert.ok(Buffer.from(got).equals(Buffer.from(expected)), 'same text but different bytes');
}

test('batchToNdjsonBytes gives the bytes of JSON.stringify of readRowsSince rows', async () => {
  const rows = [
    ['a', 1, '9223372036854775807', 1.5, 'plain', true, '2026-01-01T00:00:00.123Z', { n: [1, 'two', null], q: 'a"b' }],
    ['a', 2, null, null, null, null, null, null],
    ['a', -3, '-9007199254740993', -0, 'ünïcødé "quoted" \\ \n line', false, '1970-01-01T00:00:00Z', 'just a string'],
    ['a', 4, 12, 1e21, '', true, '2030-12-31T23:59:59.999Z', [true, { deep: { er: 0.1 } }]],
  ];
  const { got, expected } = await throughCache(rows);
  assertSameBytes(got, expected);
  assert.equal(got.toString('utf8').split('\n').length - 1, rows.length);
});

test('STRING cells are escaped as JSON.stringify escapes them; JSON cells are copied', async () => {
  const controls = Array.from({ length: 0x20 }, (_, b) => String.fromCharCode(b)).join('');
  const strings = [
    controls,
    `${controls}"\\/\x7f`,
    'quote " backslash \\ slash / del \x7f',
    'non-ASCII: é ß 中文 — and astral: 😀 𝄞 \u{10ffff}',
    'separators \u2028 \u2029 and BOM \ufeff',
    '',
    '"',
    '\\',
    `long and clean ${'x'.repeat(200)}`,
    `long, escaped late ${'y'.repeat(100)}\n${'z'.repeat(100)}"`,
    `"${'w'.repeat(100)}`,
    `long non-ASCII ${'ü'.repeat(80)}\t${'😀'.repeat(20)}`,
  ];
  const rows = strings.map((s, i) => ['a', i, null, null, s, null, null, { s, n: i, nested: [s, { k: s }] }]);
  rows.push(['a', 99, null, null, null, null, null, null]);
  // A lone surrogate has no UTF-8 form: the cache stores U+FFFD, and both ways read that.
  rows.push(['a', 100, null, null, 'lone \ud800 surrogate', null, null, 'lone \udc00 in JSON']);
  const { got, expected } = await throughCache(rows);
  assertSameBytes(got, expected);
});

test('INT64, DOUBLE, TIMESTAMP and BOOLEAN edges, and nulls in every column', async () => {
  const ints = [
    0,
    1,
    -1,
    2147483647,
    2147483648,
    -2147483648,
    -2147483649,
    4294967295,
    4294967296,
    -4294967296,
    Number.MAX_SAFE_INTEGER,
    Number.MIN_SAFE_INTEGER,
    '9007199254740992',
    '-9007199254740992',
    '9007199254740993',
    '-9007199254740993',
    '9223372036854775807',
    '-9223372036854775808',
  ];
  const doubles = [0, -0, 1, -1, 0.1, -2.5, 1e21, 1e-7, 123456789.123, 2 ** 31, -(2 ** 31), 2 ** 53, 5e-324, Number.MAX_VALUE, -Number.MAX_VALUE, 1 / 3];
  const stamps = [
    '2026-01-01T00:00:00Z',
    '2026-06-15T12:34:56.789Z',
    '2026-06-15T12:34:56.780Z',
    '2026-06-15T12:34:56.009Z',
    '1970-01-01T00:00:00.000Z',
    '1969-12-31T23:59:59.999Z',
    '1900-02-28T01:02:03.004Z',
    '0001-01-01T00:00:00Z',
    '9999-12-31T23:59:59.999Z',
    -1,
    -62198755200000, // year -0001 (±YYYYYY form)
    253402300800000, // year 10000
    8.64e15, // the last ms Date holds
    -8.64e15,
  ];
  const n = Math.max(ints.length, doubles.length, stamps.length);
  const rows = Array.from({ length: n }, (_, i) => [
    'a',
    i,
    ints[i] ?? null,
    doubles[i] ?? null,
    i % 3 === 0 ? null : `s${i}`,
    i % 3 === 0 ? null : i % 2 === 0,
    stamps[i] ?? null,
    i % 4 === 0 ? null : i,
  ]);
  rows.push(['a', -(2 ** 40), null, null, null, null, null, null]);
  const { got, expected } = await throughCache(rows);
  assertSameBytes(got, expected);
  assert.match(got.toString(), /"ts":"\+010000-01-01T00:00:00\.000Z"/);
  assert.match(got.toString(), /"ts":"-000001-01-01T00:00:00\.000Z"/);
  assert.match(got.toString(), /"big":"-9223372036854775808"/);
  assert.match(got.toString(), /"big":9007199254740991,/);
});

test('a column of nulls only, and a table of no columns', () => {
  const cols: ColumnSpec[] = [
    { name: 'a', type: 'INT64', nullable: true },
    { name: 'b', type: 'TIMESTAMP', nullable: true },
    { name: 'c', type: 'STRING', nullable: true },
    { name: 'd', type: 'JSON', nullable: true },
    { name: 'e', type: 'DOUBLE', nullable: true },
    { name: 'f', type: 'BOOLEAN', nullable: true },
    { name: 'ключ "quoted"', type: 'STRING', nullable: true },
  ];
  const batch = batchOf(cols, cols.map(() => [null, null, null]));
  assertSameBytes(batchToNdjsonBytes(batch, cols), linesOf(rowsOf(batch, cols)));
  assert.equal(Buffer.from(batchToNdjsonBytes(batch, [])).toString(), '{}\n{}\n{}\n');
  assert.equal(batchToNdjsonBytes(batch.slice(1, 1), cols).length, 0);
});

test('a timestamp beyond the Date range fails as the row form does', () => {
  const cols: ColumnSpec[] = [{ name: 't', type: 'TIMESTAMP', nullable: true }];
  for (const ms of [8.64e15 + 1, -8.64e15 - 1, Number.MAX_SAFE_INTEGER]) {
    const batch = batchOf(cols, [[ms]]);
    assert.throws(() => rowsOf(batch, cols), RangeError);
    assert.throws(() => batchToNdjsonBytes(batch, cols), RangeError);
  }
});

test('sliced batches (offsets, bitmaps and values not starting at 0) equal their rows', () => {
  const cols = ALL.columns;
  const n = 77;
  const values = [
    Array.from({ length: n }, (_, i) => i * 1_000_003 - 40_000_000),
    Array.from({ length: n }, (_, i) => (i % 5 === 0 ? null : i % 7 === 0 ? '-9223372036854775808' : i * 2 ** 35)),
    Array.from({ length: n }, (_, i) => (i % 6 === 0 ? null : i / 7)),
    Array.from({ length: n }, (_, i) => (i % 4 === 0 ? null : `${'é'.repeat(i % 3)}s"${i}\n${'x'.repeat(i)}`)),
    Array.from({ length: n }, (_, i) => (i % 9 === 0 ? null : i % 2 === 0)),
    Array.from({ length: n }, (_, i) => (i % 8 === 0 ? null : Date.UTC(2026, 0, 1) + i * 37_777_777 - 2e9)),
    Array.from({ length: n }, (_, i) => (i % 3 === 0 ? null : JSON.stringify({ i, tag: `t${i}`, u: 'ü'.repeat(i % 4) }))),
  ];
  const batch = batchOf(cols, values);
  assertSameBytes(batchToNdjsonBytes(batch, cols), linesOf(rowsOf(batch, cols)));
  for (const [from, to] of [
    [0, 1],
    [1, 2],
    [3, 11],
    [5, 77],
    [13, 64],
    [76, 77],
  ] as const) {
    const slice = batch.slice(from, to);
    const expected = linesOf(rowsOf(slice, cols));
    assertSameBytes(batchToNdjsonBytes(slice, cols), expected);
    // A slice of a slice: offsets add up.
    const inner = slice.slice(1, Math.max(1, to - from - 1));
    assertSameBytes(batchToNdjsonBytes(inner, cols), linesOf(rowsOf(inner, cols)));
  }
});

test('batchToNdjsonBytes of sliced batches read from the cache (units inside a row group) equals the rows', async () => {
  const cache = await Cache.open({ root: tempDir(), datasets: { all: ALL } });
  const rows = Array.from({ length: 50 }, (_, i) => ['a', i, null, i / 3, `s${i}`, i % 2 === 0, '2026-01-01T00:00:00Z', { i, tag: `t${i}` }]);
  await cache.appendRows({ dataset: 'all', id: 's' }, NAMES, rows);
  await cache.flushTable({ dataset: 'all', id: 's' });
  const p = cache.partition('all', 'a');
  const all = await collect(cache.storage.readRowsSince(p));
  const since = all[16]!.after;
  const until = all[33]!.after;
  const expected = linesOf(all.slice(17, 34).map((r) => r.row));
  const parts: Uint8Array[] = [];
  for await (const b of cache.storage.readBatchesSince(p, { since, until })) parts.push(batchToNdjsonBytes(b.batch, ALL.columns));
  assertSameBytes(Buffer.concat(parts), expected);
});

test('a big batch grows its buffer and stays exact (many escapes, long cells)', () => {
  const cols: ColumnSpec[] = [
    { name: 's', type: 'STRING', nullable: true },
    { name: 'j', type: 'JSON', nullable: true },
  ];
  const n = 3000;
  // Escapes expand a cell up to 6×: the first size guess (from the value bytes) is too small.
  const s = Array.from({ length: n }, (_, i) => '\x01'.repeat(i % 50) + '"'.repeat(i % 7) + 'ü'.repeat(i % 3));
  const j = Array.from({ length: n }, (_, i) => JSON.stringify({ i, s: s[i] }));
  const batch = batchOf(cols, [s, j]);
  assertSameBytes(batchToNdjsonBytes(batch, cols), linesOf(rowsOf(batch, cols)));
});

test('a RecordBatch has one Data per column: multi-chunk vectors cannot reach the serializer', () => {
  const batch = batchOf(ALL.columns, ALL.columns.map(() => [null]));
  for (const c of ALL.columns) assert.equal(batch.getChild(c.name)?.data.length, 1);
  assert.ok(batch.schema instanceof Schema);
});

test('DOUBLE cells are written as JSON.stringify writes them (fixed-point fast path and the rest)', () => {
  const cols: ColumnSpec[] = [{ name: 'x', type: 'DOUBLE', nullable: true }];
  let seed = 12345;
  const rand = () => {
    seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
    return seed / 4294967296;
  };
  const xs: number[] = [
    0.1, 0.2, 0.1 + 0.2, 0.3, 1.005, 2.675, 1.1, 1e-6, 1.5e-6, 1e-7, 9.999999, 0.000001, 0.0000015, 123456.789012,
    2147483647.5, 2147483648.5, -2147483647.999999, 2147483647.999999, 4503599627370495.5, 1e15 + 0.5, 1e21, 1.7976931348623157e308,
    5e-324, -5e-324, Number.EPSILON, 1 / 3, 2 / 3, -0.5, 0.5, 99.99, 9.95, 0.07, 1234.56, 12.345678, 0.1234567, -1e-6,
  ];
  for (let i = 0; i < 20_000; i++) {
    const k = i % 9;
    const mag = 10 ** ((i % 11) - 2);
    xs.push(Math.round(rand() * 1e6 * mag) / 10 ** k); // k decimals, the demo's kind of value
    xs.push((rand() - 0.5) * mag * 1e4); // full-precision doubles
    xs.push(-Math.round(rand() * 2 ** 31) / 10 ** (k % 7)); // near the fast path's bounds
  }
  const batch = batchOf(cols, [xs]);
  assertSameBytes(batchToNdjsonBytes(batch, cols), linesOf(xs.map((x) => ({ x }))));
});

test('a batch without one of the schema columns writes it as null', () => {
  const cols: ColumnSpec[] = [
    { name: 'a', type: 'INT64', nullable: true },
    { name: 'b', type: 'STRING', nullable: true },
  ];
  const batch = batchOf([cols[0]!], [[1, 2, 3]]);
  assertSameBytes(batchToNdjsonBytes(batch, cols), linesOf(rowsOf(batch, cols)));
  assert.equal(Buffer.from(batchToNdjsonBytes(batch, cols)).toString(), '{"a":1,"b":null}\n{"a":2,"b":null}\n{"a":3,"b":null}\n');
});

test('NdjsonWriter: several batches into one buffer equal the batches one by one', () => {
  const cols = ALL.columns;
  const n = 300;
  const values = [
    Array.from({ length: n }, (_, i) => i),
    Array.from({ length: n }, (_, i) => (i % 5 === 0 ? null : `${i * 3_000_000_000}`)),
    Array.from({ length: n }, (_, i) => i * 1.25),
    Array.from({ length: n }, (_, i) => `row ${i} ${'"'.repeat(i % 4)}${'x'.repeat(i % 90)}`),
    Array.from({ length: n }, (_, i) => i % 3 === 0),
    Array.from({ length: n }, (_, i) => Date.UTC(2026, 2, 3) + i * 3_600_000),
    Array.from({ length: n }, (_, i) => JSON.stringify({ i, pad: 'p'.repeat(i % 200) })),
  ];
  const batch = batchOf(cols, values);
  const parts = [batch.slice(0, 7), batch.slice(7, 8), batch.slice(8, 8), batch.slice(8, 150), batch.slice(150, 300)];
  const expected = linesOf(rowsOf(batch, cols));
  for (const expect of [0, 1, 300, 1e9]) {
    const w = new NdjsonWriter(cols, expect);
    for (const b of parts) w.append(b);
    assert.equal(w.rows, n);
    assertSameBytes(w.bytes(), expected);
  }
  assertSameBytes(Buffer.concat(parts.map((b) => batchToNdjsonBytes(b, cols))), expected);
});
