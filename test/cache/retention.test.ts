/**
 * Retention: oldest rows go (row cap or age), seqs are kept verbatim,
 * prunedThroughSeq is recorded; ack-coupled with a hard cap whose forced prunes
 * are recorded as ranges of consecutive seqs.
 * @ref LLP 0004 (generations), LLP 0006 (ack-coupled retention)
 */
import assert from 'node:assert/strict';
import { promises as fsp } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import type { Cache } from '../../kernel/cache.js';
import { SeqAllocator } from '../../kernel/flush/allocator.js';
import { continuation } from '../../types/storage.js';
import { COLS, collect, openCache, rows } from '../support/datasets.js';
import { tempDir } from '../support/tmp.js';
import { currentManifest } from './helpers.js';

const S1 = { dataset: 'events', id: 's1' };
const OLD = Date.parse('2020-01-01T00:00:00Z');
const NOW = Date.parse('2026-06-01T00:00:00Z');
const YEAR = 365 * 24 * 3600 * 1000;

async function seqsOf(cache: Cache, source: string) {
  return (await collect(cache.storage.readRowsSince(cache.partition('events', source)))).map((r) => ({
    id: r.row.id as number,
    seq: BigInt(r.after.seq),
  }));
}

async function threeFiles(root: string): Promise<Cache> {
  const cache = await openCache(root);
  for (let f = 0; f < 3; f++) {
    await cache.appendRows(S1, COLS, rows('web', f * 10, 10));
    if (f === 0) await cache.appendRows(S1, COLS, rows('app', 0, 5));
    await cache.flushTable(S1);
  }
  return cache;
}

