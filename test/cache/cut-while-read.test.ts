/**
 * A data file cut while a read has it open (LLP 0091: one handle per file,
 * a positional read per slice): the read that reaches the missing bytes fails
 * with HYPSINK_ERR_CORRUPT naming the file, never a hang, never fewer rows
 * handed out as if they were all. The control reads every row.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { promises as fsp } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { COLS, openCache } from '../support/datasets.js';
import { tempDir } from '../support/tmp.js';
import { currentManifest } from './helpers.js';

const S1 = { dataset: 'events', id: 's1' };

/** 300 rows of incompressible messages in one data file of three row groups. */
async function oneFile() {
  const root = tempDir();
  const cache = await openCache(root, { rowGroupRows: 100 });
  const t0 = Date.parse('2026-01-01T00:00:00Z');
  await cache.appendRows(
    S1,
    COLS,
    Array.from({ length: 300 }, (_, i) => ['web', i + 1, new Date(t0 + i).toISOString(), randomBytes(300).toString('base64')]),
  );
  await cache.flushTable(S1);
  const web = cache.partition('events', 'web');
  const dir = join(root, web.path);
  const { manifest, generation } = await currentManifest(dir);
  assert.equal(manifest.files.length, 1);
  return { cache, web, file: join(dir, `table-${generation}`, manifest.files[0]!.name) };
}

test('a data file cut after a read opened it: the next row group fails as CORRUPT naming the file', { timeout: 30_000 }, async () => {
  {
    const { cache, web } = await oneFile();
    let n = 0;
    for await (const b of cache.storage.readBatchesSince(web)) n += b.rows;
    assert.equal(n, 300, 'control: every row');
    await cache.close();
  }
  const { cache, web, file } = await oneFile();
  const size = (await fsp.stat(file)).size;
  const it = cache.storage.readBatchesSince(web)[Symbol.asyncIterator]();
  const first = await it.next();
  assert.equal(first.done, false);
  assert.equal(first.value!.rows, 100, 'the first row group read whole');
  // The second and third row groups' pages are past 40% of the file.
  await fsp.truncate(file, Math.floor(size * 0.4));
  await assert.rejects(
    (async () => {
      for (let r = await it.next(); !r.done; r = await it.next());
    })(),
    (e: { code?: string; message?: string }) => {
      assert.equal(e.code, 'HYPSINK_ERR_CORRUPT', e.message);
      assert.ok(e.message?.includes(file), e.message);
      return true;
    },
  );
  await cache.close();
});
