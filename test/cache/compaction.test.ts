/**
 * Compaction (generation n+1 sorted by seq, every committed row kept, identical
 * ones included, seqs verbatim, cursor swap), reader leases holding the old
 * generation, and legacy files without a seq column read as new exactly once.
 * @ref LLP 0004 (generations and reader leases)
 * @ref LLP 0020 (compaction keeps every committed row)
 */
import assert from 'node:assert/strict';
import { existsSync, promises as fsp } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { makeData, makeVector, Table, TimestampMillisecond, tableToIPC } from 'apache-arrow';
import * as pw from 'parquet-wasm/node';
import { buildColumn } from '../../kernel/store/columns.js';
import { continuation } from '../../types/storage.js';
import { COLS, collect, openCache, rows } from '../support/datasets.js';
import { tempDir } from '../support/tmp.js';
import { currentManifest, dumpPartition, firstNonIncreasing, parquetRowGroups, readParquetRaw, startWorker } from './helpers.js';

const S1 = { dataset: 'events', id: 's1' };
const T0 = Date.parse('2026-01-01T00:00:00Z');

describe('compaction', () => {
  test('one generation up, sorted by seq, every row kept (identical rows too), ids and seqs verbatim', async () => {
    const root = tempDir();
    const cache = await openCache(root, { rowGroupRows: 4 });
    const web = cache.partition('events', 'web');
    await cache.appendRows(S1, COLS, rows('web', 1, 5));
    await cache.flushTable(S1);
    await cache.appendRows(S1, COLS, rows('web', 3, 5)); // 3, 4, 5 again: same content, same row id
    await cache.flushTable(S1);
    await cache.appendRows(S1, COLS, [...rows('web', 8, 2), ...rows('web', 1, 1)]); // 1 a third time
    await cache.flushTable(S1);
    const before = await collect(cache.storage.readRowsSince(web));
    assert.deepEqual(
      before.map((r) => r.row.id),
      [1, 2, 3, 4, 5, 3, 4, 5, 6, 7, 8, 9, 1],
    );
    const dir = join(root, web.path);
    const rowIdsBefore = await dumpPartition(dir);
    const committedBefore = (await cache.storage.stats(web)).committedRows;
    const [res] = await cache.compact();
    assert.deepEqual(
      { generation: res!.generation, rowsBefore: res!.rowsBefore, rowsAfter: res!.rowsAfter },
      { generation: 1, rowsBefore: 13, rowsAfter: 13 },
    );
    const after = await collect(cache.storage.readRowsSince(web));
    // What a sink reads is unchanged: every row, with its original seq, in seq order.
    assert.deepEqual(
      after.map((r) => [r.row.id, r.after.seq]),
      before.map((r) => [r.row.id, r.after.seq]),
    );
    assert.equal((await cache.storage.stats(web)).committedRows, committedBefore);
    const dump = await dumpPartition(dir);
    assert.equal(firstNonIncreasing(dump.map((r) => r.seq)), -1);
    assert.deepEqual(
      dump.map((r) => [r.rowId, r.batchId]),
      rowIdsBefore.map((r) => [r.rowId, r.batchId]),
      'row and batch ids copied verbatim',
    );
    const { generation, manifest } = await currentManifest(dir);
    assert.equal(generation, 1);
    assert.equal(manifest.files.length, 1);
    assert.deepEqual(await parquetRowGroups(join(dir, 'table-1', manifest.files[0]!.name)), [4, 4, 4, 1]);
    assert.deepEqual(
      manifest.files[0]!.rowGroups.map((g) => [g.rows, g.minSeq, g.maxSeq]),
      [
        [4, dump[0]!.seq, dump[3]!.seq],
        [4, dump[4]!.seq, dump[7]!.seq],
        [4, dump[8]!.seq, dump[11]!.seq],
        [1, dump[12]!.seq, dump[12]!.seq],
      ],
    );
    assert.deepEqual(manifest.spools, { 'events/s1': 2 });
    assert.ok(!existsSync(join(dir, 'table-0')), 'no reader: the old generation is gone at once');
    // One file left: nothing more to compact.
    assert.deepEqual(await cache.compact(), []);
  });

  test('compactFileRows splits the output into seq-ordered files', async () => {
    const root = tempDir();
    const cache = await openCache(root, { compactFileRows: 10, rowGroupRows: 5 });
    for (let f = 0; f < 5; f++) {
      await cache.appendRows(S1, COLS, rows('web', f * 100, 7));
      await cache.flushTable(S1);
    }
    const before = await collect(cache.storage.readRowsSince(cache.partition('events', 'web')));
    await cache.compact();
    const { manifest } = await currentManifest(join(root, 'datasets/events/source=web'));
    assert.ok(manifest.files.length >= 3 && manifest.files.length < 5, `${manifest.files.length} files`);
    assert.deepEqual(await collect(cache.storage.readRowsSince(cache.partition('events', 'web'))), before);
  });

  test('a reader open mid-way keeps the old generation until it finishes and a later sweep runs', async () => {
    const root = tempDir();
    const cache = await openCache(root, { rowGroupRows: 10 });
    for (let f = 0; f < 3; f++) {
      await cache.appendRows(S1, COLS, rows('web', f * 100, 50));
      await cache.flushTable(S1);
    }
    const web = cache.partition('events', 'web');
    const dir = join(root, web.path);
    const expected = await collect(cache.storage.readRowsSince(web));
    const it = cache.storage.readRowsSince(web)[Symbol.asyncIterator]();
    const got: typeof expected = [];
    for (let i = 0; i < 20; i++) got.push((await it.next()).value!);
    await cache.compact();
    assert.equal((await currentManifest(dir)).generation, 1, 'the cursor swapped');
    assert.ok(existsSync(join(dir, 'table-0')), 'leased: still there');
    assert.ok(existsSync(join(dir, 'table-0', '.retired')), 'tombstoned');
    // New readers read the new generation (and see the same rows).
    assert.deepEqual(await collect(cache.storage.readRowsSince(web)), expected);
    // Maintenance while the reader is still open does not delete it either.
    await cache.compact();
    await cache.retention({ maxRows: 1_000_000 });
    assert.ok(existsSync(join(dir, 'table-0')));
    for (let r = await it.next(); !r.done; r = await it.next()) got.push(r.value);
    assert.deepEqual(got, expected, 'the old reader completed with the old rows');
    assert.ok(existsSync(join(dir, 'table-0')), 'gone only after a later sweep');
    await cache.compact(); // nothing to compact, but it sweeps
    assert.ok(!existsSync(join(dir, 'table-0')));
    assert.deepEqual(
      (await fsp.readdir(dir)).filter((n) => n.startsWith('table-')),
      ['table-1'],
    );
  });

  test('maintenance removes a generation a crashed rewrite left above the cursor, even with nothing to rewrite', async () => {
    const root = tempDir();
    const cache = await openCache(root);
    await cache.appendRows(S1, COLS, rows('web', 1, 3));
    await cache.flushTable(S1);
    const dir = join(root, 'datasets/events/source=web');
    await fsp.mkdir(join(dir, 'table-4'));
    await fsp.writeFile(join(dir, 'table-4', 'data-1-3.parquet'), 'half written');
    assert.deepEqual(await cache.compact(), [], 'one file: nothing to compact');
    assert.deepEqual(
      (await fsp.readdir(dir)).filter((n) => n.startsWith('table-')),
      ['table-0'],
    );
    assert.equal((await collect(cache.storage.readRows(cache.partition('events', 'web')))).length, 3);
  });

  test('a reader in another process holds the old generation; a dead reader does not', async () => {
    const root = tempDir();
    const cache = await openCache(root, { rowGroupRows: 10 });
    for (let f = 0; f < 3; f++) {
      await cache.appendRows(S1, COLS, rows('web', f * 100, 30));
      await cache.flushTable(S1);
    }
    const dir = join(root, 'datasets/events/source=web');
    const expected = (await collect(cache.storage.readRows(cache.partition('events', 'web')))).map((r) => r.id);
    const go = join(root, 'go');
    const live = startWorker({ root, steps: [{ op: 'readHold', source: 'web', first: 15, path: go }] }, 'reading');
    const doomed = startWorker({ root, steps: [{ op: 'readHold', source: 'web', first: 15, path: `${go}-never` }] }, 'reading');
    try {
      await Promise.all([live.ready, doomed.ready]);
      await cache.compact();
      assert.equal((await currentManifest(dir)).generation, 1);
      assert.ok(existsSync(join(dir, 'table-0')), 'leased by two live readers');
      doomed.child.kill('SIGKILL');
      assert.equal((await doomed.exited).signal, 'SIGKILL');
      await cache.compact();
      assert.ok(existsSync(join(dir, 'table-0')), 'one live reader still holds it');
      await fsp.writeFile(go, '');
      const done = await live.exited;
      assert.equal(done.code, 0, done.stderr);
      assert.deepEqual(done.events.find((e) => e.ev === 'read')?.ids, expected, 'the reader finished on the old rows');
      await cache.compact(); // the dead reader's lease does not pin the generation
      assert.ok(!existsSync(join(dir, 'table-0')));
    } finally {
      live.child.kill('SIGKILL');
      doomed.child.kill('SIGKILL');
    }
  });

  test('a reader that stops early (break) releases its lease', async () => {
    const root = tempDir();
    const cache = await openCache(root);
    for (let f = 0; f < 2; f++) {
      await cache.appendRows(S1, COLS, rows('web', f * 100, 5));
      await cache.flushTable(S1);
    }
    const web = cache.partition('events', 'web');
    for await (const _ of cache.storage.readRowsSince(web)) break;
    await cache.compact();
    assert.ok(!existsSync(join(root, web.path, 'table-0')));
  });
});

