/**
 * Untrusted dataset names and partition values → safe path segments: never
 * escape the cache root, never collide, round-trip through partition.json.
 * @ref LLP 0004 (partition identity)
 */
import assert from 'node:assert/strict';
import { mkdirSync, promises as fsp } from 'node:fs';
import { join, resolve, sep } from 'node:path';
import { describe, test } from 'node:test';
import { Cache } from '../../kernel/cache.js';
import { decodeSegment, encodeSegment } from '../../kernel/store/segments.js';
import { COLS, collect, EVENTS, openCache, rows } from '../support/datasets.js';
import { tempDir } from '../support/tmp.js';
import { walk } from './helpers.js';

const NASTY = [
  'a/b',
  'a%2Fb',
  'a%2fb',
  '..',
  '.',
  '',
  '%',
  '~',
  '.hidden',
  'a\\b',
  'x'.repeat(300),
  `${'x'.repeat(299)}y`,
  `${'x'.repeat(299)}z`,
  'é'.repeat(200),
  'ünïcødé 日本語 🚀',
  'e\u0301', // decomposed é: must differ from the precomposed one
  'é',
  'a\u0000b',
  '\u0000',
  '\uD800', // lone surrogates: not valid UTF-16, still distinct values
  '\uDC00',
  '\uFFFD',
  'web',
  'WEB',
  'a b',
  'con',
  'CON',
  'Con',
  'nul',
  'COM1',
  'lpt9',
  '%63on',
  'Web',
  'wEB',
  'Z',
  'z',
  '-',
  '_',
];

/** What a segment may hold: lowercase letters pass, uppercase ones only as hex digits of an escape. */
const SAFE = /^(?:[a-z0-9_~-]|%[0-9A-F]{2}|%u[0-9A-F]{4})+$|^%$/;
/** A name Windows reserves for a device, whatever follows a dot and whatever the case. */
const DEVICE = /^(con|prn|aux|nul|com[0-9]|lpt[0-9])(\..*)?$/i;

function assertSafe(value: string, seg: string): void {
  assert.match(seg, SAFE, `segment for ${JSON.stringify(value)}`);
  assert.notEqual(seg, '.');
  assert.notEqual(seg, '..');
  assert.doesNotMatch(seg, DEVICE, `segment for ${JSON.stringify(value)} is a Windows device name`);
  assert.ok(seg.length <= 160, `segment for ${JSON.stringify(value).slice(0, 20)} is ${seg.length} chars`);
  assert.ok(Buffer.byteLength(`source=${seg}`) <= 255, 'fits a file name');
}

describe('encodeSegment', () => {
  test('safe, bounded and collision-free on hostile values', () => {
    const seen = new Map<string, string>();
    for (const v of NASTY) {
      const seg = encodeSegment(v);
      assertSafe(v, seg);
      const prev = seen.get(seg);
      assert.equal(prev, undefined, `${JSON.stringify(v)} and ${JSON.stringify(prev)} both encode to ${seg}`);
      seen.set(seg, v);
    }
    // Plain safe names stay readable.
    assert.equal(encodeSegment('web'), 'web');
    assert.equal(encodeSegment('a-b_c9'), 'a-b_c9');
    assert.equal(encodeSegment('a-b_C9'), 'a-b_%439');
    assert.equal(encodeSegment('con'), '%63on');
  });

  test('no two values share a segment where the filesystem folds case (macOS, Windows)', () => {
    // A case-insensitive filesystem sees two names as one when they are equal folded.
    const fold = (s: string) => s.toLowerCase();
    const seen = new Map<string, string>();
    const values = [...NASTY];
    for (const a of ['web', 'events', 'source', 'con', 'x'.repeat(200)]) {
      for (let mask = 0; mask < 8; mask++) values.push([...a].map((c, i) => (mask & (1 << i % 3) ? c.toUpperCase() : c)).join(''));
    }
    for (const v of new Set(values)) {
      const seg = fold(encodeSegment(v));
      const prev = seen.get(seg);
      assert.equal(prev, undefined, `${JSON.stringify(v)} and ${JSON.stringify(prev)} are one file where case folds (${seg})`);
      seen.set(seg, v);
    }
  });

  test('random values (lone surrogates, NUL, multi-byte, long) never collide and decode back', () => {
    let state = 0x2545f491;
    const rand = () => {
      state ^= state << 13;
      state ^= state >>> 17;
      state ^= state << 5;
      return (state >>> 0) / 2 ** 32;
    };
    const alphabet = ['a', 'A', 'f', 'u', 'U', '/', '.', '%', '2', 'F', '\u0000', '\uD800', '\uDC00', '\uD83D', '\uDE80', 'é', '~', ' ', '-'];
    const values = new Set<string>();
    while (values.size < 3000) {
      const len = rand() < 0.05 ? 150 + Math.floor(rand() * 200) : Math.floor(rand() * 8);
      let s = '';
      for (let i = 0; i < len; i++) s += alphabet[Math.floor(rand() * alphabet.length)];
      values.add(s);
    }
    const bySeg = new Map<string, string>();
    for (const v of values) {
      const seg = encodeSegment(v);
      assertSafe(v, seg);
      // Keyed folded: distinct even where the filesystem ignores case.
      const prev = bySeg.get(seg.toLowerCase());
      assert.equal(prev, undefined, `collision: ${JSON.stringify(v)} vs ${JSON.stringify(prev)} → ${seg}`);
      bySeg.set(seg.toLowerCase(), v);
      const back = decodeSegment(seg);
      if (seg.includes('~')) assert.equal(back, undefined, 'a hashed segment does not decode');
      else assert.equal(back, v, `round trip of ${JSON.stringify(v)}`);
    }
  });

  test('decodeSegment rejects what encodeSegment never produces', () => {
    for (const bad of ['..', '.', 'a/b', '%2', '%zz', '%2f', 'a%', 'a.b', '%61', '', 'Web', 'con', '%uD800x'.toLowerCase()]) {
      assert.equal(decodeSegment(bad), undefined, bad);
    }
  });
});