describe('retention', () => {
  test('row cap: the oldest rows by seq go, seqs stay, prunedThroughSeq recorded', async () => {
    const root = tempDir();
    const cache = await threeFiles(root);
    const before = await seqsOf(cache, 'web');
    const webDir = join(root, cache.partition('events', 'web').path);
    const g0 = (await currentManifest(webDir)).manifest;
    const res = await cache.retention({ maxRows: 12 });
    const web = res.find((r) => r.partition.source === 'web')!;
    const app = res.find((r) => r.partition.source === 'app')!;
    assert.equal(web.prunedRows, 18);
    assert.equal(web.prunedThroughSeq, before[17]!.seq.toString());
    assert.equal(app.prunedRows, 0);
    assert.equal(app.prunedThroughSeq, null);
    assert.deepEqual(await seqsOf(cache, 'web'), before.slice(18), 'the newest 12 rows, same seqs');
    const { generation, manifest } = await currentManifest(webDir);
    assert.equal(generation, 1);
    assert.equal(manifest.prunedThroughSeq, before[17]!.seq.toString());
    assert.equal(manifest.files.length, 2, 'file 1 dropped, file 2 rewritten, file 3 kept');
    assert.deepEqual(manifest.files[1], g0.files[2], 'an untouched file is carried as is');
    assert.deepEqual(manifest.spools, g0.spools, 'spool markers survive the rewrite');
    assert.deepEqual(await fsp.readdir(webDir).then((n) => n.filter((x) => x.startsWith('table-'))), ['table-1']);
    assert.equal((await cache.storage.stats(cache.partition('events', 'web'))).prunedThroughSeq, web.prunedThroughSeq);
    // The app partition was not rewritten.
    assert.equal((await currentManifest(join(root, cache.partition('events', 'app').path))).generation, 0);
    // A reader that had exported through row 20 continues exactly where it was.
    const cont = await collect(cache.storage.readRowsSince(cache.partition('events', 'web'), { since: continuation(before[20]!.seq) }));
    assert.deepEqual(
      cont.map((r) => r.row.id),
      before.slice(21).map((r) => r.id),
    );
    // A second pass with the same cap has nothing to do.
    const again = await cache.retention({ maxRows: 12 });
    assert.ok(again.every((r) => r.prunedRows === 0));
    assert.equal((await currentManifest(webDir)).generation, 1);
  });

  test('age: rows older than maxAgeMs go wherever they sit in seq order', async () => {
    const root = tempDir();
    const cache = await openCache(root);
    await cache.appendRows(S1, COLS, rows('web', 0, 5, NOW));
    await cache.appendRows(S1, COLS, rows('web', 100, 3, OLD)); // late arrivals with old timestamps
    await cache.appendRows(S1, COLS, rows('web', 200, 4, NOW));
    await cache.flushTable(S1);
    const before = await seqsOf(cache, 'web');
    const [res] = await cache.retention({ maxAgeMs: YEAR, now: NOW + YEAR / 2 });
    assert.equal(res!.prunedRows, 3);
    assert.equal(res!.prunedThroughSeq, before[7]!.seq.toString());
    assert.deepEqual(
      (await seqsOf(cache, 'web')).map((r) => r.id),
      [0, 1, 2, 3, 4, 200, 201, 202, 203],
    );
    // Nothing older than the cutoff remains: a second pass does not rewrite.
    const [again] = await cache.retention({ maxAgeMs: YEAR, now: NOW + YEAR / 2 });
    assert.equal(again!.prunedRows, 0);
  });

  test('age: rows old and new interleaved row by row (out of time order at the cutoff): the new ones kept, in seq order, their values whole', async () => {
    const root = tempDir();
    const cache = await openCache(root);
    // One frame, one file: ids 0..39, every third one old.
    const mixed = rows('web', 0, 40, NOW).map((r, i) => (i % 3 === 1 ? rows('web', i, 1, OLD - i * 1000)[0]! : r));
    await cache.appendRows(S1, COLS, mixed);
    await cache.flushTable(S1);
    const [res] = await cache.retention({ maxAgeMs: YEAR, now: NOW + YEAR / 2 });
    const kept = Array.from({ length: 40 }, (_, i) => i).filter((i) => i % 3 !== 1);
    assert.equal(res!.prunedRows, 40 - kept.length);
    assert.deepEqual(
      (await seqsOf(cache, 'web')).map((r) => r.id),
      kept,
    );
    const read = await collect(cache.storage.readRowsSince(cache.partition('events', 'web')));
    assert.deepEqual(
      read.map((r) => r.row.msg),
      kept.map((i) => `m${i}`),
    );
  });

  test('ack-coupled: rows above the floor stay unless the hard cap forces them, recorded as seq ranges', async () => {
    const root = tempDir();
    const cache = await threeFiles(root);
    const before = await seqsOf(cache, 'web');
    const floorSeq = before[9]!.seq;
    const ackFloor = async () => floorSeq;
    // Cap 5 would prune 25, but only the 10 rows at or below the floor are exported.
    const [r1] = (await cache.retention({ maxRows: 5, ackFloor })).filter((r) => r.partition.source === 'web');
    assert.equal(r1!.prunedRows, 10);
    assert.equal(r1!.forcedRows, 0);
    assert.deepEqual(r1!.forcedRanges, []);
    assert.equal(r1!.prunedThroughSeq, floorSeq.toString());
    assert.deepEqual(await seqsOf(cache, 'web'), before.slice(10));
    // A hard cap of 15 forces 5 unexported rows out, the oldest ones.
    const [r2] = (await cache.retention({ maxRows: 5, hardMaxRows: 15, ackFloor })).filter((r) => r.partition.source === 'web');
    assert.equal(r2!.prunedRows, 5);
    assert.equal(r2!.forcedRows, 5);
    const forced = before.slice(10, 15).map((r) => r.seq);
    assert.deepEqual(r2!.forcedRanges, [[forced[0]!.toString(), forced[4]!.toString()]]);
    assert.equal(forced[4]! - forced[0]!, 4n, 'one range holds consecutive seqs');
    assert.deepEqual(await seqsOf(cache, 'web'), before.slice(15));
    const { manifest } = await currentManifest(join(root, cache.partition('events', 'web').path));
    assert.deepEqual(manifest.forcedPrunes, r2!.forcedRanges);
    assert.equal(manifest.prunedThroughSeq, forced[4]!.toString());
    // app (5 rows) is under every cap: untouched.
    assert.equal((await seqsOf(cache, 'app')).length, 5);
  });

  test('forced ranges split at seq gaps; nothing exported (floor -1) keeps everything but the hard cap', async () => {
    const root = tempDir();
    const a = await openCache(root);
    const b = await openCache(root);
    // Another writer takes seqs between the flushes (for rows of another partition): gaps in web's seqs.
    const other = new SeqAllocator(root);
    for (let i = 0; i < 4; i++) {
      const c = i % 2 ? b : a;
      await c.appendRows({ dataset: 'events', id: `w${i % 2}` }, COLS, rows('web', i * 10, 3));
      await c.flushTable({ dataset: 'events', id: `w${i % 2}` });
      other.invalidate();
      await other.allocate(1);
    }
    const before = await seqsOf(a, 'web');
    assert.ok(before[3]!.seq - before[2]!.seq > 1n, 'a gap between the writers');
    const none = await a.retention({ maxRows: 1, ackFloor: async () => -1n });
    assert.equal(none[0]!.prunedRows, 0, 'no sink exported anything: the soft cap waits');
    const [r] = await a.retention({ maxRows: 1, hardMaxRows: 5, ackFloor: async () => -1n });
    assert.equal(r!.forcedRows, 7);
    assert.deepEqual(r!.forcedRanges, [
      [before[0]!.seq.toString(), before[2]!.seq.toString()],
      [before[3]!.seq.toString(), before[5]!.seq.toString()],
      [before[6]!.seq.toString(), before[6]!.seq.toString()],
    ]);
    // Without any sink (no floor) the hard cap prunes without recording a gap.
    const [r3] = await a.retention({ hardMaxRows: 2 });
    assert.equal(r3!.prunedRows, 3);
    assert.equal(r3!.forcedRows, 0);
    assert.deepEqual(await seqsOf(a, 'web'), before.slice(10));
  });

  test('a reader mid-way through a partition finishes on the old generation', async () => {
    const root = tempDir();
    const cache = await threeFiles(root);
    const web = cache.partition('events', 'web');
    const before = await collect(cache.storage.readRowsSince(web));
    const it = cache.storage.readRowsSince(web)[Symbol.asyncIterator]();
    const got = [(await it.next()).value!, (await it.next()).value!];
    await cache.retention({ maxRows: 3 });
    for (let r = await it.next(); !r.done; r = await it.next()) got.push(r.value);
    assert.deepEqual(got, before);
    assert.equal((await collect(cache.storage.readRowsSince(web))).length, 3);
  });
});
