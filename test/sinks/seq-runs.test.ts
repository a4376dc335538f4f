/**
 * A unit's read notes the seqs it handed out as runs of consecutive seqs: what
 * tells delivered rows from pruned ones (gap accounting). `noteAll` notes a
 * batch's seqs by their 32-bit halves; it must leave exactly the runs that
 * noting each seq in turn leaves, across batches, for every shape of seqs a
 * cache holds: consecutive seqs, legacy rows that share 0, gaps (pruned rows),
 * and a low half that carries into the high one. @ref LLP 0112
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { note, noteAll, type SeqRuns } from '../../kernel/sinks/unit.js';

/** The runs noting each seq of each batch in turn leaves. */
function oneByOne(batches: readonly BigInt64Array[]): SeqRuns {
  const runs: SeqRuns = [];
  for (const b of batches) for (const s of b) note(runs, s);
  return runs;
}

function byBatch(batches: readonly BigInt64Array[]): SeqRuns {
  const runs: SeqRuns = [];
  for (const b of batches) noteAll(runs, b);
  return runs;
}

/** A deterministic generator (xorshift32), so a failing case is the same every run. */
function random(seed: number): () => number {
  let x = seed >>> 0 || 1;
  return () => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x >>> 0) / 4294967296;
  };
}

/** Seqs from `start`: mostly the next one, some repeated, some skipped over, now and then a step back. */
function seqs(rand: () => number, start: bigint, n: number): bigint[] {
  const out: bigint[] = [];
  let s = start;
  for (let i = 0; i < n; i++) {
    out.push(s);
    const r = rand();
    if (r < 0.7) s += 1n;
    else if (r < 0.8) s += 0n;
    else if (r < 0.95) s += BigInt(2 + Math.floor(rand() * 5));
    else s -= BigInt(1 + Math.floor(rand() * 3));
  }
  return out;
}

/** `all` cut into batches of random lengths (empty ones too). */
function batches(rand: () => number, all: readonly bigint[]): BigInt64Array[] {
  const out: BigInt64Array[] = [];
  for (let at = 0; at < all.length; ) {
    const n = Math.floor(rand() * 40);
    out.push(BigInt64Array.from(all.slice(at, at + n)));
    at += n;
  }
  return out;
}

test('noteAll leaves the runs that noting each seq in turn leaves, over random seqs and batch cuts', () => {
  const starts = [1n, 0n, 2n ** 32n - 20n, 2n ** 33n - 3n, 2n ** 52n, -10n];
  for (let seed = 1; seed <= 200; seed++) {
    const rand = random(seed);
    const all = seqs(rand, starts[seed % starts.length]!, 1 + Math.floor(rand() * 300));
    const cut = batches(rand, all);
    assert.deepEqual(byBatch(cut), oneByOne(cut), `seed ${seed}`);
  }
});

test('noteAll: consecutive seqs are one run, however they are cut; legacy zeros are one seq; a gap starts a run', () => {
  const run = (from: bigint, n: number) => Array.from({ length: n }, (_, i) => from + BigInt(i));
  assert.deepEqual(byBatch([BigInt64Array.from(run(1n, 5)), BigInt64Array.from(run(6n, 5))]), [[1n, 10n]]);
  assert.deepEqual(byBatch([BigInt64Array.from([0n, 0n, 0n])]), [[0n, 0n]]);
  assert.deepEqual(byBatch([BigInt64Array.from([1n, 2n, 5n, 6n]), BigInt64Array.from([9n])]), [
    [1n, 2n],
    [5n, 6n],
    [9n, 9n],
  ]);
  // The low half wraps: 2^32 - 1 then 2^32 are consecutive.
  assert.deepEqual(byBatch([BigInt64Array.from(run(2n ** 32n - 2n, 4))]), [[2n ** 32n - 2n, 2n ** 32n + 1n]]);
  // Equal low halves in other high halves are not the same seq.
  assert.deepEqual(byBatch([BigInt64Array.from([5n, 2n ** 32n + 5n])]), [
    [5n, 5n],
    [2n ** 32n + 5n, 2n ** 32n + 5n],
  ]);
  // A view into a larger buffer is read at its own offset.
  const buf = BigInt64Array.from([100n, 7n, 8n, 9n, 200n]);
  assert.deepEqual(byBatch([buf.subarray(1, 4)]), [[7n, 9n]]);
});
