/**
 * `hypsink verify` with a Postgres sink: its `inventory` reads the unit
 * records (`hypsink_units`) of this writer, so the chain, the row counts and
 * the recorded digests can be checked against the cache. A deployment from
 * before unit records (only the watermark row knows what it committed) reads
 * as one unit without a digest or a count: not checkable, never a hole.
 * @ref LLP 0037 (verify), LLP 0054 (digests), LLP 0056 (the units table)
 */
import assert from 'node:assert/strict';
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import { after, test } from 'node:test';
import type { HeldUnit } from 'hypsink/plugin';
import { createLogger } from '../../kernel/log.js';
import type { Hypsink } from '../../kernel/runtime.js';
import { unitDigest } from '../../kernel/sinks/digest.js';
import { parsePostgresConfig, PostgresShipper } from '../../plugins/postgres/src/index.js';
import { cli, eventLines, ingestText, type Json, openKernel, partitionStatus, range } from '../support/kernel.js';
import { testPg } from '../support/pg.js';
import { type PgWorkspace, pgWorkspace } from './helpers.js';

after(async () => (await testPg()).stop());

interface VerifyJson {
  ok: boolean;
  sinks: {
    name: string;
    kind: string;
    verified: boolean;
    units: number;
    partitions: { source: string; watermark: string | null; units: number; rowsChecked: number; contentChecked: number; notChecked: { pruned: number; uncounted: number; undigested: number } }[];
    findings: { problem: string; partition: string | null; object: string; message: string }[];
  }[];
}

async function verify(w: PgWorkspace): Promise<{ code: number; j: VerifyJson; err: string }> {
  const r = await cli('verify', '--json', '--config', w.config);
  return { code: r.code, j: JSON.parse(r.out) as VerifyJson, err: r.err };
}

async function withKernel<T>(w: PgWorkspace, fn: (k: Hypsink) => Promise<T>): Promise<T> {
  const { k } = await openKernel(w.config);
  try {
    return await fn(k);
  } finally {
    await k.close();
  }
}

/** Ingest rows of `source` and export: the export must pass. */
async function ingestAndExport(w: PgWorkspace, source: string, from: number, n: number, extra?: (id: number) => Json): Promise<void> {
  await withKernel(w, async (k) => {
    if (n > 0) await ingestText(k, source, eventLines(from, n, extra));
    const [t] = await k.export('warehouse');
    for (const p of t!.partitions) assert.equal(p.error, null, String(p.error));
  });
}

/** What the sink's own reader gives for `source`, next to the digest the kernel computes from the cache for each range. */
async function inventoryOf(w: PgWorkspace, source: string): Promise<{ held: HeldUnit[]; cache: (string | null)[] }> {
  return withKernel(w, async (k) => {
    const shipper = new PostgresShipper(parsePostgresConfig({ url: w.url }, 'warehouse'), {
      sink: 'warehouse',
      stateDir: join(w.dir, 'state'),
      baseDir: w.dir,
      cacheId: k.cache.id,
      log: createLogger('silent'),
    });
    try {
      const p = k.cache.partition('events', source);
      const held: HeldUnit[] = [];
      for await (const u of shipper.inventory(p, { signal: new AbortController().signal })) held.push(u);
      held.sort((a, b) => Number(BigInt(a.until) - BigInt(b.until)));
      const cache = await Promise.all(held.map((u) => (u.digest ? unitDigest(k.cache, p, u.since === null ? -1n : BigInt(u.since), u.until) : null)));
      return { held, cache };
    } finally {
      await shipper.close();
    }
  });
}

const sinkOf = (j: VerifyJson) => j.sinks.find((s) => s.name === 'warehouse')!;

