/**
 * Orphan cleanup in `maintain --tables` (issue 31): two writers race for
 * several rounds on one local-fs table (lost races leave manifest lists no
 * snapshot names) and one dies with its unit's files written but not
 * committed (an open intent). Every file is then made old (its mtime set back,
 * as time would), a few orphans are left young, and files beside the table are
 * planted old. `maintain --tables` removes exactly the old orphans: not a young
 * one, not a live file, not the open intent's data files (its retry may find
 * and reuse them), nothing outside the table; the hint-trusting read (icebird)
 * has every row once, also after the open intent's retry.
 * @ref LLP 0073
 */
import assert from 'node:assert/strict';
import { existsSync, promises as fsp, readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { decodeManifest, decodeManifestList } from '../../plugins/format-iceberg/src/avro.js';
import { throwingAt } from '../support/fault.js';
import { fileRoute, readIcebergTable, s3Route, serveDir, startConditionalS3 } from '../support/iceberg.js';
import { sampleConfig, writeConfig, withKernel as run, ingestEvents as ingest, exportLake as exportAll } from '../support/kernel.js';
import { S3RVER_ACCESS_KEY_ID } from '../support/s3server.js';
import { tempDir } from '../support/tmp.js';

const DAY = 86_400_000;

type Conditional = Awaited<ReturnType<typeof startConditionalS3>>;
let s3: Conditional;
before(async () => {
  s3 = await startConditionalS3({ buckets: ['lake'] });
  process.env.AWS_ACCESS_KEY_ID = S3RVER_ACCESS_KEY_ID;
  process.env.AWS_SECRET_ACCESS_KEY = 'S3RVER';
  process.env.AWS_EC2_METADATA_DISABLED = 'true';
});
after(() => s3.stop());

/** A writer of its own on the `lake` table sink: local-fs at `lake`, or s3rver under the prefix `s3:<prefix>`. */
async function writer(lake: string): Promise<string> {
  const dir = tempDir('hypsink-ice-orphans-');
  const c = sampleConfig();
  delete (c.sinks as Record<string, unknown>).archive;
  const where = lake.startsWith('s3:')
    ? { destination: '@hypsink/s3', config: { bucket: 'lake', prefix: lake.slice(3), region: 'us-east-1', endpoint: s3.endpoint, forcePathStyle: true } }
    : { destination: '@hypsink/local-fs', config: { dir: lake } };
  c.sinks.lake = { writer: '@hypsink/format-iceberg', ...where, datasets: ['events'], unit: { maxRows: 5 }, writerConfig: { commitAttempts: 200 } };
  return writeConfig(dir, c);
}

/** Every file under `dir`, as paths relative to it. */
async function filesUnder(dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const e of await fsp.readdir(dir, { recursive: true, withFileTypes: true })) if (e.isFile()) out.push(relative(dir, join(e.parentPath, e.name)));
  return out.sort();
}

/** The files versions `vs` of the table reach (lists, manifests, data files), as paths relative to the table. */
function reached(table: string, vs: readonly number[]): Set<string> {
  const out = new Set<string>();
  const rel = (location: string) => relative(table, fileURLToPath(location));
  for (const v of vs) {
    const m = JSON.parse(readFileSync(join(table, 'metadata', `v${v}.metadata.json`), 'utf8')) as { snapshots: { 'manifest-list': string }[] };
    for (const s of m.snapshots) {
      out.add(rel(s['manifest-list']));
      for (const mf of decodeManifestList(readFileSync(fileURLToPath(s['manifest-list'])))) {
        out.add(rel(mf.manifestPath));
        for (const e of decodeManifest(readFileSync(fileURLToPath(mf.manifestPath))).entries) out.add(rel(e.dataFile.filePath));
      }
    }
  }
  return out;
}

function headVersion(table: string): number {
  return Math.max(...readdirSync(join(table, 'metadata')).flatMap((n) => {
    const m = /^v(\d+)\.metadata\.json$/.exec(n);
    return m ? [Number(m[1])] : [];
  }));
}

