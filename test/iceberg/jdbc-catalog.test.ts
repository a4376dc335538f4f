/**
 * An Iceberg table in a JDBC catalog on PostgreSQL (embedded): hypsink and a
 * second writer committing as pyiceberg's SqlCatalog does (the same
 * `iceberg_tables` row, the same compare-and-swap of `metadata_location`:
 * test/support/sql-catalog.ts) append to one table, and it stays one history,
 * every row once, read by icebird from the file the catalog names. Each side
 * is made to lose a swap to the other at a known point: the foreign writer by
 * committing from a head read before hypsink's commit; hypsink by holding the
 * catalog's row locked (a real row lock in a real transaction) while its
 * UPDATE waits, and committing the foreign writer's swap in that
 * transaction first. Then a swap never made (an orphan metadata file), a
 * path-based table registered into the catalog from the CLI, and a catalog
 * that does not answer.
 * @ref LLP 0077
 */
import assert from 'node:assert/strict';
import { promises as fsp, readdirSync } from 'node:fs';
import { basename, join } from 'node:path';
import { after, before, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath, pathToFileURL } from 'node:url';
import pg from 'pg';
import { fileRoute, readIcebergTable, serveDir } from '../support/iceberg.js';
import { cli, type Json, sampleConfig, writeConfig, withKernel as run, ingestEvents as ingest, exportLake as exportAll } from '../support/kernel.js';
import { freePort, type TestPg, testPg } from '../support/pg.js';
import { append, metadataLocation, prepareAppend, type SqlCatalogTable } from '../support/sql-catalog.js';
import { tempDir } from '../support/tmp.js';

let server: TestPg;
before(async () => {
  server = await testPg();
});
after(() => server.stop());

const CATALOG = 'hyp';
const NAMESPACE = 'analytics';
// biome-ignore lint/suspicious/noTemplateCurlyInString: the config's own ${ENV} reference, interpolated by the kernel
const CATALOG_CONFIG = { type: 'jdbc', url: '${HYPSINK_TEST_CATALOG_URL}', name: CATALOG, namespace: NAMESPACE };

/** A workspace: a lake folder, a catalog database, and a hypsink config whose `lake` sink commits through it (or by path). */
async function setup(opts: { catalog: boolean; url?: string; writerConfig?: Json }): Promise<{ config: string; lake: string; table: SqlCatalogTable; dir: string }> {
  const dir = tempDir('hypsink-ice-jdbc-');
  const lake = join(dir, 'lake');
  await fsp.mkdir(lake);
  const url = await server.database('jdbc');
  // The URL through the environment, as a deployment gives its secrets.
  process.env.HYPSINK_TEST_CATALOG_URL = opts.url ?? url;
  const c = sampleConfig();
  delete (c.sinks as Record<string, unknown>).archive;
  c.sinks.lake = {
    writer: '@hypsink/format-iceberg',
    destination: '@hypsink/local-fs',
    datasets: ['events'],
    config: { dir: lake },
    unit: { maxRows: 25 },
    writerConfig: {
      manifestMinCountToMerge: 4,
      ...(opts.catalog ? { catalog: CATALOG_CONFIG } : {}),
      ...opts.writerConfig,
    },
  };
  return { config: await writeConfig(dir, c), lake, table: { url, catalog: CATALOG, namespace: NAMESPACE, table: 'events' }, dir };
}

const range = (from: number, n: number) => Array.from({ length: n }, (_, i) => from + i);

/** The table as the catalog names it, read by icebird: every id once, exactly `want`. */
async function assertCatalogTable(lake: string, t: SqlCatalogTable, want: number[]): Promise<Json & { snapshots: Json[] }> {
  const loc = await metadataLocation(t);
  assert.ok(loc, 'the catalog has the table');
  const served = await serveDir(lake);
  try {
    const { rows, metadata } = await readIcebergTable({ tableUrl: pathToFileURL(join(lake, 'events')).href, route: fileRoute(lake, served.url), metadataFileName: basename(loc.current) });
    const got = rows.map((r) => Number(r.id)).sort((a, b) => a - b);
    assert.deepEqual(got, [...want].sort((a, b) => a - b), 'the table the catalog names holds other ids than both writers appended (or one twice)');
    return metadata as unknown as Json & { snapshots: Json[] };
  } finally {
    await served.close();
  }
}

