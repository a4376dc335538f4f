/**
 * A day's rows of a batch the Iceberg writer reads (rowsOfDay): one batch per
 * batch read, however the days interleave. A unit across midnight whose rows
 * are out of time order made a batch of each run of one day's rows (a row or
 * two) and a 100k-row export took 30 times as long (LLP 0108).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Field, Int64, makeData, RecordBatch, Schema, Struct, Utf8, vectorFromArray } from 'apache-arrow';
import { type Day, rowsOfDay } from '../../plugins/format-iceberg/src/datafile.js';

/** Rows 0..n-1: `id` = row, `msg` = `m<row>` (null every fifth). */
function batch(n: number): RecordBatch {
  const fields = [new Field('id', new Int64(), false), new Field('msg', new Utf8(), true)];
  const children = [
    vectorFromArray(Array.from({ length: n }, (_, i) => BigInt(i)), new Int64()).data[0]!,
    vectorFromArray(Array.from({ length: n }, (_, i) => (i % 5 === 0 ? null : `m${i}`)), new Utf8()).data[0]!,
  ];
  return new RecordBatch(new Schema(fields), makeData({ type: new Struct(fields), length: n, nullCount: 0, children }));
}

const ids = (b: RecordBatch) => Array.from({ length: b.numRows }, (_, i) => Number(b.getChild('id')!.get(i) as bigint));
const msgs = (b: RecordBatch) => Array.from({ length: b.numRows }, (_, i) => b.getChild('msg')!.get(i) as string | null);

test('rows of two days interleaved: one batch of exactly the wanted day\'s rows, in order, nulls kept', () => {
  const b = batch(100);
  // Day 20000 and 20001 interleaved as a unit across midnight is, out of time order; a run of three now and then.
  const days: Day[] = Array.from({ length: 100 }, (_, i) => (i % 7 < 3 || i % 2 === 0 ? 20000 : 20001));
  for (const want of [20000, 20001]) {
    const out = rowsOfDay(b, days, want);
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

test('a day all the batch\'s rows are is the batch itself; one run is a slice of it (no copy); a day none are is null', () => {
  const b = batch(30);
  assert.equal(rowsOfDay(b, Array<Day>(30).fill(5), 5), b);
  assert.equal(rowsOfDay(b, Array<Day>(30).fill(5), 6), null);
  const days: Day[] = Array.from({ length: 30 }, (_, i) => (i >= 10 && i < 17 ? 6 : 5));
  const run = rowsOfDay(b, days, 6)!;
  assert.deepEqual(ids(run), [10, 11, 12, 13, 14, 15, 16]);
  assert.equal(run.getChild('msg')!.data[0]!.values.buffer, b.getChild('msg')!.data[0]!.values.buffer, 'a slice shares the batch\'s bytes');
});

test('rows without a timestamp (day null) are a day of their own', () => {
  const b = batch(10);
  const days: Day[] = [1, null, 1, null, null, 1, 1, null, 1, 1];
  assert.deepEqual(ids(rowsOfDay(b, days, null)!), [1, 3, 4, 7]);
  assert.deepEqual(ids(rowsOfDay(b, days, 1)!), [0, 2, 5, 6, 8, 9]);
});
