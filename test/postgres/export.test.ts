/**
 * The Postgres sink against a real PostgreSQL: rows land once, the table is
 * made from the dataset schema, the watermark row moves with them, a tick
 * with nothing new writes nothing.
 */
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { eventLines, ingestText } from '../support/kernel.js';
import { testPg } from '../support/pg.js';
import { pgWorkspace } from './helpers.js';

after(async () => (await testPg()).stop());

test('rows and the watermark row commit together; a tick with nothing new writes nothing', async () => {
  const w = await pgWorkspace({ unit: { maxRows: 40 } });
  const { k } = await w.open();
  try {
    await ingestText(k, 'host-a', eventLines(1, 100));
    await ingestText(k, 'host-b', eventLines(1, 30));
    const [r] = await k.export('warehouse');
    assert.equal(r!.rows, 130);
    const rows = await w.rows();
    assert.equal(rows.length, 130);
    assert.deepEqual(
      rows.filter((x) => x.source === 'host-a').map((x) => Number(x.id)),
      Array.from({ length: 100 }, (_, i) => i + 1),
    );
    const first = rows[0]!;
    assert.equal(first.msg, 'm1');
    assert.equal((first.ts as Date).toISOString(), new Date(Date.UTC(2026, 0, 1) + 1000).toISOString());
    const wm = await w.query('SELECT source, until::text AS until FROM hypsink_watermarks ORDER BY source');
    const st = await k.status();
    const local = new Map(st.sinks[0]!.partitions.map((p) => [p.source, p.watermark]));
    assert.deepEqual(wm.map((x) => [x.source, x.until]), [['host-a', local.get('host-a')], ['host-b', local.get('host-b')]]);
    const [again] = await k.export('warehouse');
    assert.equal(again!.rows, 0);
    assert.equal((await w.rows()).length, 130);
  } finally {
    await k.close();
  }
});
