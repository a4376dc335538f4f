/**
 * Passing faults are retried within the unit, by its retry budget, and the
 * unit still commits once: a statement cancelled by statement_timeout (an
 * admin session holds a lock the COPY needs), and a deadlock the server
 * breaks by aborting the sink's transaction (the admin session takes the
 * watermark row the sink holds, while the sink waits for its lock). A server
 * that never answers is HYPSINK_ERR_RETRYABLE once the budget is spent, with
 * what to check.
 *
 * A serialization failure (40001) cannot be made from outside honestly: the
 * sink runs READ COMMITTED. The sink raises one itself when another session
 * inserted the first watermark row meanwhile; zombies.test.ts races that.
 */
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { loadConfig } from '../../kernel/config/load.js';
import { createLogger } from '../../kernel/log.js';
import { Hypsink } from '../../kernel/runtime.js';
import { cli, eventLines, ingestText, type Json, partitionStatus, range, writeConfig } from '../support/kernel.js';
import { SinkState } from '../../kernel/sinks/states.js';
import { freePort, testPg } from '../support/pg.js';
import { pgConfig, type PgWorkspace, pgWorkspace } from './helpers.js';

after(async () => (await testPg()).stop());

const APP = 'hypsink-transient';

/** The kernel of `w`, each log line handed to `onLine` as it is written. */
async function openWith(w: PgWorkspace, onLine: (l: Json) => void = () => undefined): Promise<{ k: Hypsink; logs: Json[] }> {
  const logs: Json[] = [];
  const log = createLogger('info', {
    write(s: string) {
      const l = JSON.parse(s) as Json;
      logs.push(l);
      onLine(l);
    },
  });
  return { k: await Hypsink.open(await loadConfig(w.config), { log }), logs };
}

const retried = (logs: Json[]) => logs.filter((l) => String(l.msg).startsWith('PostgreSQL write failed; retrying'));

/** An admin session in a transaction of its own. */
async function adminSession(url: string): Promise<pg.Client> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  await c.query('BEGIN');
  return c;
}

/** Until one of the sink's sessions waits on a lock. */
async function sinkWaits(w: PgWorkspace): Promise<void> {
  for (;;) {
    const r = await w.query(
      'SELECT count(*)::int AS n FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid WHERE NOT l.granted AND a.application_name = $1 AND a.datname = current_database()',
      [APP],
    );
    if ((r[0]!.n as number) > 0) return;
    await sleep(20);
  }
}

/** A workspace whose first two rows are exported (its tables made), and rows 3..10 waiting. */
async function exportedOnce(sink: Json): Promise<PgWorkspace> {
  const w = await pgWorkspace({ sink: { applicationName: APP, ...sink } });
  const { k } = await openWith(w);
  try {
    await ingestText(k, 'h', eventLines(1, 2));
    assert.equal((await k.export('warehouse'))[0]!.failed, 0);
    await ingestText(k, 'h', eventLines(3, 8));
  } finally {
    await k.close();
  }
  return w;
}

test('nothing listening: HYPSINK_ERR_RETRYABLE after the retry budget, saying what to check; nothing moved', async () => {
  const port = await freePort();
  const w = await pgWorkspace({ url: `postgres://postgres:pw@127.0.0.1:${port}/db`, sink: { retry: { attempts: 3, baseMs: 1, maxMs: 1 } } });
  const { k, logs } = await openWith(w);
  try {
    await ingestText(k, 'h', eventLines(1, 3));
    const [t] = await k.export('warehouse');
    const e = t!.partitions[0]!.error;
    assert.equal(e?.code, 'HYPSINK_ERR_RETRYABLE', String(e));
    assert.equal(e!.retryable, true);
    assert.match(e!.message, new RegExp(`^sink "warehouse": postgres://postgres@127\\.0\\.0\\.1:${port}/db: connect ECONNREFUSED 127\\.0\\.0\\.1:${port} \\(after 3 tries\\); the partition is retried on a later tick`));
    assert.match(e!.hint ?? '', /nothing answers at postgres:\/\/postgres@127\.0\.0\.1:\d+\/db: check that PostgreSQL is running/);
    assert.equal(retried(logs).length, 2, 'three tries: two retries logged');
    const st = partitionStatus(await k.status(), 'warehouse', 'h');
    assert.deepEqual([st.watermark, st.pendingRows], [null, 3]);
    assert.match(String(st.lastError), /^HYPSINK_ERR_RETRYABLE: /);
  } finally {
    await k.close();
  }
});

