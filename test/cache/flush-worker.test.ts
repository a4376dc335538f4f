/**
 * The flush worker (LLP 0013): a segment built and encoded in a worker thread
 * commits exactly what the in-place path commits — same seqs, row ids, batch
 * ids, values and manifest statistics — and its failures surface as the flush's,
 * with the segment left in its spool.
 * @ref LLP 0013
 */
import assert from 'node:assert/strict';
import { promises as fsp } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { Cache } from '../../kernel/cache.js';
import { SeqAllocator } from '../../kernel/flush/allocator.js';
import { commitRows } from '../../kernel/flush/commit.js';
import { prepareRows } from '../../kernel/flush/decorate.js';
import { FlushEncoder } from '../../kernel/flush/flush-encoder.js';
import { encodeRows } from '../../kernel/flush/segment-rows.js';
import { DEFAULT_LAYOUT } from '../../kernel/store/parquet.js';
import { collect, EVENTS, EVENTS_V2, openCache, rows } from '../support/datasets.js';
import { tempDir } from '../support/tmp.js';
import { currentManifest, partitionDirs, readParquetRaw, walk } from './helpers.js';

const S1 = { dataset: 'events', id: 's1' };

/** Append the same frames to a cache: three sources interleaved, one frame of an older schema. */
async function fill(cache: Cache): Promise<void> {
  await cache.appendRows(S1, ['source', 'id', 'ts', 'msg'], [...rows('web', 1, 40), ...rows('ios', 1, 25)]);
  await cache.appendRows(S1, ['source', 'id', 'ts', 'msg'], [...rows('ios', 26, 10), ['web', 41, '2026-01-01T00:00:41.000Z', null]]);
  await cache.appendRows(S1, ['source', 'id', 'ts', 'msg'], rows('android\u0000odd', 1, 7));
}

/** Every column of every file of every partition, and the manifests without their times. */
async function contents(root: string): Promise<unknown> {
  const out: Record<string, unknown> = {};
  for (const dir of await partitionDirs(root)) {
    const { manifest } = await currentManifest(dir);
    const files = [];
    for (const f of manifest.files) {
      const { committedAt: _, ...entry } = f as typeof f & { committedAt?: number };
      files.push({ entry, cols: await readParquetRaw(join(dir, `table-${(await currentManifest(dir)).generation}`, f.name)) });
    }
    out[dir.slice(root.length)] = files;
  }
  return out;
}

