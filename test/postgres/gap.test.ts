/**
 * The watermark steps over a gap (rows retention pruned before this sink
 * exported them) with no unit shipped across it: the database's watermark row
 * still holds the until of the last unit shipped, so the next unit's `since`
 * (the top of the gap) is not what the database holds. The kernel gives the
 * unit `prior`, that last until, and the sink ships because the row matches
 * it; the gap is counted. @ref LLP 0041
 *
 * Each test asserts, before that export, that the database's row differs from
 * the unit's since: only `prior` can match it. Run with a verdict() that
 * ignores prior (`held === since` alone), both tests fail: the export stops
 * with HYPSINK_ERR_DESTINATION ("is at 10, but … runs from 20 to 25"; "is at
 * nothing (no row), but … runs from 20 to 25").
 *
 * Two ways to such a gap: the hard cap, while another sink's unfinished unit
 * holds the older rows (the cap never takes rows of a unit in flight, so it
 * takes the newer ones: every row above this sink's watermark); and, before
 * the sink's first unit, the age rule with ackCoupled off, which prunes every
 * row it has not exported (the hard cap alone keeps the newest rows, so it
 * cannot empty a partition above a watermark).
 */
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { eventLines, ingestText, type Json, openKernel, partitionStatus, range, runSteps, writeConfig } from '../support/kernel.js';
import { testPg } from '../support/pg.js';
import { pgConfig, type PgWorkspace, pgWorkspace } from './helpers.js';

after(async () => (await testPg()).stop());

/** The database's watermark row of source "h"; null when there is none (nor its table, before the first unit). */
async function dbWatermark(w: PgWorkspace): Promise<string | null> {
  if ((await w.query("SELECT to_regclass('hypsink_watermarks') IS NULL AS none"))[0]!.none) return null;
  return ((await w.query("SELECT until::text AS until FROM hypsink_watermarks WHERE source = 'h'"))[0]?.until as string | undefined) ?? null;
}
const ids = async (w: PgWorkspace) => (await w.rows('events', "source = 'h'")).map((r) => Number(r.id));

test("the hard cap prunes every row above the sink's watermark between two exports: the next unit ships on prior, the gap counted", async () => {
  const w = await pgWorkspace();
  const cfg = pgConfig(w.url) as Json & { sinks: Record<string, Json> };
  cfg.sinks.mirror = { writer: '@hypsink/format-parquet', destination: '@hypsink/local-fs', datasets: ['events'], config: { dir: 'mirror' } };
  await writeConfig(w.dir, cfg);
  const { k } = await openKernel(w.config);
  try {
    await ingestText(k, 'h', eventLines(1, 10));
    // mirror's first unit (rows 1..10) is recorded, and its exporter killed before it shipped.
    const killed = await runSteps([['export', '--sink', 'mirror', '--config', w.config]], { HYPSINK_FAULT: 'export.afterIntent' });
    assert.equal(killed.signal, 'SIGKILL', killed.stderr);
    assert.ok(partitionStatus(await k.status(), 'mirror', 'h').intent, "mirror's unit is in flight");

    assert.equal((await k.export('warehouse'))[0]!.failed, 0);
    const shipped = await dbWatermark(w);
    assert.equal(shipped, partitionStatus(await k.status(), 'warehouse', 'h').watermark);

    await ingestText(k, 'h', eventLines(11, 10));
    const [pruned] = await k.retention({ hardMaxRows: 10, ackCoupled: true });
    assert.equal(pruned!.forcedRows, 10, 'rows 11..20, above the watermark, went');

    // Nothing left to ship: the watermark steps over the gap; the database row stays.
    const [step] = await k.export('warehouse');
    assert.deepEqual([step!.failed, step!.units, step!.partitions[0]!.gapRows], [0, 0, 10]);
    const stepped = partitionStatus(await k.status(), 'warehouse', 'h');
    assert.equal(await dbWatermark(w), shipped);
    assert.notEqual(stepped.watermark, shipped, "the next unit's since is not what the database holds");

    await ingestText(k, 'h', eventLines(21, 5));
    const [next] = await k.export('warehouse');
    assert.equal(next!.failed, 0, String(next!.partitions[0]!.error));
    assert.deepEqual(await ids(w), [...range(1, 10), ...range(21, 5)]);
    const st = partitionStatus(await k.status(), 'warehouse', 'h');
    assert.equal(await dbWatermark(w), st.watermark);
    assert.deepEqual([st.exportedRows, st.gapRows, st.pendingRows, st.intent], [15, 10, 0, null]);
  } finally {
    await k.close();
  }
});

test('every row pruned before the sink shipped anything, twice: the first unit after the gaps ships with no watermark row (prior null)', async () => {
  const w = await pgWorkspace();
  const { k } = await openKernel(w.config);
  const day = 86_400_000;
  const old = (id: number) => ({ ts: new Date(Date.now() - 30 * day + id * 1000).toISOString() });
  try {
    for (const from of [1, 11]) {
      await ingestText(k, 'h', eventLines(from, 10, old));
      const [pruned] = await k.retention({ maxAgeMs: 7 * day, ackCoupled: false });
      assert.equal(pruned!.forcedRows, 10);
      const [step] = await k.export('warehouse');
      assert.deepEqual([step!.failed, step!.units, step!.partitions[0]!.gapRows], [0, 0, 10]);
    }
    assert.notEqual(partitionStatus(await k.status(), 'warehouse', 'h').watermark, null, 'the watermark stepped over both gaps');
    assert.equal(await dbWatermark(w), null, 'no watermark row: the unit since is not what the database holds');

    await ingestText(k, 'h', eventLines(21, 5));
    const [next] = await k.export('warehouse');
    assert.equal(next!.failed, 0, String(next!.partitions[0]!.error));
    assert.deepEqual(await ids(w), range(21, 5));
    const st = partitionStatus(await k.status(), 'warehouse', 'h');
    assert.equal(await dbWatermark(w), st.watermark);
    assert.deepEqual([st.exportedRows, st.gapRows], [5, 20]);
  } finally {
    await k.close();
  }
});
