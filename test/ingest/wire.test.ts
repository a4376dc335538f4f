/**
 * An ingest of wire rows (a receiver's client's, LLP 0087): the client column
 * is set on every row by the ingest's parse, whatever the row said there, and
 * a line no client may send refuses the batch before any of it is durable,
 * even when the input spans several blocks and the refused line is in the
 * last; in this thread and in the parse worker alike.
 */
import assert from 'node:assert/strict';
import { Readable } from 'node:stream';
import { test } from 'node:test';
import { ingestNdjson, RowRefused } from '../../kernel/ingest/ingest.js';
import { collect } from '../support/datasets.js';
import { openKernel, sampleConfig, writeConfig } from '../support/kernel.js';
import { tempDir } from '../support/tmp.js';

const TS = '2026-01-01T00:00:00.000Z';
const wire = { maxDepth: 8, stamp: { column: 'hyp_client', value: 'a1' } };

async function kernel() {
  const cfg = sampleConfig();
  const events = cfg.datasets.events as { columns: unknown[] };
  cfg.datasets.events = { ...events, columns: [...events.columns, { name: 'hyp_client', type: 'STRING', nullable: false }] };
  return openKernel(await writeConfig(tempDir(), cfg));
}

for (const parseWorkerAfterBytes of [Number.POSITIVE_INFINITY, 0]) {
  const where = parseWorkerAfterBytes === 0 ? 'in the parse worker' : 'in this thread';

  test(`wire rows ${where}: the client column is the receiver's on every row`, async () => {
    const { k } = await kernel();
    try {
      const lines = [
        JSON.stringify({ id: 1, ts: TS, msg: 'plain' }),
        JSON.stringify({ hyp_client: 'a2', id: 2, ts: TS, msg: 'names another client' }),
        JSON.stringify({ id: 3, ts: TS, msg: 'null', hyp_client: null }),
      ];
      const r = await ingestNdjson(k, 'events', 'web', Readable.from([`${lines.join('\n')}\n`]), 'body', { batchId: 'w1', wire, parseWorkerAfterBytes });
      assert.equal(r.accepted, 3);
      const rows = (await collect(k.cache.storage.readRowsSince(k.cache.partition('events', 'web'), {}))).map((x) => [Number(x.row.id), x.row.hyp_client]);
      assert.deepEqual(rows, [
        [1, 'a1'],
        [2, 'a1'],
        [3, 'a1'],
      ]);
    } finally {
      await k.close();
    }
  });

  test(`wire rows ${where}: a refused line in the last of several blocks leaves nothing of the batch`, async () => {
    const { k } = await kernel();
    try {
      // ~3 MiB of good rows (three blocks or more), then a line that repeats a key.
      const good = Array.from({ length: 24_000 }, (_, i) => JSON.stringify({ id: i + 1, ts: TS, msg: `m${i + 1}`.padEnd(100, '.') }));
      const body = `${good.join('\n')}\n{"id":0,"ts":"${TS}","msg":"a","msg":"b"}\n`;
      await assert.rejects(
        ingestNdjson(k, 'events', 'web', Readable.from([Buffer.from(body)]), 'body', { batchId: 'w2', wire, parseWorkerAfterBytes }),
        (e: unknown) => e instanceof RowRefused && e.line === 24_001 && /repeats a key/.test(e.reason),
      );
      assert.deepEqual(await k.cache.listSpools(), [], 'no spool: nothing of the batch is durable');
      const rows = await collect(k.cache.storage.readRowsSince(k.cache.partition('events', 'web'), {}));
      assert.equal(rows.length, 0);
      // The same id with the good rows alone is a new batch: every row, once.
      const r = await ingestNdjson(k, 'events', 'web', Readable.from([Buffer.from(`${good.join('\n')}\n`)]), 'body', { batchId: 'w2', wire, parseWorkerAfterBytes });
      assert.equal(r.accepted, 24_000);
      assert.equal(r.duplicate, false);
    } finally {
      await k.close();
    }
  });
}