describe('flush worker', () => {
  test('a segment built in the worker commits the same files as one built in place', async () => {
    const inPlaceRoot = tempDir();
    const workerRoot = tempDir();
    const inPlace = await openCache(inPlaceRoot, { seqBlockSize: 8, rowGroupRows: 16, workerMinBytes: Number.MAX_SAFE_INTEGER });
    const worker = await openCache(workerRoot, { seqBlockSize: 8, rowGroupRows: 16, workerMinBytes: 0 });
    try {
      await fill(inPlace);
      await fill(worker);
      const a = await inPlace.flushTable(S1);
      const b = await worker.flushTable(S1);
      assert.deepEqual(b, a);
      assert.equal(a.partitions.length, 3);
      const want = await contents(inPlaceRoot);
      assert.deepEqual(await contents(workerRoot), want);
      // The files hold the rows: 41 + 35 + 7, seqs from the allocator, ids hashed.
      const total = Object.values(want as Record<string, { cols: { id: unknown[] } }[]>).flat().reduce((n, f) => n + f.cols.id.length, 0);
      assert.equal(total, 83);
    } finally {
      await inPlace.close();
      await worker.close();
    }
  });

  test('a segment sealed by its append is built ahead; a sealed-only flush takes it and leaves the current file', async () => {
    const root = tempDir();
    const cache = await openCache(root, { seqBlockSize: 8, workerMinBytes: 0 });
    const other = await openCache(root, { seqBlockSize: 8, workerMinBytes: 0 });
    try {
      await cache.appendValidated(S1, rows('web', 1, 30).map(([s, id, ts, msg]) => [s, id, Date.parse(ts as string), msg]), { seal: true });
      await cache.appendRows(S1, ['source', 'id', 'ts', 'msg'], rows('web', 31, 5));
      const dir = join(root, 'spools/events/s1');
      assert.deepEqual((await fsp.readdir(dir)).filter((f) => f.endsWith('.ndjson')).sort(), ['current.ndjson', 'seg-0.ndjson']);
      const first = await cache.flushTable(S1, { sealCurrent: false });
      assert.deepEqual(first.partitions.map((p) => p.rows), [30]);
      assert.ok((await fsp.readdir(dir)).includes('current.ndjson'), 'the current file is left to fill');
      // A segment built ahead that another writer flushed first is not committed twice.
      await cache.appendValidated(S1, rows('web', 36, 3).map(([s, id, ts, msg]) => [s, id, Date.parse(ts as string), msg]), { seal: true });
      assert.equal((await other.flushTable(S1)).partitions[0]?.rows, 8);
      assert.deepEqual((await cache.flushTable(S1)).partitions, []);
      const web = (await collect(cache.storage.readRowsSince('datasets/events/source=web', {}))).map((r) => r.row.id);
      assert.deepEqual(web, Array.from({ length: 38 }, (_, i) => i + 1));
    } finally {
      await cache.close();
      await other.close();
    }
  });

  test('frames of an older schema read the added column as null in the worker too', async () => {
    const root = tempDir();
    const old = await openCache(root);
    await old.appendRows(S1, ['source', 'id', 'ts', 'msg'], rows('web', 1, 3));
    const evolved = await Cache.open({ root, datasets: { events: EVENTS_V2 }, lockWaitMs: 2000, workerMinBytes: 0 });
    try {
      await evolved.appendRows(S1, ['source', 'id', 'ts', 'msg', 'level'], [['web', 4, '2026-01-01T00:00:04.000Z', 'm4', 'warn']]);
      await evolved.flushTable(S1);
      const [dir] = await partitionDirs(root);
      const { generation, manifest } = await currentManifest(dir!);
      const cols = await readParquetRaw(join(dir!, `table-${generation}`, manifest.files[0]!.name));
      assert.deepEqual(cols.id!.map(Number), [1, 2, 3, 4]);
      assert.deepEqual(cols.level, [null, null, null, 'warn']);
    } finally {
      await evolved.close();
    }
    assert.equal(EVENTS.columns.length + 1, EVENTS_V2.columns.length);
  });

  test('a worker stopped while it prepares: the segment is built in place instead', async () => {
    const root = tempDir();
    const cache = await openCache(root);
    await cache.appendRows(S1, ['source', 'id', 'ts', 'msg'], rows('web', 1, 300));
    const [seg] = await cache.spool(S1).seal();
    const encoder = new FlushEncoder({ ...DEFAULT_LAYOUT, rowGroupRows: 64 }, 0);
    // The worker takes well over 20 ms to start (loader, Arrow, parquet-wasm): it is stopped mid-prepare.
    setTimeout(() => void encoder.close(), 20);
    const built = await encoder.segment(seg!.path, 'events', EVENTS);
    assert.deepEqual(
      built.partitions.map((p) => [p.source, p.rows.rows]),
      [['web', 300]],
    );
    // Rows held in this thread encode without a worker (one held by a stopped worker could not).
    const file = await built.partitions[0]!.rows.encode(1000n, 'b');
    assert.equal(file.rows, 300);
    assert.deepEqual(file.rowGroups.map((g) => [g.minSeq, g.maxSeq]).at(-1), ['1256', '1299']);
    await built.release();
    await encoder.close();
  });

  test('a file whose seqs differ from the allocation is refused before it is written', async () => {
    const root = tempDir();
    const cache = await openCache(root);
    try {
      const store = cache.store(cache.partition('events', 'web'));
      const rows = prepareRows(store.ref, EVENTS.columns, [[1, Date.parse('2026-01-01T00:00:01Z'), 'a']]);
      // An encoder that stamps the wrong seqs (as a broken worker would).
      const off = { rows: 1, encode: async (first: bigint, batchId: string) => encodeRows(EVENTS, rows, first + 7n, batchId, { ...DEFAULT_LAYOUT, rowGroupRows: 64 }) };
      await assert.rejects(
        // An allocator of its own: this checks the encoded file, not the writer lock.
        commitRows(store, new SeqAllocator(root), { rows: off, batchId: "b", marker: { spool: "x", segment: 0 } }),
        (e: Error & { code?: string }) => e.code === 'HYPSINK_ERR_INVARIANT' && /allocated 1, (\d+)\.\.\1/.test(e.message),
      );
      const [dir] = await partitionDirs(root);
      assert.deepEqual((await currentManifest(dir!)).manifest.files, []);
      assert.deepEqual(
        (await walk(dir!)).filter((f) => f.endsWith('.parquet')),
        [],
      );
    } finally {
      await cache.close();
    }
  });

  test('a corrupt segment fails the flush from the worker with its path, and stays in the spool', async () => {
    const root = tempDir();
    const cache = await openCache(root, { workerMinBytes: 0 });
    try {
      await cache.appendRows(S1, ['source', 'id', 'ts', 'msg'], rows('web', 1, 5));
      const [seg] = await cache.spool(S1).seal();
      await fsp.writeFile(seg!.path, '{"v":1,"cols":["id"],"rows":[["web"]]}\n{not json}\n');
      await assert.rejects(cache.flushTable(S1), (e: Error & { code?: string }) => {
        assert.equal(e.code, 'HYPSINK_ERR_CORRUPT');
        assert.match(e.message, new RegExp(`${seg!.path.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}.*line 1`));
        return true;
      });
      await fsp.access(seg!.path);
      assert.deepEqual(await partitionDirs(root), []);
    } finally {
      await cache.close();
    }
  });
});