test('maintain --tables removes orphans older than the safety age after two writers raced; young orphans, live files, the open intent\'s data files and everything outside the table stay; every row reads once', { timeout: 300_000 }, async () => {
  const root = tempDir('hypsink-ice-orphans-lake-');
  const lake = join(root, 'lake');
  const table = join(lake, 'events');
  const a = await writer(lake);
  const b = await writer(lake);
  const want: number[] = [];
  for (let round = 0; round < 4; round++) {
    for (const [w, base] of [
      [a, 0],
      [b, 100_000],
    ] as const) {
      for (const [i, source] of ['web', 'app'].entries()) {
        const from = base + i * 10_000 + round * 20 + 1;
        await ingest(w, source, from, 20);
        for (let id = from; id < from + 20; id++) want.push(id);
      }
    }
    // Both at once: their units race for the same version numbers.
    await Promise.all([exportAll(a), exportAll(b)]);
  }
  // A's next unit dies with its data files written, before its manifest: an open intent.
  await ingest(a, 'web', 50_001, 5);
  for (let id = 50_001; id < 50_006; id++) want.push(id);
  await throwingAt('iceberg.afterDataFile', () => exportAll(a).catch(() => undefined));

  const head = headVersion(table);
  const live = reached(table, [head]);
  const all = await filesUnder(table);
  const kept = (f: string) => /^metadata\/(v\d+\.metadata\.json|version-hint\.text)$/.test(f) || live.has(f);
  const orphans = all.filter((f) => !kept(f));
  const openIntent = orphans.filter((f) => f.startsWith('data/'));
  assert.ok(openIntent.length > 0, `the crashed unit left no data file: ${orphans.join(', ')}`);
  const lostLists = orphans.filter((f) => /^metadata\/snap-/.test(f));
  process.stdout.write(`# ${all.length} files, ${orphans.length} orphans (${lostLists.length} manifest lists of lost races, ${openIntent.length} open-intent data files)\n`);

  // An orphan of another kind: a manifest no list names (a unit that died after its manifest).
  const planted = 'metadata/00000000-0000-4000-8000-000000000000-m0.avro';
  await fsp.copyFile(join(table, [...live].find((f) => f.endsWith('-m0.avro'))!), join(table, planted));
  orphans.push(planted);
  // Beside the table, a folder whose name starts with the table's, and the root itself.
  const outside = [join(lake, 'events-old', 'metadata', 'snap-1-1-x.avro'), join(lake, 'events-old', 'data', 'x.parquet'), join(lake, 'stray.avro'), join(root, 'elsewhere.avro')];
  for (const f of outside) {
    await fsp.mkdir(join(f, '..'), { recursive: true });
    await fsp.writeFile(f, 'not the table\'s');
  }
  // Ten days pass for every file; then two orphans are written again (young: a commit could still be on its way).
  const old = new Date(Date.now() - 10 * DAY);
  for (const f of [...(await filesUnder(table)).map((x) => join(table, x)), ...outside]) await fsp.utimes(f, old, old);
  const young = [planted, ...lostLists.slice(0, 1)];
  for (const f of young) await fsp.utimes(join(table, f), new Date(), new Date());
  const doomed = orphans.filter((f) => !young.includes(f) && !openIntent.includes(f));
  assert.ok(doomed.length > 0);

  const r = await run(a, (k) => k.maintain({ tables: true }));
  assert.match(r.tables[0]!.done, new RegExp(`${doomed.length} orphan file\\(s\\) removed`), r.tables[0]!.done);
  const after = new Set(await filesUnder(table));
  assert.deepEqual(doomed.filter((f) => after.has(f)), [], 'old orphans left behind');
  assert.deepEqual(young.filter((f) => !after.has(f)), [], 'young orphans removed');
  assert.deepEqual(openIntent.filter((f) => !after.has(f)), [], 'the open intent\'s data files removed: its retry could be reusing them');
  assert.deepEqual(all.filter((f) => kept(f) && !after.has(f)), [], 'live files removed');
  for (const f of outside) assert.ok(existsSync(f), `${f} outside the table was removed`);

  // The open intent's retry commits its unit (reusing its files); every row once, read through the hint.
  await exportAll(a);
  const srv = await serveDir(lake);
  try {
    const { rows } = await readIcebergTable({ tableUrl: `file://${table}`, route: fileRoute(lake, srv.url) });
    const got = rows.map((x) => Number(x.id)).sort((x, y) => x - y);
    assert.deepEqual(got, [...want].sort((x, y) => x - y), 'every row once');
  } finally {
    await srv.close();
  }
});