/** A Parquet file as an older writer made it: user columns only, no `_hyp_*`. */
function legacyParquet(ids: number[]): Uint8Array {
  const n = ids.length;
  const ts = new BigInt64Array(ids.map((i) => BigInt(T0 + i * 1000)));
  const table = new Table({
    id: makeVector(buildColumn('INT64', ids)),
    ts: makeVector(makeData({ type: new TimestampMillisecond(), length: n, nullCount: 0, data: ts } as never)),
    msg: makeVector(buildColumn('STRING', ids.map((i) => `legacy${i}`))),
  });
  return pw.writeParquet(pw.Table.fromIPCStream(tableToIPC(table, 'stream')));
}

describe('legacy files (written before the seq column existed)', () => {
  async function legacyCache(opts: { compactFileRows?: number } = {}) {
    const root = tempDir();
    const dir = join(root, 'datasets/events/source=web');
    await fsp.mkdir(join(dir, 'table-0'), { recursive: true });
    const files = [];
    for (const [name, ids] of [
      ['legacy-a.parquet', [900, 901, 902]],
      ['legacy-b.parquet', [903, 904]],
    ] as const) {
      const bytes = legacyParquet([...ids]);
      await fsp.writeFile(join(dir, 'table-0', name), bytes);
      files.push({
        name,
        rows: ids.length,
        bytes: bytes.byteLength,
        minSeq: null,
        maxSeq: null,
        rowGroups: [{ rows: ids.length, minSeq: null, maxSeq: null }],
      });
    }
    const manifest = { v: 1, generation: 0, files, spools: {}, prunedThroughSeq: null, forcedPrunes: [] };
    await fsp.writeFile(join(dir, 'table-0', 'manifest.json'), JSON.stringify(manifest));
    await fsp.writeFile(join(dir, 'partition.json'), JSON.stringify({ v: 1, dataset: 'events', source: 'web' }));
    await fsp.writeFile(join(dir, 'cursor.json'), JSON.stringify({ v: 1, generation: 0 }));
    const cache = await openCache(root, opts);
    await cache.appendRows(S1, COLS, rows('web', 1, 3));
    await cache.flushTable(S1);
    return { root, dir, cache, web: cache.partition('events', 'web') };
  }

  const LEGACY = [900, 901, 902, 903, 904];

  async function checkExactlyOnce(c: Awaited<ReturnType<typeof legacyCache>>) {
    const first = await collect(c.cache.storage.readRowsSince(c.web));
    assert.deepEqual(
      first.map((r) => r.row.id),
      [...LEGACY, 1, 2, 3],
      'no since: legacy rows first',
    );
    assert.deepEqual(
      first.slice(0, 5).map((r) => r.after),
      new Array(5).fill({ v: 1, seq: '0' }),
    );
    assert.deepEqual(Object.keys(first[0]!.row), ['id', 'ts', 'msg']);
    assert.equal(first[0]!.row.msg, 'legacy900');
    // Consumed once ("0"), never again.
    const next = await collect(c.cache.storage.readRowsSince(c.web, { since: continuation('0') }));
    assert.deepEqual(
      next.map((r) => r.row.id),
      [1, 2, 3],
    );
    assert.equal(await c.cache.storage.countRowsSince(c.web), 8);
    assert.equal(await c.cache.storage.countRowsSince(c.web, { since: continuation('0') }), 3);
    assert.equal(await c.cache.storage.countRowsSince(c.web, { until: continuation('0') }), 5);
    const batches = await collect(c.cache.storage.readBatchesSince(c.web, { until: continuation('0') }));
    assert.equal(
      batches.reduce((n, b) => n + b.rows, 0),
      5,
    );
    assert.ok(batches.every((b) => b.after.seq === '0'));
    assert.deepEqual(
      (await collect(c.cache.storage.readRows(c.web))).map((r) => r.id),
      [...LEGACY, 1, 2, 3],
    );
  }

  test('read as new exactly once: first with no since, never after since "0"', async () => {
    await checkExactlyOnce(await legacyCache());
  });

  test('they survive compaction (even split over several files) with seq still null', async () => {
    const c = await legacyCache({ compactFileRows: 2 });
    await c.cache.compact();
    const { generation, manifest } = await currentManifest(c.dir);
    assert.equal(generation, 1);
    const dump = await dumpPartition(c.dir);
    assert.deepEqual(
      dump.map((r) => [r.id, r.seq]),
      [...LEGACY.map((i) => [i, null]), [1, '1'], [2, '2'], [3, '3']],
    );
    assert.ok(dump.every((r) => typeof r.rowId === 'string' && r.rowId.length > 0), 'legacy rows got row ids');
    assert.equal(new Set(dump.map((r) => r.rowId)).size, 8);
    assert.equal(manifest.files[0]!.minSeq, null);
    await checkExactlyOnce(c);
    // And a second compaction keeps it that way.
    await c.cache.appendRows(S1, COLS, rows('web', 4, 1));
    await c.cache.flushTable(S1);
    await c.cache.compact();
    const again = await dumpPartition(c.dir);
    assert.deepEqual(
      again.slice(0, 5).map((r) => r.seq),
      [null, null, null, null, null],
    );
    assert.equal(again.length, 9);
  });

  test('retention handles legacy rows: kept when young, pruned first by the row cap', async () => {
    const c = await legacyCache();
    const res = await c.cache.retention({ maxAgeMs: 1000 * 3600 * 24 * 365, now: T0 + 1000 });
    assert.equal(res[0]!.prunedRows, 0);
    await checkExactlyOnce(c);
    const [r] = await c.cache.retention({ maxRows: 4 });
    assert.equal(r!.prunedRows, 4);
    assert.equal(r!.prunedThroughSeq, '0');
    assert.deepEqual(
      (await collect(c.cache.storage.readRows(c.web))).map((x) => x.id),
      [904, 1, 2, 3],
    );
    const raw = await readParquetRaw(join(c.dir, 'table-1', (await currentManifest(c.dir)).manifest.files[0]!.name));
    assert.deepEqual(raw.id?.map(Number), [904]);
  });
});
