/**
 * Damaged state is an error naming the file (HYPSINK_ERR_CORRUPT), never a
 * silent empty read or a silent reset: Parquet data files, manifests, cursors,
 * partition.json, the seq allocator, spool segments and spool meta.
 */
import assert from 'node:assert/strict';
import { cpSync, promises as fsp } from 'node:fs';
import { join } from 'node:path';
import { before, describe, test } from 'node:test';
import type { Cache } from '../../kernel/cache.js';
import { settleHome } from '../../kernel/identity.js';
import { COLS, collect, openCache, rows } from '../support/datasets.js';
import { tempDir } from '../support/tmp.js';
import { currentManifest } from './helpers.js';

const S1 = { dataset: 'events', id: 's1' };
const WEB = 'datasets/events/source=web';

function corrupt(file: string) {
  return (e: { code?: string; message?: string }) => {
    assert.equal(e.code, 'HYPSINK_ERR_CORRUPT', e.message);
    assert.ok(e.message?.includes(file), `"${e.message}" names ${file}`);
    return true;
  };
}

describe('corrupt state files', () => {
  const base = tempDir();
  const scratch = tempDir();
  let n = 0;
  let dataFile = '';

  before(async () => {
    const cache = await openCache(base, { rowGroupRows: 10 });
    for (let f = 0; f < 2; f++) {
      await cache.appendRows(S1, COLS, [...rows('web', f * 100, 30), ...rows('app', f * 100, 3)]);
      await cache.flushTable(S1);
    }
    await cache.appendRows(S1, COLS, rows('web', 500, 5)); // left in the spool
    const { generation, manifest } = await currentManifest(join(base, WEB));
    dataFile = join(WEB, `table-${generation}`, manifest.files[1]!.name);
  });

  /**
   * A private copy of the prepared cache, standing in for it (as after
   * `identity --moved`): opened as the same cache, not as a suspected copy,
   * whose first open would flush the spool before the damage is done.
   */
  async function copy(): Promise<{ root: string; cache: Cache }> {
    const root = join(scratch, `c${++n}`);
    cpSync(base, root, { recursive: true });
    await settleHome(root);
    return { root, cache: await openCache(root, { rowGroupRows: 10 }) };
  }

  const read = (cache: Cache) => collect(cache.storage.readRowsSince(cache.partition('events', 'web')));

  test('the undamaged copy reads and flushes (control)', async () => {
    const { cache } = await copy();
    assert.equal((await read(cache)).length, 60);
    await cache.flushTable(S1);
    assert.equal((await read(cache)).length, 65);
  });

  test('Parquet: truncated, damaged footer, missing, or swapped for a valid file of other rows', async () => {
    const cases: [string, (p: string) => Promise<void>][] = [
      ['truncated', async (p) => fsp.truncate(p, Math.floor((await fsp.stat(p)).size / 2))],
      ['footer', async (p) => {
        const fh = await fsp.open(p, 'r+');
        const { size } = await fh.stat();
        await fh.write(Buffer.from('XXXXXXXX'), 0, 8, size - 8);
        await fh.close();
      }],
      ['empty', async (p) => fsp.truncate(p, 0)],
      ['missing', async (p) => fsp.rm(p)],
      ['other rows', async (p) => {
        // A well-formed Parquet file, but not the one the manifest lists (another partition's, 3 rows).
        const app = join(p, '../../../source=app');
        const { manifest } = await currentManifest(app);
        await fsp.copyFile(join(app, 'table-0', manifest.files[0]!.name), p);
      }],
      ['same shape, other seqs', async (p) => {
        // The partition's first file over its second: same row count and row groups, wrong seqs.
        const { manifest } = await currentManifest(join(p, '../..'));
        await fsp.copyFile(join(p, '..', manifest.files[0]!.name), p);
      }],
    ];
    for (const [what, damage] of cases) {
      const { root, cache } = await copy();
      await damage(join(root, dataFile));
      await assert.rejects(read(cache), corrupt(dataFile), what);
      // Resuming after the first file reads only the damaged one: still an error, not an empty read.
      const { manifest } = await currentManifest(join(root, WEB));
      const since = { v: 1 as const, seq: manifest.files[0]!.maxSeq! };
      await assert.rejects(collect(cache.storage.readRowsSince(cache.partition('events', 'web'), { since })), corrupt(dataFile), what);
      // Compaction must not fold the damage into a new generation either.
      await assert.rejects(cache.compact(), corrupt(dataFile), `${what}: compaction`);
    }
  });

  test('manifest: garbage, truncated, empty, wrong shape; readers and writers both refuse', async () => {
    const { manifest } = await currentManifest(join(base, WEB));
    const file = join(WEB, 'table-0', 'manifest.json');
    const text = JSON.stringify(manifest);
    for (const [what, bad] of [
      ['garbage', 'not json at all'],
      ['truncated', text.slice(0, text.length / 2)],
      ['empty', ''],
      ['shape', JSON.stringify({ ...manifest, files: 'x' })],
      ['stats', JSON.stringify({ ...manifest, files: [{ ...manifest.files[0], minSeq: 'ten' }] })],
      ['order', JSON.stringify({ ...manifest, files: [...manifest.files].reverse() })],
    ] as const) {
      const { root, cache } = await copy();
      await fsp.writeFile(join(root, file), bad);
      await assert.rejects(read(cache), corrupt(file), what);
      await assert.rejects(cache.storage.stats(cache.partition('events', 'web')), corrupt(file), what);
      // A flush must not overwrite what it cannot read.
      await assert.rejects(cache.flushTable(S1), corrupt(file), `${what}: flush`);
      assert.equal(await fsp.readFile(join(root, file), 'utf8'), bad, 'left as found');
    }
  });

  test('cursor: garbage, or naming a generation that is not there', async () => {
    const file = join(WEB, 'cursor.json');
    for (const [what, bad] of [
      ['garbage', '{"v":1,'],
      ['shape', '{"v":1,"generation":-3}'],
      ['missing generation', '{"v":1,"generation":7}'],
    ] as const) {
      const { root, cache } = await copy();
      await fsp.writeFile(join(root, file), bad);
      await assert.rejects(read(cache), corrupt(what === 'missing generation' ? WEB : file), what);
      await assert.rejects(cache.flushTable(S1), corrupt(what === 'missing generation' ? WEB : file), `${what}: flush`);
    }
  });

  test('partition.json damaged: listing the partitions says so instead of hiding the partition', async () => {
    const { root, cache } = await copy();
    const file = join(WEB, 'partition.json');
    await fsp.writeFile(join(root, file), '{"dataset":');
    await assert.rejects(cache.listPartitions(), corrupt(file));
    await fsp.writeFile(join(root, file), JSON.stringify({ v: 1, dataset: 'events', source: 'app' }));
    await assert.rejects(cache.listPartitions(), corrupt(file), 'names another partition');
    await assert.rejects(cache.retention({ maxRows: 1 }), corrupt(file));
  });

  test('seq allocator: garbage or truncated is an error, never a restart from 1', async () => {
    for (const bad of ['', '{"v":1,"reservedThrough":12', '{"v":1,"reservedThrough":12}', '{"v":1,"reservedThrough":"-4"}']) {
      const { root, cache } = await copy();
      await fsp.writeFile(join(root, '_hyp_ingest_seq.json'), bad);
      await assert.rejects(cache.flushTable(S1), corrupt('_hyp_ingest_seq.json'), JSON.stringify(bad));
      assert.equal((await read(cache)).length, 60, 'nothing committed');
    }
  });

  test('spool: a damaged frame, a truncated sealed segment, damaged meta', async () => {
    // A bad frame in the middle of the current file: the flush refuses the whole segment.
    {
      const { root, cache } = await copy();
      const cur = join(root, 'spools/events/s1/current.ndjson');
      await fsp.appendFile(cur, '{"v":1,"cols":["id"],"rows":[[tor\n');
      await cache.appendRows(S1, COLS, rows('web', 600, 1));
      await assert.rejects(cache.flushTable(S1), (e: { code?: string; message?: string }) => {
        assert.equal(e.code, 'HYPSINK_ERR_CORRUPT');
        assert.match(e.message ?? '', /spools\/events\/s1\/seg-\d+\.ndjson line 2/);
        return true;
      });
      assert.equal((await read(cache)).length, 60, 'no part of the damaged segment was committed');
    }
    // A frame that is JSON but not a frame (rows of the wrong shape).
    {
      const { root, cache } = await copy();
      await fsp.appendFile(join(root, 'spools/events/s1/current.ndjson'), '{"v":1,"cols":["id"],"rows":[[5]]}\n');
      await assert.rejects(cache.flushTable(S1), (e: { code?: string; message?: string }) => e.code === 'HYPSINK_ERR_CORRUPT');
    }
    // A v2 frame whose columns disagree with its row count, one whose columns were cut short, and a frame of an unknown version.
    for (const [damage, why] of [
      [(head: { parts: { rows: number }[] }, cols: string) => [{ ...head, parts: [{ ...head.parts[0]!, rows: head.parts[0]!.rows + 1 }] }, cols], /frame \d+: source "web" should hold one batch of 6 rows/],
      [(head: { parts: { rows: number }[] }, cols: string) => [head, cols.slice(0, -8)], /line \d+: its columns hold \d+ bytes, its parts say \d+/],
    ] as const) {
      const { root, cache } = await copy();
      const cur = join(root, 'spools/events/s1/current.ndjson');
      const last = (await fsp.readFile(cur, 'utf8')).trimEnd().split('\n').at(-1)!;
      const tab = last.indexOf('\t');
      const [head, cols] = damage(JSON.parse(last.slice(0, tab)), last.slice(tab + 1));
      await fsp.appendFile(cur, `${JSON.stringify(head)}\t${cols}\n`);
      await assert.rejects(cache.flushTable(S1), (e: { code?: string; message?: string }) => {
        assert.equal(e.code, 'HYPSINK_ERR_CORRUPT');
        assert.match(e.message ?? '', /seg-\d+\.ndjson/);
        assert.match(e.message ?? '', why);
        return true;
      });
      assert.equal((await read(cache)).length, 60, 'no part of the damaged segment was committed');
    }
    // One bit of a message's text flipped inside the columns, the frame's length and shape whole: it decodes,
    // and the flush committed the other text until frames carried a checksum. @ref LLP 0106
    {
      const { root, cache } = await copy();
      const cur = join(root, 'spools/events/s1/current.ndjson');
      const last = (await fsp.readFile(cur, 'utf8')).trimEnd().split('\n').at(-1)!;
      const tab = last.indexOf('\t');
      const columns = Buffer.from(last.slice(tab + 1), 'base64');
      columns[columns.lastIndexOf(0x6d)]! ^= 0x10; // the last "m" of a msg value ("m59") becomes "}"
      await fsp.appendFile(cur, `${last.slice(0, tab)}\t${columns.toString('base64')}\n`);
      await assert.rejects(cache.flushTable(S1), (e: { code?: string; message?: string }) => {
        assert.equal(e.code, 'HYPSINK_ERR_CORRUPT', e.message);
        assert.match(e.message ?? '', /seg-\d+\.ndjson line \d+: its columns do not match the checksum they were spooled with/);
        return true;
      });
      assert.equal((await read(cache)).length, 60, 'no part of the damaged segment was committed');
    }
    {
      const { root, cache } = await copy();
      await fsp.appendFile(join(root, 'spools/events/s1/current.ndjson'), '{"v":3,"cols":["id"],"parts":[]}\n');
      await assert.rejects(cache.flushTable(S1), corrupt('spool frame version 3 is not known'));
    }
    // A sealed segment cut short (it always ends with a complete frame when sealed).
    {
      const { root, cache } = await copy();
      const dir = join(root, 'spools/events/s1');
      const text = await fsp.readFile(join(dir, 'current.ndjson'), 'utf8');
      await fsp.rm(join(dir, 'current.ndjson'));
      await fsp.writeFile(join(dir, 'seg-7.ndjson'), text.slice(0, text.length - 20));
      await assert.rejects(cache.flushTable(S1), corrupt('spools/events/s1/seg-7.ndjson'));
    }
    // meta.json damaged: sealing must not guess a segment number.
    {
      const { root, cache } = await copy();
      await fsp.writeFile(join(root, 'spools/events/s1/meta.json'), '{"v":1,"nextSegment":');
      await assert.rejects(cache.flushTable(S1), corrupt('spools/events/s1/meta.json'));
    }
  });

  test('a suspected copy whose spool is damaged refuses to open, naming the file; nothing of the spool is committed', async () => {
    // Its first open flushes the original's spooled rows below the fork (LLP 0055); it cannot guess past damage.
    const root = join(scratch, `c${++n}`);
    cpSync(base, root, { recursive: true });
    await fsp.appendFile(join(root, 'spools/events/s1/current.ndjson'), '{"v":1,"cols":["id"],"rows":[[tor\n');
    await assert.rejects(openCache(root, { rowGroupRows: 10 }), (e: { code?: string; message?: string }) => {
      assert.equal(e.code, 'HYPSINK_ERR_CORRUPT');
      assert.match(e.message ?? '', /spools\/events\/s1\/(current|seg-\d+)\.ndjson line 2/);
      return true;
    });
    // Undamaged, the same copy opens and has flushed them at the fork.
    const ok = join(scratch, `c${++n}`);
    cpSync(base, ok, { recursive: true });
    const cache = await openCache(ok, { rowGroupRows: 10 });
    assert.ok(cache.copied, 'seen as a copy');
    assert.equal((await read(cache)).length, 65);
    assert.equal(BigInt(cache.copied.forkSeq) >= 65n, true, `fork ${cache.copied.forkSeq} covers the flushed rows`);
  });

  test('a torn tail of the current spool file (never acknowledged) is cut, not an error', async () => {
    const { root, cache } = await copy();
    await fsp.appendFile(join(root, 'spools/events/s1/current.ndjson'), '{"v":1,"cols":["id","ts","msg"],"rows":[["web",70');
    await cache.appendRows(S1, COLS, rows('web', 700, 2));
    await cache.flushTable(S1);
    assert.deepEqual(
      (await read(cache)).slice(60).map((r) => r.row.id),
      [500, 501, 502, 503, 504, 700, 701],
    );
  });
});