test('verify passes on a healthy Postgres sink: every unit from the units table, the chain whole, each count checked, a dead-lettered row counted with its unit', async () => {
  const w = await pgWorkspace({ unit: { maxRows: 4 } });
  await ingestAndExport(w, 'h', 1, 10, (id) => (id === 6 ? { msg: 'a\u0000b' } : {}));
  await ingestAndExport(w, 'app', 100, 5);
  await ingestAndExport(w, 'h', 11, 3);

  const { code, j, err } = await verify(w);
  assert.equal(code, 0, `${err}\n${JSON.stringify(j, null, 1)}`);
  assert.equal(j.ok, true);
  const s = sinkOf(j);
  assert.deepEqual([s.kind, s.verified, s.findings], ['request', true, []]);
  const h = s.partitions.find((p) => p.source === 'h')!;
  const app = s.partitions.find((p) => p.source === 'app')!;
  assert.deepEqual(
    [h.units, h.rowsChecked, h.contentChecked, h.notChecked],
    [4, 4, 4, { pruned: 0, uncounted: 0, undigested: 0 }],
    '(s0,s4], (s4,s8], (s8,s10], (s10,s13]: each count and digest checked',
  );
  assert.deepEqual([app.units, app.rowsChecked, app.contentChecked], [2, 2, 2]);

  // The reader's own output: a chain from the start, each with its rows and the digest the kernel computes from the cache.
  const { held, cache } = await inventoryOf(w, 'h');
  assert.deepEqual(
    held.map((u) => u.rows),
    [4, 4, 2, 3],
  );
  assert.equal(held[0]!.since, null);
  for (let i = 1; i < held.length; i++) assert.equal(held[i]!.since, held[i - 1]!.until, 'each unit starts where the one before ended');
  assert.equal(held.at(-1)!.until, h.watermark);
  assert.deepEqual(held.map((u) => u.digest), cache, 'each recorded digest is the cache\'s for its range');
  for (const u of held) assert.match(u.id, /^hpg1-/);
});

test('verify finds a unit record whose digest was changed: a content finding naming that unit, exit 1', async () => {
  const w = await pgWorkspace({ unit: { maxRows: 4 } });
  await ingestAndExport(w, 'h', 1, 10);
  const planted = `u1-${'Z'.repeat(43)}`;
  const [victim] = await w.query("SELECT until::text AS until, unit FROM hypsink_units WHERE source = 'h' ORDER BY hypsink_units.until OFFSET 1 LIMIT 1");
  await w.query('UPDATE hypsink_units SET digest = $1 WHERE until = $2', [planted, victim!.until]);

  const { held, cache } = await inventoryOf(w, 'h');
  const differs = held.filter((u, i) => u.digest !== cache[i]).map((u) => u.id);
  assert.deepEqual(differs, [victim!.unit], 'the planted unit, and only it, holds another digest than the cache computes for its range');
  assert.equal(held.find((u) => u.id === victim!.unit)!.digest, planted);
  const { code, j } = await verify(w);
  assert.equal(code, 1);
  const found = sinkOf(j).findings;
  assert.deepEqual(found.map((f) => [f.problem, f.object]), [['content', victim!.unit]]);
  assert.ok(found[0]!.message.includes(`recorded digest ${planted}`), found[0]!.message);
  assert.ok(found[0]!.message.includes('public.hypsink_units at postgres://'), 'says where the record is');
});

test('verify finds a deleted unit record (a hole) and a changed row count (a row-count finding)', async () => {
  const w = await pgWorkspace({ unit: { maxRows: 4 } });
  await ingestAndExport(w, 'h', 1, 12);
  const units = await w.query("SELECT until::text AS until, unit FROM hypsink_units WHERE source = 'h' ORDER BY hypsink_units.until");
  assert.equal(units.length, 3);
  await w.query('DELETE FROM hypsink_units WHERE until = $1', [units[1]!.until]);
  await w.query('UPDATE hypsink_units SET rows = 3 WHERE until = $1', [units[2]!.until]);
  const { code, j } = await verify(w);
  assert.equal(code, 1);
  const found = sinkOf(j).findings.map((f) => [f.problem, f.object]);
  assert.deepEqual(found, [
    ['hole', 'events/source=h'],
    ['row-count', units[2]!.unit],
  ]);
});

