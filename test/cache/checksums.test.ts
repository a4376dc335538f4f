/**
 * Data files carry a checksum of each column chunk in their manifest entry
 * (a flush in place or in the flush worker, compaction), and every read that
 * takes a chunk whole checks it: one bit flipped in any column's pages fails
 * the read with HYPSINK_ERR_CORRUPT naming the file, compaction does not
 * rewrite damaged rows into a fresh file, and a file written before (no
 * checksums) reads as it did.
 * @ref LLP 0104: data files carry chunk checksums
 */
import assert from 'node:assert/strict';
import { promises as fsp } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { SEQ_COLUMN } from '../../kernel/store/columns.js';
import { flipColumnBit } from '../support/damage.js';
import { COLS, collect, openCache, rows } from '../support/datasets.js';
import { tempDir } from '../support/tmp.js';
import { currentManifest, readJson } from './helpers.js';

const S1 = { dataset: 'events', id: 's1' };

/** A cache with one partition of two files (rows 1–40, 41–80), closed; the partition's folder. */
async function twoFiles(root: string, workerMinBytes: number): Promise<string> {
  const cache = await openCache(root, { rowGroupRows: 8, workerMinBytes });
  try {
    await cache.appendRows(S1, COLS, rows('web', 1, 40));
    await cache.flushTable(S1);
    await cache.appendRows(S1, COLS, rows('web', 41, 40));
    await cache.flushTable(S1);
  } finally {
    await cache.close();
  }
  return join(root, 'datasets/events/source=web');
}

const corrupt = (file: string) => (e: { code?: string; message?: string }) => {
  assert.equal(e.code, 'HYPSINK_ERR_CORRUPT', e.message);
  assert.ok(e.message?.includes(file), `names the file: ${e.message}`);
  assert.match(e.message ?? '', /does not match the checksum the cache wrote/);
  return true;
};

describe('chunk checksums', () => {
  for (const [where, workerMinBytes] of [
    ['in place', Number.MAX_SAFE_INTEGER],
    ['in the flush worker', 0],
  ] as const) {
    test(`a flush ${where} records every chunk's checksum; one bit flipped in any column fails the read that takes it`, async () => {
      const root = tempDir();
      const dir = await twoFiles(root, workerMinBytes);
      const { generation, manifest } = await currentManifest(dir);
      const entry = manifest.files[1]! as { name: string; rowGroups: unknown[]; chunks?: [number, number, number][] };
      // 40 rows in groups of 8: 5 row groups × 6 columns (3 of the dataset, seq, row id, batch id).
      assert.equal(entry.chunks?.length, 5 * 6);
      const path = join(dir, `table-${generation}`, entry.name);
      const original = await fsp.readFile(path);
      // The row ids' chunks are read by a digest, not by this read: their damage is the CLI's test (test/sinks/damaged-cache.test.ts).
      for (const column of ['id', 'ts', 'msg', SEQ_COLUMN]) {
        await flipColumnBit(path, column);
        const cache = await openCache(root);
        try {
          await assert.rejects(collect(cache.storage.readRowsSince(cache.partition('events', 'web'))), corrupt(path), column);
        } finally {
          await cache.close();
        }
        await fsp.writeFile(path, original);
      }
      const cache = await openCache(root);
      try {
        const read = await collect(cache.storage.readRowsSince(cache.partition('events', 'web')));
        assert.equal(read.length, 80, 'restored, every row reads');
      } finally {
        await cache.close();
      }
    });
  }

  test('compaction reads through the checksums: damaged rows are not rewritten into a fresh file', async () => {
    const root = tempDir();
    const dir = await twoFiles(root, Number.MAX_SAFE_INTEGER);
    const before = await currentManifest(dir);
    const first = join(dir, `table-${before.generation}`, before.manifest.files[0]!.name);
    await flipColumnBit(first, 'msg');
    const cache = await openCache(root);
    try {
      await assert.rejects(cache.compact(), corrupt(first));
    } finally {
      await cache.close();
    }
    const after = await currentManifest(dir);
    assert.equal(after.generation, before.generation, 'no new generation');
    assert.deepEqual(after.manifest, before.manifest);

    // Restored, it compacts, and the compacted file carries checksums of its own.
    await flipColumnBit(first, 'msg');
    const again = await openCache(root);
    try {
      const [res] = await again.compact();
      assert.equal(res?.rowsAfter, 80);
      const { manifest } = await currentManifest(dir);
      assert.equal(manifest.files.length, 1);
      // 80 rows in one row group (this cache has the default size), 6 columns.
      assert.equal((manifest.files[0] as { chunks?: unknown[] }).chunks?.length, 6);
    } finally {
      await again.close();
    }
  });

  test('a file written before checksums (its entry has none) reads as before; a malformed list is a damaged manifest', async () => {
    const root = tempDir();
    const dir = await twoFiles(root, Number.MAX_SAFE_INTEGER);
    const { generation } = await currentManifest(dir);
    const manifestPath = join(dir, `table-${generation}`, 'manifest.json');
    const m = await readJson<{ files: { chunks?: unknown }[] }>(manifestPath);
    for (const f of m.files) delete f.chunks;
    await fsp.writeFile(manifestPath, JSON.stringify(m));
    let cache = await openCache(root);
    try {
      assert.equal((await collect(cache.storage.readRowsSince(cache.partition('events', 'web')))).length, 80);
    } finally {
      await cache.close();
    }
    m.files[0]!.chunks = [[4, 10, -1]];
    await fsp.writeFile(manifestPath, JSON.stringify(m));
    cache = await openCache(root);
    try {
      await assert.rejects(collect(cache.storage.readRowsSince(cache.partition('events', 'web'))), (e: { code?: string; message?: string }) => {
        assert.equal(e.code, 'HYPSINK_ERR_CORRUPT', e.message);
        assert.match(e.message ?? '', /bad chunk checksums/);
        return true;
      });
    } finally {
      await cache.close();
    }
  });
});
