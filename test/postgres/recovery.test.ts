/**
 * The database's watermark row decides what a unit is (LLP 0041): a unit the
 * database committed but this cache does not know it shipped (its local
 * record reset to before it, or the exporter killed between COMMIT and the
 * local advance) is not written again, and the local watermark catches up;
 * a transaction killed before COMMIT leaves nothing; a row that matches
 * neither the unit's start nor its end (the database restored from a backup,
 * the row changed by hand) stops the sink naming both values, writing
 * nothing, until the operator sets the row as the error says.
 */
import assert from 'node:assert/strict';
import { cp, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { eventLines, ingestText, partitionStatus, range, runSteps } from '../support/kernel.js';
import { testPg } from '../support/pg.js';
import { type PgWorkspace, pgWorkspace } from './helpers.js';

after(async () => (await testPg()).stop());

const ids = async (w: PgWorkspace) => (await w.rows()).map((r) => Number(r.id));
const dbWatermark = async (w: PgWorkspace, source = 'h') =>
  ((await w.query('SELECT until::text AS until FROM hypsink_watermarks WHERE source = $1', [source]))[0]?.until as string | undefined) ?? null;

async function ingest(w: PgWorkspace, from: number, n: number, extra?: (id: number) => Record<string, unknown>): Promise<void> {
  const { k } = await w.open();
  try {
    await ingestText(k, 'h', eventLines(from, n, extra));
  } finally {
    await k.close();
  }
}

async function exportAll(w: PgWorkspace) {
  const { k, logs } = await w.open();
  try {
    const [t] = await k.export('warehouse');
    return { t: t!, p: t!.partitions[0]!, status: partitionStatus(await k.status(), 'warehouse', 'h'), logs };
  } finally {
    await k.close();
  }
}

test('the local watermark reset to before units the database committed: they are not written again, and it catches up', async () => {
  const w = await pgWorkspace({ unit: { maxRows: 4 } });
  await ingest(w, 1, 2);
  assert.equal((await exportAll(w)).p.error, null);
  // Row 6 holds a NUL byte: refused into the dead letter with its unit.
  await ingest(w, 3, 10, (id) => (id === 6 ? { msg: 'a\u0000b' } : {}));
  const state = join(w.dir, 'state');
  const saved = join(w.dir, 'state.before');
  await cp(state, saved, { recursive: true });
  const first = await exportAll(w);
  assert.equal(first.p.error, null);
  assert.equal(first.t.units, 3);
  const committed = await dbWatermark(w);
  assert.equal(committed, first.status.watermark);
  assert.equal(first.status.rejectedRows, 1);

  // The sink's local state as it was before that export: it believes nothing shipped.
  await rm(state, { recursive: true });
  await cp(saved, state, { recursive: true });
  const again = await exportAll(w);
  assert.equal(again.p.error, null, String(again.p.error));
  assert.equal(again.t.units, 3, 'the same three units, each found committed');
  assert.deepEqual(await ids(w), [...range(1, 5), ...range(7, 6)], 'every row once');
  assert.equal(await dbWatermark(w), committed, 'the row did not move');
  assert.equal(again.status.watermark, committed, 'the local watermark caught up');
  assert.equal(again.status.exportedRows, 12);
  assert.equal(again.status.rejectedRows, 1, 'the refused row is counted from the dead letter, once');
  assert.equal((await w.query('SELECT count(*)::int AS n FROM hypsink_rejected'))[0]!.n, 1);
});

for (const [point, at, landed] of [
  ['postgres.afterCommit', '1', true],
  ['postgres.afterCommit', '2', true],
  ['postgres.afterCopy', '2', false],
] as const) {
  test(`the exporter killed at ${point} (unit ${at}): the next export writes every row once`, async () => {
    const w = await pgWorkspace({ unit: { maxRows: 4 } });
    await ingest(w, 1, 10);
    const crashed = await runSteps([['export', '--config', w.config]], { HYPSINK_FAULT: point, HYPSINK_FAULT_AT: at });
    assert.equal(crashed.signal, 'SIGKILL', crashed.stderr);
    // The database holds the killed unit's rows if it committed, else only the units before it;
    // the local record is behind it (how far depends on the look-ahead's writes: LLP 0014).
    const left = partitionStatus(await exportStatus(w), 'warehouse', 'h');
    assert.ok(left.intent, 'a unit is still open locally');
    const before = Number(at) - 1;
    assert.deepEqual(await ids(w), range(1, 4 * (landed ? before + 1 : before)));
    const db = await dbWatermark(w);
    const local = BigInt(left.watermark ?? -1);
    // A committed unit's advance is written after its COMMIT: the kill came first.
    assert.ok(landed ? local < BigInt(db!) : local <= BigInt(db ?? -1), `local ${left.watermark} behind the database's ${db}`);

    const next = await exportAll(w);
    assert.equal(next.p.error, null, String(next.p.error));
    assert.deepEqual(await ids(w), range(1, 10));
    assert.equal(await dbWatermark(w), next.status.watermark);
    assert.equal(next.status.intent, null);
    assert.equal(next.status.exportedRows, 10);
  });
}

for (const [what, set] of [
  ['between the unit\'s start and its end', (since: bigint, until: bigint) => (since + until) / 2n],
  ['below the unit\'s start (a backup from before the last unit)', (since: bigint) => since - 2n],
  ['missing (the row deleted)', null],
] as const) {
  test(`a database watermark ${what}: HYPSINK_ERR_DESTINATION naming both values, nothing written; the row set as told ships`, async () => {
    const w = await pgWorkspace();
    await ingest(w, 1, 5);
    const first = await exportAll(w);
    const since = BigInt(first.status.watermark!);
    await ingest(w, 6, 5);
    const until = BigInt(partitionStatus((await exportStatus(w)), 'warehouse', 'h').highWater!);
    let held: string;
    if (set === null) {
      await w.query('DELETE FROM hypsink_watermarks');
      held = 'nothing (no row)';
    } else {
      held = set(since, until).toString();
      await w.query('UPDATE hypsink_watermarks SET until = $1', [held]);
    }
    const bad = await exportAll(w);
    assert.equal(bad.p.error?.code, 'HYPSINK_ERR_DESTINATION', String(bad.p.error));
    const msg = bad.p.error!.message;
    assert.ok(msg.includes(`is at ${held}, but`), msg);
    assert.ok(msg.includes(`runs from ${since} to ${until}`), msg);
    assert.match(msg, /Nothing was written/);
    assert.deepEqual(await ids(w), range(1, 5), 'nothing written');
    assert.equal(bad.status.watermark, since.toString(), 'the local watermark did not move');
    assert.equal(await dbWatermark(w), set === null ? null : held, 'the row as it was');

    // The hint: set the row's until to the unit's start, and the unit ships.
    assert.ok(bad.p.error!.hint?.includes(`set the row's until to ${since}`), bad.p.error!.hint);
    if (set === null) {
      await w.query(
        "INSERT INTO hypsink_watermarks (writer, sink, dataset, source, until, unit, target) SELECT $1, 'warehouse', 'events', 'h', $2, 'by hand', 'public.events'",
        [await writerOf(w), since.toString()],
      );
    } else {
      await w.query('UPDATE hypsink_watermarks SET until = $1', [since.toString()]);
    }
    const good = await exportAll(w);
    assert.equal(good.p.error, null, String(good.p.error));
    assert.deepEqual(await ids(w), range(1, 10));
    assert.equal(await dbWatermark(w), until.toString());
  });
}

async function exportStatus(w: PgWorkspace) {
  const { k } = await w.open();
  try {
    return await k.status();
  } finally {
    await k.close();
  }
}

async function writerOf(w: PgWorkspace): Promise<string> {
  const { k } = await w.open();
  try {
    return k.cache.id;
  } finally {
    await k.close();
  }
}
