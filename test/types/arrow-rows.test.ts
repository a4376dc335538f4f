/**
 * The SDK's row gathering (takeBatch, takeRows): the rows at the given
 * indexes, every column type a cache column reads as, nulls kept where they
 * were, from a batch Arrow has sliced at an offset that is not a whole byte
 * (its bitmaps and booleans then start mid-byte). Transforms drop refused rows
 * with it (LLP 0046). And rowsWithKey, a day's or a time bucket's rows as one
 * batch per batch read, however the keys interleave: the Iceberg writer and
 * time-keyed blob sinks yielded a batch per run, and a unit across midnight
 * with rows out of time order took 30 times as long (LLP 0108).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { type DataType, Field, Int64, makeData, RecordBatch, Schema, Struct, Utf8, vectorFromArray } from 'apache-arrow';
import { arrowType } from '../../kernel/store/columns.js';
import { isValid, rowsWithKey, takeBatch } from '../../types/arrow-rows.js';
import type { ColumnType } from '../../types/schema.js';

const TYPES: ColumnType[] = ['INT64', 'DOUBLE', 'BOOLEAN', 'TIMESTAMP', 'STRING', 'JSON'];

/** Row i's value in a column of `type`; null every (3 + column)th row. */
function cell(type: ColumnType, col: number, i: number): unknown {
  if (i % (3 + col) === 0) return null;
  switch (type) {
    case 'INT64':
      return BigInt(i) * 1_000_000_007n - 5n;
    case 'DOUBLE':
      return i === 7 ? Number.NaN : i / 4 - 3;
    case 'BOOLEAN':
      return i % 2 === 1;
    case 'TIMESTAMP':
      return Date.UTC(2026, 11, 4, 23) + i * 997;
    case 'STRING':
      return `s${i}${'é'.repeat(i % 4)}`;
    case 'JSON':
      return JSON.stringify({ i });
  }
}

function batchOf(rows: number): RecordBatch {
  const fields = TYPES.map((t, j) => new Field(`c${j}`, arrowType(t), true));
  const children = TYPES.map((t, j) => {
    const type = arrowType(t) as DataType;
    const values = Array.from({ length: rows }, (_, i) => {
      const v = cell(t, j, i);
      return t === 'TIMESTAMP' && v !== null ? new Date(v as number) : v;
    });
    return vectorFromArray(values, type).data[0]!;
  });
  const schema = new Schema(fields);
  return new RecordBatch(schema, makeData({ type: new Struct(fields), length: rows, nullCount: 0, children }));
}

/** Column j, row i of `b` as the test's `cell` speaks of it. */
function read(b: RecordBatch, j: number, i: number): unknown {
  const d = b.data.children[j]!;
  if (!isValid(d, i)) return null;
  const v = b.getChildAt(j)!.get(i) as unknown;
  return v;
}

const same = (a: unknown, b: unknown) => (typeof a === 'number' && Number.isNaN(a) ? Number.isNaN(b as number) : a === b);

test('takeBatch: the rows kept, every cache column type, nulls where they were, from a batch sliced mid-byte', () => {
  const whole = batchOf(200);
  // Sliced at 13: every bitmap and the booleans start at bit 5 of a byte.
  const b = whole.slice(13, 190);
  const keep = Int32Array.from({ length: b.numRows }, (_, k) => k).filter((k) => k % 3 !== 1 && k % 7 !== 2);
  const out = takeBatch(b, keep);
  assert.equal(out.numRows, keep.length);
  assert.deepEqual(
    out.schema.fields.map((f) => String(f.type)),
    b.schema.fields.map((f) => String(f.type)),
  );
  for (const [j, t] of TYPES.entries()) {
    for (const [k, r] of keep.entries()) {
      const want = cell(t, j, r + 13);
      const got = read(out, j, k);
      const norm = t === 'TIMESTAMP' && got !== null ? Number(got) : got;
      assert.ok(same(norm, want), `column ${t}, kept row ${k} (row ${r + 13} of the whole): ${String(norm)} ≠ ${String(want)}`);
    }
    const nulls = keep.reduce((n, r) => n + (cell(t, j, r + 13) === null ? 1 : 0), 0);
    assert.equal(out.data.children[j]!.nullCount, nulls, `${t}: null count`);
  }
});

