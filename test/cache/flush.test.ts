/**
 * Spools, the flush chokepoint, the seq allocator and the writer lock.
 * @ref LLP 0001 (seq allocator and commit order), LLP 0002 (exactly-once flush)
 */
import assert from 'node:assert/strict';
import { promises as fsp } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import type { Cache } from '../../kernel/cache.js';
import { rowId } from '../../kernel/flush/decorate.js';
import { COLS, collect, EVENTS, openCache, rows } from '../support/datasets.js';
import { tempDir } from '../support/tmp.js';
import {
  currentManifest,
  dumpPartition,
  firstNonIncreasing,
  parquetRowGroups,
  partitionDirs,
  readJson,
  runWorker,
  seqsOnDisk,
  startWorker,
  walk,
} from './helpers.js';

const S1 = { dataset: 'events', id: 's1' };

describe('flush chokepoint', () => {
  test('stamps seq, row id and batch id; one file per partition; manifest stats match the files', async () => {
    const root = tempDir();
    const cache = await openCache(root, { seqBlockSize: 8, rowGroupRows: 4 });
    await cache.appendRows(S1, COLS, [...rows('web', 1, 5), ...rows('app', 1, 3)]);
    await cache.appendRows(S1, COLS, rows('web', 6, 5));
    const res = await cache.flushTable(S1);
    assert.equal(res.segments, 1);
    assert.deepEqual(
      res.partitions.map((p) => [p.partition.source, p.rows]),
      [
        ['web', 10],
        ['app', 3],
      ],
    );
    const web = cache.partition('events', 'web');
    const webDir = join(root, web.path);
    const { generation, manifest } = await currentManifest(webDir);
    assert.equal(generation, 0);
    assert.equal(manifest.files.length, 1, 'one data file per partition per flushed segment');
    const dump = await dumpPartition(webDir);
    // Seqs start at 1 and are contiguous within one commit.
    assert.deepEqual(
      dump.map((r) => r.seq),
      ['1', '2', '3', '4', '5', '6', '7', '8', '9', '10'],
    );
    assert.deepEqual(
      dump.map((r) => r.id),
      [1, 2, 3, 4, 5, 6, 7, 8, 9, 10],
    );
    assert.ok(dump.every((r) => r.batchId === 'events/s1#0'));
    // Row id = content hash of (partition, values): recompute it independently of the write path.
    const expectIds = rows('web', 1, 10).map((r) => rowId(web, EVENTS.columns, [r[1], Date.parse(r[2] as string), r[3]]));
    assert.deepEqual(
      dump.map((r) => r.rowId),
      expectIds,
    );
    assert.equal(new Set(expectIds).size, 10);
    const f = manifest.files[0]!;
    assert.equal(f.rows, 10);
    // The timestamp range retention ages the file by: rows 1..10 are 1 s apart from 2026-01-01.
    assert.deepEqual([f.minTs, f.maxTs], [Date.parse('2026-01-01T00:00:01Z'), Date.parse('2026-01-01T00:00:10Z')]);
    assert.equal(f.bytes, (await fsp.stat(join(webDir, 'table-0', f.name))).size);
    assert.equal(f.minSeq, '1');
    assert.equal(f.maxSeq, '10');
    assert.deepEqual(await parquetRowGroups(join(webDir, 'table-0', f.name)), [4, 4, 2]);
    assert.deepEqual(f.rowGroups, [
      { rows: 4, minSeq: '1', maxSeq: '4' },
      { rows: 4, minSeq: '5', maxSeq: '8' },
      { rows: 2, minSeq: '9', maxSeq: '10' },
    ]);
    assert.deepEqual(manifest.spools, { 'events/s1': 0 }, 'the consumed segment rides in the commit');
    // A commit larger than the block (10 > 8) reserved its own size; the app rows went on from it, so the
    // flush reserved what it took and nothing more (LLP 0039).
    const app = await dumpPartition(join(root, cache.partition('events', 'app').path));
    assert.deepEqual(
      app.map((r) => r.seq),
      ['11', '12', '13'],
    );
    const alloc = await readJson<{ reservedThrough: unknown }>(join(root, '_hyp_ingest_seq.json'));
    assert.equal(typeof alloc.reservedThrough, 'string', 'decimal string on disk');
    assert.equal(alloc.reservedThrough, '13');
    // The spool segment is gone once every partition committed.
    assert.deepEqual((await walk(join(root, 'spools'))).filter((p) => p.endsWith('.ndjson')), []);
  });

  test('frames spooled as JSON rows (v1, before LLP 0015) flush to the rows and row ids of Arrow frames', async () => {
    const v1Root = tempDir();
    const v2Root = tempDir();
    const v2 = await openCache(v2Root);
    const appended = rows('web', 1, 6);
    appended[5]![3] = null;
    await v2.appendRows(S1, COLS, appended);
    // The same rows as v1 frames: one in another column order, one without a column (it reads as null).
    const v1 = await openCache(v1Root);
    const dir = join(v1Root, 'spools/events/s1');
    await fsp.mkdir(dir, { recursive: true });
    const ms = (r: unknown[]) => Date.parse(r[2] as string);
    const reordered = { v: 1, cols: ['msg', 'id', 'ts'], rows: appended.slice(0, 5).map((r) => [r[0], r[3], r[1], ms(r)]) };
    const narrower = { v: 1, cols: ['id', 'ts'], rows: appended.slice(5).map((r) => [r[0], r[1], ms(r)]) };
    await fsp.writeFile(join(dir, 'current.ndjson'), `${JSON.stringify(reordered)}\n${JSON.stringify(narrower)}\n`);
    await v1.flushTable(S1);
    await v2.flushTable(S1);
    const web = v2.partition('events', 'web');
    const [a, b] = [await dumpPartition(join(v1Root, web.path)), await dumpPartition(join(v2Root, web.path))];
    assert.deepEqual(a.map((r) => r.id), [1, 2, 3, 4, 5, 6]);
    assert.deepEqual(a.map((r) => [r.id, r.seq, r.rowId]), b.map((r) => [r.id, r.seq, r.rowId]));
    assert.equal((await collect(v1.storage.readRowsSince(web.path, {}))).at(-1)?.row.msg, null);
  });

  test('a bad row rejects the whole append and nothing is spooled', async () => {
    const root = tempDir();
    const cache = await openCache(root);
    const bad = [...rows('web', 1, 2), ['web', 'not-an-int', '2026-01-01T00:00:00Z', 'x']];
    await assert.rejects(cache.appendRows(S1, COLS, bad), (e: { code?: string; message?: string }) => {
      return e.code === 'HYPSINK_ERR_INPUT' && /row 3/.test(e.message ?? '');
    });
    await assert.rejects(cache.appendRows(S1, ['id', 'ts', 'msg'], [[1, 0, 'x']]), /source/);
    const r = await cache.flushTable(S1);
    assert.equal(r.segments, 0);
    assert.deepEqual(await cache.listPartitions(), []);
  });

  test('the allocator reserves its block durably before stamping: no reservation, no data file', async () => {
    const root = tempDir();
    const cache = await openCache(root);
    await cache.appendRows(S1, COLS, rows('web', 1, 3));
    // A directory where the allocator file goes: the reservation cannot be written.
    await fsp.mkdir(join(root, '_hyp_ingest_seq.json'));
    await assert.rejects(cache.flushTable(S1));
    assert.deepEqual((await walk(join(root, 'datasets'))).filter((p) => p.endsWith('.parquet')), []);
    await fsp.rmdir(join(root, '_hyp_ingest_seq.json'));
    const again = await cache.flushTable(S1);
    assert.equal(again.partitions[0]?.rows, 3, 'the rows waited in the spool');
  });

  test('spool rotation: many segments, consumed in order, markers record the last one', async () => {
    const root = tempDir();
    const cache = await openCache(root, { segmentBytes: 600 });
    for (let i = 0; i < 8; i++) await cache.appendRows(S1, COLS, rows(i % 2 ? 'web' : 'app', i * 10, 10));
    const sealed = (await walk(join(root, 'spools'))).filter((p) => /seg-\d+\.ndjson$/.test(p));
    assert.ok(sealed.length >= 3, `appends rotated the spool (${sealed.length} sealed)`);
    const res = await cache.flushTable(S1);
    assert.ok(res.segments >= 4);
    const web = await dumpPartition(join(root, cache.partition('events', 'web').path));
    assert.deepEqual(
      web.map((r) => r.id),
      [10, 30, 50, 70].flatMap((s) => Array.from({ length: 10 }, (_, i) => s + i)),
    );
    assert.equal(firstNonIncreasing(web.map((r) => r.seq)), -1);
    const { manifest } = await currentManifest(join(root, cache.partition('events', 'web').path));
    assert.equal(manifest.spools['events/s1'], res.segments - 1);
  });
});

