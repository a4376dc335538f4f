/**
 * The DDL lock is taken for DDL only: an export into a table that fits
 * already reads the table and goes on while another session holds the
 * table's DDL lock (a host creating or widening it, a long migration), and
 * an export that must add a column waits for that lock as before.
 * @ref LLP 0097
 */
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import pg from 'pg';
import { eventLines, ingestText, writeConfig } from '../support/kernel.js';
import { testPg } from '../support/pg.js';
import { EVENTS_V2 } from '../support/datasets.js';
import { pgConfig, type PgWorkspace, pgWorkspace } from './helpers.js';

after(async () => (await testPg()).stop());

const APP = 'hypsink-ddl-lock-test';
/** The lock the sink's DDL takes for table public.events (plugins/postgres/src/table.ts). */
const LOCK = 'hypsink:ddl:public.events';

/**
 * Export `n` more rows while another session holds the DDL lock; whether a
 * session of the sink waited for it (then the lock is let go, so the export
 * ends either way).
 */
async function exportUnderLock(w: PgWorkspace, from: number, n: number): Promise<{ waited: boolean; error: unknown }> {
  const holder = new pg.Client({ connectionString: w.url });
  await holder.connect();
  try {
    await holder.query('SELECT pg_advisory_lock(hashtext($1))', [LOCK]);
    const { k } = await w.open();
    try {
      await ingestText(k, 'h', eventLines(from, n));
      let done = false;
      const exported = k.export('warehouse').finally(() => {
        done = true;
      });
      let waited = false;
      while (!done) {
        const r = await holder.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
            WHERE l.locktype = 'advisory' AND NOT l.granted AND a.application_name = $1`,
          [APP],
        );
        if (r.rows[0]!.n > 0) {
          waited = true;
          await holder.query('SELECT pg_advisory_unlock(hashtext($1))', [LOCK]);
          break;
        }
        await new Promise((ok) => setTimeout(ok, 20));
      }
      const [t] = await exported;
      return { waited, error: t!.partitions[0]!.error };
    } finally {
      await k.close();
    }
  } finally {
    await holder.end();
  }
}

test('a table that fits is not locked: the export goes on while another session holds its DDL lock; adding a column waits for it', async () => {
  const w = await pgWorkspace({ sink: { applicationName: APP } });
  // The first export creates the table (under the lock, nobody holding it).
  {
    const { k } = await w.open();
    try {
      await ingestText(k, 'h', eventLines(1, 5));
      const [t] = await k.export('warehouse');
      assert.equal(t!.partitions[0]!.error, null);
    } finally {
      await k.close();
    }
  }
  const fits = await exportUnderLock(w, 6, 5);
  assert.equal(fits.error, null, String(fits.error));
  assert.equal(fits.waited, false, 'the export of a table that fits waited for the DDL lock');
  assert.equal((await w.rows()).length, 10);

  // The dataset gains a nullable column: the sink adds it, under the lock, so it waits.
  await writeConfig(w.dir, pgConfig(w.url, { datasets: { events: EVENTS_V2 }, sink: { applicationName: APP } }));
  const widened = await exportUnderLock(w, 11, 5);
  assert.equal(widened.error, null, String(widened.error));
  assert.equal(widened.waited, true, 'the export that added a column did not wait for the DDL lock');
  assert.equal((await w.rows()).length, 15);
  assert.deepEqual(await w.query("SELECT count(*)::int AS n FROM pg_attribute WHERE attrelid = 'public.events'::regclass AND attname = 'level' AND NOT attisdropped"), [{ n: 1 }]);
});