/**
 * One history: every snapshot is on the chain from the current one back to the
 * first, sequence numbers one apart; the catalog's previous location is the
 * current version's last metadata-log entry.
 */
async function assertOneHistory(t: SqlCatalogTable): Promise<Json[]> {
  const loc = (await metadataLocation(t))!;
  const m = JSON.parse(await fsp.readFile(fileURLToPath(loc.current), 'utf8')) as { 'current-snapshot-id': number; snapshots: Json[]; 'metadata-log': { 'metadata-file': string }[] };
  const byId = new Map(m.snapshots.map((s) => [s['snapshot-id'] as number, s]));
  const chain: Json[] = [];
  for (let s = byId.get(m['current-snapshot-id']); s; s = byId.get(s['parent-snapshot-id'] as number)) chain.push(s);
  assert.equal(chain.length, m.snapshots.length, 'a snapshot off the current chain: two histories');
  const seqs = chain.map((s) => s['sequence-number'] as number).reverse();
  assert.deepEqual(
    seqs,
    seqs.map((_, i) => seqs[0]! + i),
  );
  assert.equal(loc.previous, m['metadata-log'].at(-1)?.['metadata-file'] ?? null, "previous_metadata_location is the version's parent");
  return chain;
}

const isHypsink = (s: Json) => (s.summary as Record<string, string>)['hypsink.writer'] !== undefined;

test('hypsink and a SqlCatalog writer append through one iceberg_tables row: each loses a swap to the other and re-bases, one history, every row once', { timeout: 300_000 }, async () => {
  const s = await setup({ catalog: true });
  const t = s.table;
  // The first export creates the table in the catalog (hypsink's own row, as SqlCatalog.create_table makes it).
  await ingest(s.config, 'web', 1, 50);
  await exportAll(s.config);
  assert.ok(await metadataLocation(t), 'the first export added the table to the catalog');
  const foreign: number[] = [];
  const foreignIds = (n: number) => {
    const ids = range(1_000_000 + foreign.length, n);
    foreign.push(...ids);
    return ids;
  };

  // The foreign writer loses: it prepared its append on a head hypsink then commits past.
  const stale = await prepareAppend(t, 'foreign', foreignIds(10));
  await ingest(s.config, 'web', 51, 50);
  await exportAll(s.config);
  assert.equal(await stale.commit(), false, "the foreign writer's swap from a head hypsink moved past must fail");
  foreign.length -= 10;
  assert.equal(await append(t, 'foreign', foreignIds(10)), 0);

  // hypsink loses: its UPDATE waits on the row a transaction holds, which commits the foreign writer's swap first.
  await ingest(s.config, 'web', 101, 50);
  const first = await prepareAppend(t, 'foreign', foreignIds(7));
  const holder = new pg.Client({ connectionString: t.url });
  await holder.connect();
  try {
    await holder.query('BEGIN');
    await holder.query('SELECT 1 FROM iceberg_tables WHERE catalog_name = $1 AND table_namespace = $2 AND table_name = $3 FOR UPDATE', [t.catalog, t.namespace, t.table]);
    let settled = false;
    const exporting = exportAll(s.config).finally(() => {
      settled = true;
    });
    for (;;) {
      const waiting = await server.query("SELECT 1 FROM pg_stat_activity WHERE application_name = 'hypsink' AND wait_event_type = 'Lock' AND query LIKE 'UPDATE iceberg_tables%'", [], t.url);
      if (waiting.rowCount === 1) break;
      assert.equal(settled, false, "hypsink's export ended without waiting on the catalog's row: it did not commit through the catalog");
      await sleep(20);
    }
    assert.equal(await first.commit(holder), true);
    await holder.query('COMMIT');
    await exporting;
  } finally {
    await holder.end();
  }
  // A lost swap leaves a manifest list of a second attempt (`snap-<id>-2-…`): hypsink re-based.
  const metadataDir = join(s.lake, 'events', 'metadata');
  assert.ok(
    readdirSync(metadataDir).some((n) => /^snap-\d+-2-[0-9a-f-]+\.avro$/.test(n)),
    'hypsink re-based after its lost swap',
  );

  // Then both at once, several commits each.
  await ingest(s.config, 'app', 1, 100);
  await Promise.all([exportAll(s.config), (async () => {
    for (let i = 0; i < 6; i++) await append(t, 'foreign', foreignIds(5));
  })()]);

  const chain = await assertOneHistory(t);
  assert.equal(chain.filter((x) => !isHypsink(x)).length, 2 + 6, 'every foreign append is in the history');
  assert.equal(chain.filter(isHypsink).length, 6 + 4, 'every hypsink unit is in the history');
  await assertCatalogTable(s.lake, t, [...range(1, 150), ...range(1, 100), ...foreign]);
  // No path-based version was ever written: every commit went through the catalog.
  assert.deepEqual(
    readdirSync(metadataDir).filter((n) => /^v\d+\.metadata\.json$/.test(n) || n === 'version-hint.text'),
    [],
  );
  const verified = await run(s.config, (k) => k.verify('lake'));
  assert.equal(verified.ok, true, JSON.stringify(verified));
});

