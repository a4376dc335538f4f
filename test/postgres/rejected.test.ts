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
    // row_json is jsonb (LLP 0069): queried as JSON, handed back by pg as an object.
    assert.deepEqual(await w.query("SELECT data_type FROM information_schema.columns WHERE table_name = 'hypsink_rejected' AND column_name = 'row_json'"), [{ data_type: 'jsonb' }]);
    const dl = await w.query("SELECT ordinal, reason, row_json FROM hypsink_rejected ORDER BY (row_json->>'id')::bigint");
    const id = (x: { row_json?: unknown }) => (x.row_json as { id: number }).id;
    assert.deepEqual(dl.map(id), refused);
    assert.match(String(dl[0]!.reason), /NUL/);
    assert.match(String(dl[1]!.reason), /23514/);
    // jsonb cannot hold U+0000: it is kept as the six characters \u0000.
    assert.equal((dl[0]!.row_json as { msg: string }).msg, 'bad\\u00007');
    const st = await k.status();
    assert.equal(st.sinks[0]!.partitions[0]!.rejectedRows, 4);
  } finally {
    await k.close();
  }
});

test('a dead-letter table made before row_json was jsonb keeps its text column: refused rows go on landing there, as JSON text', async () => {
  const w = await pgWorkspace({ unit: { maxRows: 25 } });
  await w.query('CREATE TABLE events (source text NOT NULL, id bigint NOT NULL, ts timestamptz NOT NULL, msg text, CHECK (id <> 13))');
  // The dead letter as the sink created it before LLP 0069.
  await w.query(`CREATE TABLE hypsink_rejected (
    writer text NOT NULL, sink text NOT NULL, dataset text NOT NULL, source text NOT NULL,
    unit text NOT NULL, ordinal integer NOT NULL, reason text NOT NULL, row_json text NOT NULL,
    target text NOT NULL, rejected_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (writer, sink, unit, ordinal))`);
  const { k } = await w.open();
  try {
    await ingestText(k, 'h', eventLines(1, 20, (id) => (id === 7 ? { msg: `bad\u0000${id}` } : {})));
    const [r] = await k.export('warehouse');
    assert.equal(r!.rows, 20);
    assert.deepEqual(await w.query("SELECT data_type FROM information_schema.columns WHERE table_name = 'hypsink_rejected' AND column_name = 'row_json'"), [{ data_type: 'text' }]);
    const dl = await w.query('SELECT row_json FROM hypsink_rejected ORDER BY ordinal');
    const rows = dl.map((x) => JSON.parse(String(x.row_json)) as { id: number; msg: string });
    assert.deepEqual(rows.map((x) => x.id), [7, 13]);
    // Text holds U+0000 as JSON writes it: the row comes back exactly.
    assert.equal(rows[0]!.msg, 'bad\u00007');
  } finally {
    await k.close();
  }
});
