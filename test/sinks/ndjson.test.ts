/** The kernel's column-wise NDJSON equals JSON.stringify of each row-form row. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Cache } from '../../kernel/cache/cache.js';
import { batchToNdjson } from '../../kernel/cache/ndjson.js';
import type { DatasetSchema } from '../../types/schema.js';
import { collect } from '../support/datasets.js';
import { tempDir } from '../support/tmp.js';

const ALL: DatasetSchema = {
  columns: [
    { name: 'id', type: 'INT64', nullable: false },
    { name: 'big', type: 'INT64', nullable: true },
    { name: 'x', type: 'DOUBLE', nullable: true },
    { name: 's', type: 'STRING', nullable: true },
    { name: 'ok', type: 'BOOLEAN', nullable: true },
    { name: 'ts', type: 'TIMESTAMP', nullable: true },
    { name: 'j', type: 'JSON', nullable: true },
  ],
};

test('batchToNdjson gives the same lines as JSON.stringify of readRowsSince rows', async () => {
  const cache = await Cache.open({ root: tempDir(), datasets: { all: ALL } });
  const rows = [
    ['a', 1, '9223372036854775807', 1.5, 'plain', true, '2026-01-01T00:00:00.123Z', { n: [1, 'two', null], q: 'a"b' }],
    ['a', 2, null, null, null, null, null, null],
    ['a', -3, '-9007199254740993', -0, 'ünïcødé "quoted" \\ \n line', false, '1970-01-01T00:00:00Z', 'just a string'],
    ['a', 4, 12, 1e21, '', true, '2030-12-31T23:59:59.999Z', [true, { deep: { er: 0.1 } }]],
  ];
  await cache.appendRows({ dataset: 'all', id: 's' }, ['source', 'id', 'big', 'x', 's', 'ok', 'ts', 'j'], rows);
  await cache.flushTable({ dataset: 'all', id: 's' });
  const p = cache.partition('all', 'a');
  const expected = (await collect(cache.storage.readRowsSince(p))).map((r) => `${JSON.stringify(r.row)}\n`).join('');
  let got = '';
  for await (const b of cache.storage.readBatchesSince(p)) got += batchToNdjson(b.batch, ALL.columns);
  assert.equal(got, expected);
  assert.equal(got.split('\n').length - 1, rows.length);
});

test('batchToNdjson of sliced batches (units inside a row group) equals the rows', async () => {
  const cache = await Cache.open({ root: tempDir(), datasets: { all: ALL } });
  const rows = Array.from({ length: 50 }, (_, i) => ['a', i, null, i / 3, `s${i}`, i % 2 === 0, '2026-01-01T00:00:00Z', { i, tag: `t${i}` }]);
  await cache.appendRows({ dataset: 'all', id: 's' }, ['source', 'id', 'big', 'x', 's', 'ok', 'ts', 'j'], rows);
  await cache.flushTable({ dataset: 'all', id: 's' });
  const p = cache.partition('all', 'a');
  const all = await collect(cache.storage.readRowsSince(p));
  const since = all[16]!.after;
  const until = all[33]!.after;
  const expected = all.slice(17, 34).map((r) => `${JSON.stringify(r.row)}\n`).join('');
  let got = '';
  for await (const b of cache.storage.readBatchesSince(p, { since, until })) got += batchToNdjson(b.batch, ALL.columns);
  assert.equal(got, expected);
});