describe('commit order = seq order', () => {
  async function checkPartitions(root: string, expectPerSource: Map<string, Set<number>>) {
    const allSeqs: string[] = [];
    const cache = await openCache(root);
    for (const dir of await partitionDirs(root)) {
      const dump = await dumpPartition(dir);
      const seqs = dump.map((r) => r.seq);
      assert.equal(firstNonIncreasing(seqs), -1, `${dir}: seqs increase in commit (manifest) order`);
      allSeqs.push(...(seqs as string[]));
      const meta = await readJson<{ source: string }>(join(dir, 'partition.json'));
      const ids = dump.map((r) => r.id);
      assert.equal(new Set(ids).size, ids.length, `${meta.source}: no row twice`);
      assert.deepEqual(new Set(ids), expectPerSource.get(meta.source), `${meta.source}: every row once`);
      // The reader yields the same rows in the same order, with the same seqs as continuations.
      const read = await collect(cache.storage.readRowsSince(cache.partition('events', meta.source)));
      assert.deepEqual(
        read.map((r) => r.row.id),
        ids,
      );
      assert.deepEqual(
        read.map((r) => r.after.seq),
        seqs,
      );
    }
    assert.equal(new Set(allSeqs).size, allSeqs.length, 'no seq is issued twice, across partitions');
    return allSeqs;
  }

  test('several spools flushed concurrently (Promise.all) into shared partitions', async () => {
    const root = tempDir();
    const cache = await openCache(root, { seqBlockSize: 16 });
    const expect = new Map<string, Set<number>>([
      ['shared', new Set()],
      ['other', new Set()],
    ]);
    let next = 0;
    for (let round = 0; round < 4; round++) {
      for (const id of ['a', 'b', 'c', 'd']) {
        const n = 5 + ((round * 7 + id.charCodeAt(0)) % 9);
        await cache.appendRows({ dataset: 'events', id }, COLS, [...rows('shared', next, n), ...rows('other', next, 2)]);
        for (let i = 0; i < n; i++) expect.get('shared')!.add(next + i);
        for (let i = 0; i < 2; i++) expect.get('other')!.add(next + i);
        next += 100;
      }
      const results = await Promise.all(['a', 'b', 'c', 'd'].map((id) => cache.flushTable({ dataset: 'events', id })));
      assert.equal(
        results.reduce((n, r) => n + r.segments, 0),
        4,
      );
    }
    await checkPartitions(root, expect);
    const { manifest } = await currentManifest(join(root, cache.partition('events', 'shared').path));
    assert.equal(manifest.files.length, 16, 'one commit per spool segment');
  });

  test('two cache instances alternating writers: each goes on where the other stopped, no seq twice', async () => {
    const root = tempDir();
    const a = await openCache(root);
    const b = await openCache(root);
    const expect = new Map([['web', new Set<number>()]]);
    for (let i = 0; i < 6; i++) {
      const c = i % 2 ? b : a;
      const id = i % 2 ? 'sb' : 'sa';
      await c.appendRows({ dataset: 'events', id }, COLS, rows('web', i * 10, 3));
      for (let k = 0; k < 3; k++) expect.get('web')!.add(i * 10 + k);
      await c.flushTable({ dataset: 'events', id });
    }
    const seqs = await checkPartitions(root, expect);
    // Each flush reserved what it took, so no writer held a block the other had to skip (LLP 0039;
    // a block left in hand is never reused: test/cache/allocator.test.ts).
    assert.deepEqual(seqs, Array.from({ length: 18 }, (_, i) => String(i + 1)));
  });

  test('a flush reserves what it takes: the next flush, by the same writer or another, goes on from it', async () => {
    const root = tempDir();
    const a = await openCache(root, { seqBlockSize: 100 });
    const b = await openCache(root, { seqBlockSize: 100 });
    const reserved = async () => (await readJson<{ reservedThrough: string }>(join(root, '_hyp_ingest_seq.json'))).reservedThrough;
    const flushRows = async (c: Cache, id: string, from: number) => {
      await c.appendRows({ dataset: 'events', id }, COLS, rows('web', from, 3));
      await c.flushTable({ dataset: 'events', id });
    };
    await flushRows(a, 'sa', 0);
    await flushRows(a, 'sa', 10);
    assert.equal(await reserved(), '6', 'the second flush went on from the first one\'s end');
    await flushRows(b, 'sb', 20);
    await flushRows(a, 'sa', 30);
    const web = await dumpPartition(join(root, a.partition('events', 'web').path));
    assert.deepEqual(web.map((r) => [r.id, r.seq]), [[0, '1'], [1, '2'], [2, '3'], [10, '4'], [11, '5'], [12, '6'], [20, '7'], [21, '8'], [22, '9'], [30, '10'], [31, '11'], [32, '12']]);
    assert.equal(await reserved(), '12');
  });

  test('two child processes flushing into one partition at once', async () => {
    const root = tempDir();
    const go = join(root, 'go');
    const script = (spool: string, from: number) => ({
      root,
      opts: { lockWaitMs: 20_000, seqBlockSize: 32 },
      steps: [
        { op: 'waitFile' as const, path: go },
        { op: 'appendFlushLoop' as const, spool, source: 'shared', from, n: 7, rounds: 25, pauseMs: 40 },
      ],
    });
    const workers = [startWorker(script('px', 0), 'ready'), startWorker(script('py', 100_000), 'ready')];
    await Promise.all(workers.map((w) => w.ready));
    await fsp.writeFile(go, '');
    const [x, y] = await Promise.all(workers.map((w) => w.exited));
    assert.ok(x && y);
    assert.equal(x.code, 0, x.stderr);
    assert.equal(y.code, 0, y.stderr);
    const expect = new Set<number>();
    for (let i = 0; i < 25 * 7; i++) {
      expect.add(i);
      expect.add(100_000 + i);
    }
    const seqs = await checkPartitions(root, new Map([['shared', expect]]));
    // Two writers at once, each flush reserving what it took: no seq skipped (LLP 0039).
    assert.equal(seqs.at(-1), String(2 * 25 * 7), 'the last seq is the row count');
    const dir = join(root, 'datasets/events/source=shared');
    // The writers really interleaved: the commit sequence switches between the two spools.
    const batches = (await dumpPartition(dir)).map((r) => r.batchId!.split('#')[0]);
    let switches = 0;
    for (let i = 1; i < batches.length; i++) if (batches[i] !== batches[i - 1]) switches++;
    assert.ok(switches >= 3, `commits of the two processes interleave (${switches} switches)`);
    // Each process saw its own commits land at increasing seqs.
    for (const run of [x, y]) {
      const hw = run.events.filter((e) => e.ev === 'flushed').map((e) => (e.partitions as { highWater: string }[])[0]!.highWater);
      assert.equal(hw.length, 25);
      assert.equal(firstNonIncreasing(hw), -1);
    }
  });

  test('the same spool flushed concurrently in one process: every row exactly once', async () => {
    const root = tempDir();
    const cache = await openCache(root, { segmentBytes: 400 });
    for (let i = 0; i < 10; i++) await cache.appendRows(S1, COLS, rows('web', i * 10, 10));
    const flushes = [cache.flushTable(S1), cache.flushTable(S1), cache.flushAll()];
    await cache.appendRows(S1, COLS, rows('web', 100, 10));
    flushes.push(cache.flushTable(S1));
    await Promise.all(flushes);
    await cache.flushTable(S1);
    const ids = (await dumpPartition(join(root, 'datasets/events/source=web'))).map((r) => r.id);
    assert.deepEqual(
      ids,
      Array.from({ length: 110 }, (_, i) => i),
    );
  });

  test('appends racing flushes of their own spool in one process: every row exactly once', async () => {
    // An ingest flushes while it still appends (LLP 0013). A frame written into a
    // segment after the flush read it would be deleted with it, unflushed.
    const root = tempDir();
    const cache = await openCache(root);
    const pending: Promise<unknown>[] = [];
    for (let i = 0; i < 60; i++) {
      pending.push(cache.appendRows(S1, COLS, rows('web', i * 50, 50)));
      if (i % 3 === 0) pending.push(cache.flushTable(S1));
    }
    await Promise.all(pending);
    await cache.flushTable(S1);
    const ids = (await dumpPartition(join(root, 'datasets/events/source=web'))).map((r) => r.id).sort((a, b) => a - b);
    assert.deepEqual(
      ids,
      Array.from({ length: 3000 }, (_, i) => i),
    );
  });
});

