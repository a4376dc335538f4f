/**
 * Batches in the cache (issue 12): a committed batch's spool is removed by
 * its ingest (LLP 0085), or else by maintenance, while its record keeps a
 * retry idempotent; the record goes once
 * the cache holds none of its rows; manifests keep a `spools` entry only for a
 * spool that still exists (they used to keep one per ingest forever).
 * @ref LLP 0021: idempotent ingest
 */
import assert from 'node:assert/strict';
import { promises as fsp } from 'node:fs';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { test } from 'node:test';
import { resetFaultHits } from '../../kernel/fault.js';
import { ingestNdjson } from '../../kernel/ingest/ingest.js';
import { eventLines, openKernel, sampleConfig, writeConfig } from '../support/kernel.js';
import { tempDir } from '../support/tmp.js';
import { currentManifest } from './helpers.js';

const lines = (from: number, n: number) => Readable.from([eventLines(from, n)]);

test('maintenance removes committed batch spools, trims manifest spool entries, and forgets a batch once its rows are gone', async () => {
  const dir = tempDir();
  const c = sampleConfig();
  c.maintenance = { retention: { maxAge: '1d' } };
  const config = await writeConfig(dir, c);
  const { k } = await openKernel(config);
  const web = join(dir, '.hypsink/cache/datasets/events/source=web');
  try {
    const spools = () => fsp.readdir(join(dir, '.hypsink/cache/spools/events'));
    // A committed batch's spool goes with its ingest (LLP 0085): a cache fed many batches between sweeps (an
    // aggregator's) keeps no spool per batch, and each commit looks at the entries of spools that remain.
    for (let b = 0; b < 3; b++) {
      await ingestNdjson(k, 'events', 'web', lines(1 + 5 * b, 5), 't', { batchId: `b${b}` });
      assert.deepEqual(await spools(), [], `batch b${b}: its spool stayed after its commit`);
    }
    assert.equal(Object.keys((await currentManifest(web)).manifest.spools).length, 1, "only the last batch's entry: the others' spools are gone");

    // A batch whose ingest's flush failed after its commit point: the next flush completes it, and its spool goes then.
    process.env.HYPSINK_FAULT = 'flush.afterManifest';
    process.env.HYPSINK_FAULT_ACTION = 'throw';
    try {
      await assert.rejects(ingestNdjson(k, 'events', 'web', lines(100, 5), 't', { batchId: 'cut' }), /injected failure/);
    } finally {
      delete process.env.HYPSINK_FAULT;
      delete process.env.HYPSINK_FAULT_ACTION;
      resetFaultHits();
    }
    assert.equal((await spools()).length, 1, 'its spool stays while its end is not recorded');
    await k.flush();
    assert.deepEqual(await spools(), [], 'the flush that completed the batch removed its spool');
    assert.equal((await ingestNdjson(k, 'events', 'web', lines(100, 5), 't', { batchId: 'cut' })).duplicate, true);

    // A spool left by an ingest that could not remove it (busy, or a crash before): maintenance removes it.
    await k.cache.withBatch(k.cache.batchSpool('events', 'b0'), async () => undefined);
    assert.equal((await spools()).length, 1);
    // No sink has exported: retention keeps every row, but the committed batches' spools go.
    await k.maintain({ retention: true });
    assert.deepEqual(await spools(), []);
    await ingestNdjson(k, 'events', 'web', lines(16, 5), 't', { batchId: 'b3' });
    assert.equal(Object.keys((await currentManifest(web)).manifest.spools).length, 1, 'entries of removed spools are dropped');
    // A retry of a batch whose spool is gone is still acknowledged: its record stays.
    const again = await ingestNdjson(k, 'events', 'web', lines(1, 5), 't', { batchId: 'b0' });
    assert.equal(again.duplicate, true);
    assert.deepEqual(await spools(), [], 'a retry acknowledged as a duplicate leaves no spool either');
    const records = () => fsp.readdir(join(dir, '.hypsink/cache/batches/events'));
    assert.equal((await records()).length, 5);

    // Every row exported, then pruned by age: no row of any batch is left, so their records go.
    await k.export();
    await k.maintain({ retention: true });
    assert.deepEqual(await records(), []);
    const late = await ingestNdjson(k, 'events', 'web', lines(1, 5), 't', { batchId: 'b0' });
    assert.equal(late.duplicate, false, 'a batch the cache no longer holds is new again (documented)');
  } finally {
    await k.close();
  }
});