test('a swap never made (a writer died after writing its metadata file) leaves an orphan: hypsink commits past it, and maintain --tables removes it once old', { timeout: 120_000 }, async () => {
  const s = await setup({ catalog: true });
  const t = s.table;
  await ingest(s.config, 'web', 1, 30);
  await exportAll(s.config);
  const dead = await prepareAppend(t, 'foreign', range(5_000, 5));
  await ingest(s.config, 'web', 31, 30);
  await exportAll(s.config);
  await assertCatalogTable(s.lake, t, range(1, 60));
  // Everything ten days old, so only what the head reaches is kept.
  const old = new Date(Date.now() - 10 * 86_400_000);
  const all = async (d: string): Promise<string[]> => (await fsp.readdir(d, { recursive: true, withFileTypes: true })).filter((e) => e.isFile()).map((e) => join(e.parentPath, e.name));
  for (const f of await all(join(s.lake, 'events'))) await fsp.utimes(f, old, old);
  const kept = (await metadataLocation(t))!;
  const m = await run(s.config, (k) => k.maintain({ tables: true }));
  assert.match(m.tables[0]!.done, /orphan file\(s\) removed/);
  const left = await all(join(s.lake, 'events'));
  assert.equal(left.includes(fileURLToPath(dead.next)), false, 'the metadata file of the swap never made is removed');
  assert.equal(
    left.some((f) => f.includes('/data/foreign/')),
    false,
    "the dead writer's data file is removed",
  );
  assert.ok(left.includes(fileURLToPath(kept.current)), "the catalog's current metadata file stays");
  await assertCatalogTable(s.lake, t, range(1, 60));
  await assertOneHistory(t);
});

test('maintain --tables compacts through the catalog: hypsink\'s and the SqlCatalog writer\'s small files rewritten as one replace swapped in, one history, every row once, and both writers append after it', { timeout: 120_000 }, async () => {
  const s = await setup({ catalog: true, writerConfig: { compactMinFiles: 2 } });
  const t = s.table;
  // Three units of hypsink's in one partition (web, one day), two appends of the foreign writer's in another.
  await ingest(s.config, 'web', 1, 60);
  await exportAll(s.config);
  await append(t, 'foreign', range(5_000, 5));
  await append(t, 'foreign', range(5_005, 5));
  const m = await run(s.config, (k) => k.maintain({ tables: true }));
  assert.match(m.tables[0]!.done, /5 data file\(s\) in 2 partition\(s\) compacted into 2/, m.tables[0]!.done);
  const metadata = await assertCatalogTable(s.lake, t, [...range(1, 60), ...range(5_000, 10)]);
  const current = metadata.snapshots.find((x) => x['snapshot-id'] === metadata['current-snapshot-id'])!;
  assert.equal((current.summary as Record<string, string>).operation, 'replace', 'the catalog names the replace');
  await assertOneHistory(t);
  // Both writers go on from the replace.
  await append(t, 'foreign', range(5_010, 5));
  await ingest(s.config, 'web', 61, 10);
  await exportAll(s.config);
  await assertCatalogTable(s.lake, t, [...range(1, 70), ...range(5_000, 15)]);
  await assertOneHistory(t);
});