describe('writer lock', () => {
  test('a writer that cannot get the lock fails in bounded time naming the holder; a dead holder does not block', async () => {
    const root = tempDir();
    const holder = startWorker({ root, steps: [{ op: 'holdLock', ms: 60_000 }] }, 'locked');
    try {
      const ev = await holder.ready;
      const cache = await openCache(root, { lockWaitMs: 400 });
      await cache.appendRows(S1, COLS, rows('web', 1, 3)); // the spool lock is not the writer lock
      const t0 = Date.now();
      await assert.rejects(cache.flushTable(S1), (e: { code?: string; message?: string }) => {
        assert.equal(e.code, 'HYPSINK_ERR_LOCKED');
        assert.match(e.message ?? '', new RegExp(`pid ${ev.pid}\\b`));
        return true;
      });
      const waited = Date.now() - t0;
      assert.ok(waited >= 350 && waited < 6000, `waited ${waited} ms: bounded, not a hang`);
      await assert.rejects(cache.retention({ maxRows: 1 }), /HYPSINK_ERR_LOCKED|locked by/);
      // The holder dies without releasing (SIGKILL): its lock must not outlive it.
      holder.child.kill('SIGKILL');
      assert.equal((await holder.exited).signal, 'SIGKILL');
      // proper-lockfile alone would call the lock stale only after 30 s: this wait is far shorter.
      const res = await (await openCache(root, { lockWaitMs: 3000 })).flushTable(S1);
      assert.equal(res.partitions[0]?.rows, 3);
    } finally {
      holder.child.kill('SIGKILL');
    }
  });

  test('the lock is held per operation: a second process flushes between the first one\'s operations', async () => {
    const root = tempDir();
    const cache = await openCache(root);
    await cache.appendRows(S1, COLS, rows('web', 1, 2));
    await cache.flushTable(S1);
    const run = await runWorker({
      root,
      steps: [
        { op: 'append', spool: 'w', source: 'web', from: 10, n: 2 },
        { op: 'flush', spools: ['w'] },
      ],
    });
    assert.equal(run.code, 0, run.stderr);
    await cache.appendRows(S1, COLS, rows('web', 20, 2));
    await cache.flushTable(S1);
    const dump = await dumpPartition(join(root, 'datasets/events/source=web'));
    assert.deepEqual(
      dump.map((r) => r.id),
      [1, 2, 10, 11, 20, 21],
    );
    assert.equal(firstNonIncreasing(dump.map((r) => r.seq)), -1);
    assert.equal(new Set(await seqsOnDisk(root)).size, 6);
  });
});
