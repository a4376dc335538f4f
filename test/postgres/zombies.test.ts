/**
 * Two exporters with one identity (a zombie: the same cache copied, or a
 * second process on the same state) racing the same unit: exactly one
 * commits it, the other finds it committed and writes nothing, whether the
 * watermark row already exists (the loser waits on its row lock, then reads
 * the winner's until) or not (the very first unit: both INSERT the row, the
 * loser's insert does nothing, it rolls back and its retry finds the row).
 * The race is made certain, not hoped for: an admin session holds a lock
 * both transactions need at the step under test until both wait on it.
 * @ref LLP 0041
 */
import assert from 'node:assert/strict';
import { cp } from 'node:fs/promises';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import type { Continuation, ShipResult } from 'hypsink/plugin';
import { createLogger } from '../../kernel/log.js';
import { buildUnit, UnitReads } from '../../kernel/sinks/unit.js';
import type { Hypsink } from '../../kernel/runtime.js';
import { parsePostgresConfig, PostgresShipper } from '../../plugins/postgres/src/index.js';
import { eventLines, ingestText, type Json, openKernel, partitionStatus, range } from '../support/kernel.js';
import { testPg } from '../support/pg.js';
import { tempDir } from '../support/tmp.js';
import { type PgWorkspace, pgWorkspace } from './helpers.js';

after(async () => (await testPg()).stop());

const APP = 'hypsink-zombie';
const cont = (seq: string): Continuation => ({ v: 1, seq });

/** An admin session holding `LOCK TABLE … IN SHARE MODE` until released. */
async function holdShareLock(url: string, table: string): Promise<{ release(): Promise<void> }> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  await c.query('BEGIN');
  await c.query(`LOCK TABLE ${table} IN SHARE MODE`);
  return {
    async release() {
      await c.query('ROLLBACK');
      await c.end();
    },
  };
}

/** Until `n` of the sink's sessions wait on a lock: both racers are at the step under test. */
async function waiters(w: PgWorkspace, n: number): Promise<void> {
  for (;;) {
    const r = await w.query(
      'SELECT count(*)::int AS n FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid WHERE NOT l.granted AND a.application_name = $1 AND a.datname = current_database()',
      [APP],
    );
    if (r[0]!.n === n) return;
    await sleep(20);
  }
}

/** Two PostgresShipper objects with the same identity (cache id, sink), and units of `k`'s cache. */
function twoShippers(w: PgWorkspace, k: Hypsink) {
  const ctx = { sink: 'warehouse', stateDir: join(w.dir, 'state'), baseDir: w.dir, cacheId: k.cache.id, log: createLogger('silent') };
  const cfg = parsePostgresConfig({ url: w.url, applicationName: APP }, 'warehouse');
  const shippers = [new PostgresShipper(cfg, ctx), new PostgresShipper(cfg, ctx)] as const;
  const unit = (source: string, since: string | null, until: string, rows: number) => {
    const p = k.cache.partition('events', source);
    const id = shippers[0].unitId(p, since === null ? null : cont(since), cont(until));
    assert.equal(id, shippers[1].unitId(p, since === null ? null : cont(since), cont(until)), 'one identity');
    const intent = { since, until, unit: id, rows };
    return buildUnit({ cache: k.cache, p, schema: k.cache.schema('events'), chain: null }, 'warehouse', intent, `u1-${'A'.repeat(43)}`, new UnitReads(rows, 'warehouse', id), new AbortController().signal);
  };
  return { shippers, unit };
}

const highWater = async (k: Hypsink, source: string) => partitionStatus(await k.status(), 'warehouse', source).highWater!;

function oneCommitted(results: ShipResult[]): void {
  assert.deepEqual(
    results.map((r) => r.duplicate).sort(),
    [false, true],
    'one committed the unit, the other found it committed',
  );
  for (const r of results) assert.equal(r.rows, results[0]!.rows);
}

