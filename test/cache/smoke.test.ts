import assert from 'node:assert/strict';
import { test } from 'node:test';
import { COLS, collect, openCache, rows } from '../support/datasets.js';
import { tempDir } from '../support/tmp.js';

test('append, flush, read back without internal columns', async () => {
  const cache = await openCache(tempDir());
  await cache.appendRows({ dataset: 'events', id: 's1' }, COLS, rows('web', 1, 5));
  await cache.appendRows({ dataset: 'events', id: 's1' }, COLS, rows('app', 100, 3));
  const res = await cache.flushTable({ dataset: 'events', id: 's1' });
  assert.equal(res.partitions.length, 2);
  const web = cache.partition('events', 'web');
  const got = await collect(cache.storage.readRowsSince(web));
  assert.deepEqual(got.map((r) => r.row.id), [1, 2, 3, 4, 5]);
  assert.deepEqual(Object.keys(got[0]!.row), ['id', 'ts', 'msg']);
  assert.equal(got[0]!.row.ts, '2026-01-01T00:00:01.000Z');
});
