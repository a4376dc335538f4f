/**
 * Row ids: a 128-bit hash of a row's content. They must not change between
 * releases: compaction dedupes files written by either.
 * @ref LLP 0013
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { rowId } from '../../kernel/cache/decorate.js';
import { hash128 } from '../../kernel/cache/hash128.js';
import { partitionRef } from '../../kernel/cache/partition.js';

/** Pinned from the first release: a changed value means row ids of existing caches no longer match. */
const PINNED: [string, string][] = [
  ['', 'AAAAAAAAAAAAAAAAAAAAAA'],
  ['a', 'AzuxlszvT-HM70_hzO9P4Q'],
  ['abc', 'K1uXoyD3X7VQEsK0UBLCtA'],
  ['hello world', 'j75Y5VbuP32vKHa14mCCNg'],
  ['x'.repeat(100), 'ddWSItiazCOSCjbyddj6rw'],
  ['ünïcödé\u0000\u001f', 'JQ3TAJ_Z0C-zVlg_VjtnSA'],
];

describe('row ids', () => {
  test('hash128 keeps its pinned values', () => {
    for (const [s, h] of PINNED) assert.equal(hash128(s), h, JSON.stringify(s));
  });

  test('a row id is the hash of the partition key and the values joined as documented', () => {
    const p = partitionRef('events', 'web');
    const cases: unknown[][] = [
      [1, 1700000000000, 'a', null, 2.5, true, '{"x":1}'],
      [null, null, '', 'with\u001fsep', 'with\u0000nul', false, '[]'],
      ['12345678901234567890', -1, 'ünï', 'x'.repeat(37), 0, null, 'null'],
    ];
    for (const values of cases) {
      const content = values
        .map((v) => (v === null ? '\u0000' : typeof v === 'string' && (v.includes('\u0000') || v.includes('\u001f')) ? `\u0000${JSON.stringify(v)}` : String(v)))
        .map((v) => `${v}\u001f`)
        .join('');
      assert.equal(rowId(p, values), hash128(`${p.key}\u0000${content}`));
    }
    // Null, the empty string and a string holding a control character stay apart.
    const ids = new Set([[null], [''], ['\u0000'], ['\u001f'], ['\u0000""']].map((v) => rowId(p, v)));
    assert.equal(ids.size, 5);
  });
});