test('two PostgresShipper objects with one identity race the first unit and a later one: one commits each, the other writes nothing', async () => {
  const w = await pgWorkspace();
  const { k } = await openKernel(w.config);
  const { shippers, unit } = twoShippers(w, k);
  try {
    // The sink's tables, made by a unit of another source: the race below is of units, not of DDL.
    await ingestText(k, 'other', eventLines(1, 1));
    await shippers[0].ship(unit('other', null, await highWater(k, 'other'), 1));

    await ingestText(k, 'h', eventLines(1, 10));
    const first = await highWater(k, 'h');
    // The first unit: no watermark row. Both pass its (empty) SELECT … FOR UPDATE and COPY,
    // then wait to INSERT the row.
    let lock = await holdShareLock(w.url, 'hypsink_watermarks');
    let racing = shippers.map((s) => s.ship(unit('h', null, first, 10)));
    await waiters(w, 2);
    await lock.release();
    oneCommitted(await Promise.all(racing));

    await ingestText(k, 'h', eventLines(11, 10));
    const second = await highWater(k, 'h');
    // A later unit: one holds the watermark row's lock and waits to COPY; the other waits on the row.
    lock = await holdShareLock(w.url, 'events');
    racing = shippers.map((s) => s.ship(unit('h', first, second, 10)));
    await waiters(w, 2);
    await lock.release();
    oneCommitted(await Promise.all(racing));

    assert.deepEqual((await w.rows('events', "source = 'h'")).map((r) => Number(r.id)), range(1, 20), 'every row once');
    assert.deepEqual(await w.query("SELECT until::text AS until FROM hypsink_watermarks WHERE source = 'h'"), [{ until: second }]);
  } finally {
    await Promise.all(shippers.map((s) => s.close()));
    await k.close();
  }
});

/** Both kernels' exports of the sink at once, racing at the lock `table` (held until both wait). */
async function raceExports(w: PgWorkspace, configs: string[], table: string) {
  const opened = await Promise.all(configs.map((c) => openKernel(c)));
  try {
    const lock = await holdShareLock(w.url, table);
    const ticks = opened.map(({ k }) => k.export('warehouse'));
    await waiters(w, 2);
    await lock.release();
    const reports = (await Promise.all(ticks)).map(([t]) => t!);
    for (const t of reports) assert.equal(t.failed, 0, String(t.partitions.find((p) => p.error)?.error));
    return await Promise.all(opened.map(async ({ k }) => partitionStatus(await k.status(), 'warehouse', 'h')));
  } finally {
    await Promise.all(opened.map(({ k }) => k.close()));
  }
}

test('two Hypsink instances on copies of one state race the same units: every row once, both catch up', async () => {
  const w = await pgWorkspace({ sink: { applicationName: APP } });
  const copy = tempDir('hypsink-pg-copy-');
  const ingest = async (source: string, from: number, n: number) => {
    const { k } = await openKernel(w.config);
    try {
      await ingestText(k, source, eventLines(from, n));
    } finally {
      await k.close();
    }
  };
  // The sink's tables, made by another source's export.
  await ingest('other', 1, 1);
  const { k } = await openKernel(w.config);
  try {
    assert.equal((await k.export('warehouse'))[0]!.failed, 0);
  } finally {
    await k.close();
  }

  // The first unit of "h" (no watermark row yet), from both copies.
  await ingest('h', 1, 10);
  await cp(w.dir, copy, { recursive: true });
  const configs = [w.config, join(copy, 'hypsink.config.json')];
  // A deliberate twin (same identity, both running): told the original stopped, so the database's checks are what holds. @ref LLP 0055
  const twin = await openKernel(configs[1]!);
  await twin.k.identityMoved();
  await twin.k.close();
  let both = await raceExports(w, configs, 'hypsink_watermarks');
  assert.deepEqual((await w.rows('events', "source = 'h'")).map((r) => Number(r.id)), range(1, 10));
  assert.equal(both[0]!.watermark, both[1]!.watermark);

  // A later unit: the same rows ingested into both copies (same seqs), raced again.
  for (const c of configs) {
    const { k: kc } = await openKernel(c);
    try {
      await ingestText(kc, 'h', eventLines(11, 10));
    } finally {
      await kc.close();
    }
  }
  both = await raceExports(w, configs, 'events');
  assert.deepEqual((await w.rows('events', "source = 'h'")).map((r) => Number(r.id)), range(1, 20), 'every row once');
  const db = (await w.query("SELECT until::text AS until FROM hypsink_watermarks WHERE source = 'h'"))[0] as Json;
  assert.deepEqual(both.map((s) => s.watermark), [db.until, db.until], 'both local watermarks at the database row');
  assert.deepEqual(both.map((s) => s.exportedRows), [20, 20]);
});