test('S3: maintain --tables removes old orphans by their LastModified; young ones, live objects, the open intent\'s data files and objects beside the table\'s prefix stay', { timeout: 300_000 }, async () => {
  const a = await writer('s3:orph');
  const b = await writer('s3:orph');
  const want: number[] = [];
  for (let round = 0; round < 2; round++) {
    for (const [w, base] of [
      [a, 0],
      [b, 100_000],
    ] as const) {
      const from = base + round * 10 + 1;
      await ingest(w, 'web', from, 10);
      for (let id = from; id < from + 10; id++) want.push(id);
    }
    await Promise.all([exportAll(a), exportAll(b)]);
  }
  await ingest(a, 'web', 50_001, 5);
  for (let id = 50_001; id < 50_006; id++) want.push(id);
  await throwingAt('iceberg.afterManifestList', () => exportAll(a).catch(() => undefined));

  // s3rver keeps each object in `<key>._S3rver_object`, its LastModified that file's mtime.
  const SUFFIX = '._S3rver_object';
  const bucketDir = join(s3.s3.directory, 'lake');
  const table = join(bucketDir, 'orph', 'events');
  const objects = async (dir: string) => (existsSync(dir) ? (await filesUnder(dir)).filter((f) => f.endsWith(SUFFIX)).map((f) => f.slice(0, -SUFFIX.length)) : []);
  const head = Math.max(...(await objects(join(table, 'metadata'))).flatMap((n) => {
    const m = /^v(\d+)\.metadata\.json$/.exec(n);
    return m ? [Number(m[1])] : [];
  }));
  const rel = (location: string) => location.replace('s3://lake/orph/events/', '');
  const obj = (r: string) => join(table, `${r}${SUFFIX}`);
  const live = new Set<string>();
  const m = JSON.parse(readFileSync(obj(`metadata/v${head}.metadata.json`), 'utf8')) as { snapshots: { 'manifest-list': string }[] };
  for (const snap of m.snapshots) {
    live.add(rel(snap['manifest-list']));
    for (const mf of decodeManifestList(readFileSync(obj(rel(snap['manifest-list']))))) {
      live.add(rel(mf.manifestPath));
      for (const e of decodeManifest(readFileSync(obj(rel(mf.manifestPath)))).entries) live.add(rel(e.dataFile.filePath));
    }
  }
  const all = await objects(table);
  const kept = (f: string) => /^metadata\/(v\d+\.metadata\.json|version-hint\.text)$/.test(f) || live.has(f);
  const orphans = all.filter((f) => !kept(f));
  const openIntent = orphans.filter((f) => f.startsWith('data/'));
  assert.ok(openIntent.length > 0, `the crashed unit left no data file: ${orphans.join(', ')}`);
  const lists = orphans.filter((f) => f.startsWith('metadata/snap-'));
  assert.ok(lists.length > 0, 'the crashed unit left no manifest list');
  // Beside the table: a sibling folder in the prefix, the prefix itself, another prefix starting with the same letters.
  const outside = [join(bucketDir, 'orph', 'events-old', 'metadata', `snap-1-1-x.avro${SUFFIX}`), join(bucketDir, 'orph', `stray.avro${SUFFIX}`), join(bucketDir, 'orphx', 'events', 'metadata', `snap-1-1-x.avro${SUFFIX}`)];
  for (const f of outside) {
    await fsp.mkdir(join(f, '..'), { recursive: true });
    await fsp.writeFile(f, 'not the table\'s');
  }
  const old = new Date(Date.now() - 10 * DAY);
  for (const f of [...all.map(obj), ...outside]) await fsp.utimes(f, old, old);
  const young = lists.slice(0, 1);
  for (const f of young) await fsp.utimes(obj(f), new Date(), new Date());
  const doomed = orphans.filter((f) => !young.includes(f) && !openIntent.includes(f));
  assert.ok(doomed.length > 0);

  const r = await run(a, (k) => k.maintain({ tables: true }));
  assert.match(r.tables[0]!.done, new RegExp(`${doomed.length} orphan file\\(s\\) removed`), r.tables[0]!.done);
  const afterAll = new Set(await objects(table));
  assert.deepEqual(doomed.filter((f) => afterAll.has(f)), [], 'old orphans left behind');
  assert.deepEqual(young.filter((f) => !afterAll.has(f)), [], 'young orphans removed');
  assert.deepEqual(openIntent.filter((f) => !afterAll.has(f)), [], 'the open intent\'s data files removed');
  assert.deepEqual(all.filter((f) => kept(f) && !afterAll.has(f)), [], 'live objects removed');
  for (const f of outside) assert.ok(existsSync(f), `${f} beside the table was removed`);

  await exportAll(a);
  const { rows } = await readIcebergTable({ tableUrl: 's3://lake/orph/events', route: s3Route(s3.s3.endpoint) });
  assert.deepEqual(
    rows.map((x) => Number(x.id)).sort((x, y) => x - y),
    [...want].sort((x, y) => x - y),
    'every row once',
  );
});
