/**
 * The seq allocator read from outside its own section (a batch record takes
 * the reservation as its `maxSeq`) while seqs are being reserved. A read that
 * began before a reservation landed and ended after it once compared the old
 * file with the new end, and reported the file as gone backwards: the sim's
 * seed 53 met it under load, with three batches ingesting in one process.
 *
 * And the blocks themselves: a block left in hand is kept only while nobody
 * reserved after it, a short one goes on where it is, and a reservation is
 * sized by what its caller will take (LLP 0001, LLP 0039). Two allocators on
 * one root are two writers; `invalidate` is what taking the writer lock from
 * nobody calls.
 */
import assert from 'node:assert/strict';
import { promises as fsp } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { SeqAllocator } from '../../kernel/flush/allocator.js';
import { tempDir } from '../support/tmp.js';

test('reading the reservation while seqs are reserved never reports the file as gone backwards', async () => {
  const alloc = new SeqAllocator(tempDir(), 1);
  const N = 1000;
  let reserving = true;
  // Readers at every point of a reservation's write: several, each reading again at once.
  const readers = Array.from({ length: 8 }, async () => {
    const seen: bigint[] = [];
    while (reserving) seen.push(await alloc.readReserved());
    return seen;
  });
  const seqs: bigint[] = [];
  try {
    for (let i = 0; i < N; i++) seqs.push((await alloc.allocate(1)).first);
  } finally {
    reserving = false;
  }
  const reads = await Promise.all(readers);
  assert.deepEqual(seqs, Array.from({ length: N }, (_, i) => BigInt(i + 1)), 'one block per allocation, in order');
  for (const seen of reads) {
    assert.ok(seen.length > 0);
    for (let i = 1; i < seen.length; i++) assert.ok(seen[i]! >= seen[i - 1]!, 'each reader sees the reservation at or above its last read');
  }
});

const reservedOn = async (root: string) => (JSON.parse(await fsp.readFile(join(root, '_hyp_ingest_seq.json'), 'utf8')) as { reservedThrough: string }).reservedThrough;
const seqsOf = (r: { first: bigint; last: bigint }) => [Number(r.first), Number(r.last)];

test('a block left in hand is kept across lock takes while nobody reserved, and never reused once another writer did', async () => {
  const root = tempDir();
  const a = new SeqAllocator(root, 100);
  const b = new SeqAllocator(root, 100);
  assert.deepEqual(seqsOf(await a.allocate(3)), [1, 3]);
  a.invalidate();
  assert.deepEqual(seqsOf(await a.allocate(3)), [4, 6], 'nobody reserved since: the block in hand is still good');
  assert.equal(await reservedOn(root), '100');
  b.invalidate();
  assert.deepEqual(seqsOf(await b.allocate(3)), [101, 103]);
  a.invalidate();
  // a still holds 7..100, but b reserved after it: b may have committed 101.. into a partition a writes next.
  assert.deepEqual(seqsOf(await a.allocate(3)), [201, 203]);
  assert.equal(await reservedOn(root), '300');
});

test('a block too short for a commit goes on where it is while nobody reserved since, else starts above the other', async () => {
  const root = tempDir();
  const a = new SeqAllocator(root, 4);
  const b = new SeqAllocator(root, 4);
  assert.deepEqual(seqsOf(await a.allocate(3)), [1, 3]);
  assert.deepEqual(seqsOf(await a.allocate(3)), [4, 6], 'seq 4, the rest of the first block, is not skipped');
  assert.equal(await reservedOn(root), '7');
  b.invalidate();
  assert.deepEqual(seqsOf(await b.allocate(1)), [8, 8]);
  a.invalidate();
  // a holds only 7 (too short), and b reserved after it: 7 stays a gap, never handed out.
  assert.deepEqual(seqsOf(await a.allocate(3)), [12, 14]);
});

test('a reservation covers what its caller says will come, up to a block (a large commit: 4 × its size)', async () => {
  const root = tempDir();
  const a = new SeqAllocator(root, 1024);
  assert.deepEqual(seqsOf(await a.allocate(1, 1)), [1, 1]);
  assert.equal(await reservedOn(root), '1', 'a 1-row flush reserves 1 seq');
  assert.deepEqual(seqsOf(await a.allocate(5, 12)), [2, 6]);
  assert.equal(await reservedOn(root), '13', 'the 12 seqs the flush will take');
  assert.deepEqual(seqsOf(await a.allocate(7, 7)), [7, 13]);
  assert.equal(await reservedOn(root), '13', 'taken from the block in hand');
  assert.deepEqual(seqsOf(await a.allocate(10, 100_000)), [14, 23]);
  assert.equal(await reservedOn(root), '1037', 'a block, not all that will come');
  assert.deepEqual(seqsOf(await a.allocate(5000, 5000)), [24, 5023], 'a commit larger than what is left takes its own size, going on from the rest');
  assert.equal(await reservedOn(root), '5023');
  assert.deepEqual(seqsOf(await a.allocate(2000, 5000)), [5024, 7023]);
  assert.equal(await reservedOn(root), '10023', 'the 5000 the flush will take, within 4 × 2000');
  assert.deepEqual(seqsOf(await a.allocate(3000, 3000)), [7024, 10023]);
  assert.equal(await reservedOn(root), '10023', 'taken from the block in hand');
  // Without a word of what comes: a block, or 4 × a large commit, as before.
  assert.deepEqual(seqsOf(await a.allocate(2000)), [10024, 12023]);
  assert.equal(await reservedOn(root), '18023');
});
