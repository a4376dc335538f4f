/**
 * Rows PostgreSQL refuses go to the sink's dead-letter table with the reason,
 * in the unit's own transaction: every row of the unit is in exactly one of
 * the table and the dead letter, and status counts the refused ones.
 * @ref LLP 0042
 */
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { eventLines, ingestText } from '../support/kernel.js';
import { testPg } from '../support/pg.js';
import { pgWorkspace } from './helpers.js';

after(async () => (await testPg()).stop());

test('a NUL byte and a CHECK constraint: those rows go to the dead letter, the rest commit', async () => {
  const w = await pgWorkspace({ unit: { maxRows: 25 } });
  // The operator's own table, with a constraint the sink knows nothing of.
  await w.query('CREATE TABLE events (source text NOT NULL, id bigint NOT NULL, ts timestamptz NOT NULL, msg text, CHECK (id <> 13 AND id <> 40))');
  const { k } = await w.open();
  try {
    await ingestText(k, 'h', eventLines(1, 60, (id) => (id === 7 || id === 33 ? { msg: `bad\u0000${id}` } : {})));
    const [r] = await k.export('warehouse');
    assert.equal(r!.rows, 60);
    const ids = (await w.rows()).map((x) => Number(x.id));
    const refused = [7, 13, 33, 40];
    assert.deepEqual(ids, Array.from({ length: 60 }, (_, i) => i + 1).filter((i) => !refused.includes(i)));
    const id = (x: { row_json?: unknown }) => (JSON.parse(String(x.row_json)) as { id: number }).id;
    const dl = (await w.query('SELECT ordinal, reason, row_json FROM hypsink_rejected')).sort((a, b) => id(a) - id(b));
    assert.deepEqual(dl.map(id), refused);
    assert.match(String(dl[0]!.reason), /NUL/);
    assert.match(String(dl[1]!.reason), /23514/);
    assert.equal((JSON.parse(String(dl[0]!.row_json)) as { msg: string }).msg, 'bad\u00007');
    const st = await k.status();
    assert.equal(st.sinks[0]!.partitions[0]!.rejectedRows, 4);
  } finally {
    await k.close();
  }
});
