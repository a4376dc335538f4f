/**
 * Held batch spools (LLP 0080): a batch ingested held is durable in its spool
 * and no flush commits it (the ingest's own, k.flush, a reopened cache's)
 * until it is released; a dropped one never commits, and its id is new again.
 */
import assert from 'node:assert/strict';
import { Readable } from 'node:stream';
import { test } from 'node:test';
import { ingestNdjson } from '../../kernel/ingest/ingest.js';
import { eventLines, openKernel, sampleConfig, writeConfig } from '../support/kernel.js';
import { tempDir } from '../support/tmp.js';

const lines = (from: number, n: number) => Readable.from([eventLines(from, n)]);

test('a held batch commits only once released; a dropped one never, and its id is new again', async () => {
  const dir = tempDir();
  const config = await writeConfig(dir, sampleConfig());
  let { k } = await openKernel(config);
  const pending = async () => (await k.status()).sinks.flatMap((s) => s.partitions).reduce((n, p) => n + p.pendingRows, 0);
  try {
    const held = await ingestNdjson(k, 'events', 'web', lines(1, 5), 't', { batchId: 'h1', hold: 'key-1' });
    assert.equal(held.accepted, 5);
    await k.flush();
    assert.equal(await pending(), 0, 'the ingest and a flush leave a held batch in its spool');
    const ref = k.cache.batchSpool('events', 'h1');
    await k.close();
    // Reopened: the cache's own flush at open passes it by too.
    ({ k } = await openKernel(config));
    assert.equal(await pending(), 0, 'a reopened cache does not commit it');
    assert.deepEqual(await k.cache.heldSpools(), [{ ref, key: 'key-1' }]);
    const again = await ingestNdjson(k, 'events', 'web', lines(1, 5), 't', { batchId: 'h1', hold: 'key-1' });
    assert.equal(again.duplicate, true, 'a retry finds it spooled whole');
    assert.equal(await pending(), 0);

    await k.cache.releaseBatch(ref);
    assert.equal(await pending(), 5, 'released: committed');
    assert.deepEqual(await k.cache.heldSpools(), []);

    await ingestNdjson(k, 'events', 'web', lines(6, 5), 't', { batchId: 'h2', hold: 'key-2' });
    const ref2 = k.cache.batchSpool('events', 'h2');
    await k.cache.dropBatch(ref2);
    await k.flush();
    assert.equal(await pending(), 5, 'dropped: none of its rows committed');
    assert.deepEqual(await k.cache.heldSpools(), []);
    const fresh = await ingestNdjson(k, 'events', 'web', lines(6, 5), 't', { batchId: 'h2' });
    assert.deepEqual([fresh.duplicate, fresh.accepted], [false, 5], 'a dropped batch is new again');
    assert.equal(await pending(), 10);
    // Committed, its spool gone with its ingest (LLP 0085): a drop finds nothing to remove and removes no row.
    await k.cache.dropBatch(ref2);
    assert.equal(await pending(), 10);
    // A spool there and not held (as a retry that found the batch committed leaves it until it is retired): refused.
    await k.cache.withBatch(ref2, async () => undefined);
    await assert.rejects(k.cache.dropBatch(ref2), /is not held/, 'a batch not held is never dropped');
  } finally {
    await k.close();
  }
});
