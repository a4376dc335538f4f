/**
 * The storage contract: seq order, (since, until], internal columns stripped,
 * Arrow batches, exact counts, and seq-stat pruning measured with counters.
 * @ref LLP 0003 (seq-stat pruning)
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { before, describe, test } from 'node:test';
import type { Cache } from '../../kernel/cache.js';
import { Cache as CacheClass } from '../../kernel/cache.js';
import type { DatasetSchema } from '../../types/schema.js';
import { continuation, type PartitionRef } from '../../types/storage.js';
import { COLS, collect, EVENTS, EVENTS_V2, openCache, rows } from '../support/datasets.js';
import { tempDir } from '../support/tmp.js';
import { currentManifest, dumpPartition } from './helpers.js';

const S1 = { dataset: 'events', id: 's1' };

function counters(cache: Cache) {
  return { ...cache.storage.counters };
}
function delta(cache: Cache, before: ReturnType<typeof counters>) {
  const now = cache.storage.counters;
  return {
    filesOpened: now.filesOpened - before.filesOpened,
    rowGroupsRead: now.rowGroupsRead - before.rowGroupsRead,
    bytesRead: now.bytesRead - before.bytesRead,
  };
}

describe('incremental reads over 10 files of 250 rows (row groups of 100)', () => {
  const root = tempDir(); // at collection time: tempDir() registers its cleanup on the suite
  let cache: Cache;
  let web: PartitionRef;
  let all: { id: number; seq: bigint }[];
  let files: { minSeq: string | null; maxSeq: string | null; bytes: number }[];

  before(async () => {
    cache = await openCache(root, { rowGroupRows: 100 });
    for (let f = 0; f < 10; f++) {
      await cache.appendRows(S1, COLS, [...rows('web', f * 1000, 250), ...rows('app', f * 1000, 1)]);
      await cache.flushTable(S1);
    }
    web = cache.partition('events', 'web');
    all = (await dumpPartition(join(root, web.path))).map((r) => ({ id: r.id, seq: BigInt(r.seq!) }));
    files = (await currentManifest(join(root, web.path))).manifest.files;
    assert.equal(files.length, 10);
    assert.equal(all.length, 2500);
  });

  test('a full read: seq order, continuations, user columns only', async () => {
    const got = await collect(cache.storage.readRowsSince(web));
    assert.deepEqual(
      got.map((r) => r.row.id),
      all.map((r) => r.id),
    );
    assert.deepEqual(
      got.map((r) => r.after.seq),
      all.map((r) => r.seq.toString()),
    );
    for (const r of got) {
      assert.deepEqual(Object.keys(r.row), ['id', 'ts', 'msg']);
      assert.equal(r.after.v, 1);
    }
    assert.equal(got[3]!.row.ts, new Date(Date.parse('2026-01-01T00:00:00Z') + 3000).toISOString());
    assert.equal(got[3]!.row.msg, 'm3');
    // readRows without opts is the same rows; with since it resumes.
    assert.deepEqual(
      await collect(cache.storage.readRows(web)),
      got.map((r) => r.row),
    );
    assert.deepEqual(
      await collect(cache.storage.readRows(web, ['msg'], { since: got[2499 - 3]!.after })),
      got.slice(-3).map((r) => ({ msg: r.row.msg })),
    );
  });

  test('(since, until] matches a brute-force filter, for rows, batches and counts', async () => {
    const seqs = all.map((r) => r.seq);
    const probes = [0n, seqs[0]!, seqs[99]!, seqs[100]!, seqs[249]!, seqs[250]! - 1n, seqs[1234]!, seqs[2499]! - 1n, seqs[2499]!];
    // Seq gaps (unused rests of allocator blocks) make good probes too.
    for (let i = 1; i < seqs.length; i++) if (seqs[i]! - seqs[i - 1]! > 1n) probes.push(seqs[i - 1]! + 1n);
    assert.ok(probes.length > 9, 'the allocator left at least one gap to probe');
    for (const lo of [null, ...probes]) {
      for (const hi of [null, ...probes]) {
        const since = lo === null ? null : continuation(lo);
        const until = hi === null ? null : continuation(hi);
        const expect = all.filter((r) => (lo === null || r.seq > lo) && (hi === null || r.seq <= hi));
        const n = await cache.storage.countRowsSince(web, { since, until });
        assert.equal(n, expect.length, `count (${lo}, ${hi}]`);
        if ((probes.indexOf(lo ?? 0n) + probes.indexOf(hi ?? 0n)) % 3 !== 0) continue; // rows for a third of the pairs
        const got = await collect(cache.storage.readRowsSince(web, { since, until, columns: ['id'] }));
        assert.deepEqual(
          got.map((r) => [r.row.id, r.after.seq]),
          expect.map((r) => [r.id, r.seq.toString()]),
          `rows (${lo}, ${hi}]`,
        );
        const batches = await collect(cache.storage.readBatchesSince(web, { since, until }));
        const ids = batches.flatMap((b) => {
          assert.equal(b.rows, b.batch.numRows);
          assert.deepEqual(
            b.batch.schema.fields.map((f) => f.name),
            ['id', 'ts', 'msg'],
          );
          return Array.from({ length: b.rows }, (_, i) => Number(b.batch.getChild('id')!.get(i)));
        });
        assert.deepEqual(
          ids,
          expect.map((r) => r.id),
        );
        // Each batch's `after` is the seq of its last row.
        let k = 0;
        for (const b of batches) {
          k += b.rows;
          assert.equal(b.after.seq, expect[k - 1]!.seq.toString());
        }
      }
    }
  });

  test('nothing new: no data file opened, no byte read', async () => {
    const hw = all[all.length - 1]!.seq;
    const c0 = counters(cache);
    assert.deepEqual(await collect(cache.storage.readRowsSince(web, { since: continuation(hw) })), []);
    assert.deepEqual(await collect(cache.storage.readBatchesSince(web, { since: continuation(hw) })), []);
    assert.equal(await cache.storage.countRowsSince(web, { since: continuation(hw) }), 0);
    assert.deepEqual(delta(cache, c0), { filesOpened: 0, rowGroupsRead: 0, bytesRead: 0 });
    const stats = await cache.storage.stats(web);
    assert.deepEqual(stats, { rows: 2500, files: 10, highWater: hw.toString(), prunedThroughSeq: null, committedRows: 2500 });
  });

  test('N new rows open only the files holding them', async () => {
    // Since = end of file 8: only files 9 and 10 are read, all their row groups.
    const c0 = counters(cache);
    const got = await collect(cache.storage.readRowsSince(web, { since: continuation(files[7]!.maxSeq!) }));
    assert.equal(got.length, 500);
    const d = delta(cache, c0);
    assert.equal(d.filesOpened, 2);
    assert.equal(d.rowGroupsRead, 6);
    assert.ok(d.bytesRead <= files[8]!.bytes + files[9]!.bytes, `${d.bytesRead} bytes`);
    // Whole row groups inside the bounds are counted from stats alone.
    const c1 = counters(cache);
    assert.equal(await cache.storage.countRowsSince(web, { since: continuation(files[7]!.maxSeq!) }), 500);
    assert.equal(delta(cache, c1).filesOpened, 0);
    // An upper bound prunes too: (−, end of file 1] reads one file.
    const c2 = counters(cache);
    assert.equal((await collect(cache.storage.readRowsSince(web, { until: continuation(files[0]!.maxSeq!) }))).length, 250);
    assert.equal(delta(cache, c2).filesOpened, 1);
  });

  test('a bound inside a file reads only the row groups it needs', async () => {
    // The last 30 rows of file 10 sit in its third row group (rows 200..249).
    const since = all[2500 - 31]!.seq;
    const c0 = counters(cache);
    const got = await collect(cache.storage.readRowsSince(web, { since: continuation(since) }));
    assert.equal(got.length, 30);
    const d = delta(cache, c0);
    assert.equal(d.filesOpened, 1);
    assert.equal(d.rowGroupsRead, 1);
    // countRowsSince opens the straddling row group's seq column only.
    const c1 = counters(cache);
    assert.equal(await cache.storage.countRowsSince(web, { since: continuation(since) }), 30);
    assert.equal(delta(cache, c1).filesOpened, 1);
  });

  test('row-group pruning inside one large file', async () => {
    const r2 = tempDir();
    const c = await openCache(r2, { rowGroupRows: 100 });
    // Messages that do not compress to nothing, so row-group data outweighs the footer.
    const noisy = (r: unknown[]) => [...r.slice(0, 3), `${r[3]}:${((Number(r[1]) * 2654435761) >>> 0).toString(36).repeat(3)}`];
    for (let f = 0; f < 4; f++) {
      await c.appendRows(S1, COLS, rows('web', f * 1000, 500).map(noisy));
      await c.flushTable(S1);
    }
    await c.compact();
    const p = c.partition('events', 'web');
    const { manifest } = await currentManifest(join(r2, p.path));
    assert.equal(manifest.files.length, 1);
    const file = manifest.files[0]!;
    assert.equal(file.rowGroups.length, 20);
    const seqs = (await dumpPartition(join(r2, p.path))).map((r) => BigInt(r.seq!));
    const c0 = counters(c);
    const got = await collect(c.storage.readRowsSince(p, { since: continuation(seqs[1949]!) }));
    assert.deepEqual(
      got.map((r) => r.row.id),
      Array.from({ length: 50 }, (_, i) => 3450 + i),
    );
    const d = delta(c, c0);
    assert.equal(d.filesOpened, 1);
    assert.equal(d.rowGroupsRead, 1);
    // The footer (with its page index) is a fixed cost; the data read is one row group of twenty.
    const cAll = counters(c);
    assert.equal((await collect(c.storage.readRowsSince(p))).length, 2000);
    const full = delta(c, cAll);
    assert.equal(full.rowGroupsRead, 20);
    assert.ok(d.bytesRead < full.bytesRead / 2, `read ${d.bytesRead} bytes for one row group, ${full.bytesRead} for all`);
    // A window in the middle: rows 1000..1099 are exactly row group 10.
    const c1 = counters(c);
    const mid = await collect(c.storage.readRowsSince(p, { since: continuation(seqs[999]!), until: continuation(seqs[1099]!) }));
    assert.equal(mid.length, 100);
    assert.equal(delta(c, c1).rowGroupsRead, 1);
  });

  test('unknown columns and foreign continuations are refused; an absent partition reads as empty', async () => {
    await assert.rejects(collect(cache.storage.readRowsSince(web, { columns: ['nope'] })), /no column "nope"/);
    for (const bad of [{ v: 2, seq: '10' }, { v: 1, seq: '1e3' }, { v: 1, seq: '-1' }, { v: 1, seq: 12 }]) {
      const since = bad as unknown as { v: 1; seq: string };
      await assert.rejects(collect(cache.storage.readRowsSince(web, { since })), (e: { code?: string }) => e.code === 'HYPSINK_ERR_INPUT');
      await assert.rejects(cache.storage.countRowsSince(web, { until: since }), (e: { code?: string }) => e.code === 'HYPSINK_ERR_INPUT');
    }
    const none = cache.partition('events', 'never-written');
    assert.deepEqual(await collect(cache.storage.readRowsSince(none)), []);
    assert.equal(await cache.storage.countRowsSince(none), 0);
    assert.deepEqual(await cache.storage.stats(none), { rows: 0, files: 0, highWater: null, prunedThroughSeq: null, committedRows: 0 });
    assert.deepEqual(
      (await cache.storage.listPartitions('events')).map((p) => p.source),
      ['app', 'web'],
    );
  });
});

describe('schema evolution and column types', () => {
  test('a nullable column added later reads as null in older files, spools and compactions', async () => {
    const root = tempDir();
    const v1 = await openCache(root);
    await v1.appendRows(S1, COLS, rows('web', 1, 3));
    await v1.flushTable(S1);
    await v1.appendRows(S1, COLS, rows('web', 4, 2)); // spooled under v1, flushed under v2
    const v2 = await CacheClass.open({ root, datasets: { events: EVENTS_V2 }, lockWaitMs: 2000 });
    await v2.flushTable(S1);
    await v2.appendRows(S1, [...COLS, 'level'], rows('web', 6, 2).map((r) => [...r, 'warn']));
    await v2.flushTable(S1);
    const web = v2.partition('events', 'web');
    const expectLevels = [null, null, null, null, null, 'warn', 'warn'];
    const read = async () => (await collect(v2.storage.readRows(web))).map((r) => [r.id, r.level]);
    assert.deepEqual(
      await read(),
      expectLevels.map((l, i) => [i + 1, l]),
    );
    const batches = await collect(v2.storage.readBatchesSince(web));
    assert.ok(batches.every((b) => b.batch.schema.fields.map((f) => f.name).join() === 'id,ts,msg,level'));
    await v2.compact();
    assert.deepEqual(
      await read(),
      expectLevels.map((l, i) => [i + 1, l]),
    );
    // The v1 view still reads (the extra column is not projected).
    assert.deepEqual(
      (await collect(v1.storage.readRows(web))).map((r) => Object.keys(r).join()),
      new Array(7).fill('id,ts,msg'),
    );
  });

  test('every column type round-trips through spool, Parquet and read', async () => {
    const schema: DatasetSchema = {
      columns: [
        { name: 'i', type: 'INT64', nullable: true },
        { name: 'd', type: 'DOUBLE', nullable: true },
        { name: 's', type: 'STRING', nullable: true },
        { name: 'b', type: 'BOOLEAN', nullable: true },
        { name: 't', type: 'TIMESTAMP', nullable: true },
        { name: 'j', type: 'JSON', nullable: true },
      ],
    };
    const cache = await CacheClass.open({ root: tempDir(), datasets: { all: schema } });
    const input = [
      { i: 1, d: 1.5, s: 'x', b: true, t: '2026-03-04T05:06:07.089Z', j: { a: [1, 'two', null] } },
      { i: '9007199254740993', d: -0.25, s: '', b: false, t: '1970-01-01T00:00:00.000Z', j: 'str' },
      { i: '-9223372036854775808', d: 0, s: 'ünï 🚀', b: null, t: null, j: null },
      { i: null, d: null, s: null, b: true, t: '2026-01-01T00:00:00.000Z', j: [1, 2] },
    ];
    const cols = ['source', 'i', 'd', 's', 'b', 't', 'j'];
    await cache.appendRows({ dataset: 'all', id: 's' }, cols, input.map((r) => ['src', r.i, r.d, r.s, r.b, r.t, r.j]));
    await cache.flushTable({ dataset: 'all', id: 's' });
    assert.deepEqual(await collect(cache.storage.readRows(cache.partition('all', 'src'))), input);
    assert.ok(EVENTS.columns.length === 3);
  });
});
