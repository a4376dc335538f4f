/**
 * Row ids: a 128-bit hash of a row's content, read from its column bytes. They
 * must not change between releases without a record: compaction dedupes on
 * them across files written by either.
 * @ref LLP 0015
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { buildColumn } from '../../kernel/store/columns.js';
import { prepareBatches, rowId } from '../../kernel/flush/decorate.js';
import { hash128 } from '../../kernel/flush/hash128.js';
import { partitionRef } from '../../kernel/store/partition.js';
import type { ColumnSpec } from '../../types/schema.js';

/** MurmurHash3 x86_128, seed 0: the reference implementation's published answers, as hex of its four words. */
const KNOWN: [string, string][] = [
  ['', '00000000000000000000000000000000'],
  ['The quick brown fox jumps over the lazy dog', '2f1583c3ecee2c675d7bf66ce5e91d2c'],
  ['MurmurHash3 was written by Austin Appleby, and is placed in the public', '6d3583489d9d1e5a898493af67e2ad10'],
];

/** Pinned when row ids moved to column bytes (LLP 0015): a changed value means existing caches no longer match. */
const PINNED: [string, string][] = [
  ['a', 'p5STPFVWsBtVVrAbVVawGw'],
  ['abc', 'dc3G0aKwBqWisAalorAGpQ'],
  ['hello world', 'wLIaiBTzweEcDRUamwyeLA'],
  ['x'.repeat(100), 'nDc3ksYJIIwEw-hZN9Uh0A'],
  ['ünïcödé\u0000\u001f', 'GUOe7iclHuubCKELuu1kDg'],
];

const ALL: ColumnSpec[] = [
  { name: 'id', type: 'INT64', nullable: true },
  { name: 'ts', type: 'TIMESTAMP', nullable: true },
  { name: 'kind', type: 'STRING', nullable: true },
  { name: 'd', type: 'DOUBLE', nullable: true },
  { name: 'ok', type: 'BOOLEAN', nullable: true },
  { name: 'payload', type: 'JSON', nullable: true },
];

/** The documented content of a row, written independently of the Arrow path. */
function content(key: string, values: readonly unknown[]): Buffer {
  const parts: Buffer[] = [Buffer.from(`${key}\u0000`, 'utf8')];
  values.forEach((v, ci) => {
    parts.push(Buffer.from([v === null ? 0 : 1]));
    if (v === null) return;
    const type = ALL[ci]!.type;
    if (type === 'STRING' || type === 'JSON') {
      const b = Buffer.from(v as string, 'utf8');
      const len = Buffer.alloc(4);
      len.writeUInt32LE(b.length);
      parts.push(len, b);
    } else if (type === 'DOUBLE') {
      const b = Buffer.alloc(8);
      b.writeDoubleLE(v as number);
      parts.push(b);
    } else if (type === 'BOOLEAN') {
      parts.push(Buffer.from([v ? 1 : 0]));
    } else {
      const b = Buffer.alloc(8);
      b.writeBigInt64LE(BigInt(v as number | string));
      parts.push(b);
    }
  });
  return Buffer.concat(parts);
}

const CASES: unknown[][] = [
  [1, 1700000000000, 'a', 2.5, true, '{"x":1}'],
  [null, null, '', null, false, '[]'],
  ['9223372036854775807', -1, 'ünï', -0.125, null, 'null'],
  [-9007199254740993n.toString(), 0, 'x'.repeat(37), 1e300, true, '"s"'],
];

describe('row ids', () => {
  test('hash128 is MurmurHash3 x86_128 and keeps its pinned values', () => {
    for (const [s, hex] of KNOWN) assert.equal(Buffer.from(hash128(s), 'base64url').toString('hex'), hex, JSON.stringify(s));
    for (const [s, h] of PINNED) assert.equal(hash128(s), h, JSON.stringify(s));
  });

  test('a row id is the hash of the partition key and each cell as documented', () => {
    const p = partitionRef('events', 'web');
    for (const values of CASES) assert.equal(rowId(p, ALL, values), hash128(content(p.key, values)), JSON.stringify(values));
    // Null, the empty string and lengths that could run into the next cell stay apart.
    const one: ColumnSpec[] = [ALL[2]!, ALL[2]!];
    const ids = new Set([[null, 'ab'], ['', 'ab'], ['a', 'b'], ['ab', ''], ['ab', null]].map((v) => rowId(p, one, v)));
    assert.equal(ids.size, 5);
    assert.notEqual(rowId(p, ALL, CASES[0]!), rowId(partitionRef('events', 'app'), ALL, CASES[0]!), 'the partition is part of the content');
  });

  test('batches and slices of batches give each row the id it has alone', () => {
    const p = partitionRef('events', 'web');
    const columns = ALL.map((c, ci) => buildColumn(c.type, CASES.map((r) => r[ci])));
    // Slices keep bitmaps whole and move their offset: cells must be read at the right bit.
    const sliced = columns.map((d) => d.slice(1, 3));
    const prepared = prepareBatches(p, ALL, [columns, sliced]);
    assert.equal(prepared.rows, CASES.length + 3);
    const ids = prepared.batches.flatMap((b) => Array.from({ length: b.rows }, (_, i) => Buffer.from(b.rowIds.values.subarray(i * 22, i * 22 + 22)).toString()));
    const alone = CASES.map((v) => rowId(p, ALL, v));
    assert.deepEqual(ids, [...alone, ...alone.slice(1, 4)]);
  });
});