test('a path-based table is registered into the catalog from the CLI; before that, a catalog sink refuses to start a second history beside it', { timeout: 120_000 }, async () => {
  const path = await setup({ catalog: false });
  await ingest(path.config, 'web', 1, 40);
  await exportAll(path.config);
  // The same sink, now configured with the catalog.
  const cfg = JSON.parse(await fsp.readFile(path.config, 'utf8')) as { sinks: { lake: { writerConfig: Json } } };
  cfg.sinks.lake.writerConfig.catalog = CATALOG_CONFIG;
  await fsp.writeFile(path.config, JSON.stringify(cfg));
  await ingest(path.config, 'web', 41, 20);
  const refused = await run(path.config, (k) => k.export('lake'));
  const err = refused[0]!.partitions[0]!.error;
  assert.ok(err && /hypsink iceberg register --sink lake/.test(err.message), JSON.stringify(err));
  assert.equal(await metadataLocation(path.table), null, 'nothing was added to the catalog');

  const r = await cli('iceberg', 'register', '--sink', 'lake', '--config', path.config);
  assert.equal(r.code, 0, r.err);
  assert.match(r.out, /registered/);
  const loc = await metadataLocation(path.table);
  const newest = Math.max(...readdirSync(join(path.lake, 'events', 'metadata')).map((n) => Number(/^v(\d+)\.metadata\.json$/.exec(n)?.[1] ?? 0)));
  assert.ok(loc && loc.current === pathToFileURL(join(path.lake, 'events', 'metadata', `v${newest}.metadata.json`)).href, `the path table's head v${newest} is registered: ${JSON.stringify(loc)}`);
  const again = await cli('iceberg', 'register', '--sink', 'lake', '--config', path.config);
  assert.equal(again.code, 0, again.err);
  assert.match(again.out, /already/);

  await append(path.table, 'foreign', range(7_000, 9));
  await exportAll(path.config);
  await assertCatalogTable(path.lake, path.table, [...range(1, 60), ...range(7_000, 9)]);
  await assertOneHistory(path.table);
});

test('a catalog that does not answer: the export fails retryable, nothing moves; with the catalog back every row lands once', { timeout: 120_000 }, async () => {
  const closed = `postgres://postgres:x@127.0.0.1:${await freePort()}/postgres`;
  const s = await setup({ catalog: true, url: closed });
  await ingest(s.config, 'web', 1, 30);
  const failed = await run(s.config, (k) => k.export('lake'));
  const err = failed[0]!.partitions[0]!.error;
  assert.equal(err?.code, 'HYPSINK_ERR_RETRYABLE', JSON.stringify(err));
  assert.match(err!.message, /jdbc catalog "hyp" \(postgres:\/\/postgres@127\.0\.0\.1:\d+\/postgres\) table analytics\.events/);
  assert.equal(err!.message.includes(':x@'), false, 'no password in the message');
  assert.equal(await metadataLocation(s.table), null);
  process.env.HYPSINK_TEST_CATALOG_URL = s.table.url;
  await exportAll(s.config);
  await assertCatalogTable(s.lake, s.table, range(1, 30));
});

test("a catalog row naming a metadata file outside the table is refused before it is read (LLP 0063's rule)", { timeout: 120_000 }, async () => {
  const s = await setup({ catalog: true });
  await ingest(s.config, 'web', 1, 10);
  await exportAll(s.config);
  const loc = (await metadataLocation(s.table))!;
  // A copy of the current version beside the table: a row pointed there would have hypsink read (and copy on) another folder's files.
  const outside = join(s.dir, 'elsewhere.metadata.json');
  await fsp.copyFile(fileURLToPath(loc.current), outside);
  await server.query('UPDATE iceberg_tables SET metadata_location = $1', [pathToFileURL(outside).href], s.table.url);
  await ingest(s.config, 'web', 11, 10);
  const failed = await run(s.config, (k) => k.export('lake'));
  const err = failed[0]!.partitions[0]!.error;
  assert.equal(err?.code, 'HYPSINK_ERR_DESTINATION', JSON.stringify(err));
  assert.match(err!.message, /jdbc catalog "hyp" .* names ".*elsewhere\.metadata\.json", which lies outside the table/);
  assert.equal((await metadataLocation(s.table))!.current, pathToFileURL(outside).href, 'the row is left as it was');
});