test('a COPY cancelled by statement_timeout (a lock held elsewhere) is retried, and the unit commits once', async () => {
  const w = await exportedOnce({ statementTimeoutMs: 300, retry: { attempts: 10, baseMs: 300, maxMs: 300 } });
  const lock = await adminSession(w.url);
  await lock.query('LOCK TABLE events IN SHARE MODE');
  let released: Promise<unknown> | null = null;
  // The lock goes once the first timeout is logged: the retry then finds the table free.
  const { k, logs } = await openWith(w, (l) => {
    if (released === null && String(l.msg).startsWith('PostgreSQL write failed; retrying')) released = lock.query('ROLLBACK').then(() => lock.end());
  });
  try {
    const [t] = await k.export('warehouse');
    assert.equal(t!.failed, 0, String(t!.partitions[0]!.error));
    const first = retried(logs)[0];
    assert.ok(first, 'the cancelled statement was retried');
    assert.match(String(first.error), /canceling statement due to statement timeout/);
    assert.deepEqual((await w.rows()).map((r) => Number(r.id)), range(1, 10), 'every row once');
  } finally {
    await k.close();
    await released;
  }
});

test('a deadlock the server breaks by aborting the sink: retried, and the unit commits once', async () => {
  const w = await exportedOnce({ retry: { attempts: 5, baseMs: 50, maxMs: 50 } });
  const other = await adminSession(w.url);
  // Only the sink's session runs the deadlock check (at the server's deadlock_timeout, 1 s): it is the one aborted.
  await other.query("SET LOCAL deadlock_timeout = '10min'");
  await other.query('LOCK TABLE events IN SHARE MODE');
  const { k, logs } = await openWith(w);
  try {
    const tick = k.export('warehouse');
    // The sink holds its watermark row (SELECT … FOR UPDATE) and waits to COPY; now wait for that row.
    await sinkWaits(w);
    await other.query("SELECT until FROM hypsink_watermarks WHERE source = 'h' FOR UPDATE");
    await other.query('ROLLBACK');
    const [t] = await tick;
    assert.equal(t!.failed, 0, String(t!.partitions[0]!.error));
    const first = retried(logs)[0];
    assert.ok(first, 'the aborted transaction was retried');
    assert.match(String(first.error), /deadlock detected/);
    assert.deepEqual((await w.rows()).map((r) => Number(r.id)), range(1, 10), 'every row once');
    const st = partitionStatus(await k.status(), 'warehouse', 'h');
    assert.equal((await w.query("SELECT until::text AS until FROM hypsink_watermarks WHERE source = 'h'"))[0]!.until, st.watermark);
  } finally {
    await other.end();
    await k.close();
  }
});

/** The intent and the next unit of each watermark of the sink: what a changed destination is judged by. @ref LLP 0070 */
async function planned(w: PgWorkspace): Promise<unknown[]> {
  const stateDir = (await loadConfig(w.config)).stateDir;
  return (await SinkState.of(stateDir, 'warehouse').watermarks.list()).map((x) => [x.record.intent, x.record.next ?? null]);
}

test('a mistyped url (nothing listens there) corrected in the config: its unit was withdrawn, and the right server gets every row once (issue 28)', async () => {
  const port = await freePort();
  const w = await pgWorkspace({ url: `postgres://postgres:pw@127.0.0.1:${port}/db`, sink: { retry: { attempts: 2, baseMs: 1, maxMs: 1 } } });
  const { k } = await openWith(w);
  try {
    await ingestText(k, 'h', eventLines(1, 3));
    const [t] = await k.export('warehouse');
    assert.equal(t!.partitions[0]!.error?.code, 'HYPSINK_ERR_RETRYABLE');
  } finally {
    await k.close();
  }
  assert.deepEqual(await planned(w), [[null, null]], 'nothing of the unit was sent: it is withdrawn');
  const right = await (await testPg()).database('pgsink');
  await writeConfig(w.dir, pgConfig(right));
  const r = await cli('export', '--config', w.config);
  assert.equal(r.code, 0, `the corrected url is not refused as a moved destination: ${r.err}`);
  const rows = (await (await testPg()).query('SELECT id FROM events ORDER BY id', [], right)).rows;
  assert.deepEqual(rows.map((x) => Number(x.id)), range(1, 3));
});

test('a unit that reached the server and failed there stays planned: its destination stays locked (LLP 0070)', async () => {
  const w = await exportedOnce({ statementTimeoutMs: 200, retry: { attempts: 1, baseMs: 1, maxMs: 1 } });
  const lock = await adminSession(w.url);
  await lock.query('LOCK TABLE events IN SHARE MODE');
  const { k } = await openWith(w);
  try {
    const [t] = await k.export('warehouse');
    assert.match(String(t!.partitions[0]!.error?.message), /statement timeout/);
  } finally {
    await k.close();
    await lock.query('ROLLBACK').then(() => lock.end());
  }
  const [[intent]] = (await planned(w)) as [[unknown]];
  assert.notEqual(intent, null, 'a connection was made: the unit may have reached the table, so it is not withdrawn');
});