describe('hostile partition values end to end', () => {
  test('ingest, list back, read back: every value round-trips and every file stays under the root', async () => {
    const parent = tempDir();
    const root = join(parent, 'cache');
    mkdirSync(root);
    const datasets = { events: EVENTS, '../escape': EVENTS, 'a/b': EVENTS, 'a%2Fb': EVENTS, '': EVENTS };
    const cache = await Cache.open({ root, datasets, lockWaitMs: 2000 });
    // Every hostile value in one dataset; a few in each hostile dataset name.
    const valuesOf = (ds: string) => (ds === 'events' ? NASTY : ['', '..', 'a/b', 'a%2Fb', 'x'.repeat(300)]);
    for (const [di, ds] of Object.keys(datasets).entries()) {
      const values = valuesOf(ds);
      const spool = { dataset: ds, id: 's1' };
      const all: unknown[][] = [];
      for (const [i, v] of values.entries()) all.push(...rows(v, di * 10_000 + i * 10, 2));
      await cache.appendRows(spool, COLS, all);
      await cache.flushTable(spool);
    }
    // Nothing was created beside the root.
    assert.deepEqual(await fsp.readdir(parent), ['cache']);
    const rootAbs = resolve(root) + sep;
    for (const rel of await walk(root)) {
      const abs = resolve(root, rel);
      assert.ok(abs.startsWith(rootAbs), `${rel} escapes the root`);
      assert.equal((await fsp.realpath(abs)).startsWith(await fsp.realpath(root)), true);
    }
    for (const [di, ds] of Object.keys(datasets).entries()) {
      const values = valuesOf(ds);
      const parts = await cache.listPartitions(ds);
      assert.equal(parts.length, values.length, `dataset ${JSON.stringify(ds)}: one partition per distinct value`);
      assert.deepEqual(new Set(parts.map((p) => p.source)), new Set(values));
      assert.ok(parts.every((p) => p.dataset === ds));
      assert.equal(new Set(parts.map((p) => p.key)).size, values.length, 'watermark keys are distinct');
      for (const p of parts) {
        const i = values.indexOf(p.source);
        const got = await collect(cache.storage.readRows(p));
        assert.deepEqual(
          got.map((r) => r.id),
          [di * 10_000 + i * 10, di * 10_000 + i * 10 + 1],
          `rows of ${JSON.stringify(p.source).slice(0, 30)}`,
        );
        // The same partition is reachable by its relative path.
        const byPath = await collect(cache.storage.readRows(p.path));
        assert.deepEqual(byPath, got);
      }
    }
    // A reopened cache lists the same partitions.
    const again = await Cache.open({ root, datasets, lockWaitMs: 2000 });
    assert.equal((await again.listPartitions()).length, NASTY.length + 4 * 5);
  });

  test('a partition path that is not one this cache would produce is refused', async () => {
    const cache = await openCache(tempDir());
    await cache.appendRows({ dataset: 'events', id: 's' }, COLS, rows('web', 1, 3));
    await cache.flushTable({ dataset: 'events', id: 's' });
    assert.deepEqual(
      (await collect(cache.storage.readRows('datasets/events/source=web'))).map((r) => r.id),
      [1, 2, 3],
    );
    for (const bad of ['datasets/../source=web', 'datasets/events/source=..', 'datasets/events/source=a.b', 'datasets/nope/source=web', '../x']) {
      await assert.rejects(
        collect(cache.storage.readRows(bad)),
        (e: { code?: string }) => e.code === 'HYPSINK_ERR_INPUT',
        bad,
      );
    }
  });
});
