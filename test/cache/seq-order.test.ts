/**
 * The reader's seq-order check compares seqs as 32-bit halves (no BigInt per
 * row): it must say what the plain BigInt comparison says, across the 2^32
 * boundary, for shared legacy zeros, and for negatives (never written, but
 * a damaged file could hold one).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ascending } from '../../kernel/store/reader.js';

function reference(seqs: BigInt64Array): boolean {
  for (let i = 1; i < seqs.length; i++) {
    if (seqs[i]! < seqs[i - 1]! || (seqs[i] === seqs[i - 1] && seqs[i] !== 0n)) return false;
  }
  return true;
}

test('ascending agrees with BigInt comparison on edge values and random runs', () => {
  const edges = [0n, 1n, 2n ** 31n - 1n, 2n ** 31n, 2n ** 32n - 1n, 2n ** 32n, 2n ** 32n + 1n, 2n ** 53n, 2n ** 63n - 1n, -1n, -(2n ** 32n)];
  let unordered = 0;
  for (const a of edges) {
    for (const b of edges) {
      const s = BigInt64Array.of(a, b);
      assert.equal(ascending(s), reference(s), `${a}, ${b}`);
      if (!reference(s)) unordered++;
    }
  }
  assert.ok(unordered > edges.length, 'the edge pairs include out-of-order ones');
  let seed = 7;
  const rnd = () => {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    return seed / 2 ** 31;
  };
  for (let r = 0; r < 500; r++) {
    const n = 2 + Math.floor(rnd() * 20);
    const base = edges[Math.floor(rnd() * edges.length)]!;
    const s = new BigInt64Array(n);
    let v = base;
    for (let i = 0; i < n; i++) {
      v += BigInt(Math.floor(rnd() * 3)) - (rnd() < 0.05 ? 1n : 0n);
      s[i] = rnd() < 0.05 ? 0n : v;
    }
    assert.equal(ascending(s), reference(s), s.join(','));
  }
  // A view into a larger buffer (the column's own, at an offset) is read at its offset.
  const big = BigInt64Array.of(9n, 1n, 2n, 3n);
  assert.equal(ascending(big.subarray(1)), true);
  assert.equal(ascending(big), false);
});