test('takeBatch: no row kept is an empty batch of the same schema; every row kept is every value', () => {
  const b = batchOf(40).slice(3);
  assert.equal(takeBatch(b, new Int32Array(0)).numRows, 0);
  const all = takeBatch(b, Int32Array.from({ length: b.numRows }, (_, k) => k));
  for (const [j, t] of TYPES.entries()) {
    for (let i = 0; i < b.numRows; i++) {
      const got = read(all, j, i);
      const norm = t === 'TIMESTAMP' && got !== null ? Number(got) : got;
      assert.ok(same(norm, cell(t, j, i + 3)), `${t} row ${i}`);
    }
  }
});

/** Rows 0..n-1: `id` = row, `msg` = `m<row>` (null every fifth). */
function idBatch(n: number): RecordBatch {
  const fields = [new Field('id', new Int64(), false), new Field('msg', new Utf8(), true)];
  const children = [
    vectorFromArray(Array.from({ length: n }, (_, i) => BigInt(i)), new Int64()).data[0]!,
    vectorFromArray(Array.from({ length: n }, (_, i) => (i % 5 === 0 ? null : `m${i}`)), new Utf8()).data[0]!,
  ];
  return new RecordBatch(new Schema(fields), makeData({ type: new Struct(fields), length: n, nullCount: 0, children }));
}

const ids = (b: RecordBatch) => Array.from({ length: b.numRows }, (_, i) => Number(b.getChild('id')!.get(i) as bigint));
const msgs = (b: RecordBatch) => Array.from({ length: b.numRows }, (_, i) => b.getChild('msg')!.get(i) as string | null);

test('rowsWithKey: rows of two days interleaved are one batch of exactly the wanted day\'s rows, in order, nulls kept', () => {
  const b = idBatch(100);
  // Day 20000 and 20001 interleaved as a unit across midnight is, out of time order; a run of three now and then.
  const days: (number | null)[] = Array.from({ length: 100 }, (_, i) => (i % 7 < 3 || i % 2 === 0 ? 20000 : 20001));
  for (const want of [20000, 20001]) {
    const out = rowsWithKey(b, days, want);
    assert.ok(out, `day ${want}`);
    const rows = days.flatMap((d, i) => (d === want ? [i] : []));
    assert.deepEqual(ids(out), rows, `day ${want}: the rows`);
    assert.deepEqual(
      msgs(out),
      rows.map((i) => (i % 5 === 0 ? null : `m${i}`)),
      `day ${want}: the messages and their nulls`,
    );
  }
});

test('rowsWithKey: a key all the batch\'s rows have is the batch itself; one run is a slice of it (no copy); a key none has is null', () => {
  const b = idBatch(30);
  assert.equal(rowsWithKey(b, Array<number | null>(30).fill(5), 5), b);
  assert.equal(rowsWithKey(b, Array<number | null>(30).fill(5), 6), null);
  const days: (number | null)[] = Array.from({ length: 30 }, (_, i) => (i >= 10 && i < 17 ? 6 : 5));
  const run = rowsWithKey(b, days, 6)!;
  assert.deepEqual(ids(run), [10, 11, 12, 13, 14, 15, 16]);
  assert.equal(run.getChild('msg')!.data[0]!.values.buffer, b.getChild('msg')!.data[0]!.values.buffer, 'a slice shares the batch\'s bytes');
});

test('rowsWithKey: rows without a timestamp (day null) are a day of their own', () => {
  const b = idBatch(10);
  const days: (number | null)[] = [1, null, 1, null, null, 1, 1, null, 1, 1];
  assert.deepEqual(ids(rowsWithKey(b, days, null)!), [1, 3, 4, 7]);
  assert.deepEqual(ids(rowsWithKey(b, days, 1)!), [0, 2, 5, 6, 8, 9]);
});