test('a deployment from before unit records: its committed range reads as one unit not checkable (not a hole), is taken by its label on a retry, and gets its record when the next unit ships', async () => {
  const w = await pgWorkspace({ unit: { maxRows: 5 } });
  await withKernel(w, (k) => ingestText(k, 'h', eventLines(1, 10)));
  const state = join(w.dir, 'state');
  await ingestAndExport(w, 'h', 11, 0);
  // What the sink made before unit records: the watermark row and the dead letter, no units table.
  await w.query('DROP TABLE hypsink_units');
  const wm = (await w.query("SELECT until::text AS until FROM hypsink_watermarks WHERE source = 'h'"))[0]!.until as string;

  let v = await verify(w);
  assert.equal(v.code, 0, JSON.stringify(v.j, null, 1));
  let h = sinkOf(v.j).partitions.find((p) => p.source === 'h')!;
  assert.deepEqual([h.units, h.rowsChecked, h.contentChecked, h.notChecked], [1, 0, 0, { pruned: 0, uncounted: 1, undigested: 1 }], 'one range, neither counted nor compared');
  assert.equal((await w.query("SELECT to_regclass('hypsink_units') IS NULL AS none"))[0]!.none, true, 'verify created nothing');
  const legacy = await inventoryOf(w, 'h');
  assert.deepEqual(legacy.held.map((u) => [u.since, u.until, u.digest, u.rows]), [[null, wm, null, undefined]]);

  // The local state from before that export: the units are found committed by the watermark row, as before.
  await rm(state, { recursive: true });
  await withKernel(w, async (k) => {
    const [t] = await k.export('warehouse');
    assert.equal(t!.partitions[0]!.error, null, String(t!.partitions[0]!.error));
    assert.equal(t!.units, 2);
    assert.equal(partitionStatus(await k.status(), 'warehouse', 'h').watermark, wm);
  });
  assert.deepEqual((await w.rows()).map((r) => Number(r.id)), range(1, 10), 'every row once');
  assert.deepEqual(await w.query('SELECT count(*)::int AS n FROM hypsink_units'), [{ n: 0 }], 'no record made up for them');

  // The next unit ships: the range before it is recorded, without a digest, in its transaction.
  await ingestAndExport(w, 'h', 11, 3);
  const recs = await w.query("SELECT since::text AS since, until::text AS until, digest IS NULL AS legacy, rows::int AS rows FROM hypsink_units WHERE source = 'h' ORDER BY hypsink_units.until");
  assert.deepEqual(recs.map((r) => [r.since, r.until, r.legacy, r.rows]), [
    [null, wm, true, null],
    [wm, recs[1]!.until, false, 3],
  ]);
  v = await verify(w);
  assert.equal(v.code, 0, JSON.stringify(v.j, null, 1));
  h = sinkOf(v.j).partitions.find((p) => p.source === 'h')!;
  assert.deepEqual([h.units, h.rowsChecked, h.contentChecked, h.notChecked], [2, 1, 1, { pruned: 0, uncounted: 1, undigested: 1 }]);

  // Reset once more (the same cuts: 5 rows a unit): units inside the range recorded without a digest go by their label, the one after it by its digest.
  await rm(state, { recursive: true });
  await withKernel(w, async (k) => {
    const [t] = await k.export('warehouse');
    assert.equal(t!.partitions[0]!.error, null, String(t!.partitions[0]!.error));
    assert.equal(t!.units, 3);
    assert.equal(partitionStatus(await k.status(), 'warehouse', 'h').exportedRows, 13);
  });
  assert.deepEqual((await w.rows()).map((r) => Number(r.id)), range(1, 13), 'every row once');
});
