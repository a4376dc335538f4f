/**
 * The seq allocator read from outside its own section (a batch record takes
 * the reservation as its `maxSeq`) while seqs are being reserved. A read that
 * began before a reservation landed and ended after it once compared the old
 * file with the new end, and reported the file as gone backwards: the sim's
 * seed 53 met it under load, with three batches ingesting in one process.
 */
import assert from 'node:assert/strict';
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
