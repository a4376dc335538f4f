/**
 * The SDK's row gathering (takeBatch, takeRows): the rows at the given
 * indexes, every column type a cache column reads as, nulls kept where they
 * were, from a batch Arrow has sliced at an offset that is not a whole byte
 * (its bitmaps and booleans then start mid-byte). The Iceberg writer gathers
 * a day's rows with it (LLP 0108), transforms drop refused rows (LLP 0046).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { type DataType, makeData, RecordBatch, Schema, Field, Struct, vectorFromArray } from 'apache-arrow';
import { arrowType } from '../../kernel/store/columns.js';
import { isValid, takeBatch } from '../../types/arrow-rows.js';
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
