/**
 * An Iceberg table in a REST catalog (test/support/rest-catalog.ts: a loopback
 * server written from the published OpenAPI spec, since no real one installs
 * here): hypsink and a second REST client append to one table, and it stays
 * one history, every row once, read by icebird from the metadata-location the
 * server reports. hypsink is made to lose a commit at a known point (the
 * foreign append is committed while hypsink's request waits at the server),
 * the foreign writer by committing from a table hypsink moved past. Then
 * compaction and expiry through the catalog, a path table registered from the
 * CLI, a catalog that is down, the bearer token kept out of every message,
 * and the server's answers against the spec's own examples.
 * @ref LLP 0081
 */
import assert from 'node:assert/strict';
import { promises as fsp, readdirSync } from 'node:fs';
import { basename, join } from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { fileRoute, readIcebergTable, serveDir } from '../support/iceberg.js';
import { cli, ingestEvents as ingest, exportLake as exportAll, type Json, runBin, withKernel as run, sampleConfig, writeConfig } from '../support/kernel.js';
import { namespacePath, prepareRestAppend, type RestCatalog, type RestMetadata, type RestTableRef, restAppend, startRestCatalog } from '../support/rest-catalog.js';
import { tempDir } from '../support/tmp.js';

const TOKEN = 'tok-3f9c2a7e51d84b06a1c9-never-shown';
const PREFIX = 'wh1';
const NAMESPACE = ['analytics', 'web'];

let catalog: RestCatalog;
before(async () => {
  catalog = await startRestCatalog({ token: TOKEN, prefix: PREFIX });
});
after(() => catalog.close());

// biome-ignore lint/suspicious/noTemplateCurlyInString: the config's own ${ENV} reference, interpolated by the kernel
const TOKEN_REF = '${HYPSINK_TEST_REST_TOKEN}';

/** A workspace: a lake folder and a config whose `lake` sink commits through the REST catalog (or by path). */
async function setup(opts: { catalog: boolean; table?: string; uri?: string; writerConfig?: Json }): Promise<{ config: string; lake: string; ref: RestTableRef; dir: string }> {
  const dir = tempDir('hypsink-ice-rest-');
  const lake = join(dir, 'lake');
  await fsp.mkdir(lake);
  process.env.HYPSINK_TEST_REST_TOKEN = TOKEN;
  // A table of its own per test, in one shared catalog.
  const table = opts.table ?? `events_${basename(dir).replace(/[^A-Za-z0-9]/g, '_')}`;
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
      ...(opts.catalog ? { catalog: restConfig(table, opts.uri) } : {}),
      ...opts.writerConfig,
    },
  };
  return { config: await writeConfig(dir, c), lake, ref: { uri: catalog.uri, prefix: PREFIX, token: TOKEN, namespace: NAMESPACE, table }, dir };
}

function restConfig(table: string, uri = catalog.uri): Json {
  return { type: 'rest', uri, warehouse: 'lakehouse', namespace: NAMESPACE.join('.'), table, token: TOKEN_REF };
}

const range = (from: number, n: number) => Array.from({ length: n }, (_, i) => from + i);
const isHypsink = (s: Json) => (s.summary as Record<string, string>)['hypsink.writer'] !== undefined;

/** The table at the metadata-location the catalog reports, read by icebird: every id once, exactly `want`. */
async function assertCatalogTable(lake: string, ref: RestTableRef, want: number[]): Promise<RestMetadata> {
  const t = catalog.table(ref.namespace, ref.table);
  assert.ok(t, 'the catalog has the table');
  const served = await serveDir(lake);
  try {
    const { rows } = await readIcebergTable({ tableUrl: pathToFileURL(join(lake, 'events')).href, route: fileRoute(lake, served.url), metadataFileName: basename(t.file) });
    const got = rows.map((r) => Number(r.id)).sort((a, b) => a - b);
    assert.deepEqual(got, [...want].sort((a, b) => a - b), 'the table the catalog names holds other ids than the writers appended (or one twice)');
  } finally {
    await served.close();
  }
  return JSON.parse(await fsp.readFile(fileURLToPath(t.file), 'utf8')) as RestMetadata;
}

/** One history: every snapshot on the chain from the current one back to the first, sequence numbers one apart. */
function assertOneHistory(m: RestMetadata): Json[] {
  const byId = new Map(m.snapshots.map((s) => [s['snapshot-id'], s as unknown as Json]));
  const chain: Json[] = [];
  for (let s = byId.get(m['current-snapshot-id']); s; s = byId.get(s['parent-snapshot-id'] as number)) chain.push(s);
  assert.equal(chain.length, m.snapshots.length, 'a snapshot off the current chain: two histories');
  const seqs = chain.map((s) => s['sequence-number'] as number).reverse();
  assert.deepEqual(
    seqs,
    seqs.map((_, i) => seqs[0]! + i),
  );
  return chain;
}

/** hypsink's commits the server saw for `table` (a POST to the table carrying its updates). */
function commitsOf(table: string): Json[] {
  return catalog.requests.filter((r) => r.method === 'POST' && r.path.endsWith(`/tables/${table}`)).map((r) => r.body as Json);
}

test('hypsink and a second REST client append through one catalog: each loses a commit to the other and re-bases, one history, every row once', { timeout: 300_000 }, async () => {
  const s = await setup({ catalog: true });
  const ref = s.ref;
  // The first export creates the table in the catalog.
  await ingest(s.config, 'web', 1, 50);
  await exportAll(s.config);
  assert.ok(catalog.table(NAMESPACE, ref.table), 'the first export created the table in the catalog');
  const create = commitsOf(ref.table)[0]!;
  assert.deepEqual(create.requirements, [{ type: 'assert-create' }], 'a new table is committed with assert-create');
  const foreign: number[] = [];
  const foreignIds = (n: number) => {
    const ids = range(1_000_000 + foreign.length, n);
    foreign.push(...ids);
    return ids;
  };

  // The foreign writer loses: it prepared its append on a table hypsink then commits past.
  const stale = await prepareRestAppend(ref, 'foreign', foreignIds(10));
  await ingest(s.config, 'web', 51, 50);
  await exportAll(s.config);
  assert.equal(await stale.commit(), false, "the foreign writer's commit from a main hypsink moved past must fail (409)");
  foreign.length -= 10;
  assert.equal(await restAppend(ref, 'foreign', foreignIds(10)), 0);

  // hypsink loses: its first commit reaches the server after the foreign append it lets through first.
  await ingest(s.config, 'web', 101, 50);
  const first = await prepareRestAppend(ref, 'foreign', foreignIds(7));
  let raced = false;
  catalog.beforeCommit = async (body) => {
    const adds = (body.updates as Json[]).filter((u) => u.action === 'add-snapshot');
    if (raced || !adds.some((u) => isHypsink(u.snapshot as Json))) return;
    raced = true;
    assert.equal(await first.commit(), true);
  };
  try {
    await exportAll(s.config);
  } finally {
    catalog.beforeCommit = undefined;
  }
  assert.ok(raced, "hypsink's export committed through the catalog");
  // A lost commit leaves a manifest list of a second attempt (`snap-<id>-2-…`): hypsink re-based.
  const metadataDir = join(s.lake, 'events', 'metadata');
  assert.ok(
    readdirSync(metadataDir).some((n) => /^snap-\d+-2-[0-9a-f-]+\.avro$/.test(n)),
    'hypsink re-based after its lost commit',
  );
  // Every hypsink commit asserted the table and the main branch it was made from.
  for (const c of commitsOf(ref.table).slice(1)) {
    if (!(c.updates as Json[]).some((u) => u.action === 'add-snapshot' && isHypsink(u.snapshot as Json))) continue;
    const req = c.requirements as Json[];
    assert.deepEqual(
      req.map((r) => r.type),
      ['assert-table-uuid', 'assert-ref-snapshot-id'],
    );
    assert.equal(req[1]!.ref, 'main');
  }

  // Then both at once, several commits each.
  await ingest(s.config, 'app', 1, 100);
  await Promise.all([
    exportAll(s.config),
    (async () => {
      for (let i = 0; i < 6; i++) await restAppend(ref, 'foreign', foreignIds(5));
    })(),
  ]);

  const metadata = await assertCatalogTable(s.lake, ref, [...range(1, 150), ...range(1, 100), ...foreign]);
  const chain = assertOneHistory(metadata);
  assert.equal(chain.filter((x) => !isHypsink(x)).length, 2 + 6, 'every foreign append is in the history');
  assert.equal(chain.filter(isHypsink).length, 6 + 4, 'every hypsink unit is in the history');
  // No path-based version was written, nor a hint: every commit went through the catalog.
  assert.deepEqual(
    readdirSync(metadataDir).filter((n) => /^v\d+\.metadata\.json$/.test(n) || n === 'version-hint.text'),
    [],
  );
  // Every request carried the token, under the prefix /v1/config handed out.
  for (const r of catalog.requests) assert.equal(r.authorization, `Bearer ${TOKEN}`);
  assert.ok(catalog.requests.some((r) => r.path === '/v1/config'));
  assert.ok(catalog.requests.filter((r) => r.path !== '/v1/config').every((r) => r.path.startsWith(`/v1/${PREFIX}/namespaces`)));
  const verified = await run(s.config, (k) => k.verify('lake'));
  assert.equal(verified.ok, true, JSON.stringify(verified));
});

test('maintain --tables compacts and expires through the REST catalog: a replace snapshot and remove-snapshots committed by the server, every row once, and both writers append after', { timeout: 180_000 }, async () => {
  const s = await setup({ catalog: true, writerConfig: { compactMinFiles: 2, maxSnapshotAgeMs: 1, minSnapshotsToKeep: 1 } });
  const ref = s.ref;
  await ingest(s.config, 'web', 1, 60);
  await exportAll(s.config);
  await restAppend(ref, 'foreign', range(5_000, 5));
  await restAppend(ref, 'foreign', range(5_005, 5));
  const before = catalog.table(NAMESPACE, ref.table)!.metadata.snapshots.length;
  assert.equal(before, 5);
  const m = await run(s.config, (k) => k.maintain({ tables: true }));
  assert.match(m.tables[0]!.done, /5 data file\(s\) in 2 partition\(s\) compacted into 2/, m.tables[0]!.done);
  assert.match(m.tables[0]!.done, /[1-9]\d* snapshot\(s\) expired/, m.tables[0]!.done);
  const metadata = await assertCatalogTable(s.lake, ref, [...range(1, 60), ...range(5_000, 10)]);
  const current = metadata.snapshots.find((x) => x['snapshot-id'] === metadata['current-snapshot-id'])!;
  assert.equal(current.summary.operation, 'replace', 'the catalog names the replace');
  // Kept: the replace, and hypsink's newest unit (recovery of an open intent looks for it: LLP 0052).
  assert.deepEqual(metadata.snapshots.map((x) => (x === current ? 'replace' : isHypsink(x as unknown as Json) ? 'hypsink' : 'foreign')).sort(), ['hypsink', 'replace'], 'the rest expired');
  const updates = commitsOf(ref.table).flatMap((c) => (c.updates as Json[]).map((u) => u.action));
  assert.ok(updates.includes('remove-snapshots'), 'expiry went through the catalog as remove-snapshots');
  // Both writers go on from there.
  await restAppend(ref, 'foreign', range(5_010, 5));
  await ingest(s.config, 'web', 61, 10);
  await exportAll(s.config);
  const after = await assertCatalogTable(s.lake, ref, [...range(1, 70), ...range(5_000, 15)]);
  // The chain from the current snapshot runs back to the replace (its parent expired).
  const byId = new Map(after.snapshots.map((x) => [x['snapshot-id'], x as unknown as Json]));
  const chain: Json[] = [];
  for (let x = byId.get(after['current-snapshot-id']); x; x = byId.get(x['parent-snapshot-id'] as number)) chain.push(x);
  assert.deepEqual(
    chain.map((x) => (x['snapshot-id'] === current['snapshot-id'] ? 'replace' : isHypsink(x) ? 'hypsink' : 'foreign')).reverse(),
    ['replace', 'foreign', 'hypsink'],
  );
});

test('a path-based table is registered into the REST catalog from the CLI; before that, a catalog sink refuses to start a second history beside it', { timeout: 120_000 }, async () => {
  const path = await setup({ catalog: false });
  await ingest(path.config, 'web', 1, 40);
  await exportAll(path.config);
  const cfg = JSON.parse(await fsp.readFile(path.config, 'utf8')) as { sinks: { lake: { writerConfig: Json } } };
  cfg.sinks.lake.writerConfig.catalog = restConfig(path.ref.table);
  await fsp.writeFile(path.config, JSON.stringify(cfg));
  await ingest(path.config, 'web', 41, 20);
  const refused = await run(path.config, (k) => k.export('lake'));
  const err = refused[0]!.partitions[0]!.error;
  assert.ok(err && /hypsink iceberg register --sink lake/.test(err.message), JSON.stringify(err));
  assert.equal(catalog.table(NAMESPACE, path.ref.table), null, 'nothing was added to the catalog');

  const r = await cli('iceberg', 'register', '--sink', 'lake', '--config', path.config);
  assert.equal(r.code, 0, r.err);
  assert.match(r.out, /registered/);
  const newest = Math.max(...readdirSync(join(path.lake, 'events', 'metadata')).map((n) => Number(/^v(\d+)\.metadata\.json$/.exec(n)?.[1] ?? 0)));
  assert.equal(catalog.table(NAMESPACE, path.ref.table)?.file, pathToFileURL(join(path.lake, 'events', 'metadata', `v${newest}.metadata.json`)).href, `the path table's head v${newest} is registered`);
  assert.ok(catalog.requests.some((q) => q.method === 'POST' && q.path === `/v1/${PREFIX}/namespaces/${namespacePath(NAMESPACE)}/register`));
  const again = await cli('iceberg', 'register', '--sink', 'lake', '--config', path.config);
  assert.equal(again.code, 0, again.err);
  assert.match(again.out, /already/);

  await restAppend(path.ref, 'foreign', range(7_000, 9));
  await exportAll(path.config);
  assertOneHistory(await assertCatalogTable(path.lake, path.ref, [...range(1, 60), ...range(7_000, 9)]));
});

test('the catalog down: the export fails retryable, nothing moves; with the catalog back every row lands once', { timeout: 120_000 }, async () => {
  const s = await setup({ catalog: true });
  await ingest(s.config, 'web', 1, 30);
  await exportAll(s.config);
  await ingest(s.config, 'web', 31, 30);
  const was = catalog.table(NAMESPACE, s.ref.table)!.file;
  await catalog.down();
  let err: { code: string; message: string } | null | undefined;
  try {
    const failed = await run(s.config, (k) => k.export('lake'));
    err = failed[0]!.partitions[0]!.error;
  } finally {
    await catalog.up();
  }
  assert.equal(err?.code, 'HYPSINK_ERR_RETRYABLE', JSON.stringify(err));
  assert.match(err!.message, new RegExp(`rest catalog ${catalog.uri.replace(/\./g, '\\.')} table analytics\\.web\\.${s.ref.table}`));
  assert.equal(catalog.table(NAMESPACE, s.ref.table)!.file, was, 'nothing was committed');
  await exportAll(s.config);
  await assertCatalogTable(s.lake, s.ref, range(1, 60));
});

test('the bearer token never shows: a refused token fails the export as an auth error without it, and a debug-logged export through the CLI prints it nowhere', { timeout: 120_000 }, async () => {
  const s = await setup({ catalog: true });
  await ingest(s.config, 'web', 1, 30);
  const wrong = `${TOKEN}-revoked`;
  process.env.HYPSINK_TEST_REST_TOKEN = wrong;
  const failed = await run(s.config, (k) => k.export('lake'));
  const err = failed[0]!.partitions[0]!.error;
  assert.equal(err?.code, 'HYPSINK_ERR_AUTH', JSON.stringify(err));
  assert.match(err!.message, /401/);
  assert.match(err!.message, /writerConfig\.catalog\.token/);
  assert.equal(JSON.stringify(err).includes(TOKEN), false, 'no token in the error');
  assert.equal(catalog.table(NAMESPACE, s.ref.table), null);

  const r = await runBin(['export', '--config', s.config], { env: { HYPSINK_LOG_LEVEL: 'debug', HYPSINK_TEST_REST_TOKEN: TOKEN } });
  assert.equal(r.code, 0, r.stderr);
  assert.equal(`${r.stdout}${r.stderr}`.includes(TOKEN), false, 'no token in the CLI output or its debug log');
  await assertCatalogTable(s.lake, s.ref, range(1, 30));
});

test("the test server answers as the spec's examples show: the error model, a 409 for a failed requirement, a 400 for an unknown update", async () => {
  const call = async (method: string, path: string, body?: unknown, token = TOKEN) => {
    const r = await fetch(`${catalog.uri}${path}`, { method, headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, ...(body !== undefined ? { body: JSON.stringify(body) } : {}) });
    return { status: r.status, json: (await r.json()) as { error?: { type: string; code: number; message: string } } & Json };
  };
  const cfg = await call('GET', '/v1/config?warehouse=lakehouse');
  assert.equal(cfg.status, 200);
  assert.deepEqual(Object.keys(cfg.json).sort(), ['defaults', 'overrides'], 'CatalogConfig: defaults and overrides');
  // The spec's CreateNamespaceResponse example: the namespace and its properties back.
  const ns = await call('POST', `/v1/${PREFIX}/namespaces`, { namespace: ['accounting', 'tax'], properties: { owner: 'Ralph' } });
  assert.deepEqual(ns.json, { namespace: ['accounting', 'tax'], properties: { owner: 'Ralph' } });
  // NamespaceAlreadyExistsError, NoSuchTableError, TableAlreadyExistsError: their type and code.
  const again = await call('POST', `/v1/${PREFIX}/namespaces`, { namespace: ['accounting', 'tax'] });
  assert.deepEqual([again.status, again.json.error?.type, again.json.error?.code], [409, 'AlreadyExistsException', 409]);
  const missing = await call('GET', `/v1/${PREFIX}/namespaces/accounting%1Ftax/tables/paid`);
  assert.deepEqual([missing.status, missing.json.error?.type, missing.json.error?.code], [404, 'NoSuchTableException', 404]);
  const noAuth = await call('GET', `/v1/${PREFIX}/namespaces/accounting%1Ftax/tables/paid`, undefined, 'nope');
  assert.deepEqual([noAuth.status, noAuth.json.error?.type, noAuth.json.error?.code], [401, 'NotAuthorizedException', 401]);
  // A table, then a commit whose requirement fails (409 CommitFailedException), one with an unknown update (400).
  const location = pathToFileURL(join(tempDir('hypsink-ice-rest-spec-'), 'paid')).href;
  const created = await call('POST', `/v1/${PREFIX}/namespaces/accounting%1Ftax/tables`, {
    name: 'paid',
    location,
    schema: { type: 'struct', 'schema-id': 0, fields: [{ id: 1, name: 'id', type: 'long', required: true }] },
  });
  assert.equal(created.status, 200, JSON.stringify(created.json));
  assert.match(String(created.json['metadata-location']), /\/metadata\/00000-[0-9a-f-]+\.metadata\.json$/);
  const uuid = (created.json.metadata as Json)['table-uuid'];
  const stale = await call('POST', `/v1/${PREFIX}/namespaces/accounting%1Ftax/tables/paid`, { requirements: [{ type: 'assert-table-uuid', uuid: 'another' }], updates: [] });
  assert.deepEqual([stale.status, stale.json.error?.type], [409, 'CommitFailedException']);
  const unknown = await call('POST', `/v1/${PREFIX}/namespaces/accounting%1Ftax/tables/paid`, { requirements: [{ type: 'assert-table-uuid', uuid }], updates: [{ action: 'rename-everything' }] });
  assert.deepEqual([unknown.status, unknown.json.error?.type], [400, 'BadRequestException']);
  const dup = await call('POST', `/v1/${PREFIX}/namespaces/accounting%1Ftax/register`, { name: 'paid', 'metadata-location': created.json['metadata-location'] });
  assert.deepEqual([dup.status, dup.json.error?.type, dup.json.error?.code], [409, 'AlreadyExistsException', 409]);
  const ok = await call('POST', `/v1/${PREFIX}/namespaces/accounting%1Ftax/tables/paid`, { requirements: [{ type: 'assert-table-uuid', uuid }], updates: [{ action: 'set-properties', updates: { owner: 'Hank' } }] });
  assert.equal(ok.status, 200);
  assert.match(String(ok.json['metadata-location']), /\/metadata\/00001-[0-9a-f-]+\.metadata\.json$/);
  assert.deepEqual((ok.json.metadata as Json)['metadata-log'], [{ 'timestamp-ms': (created.json.metadata as Json)['last-updated-ms'], 'metadata-file': created.json['metadata-location'] }]);
});

test('a catalog uri carrying credentials is refused when the sink is built, without echoing them: the token goes in catalog.token', async () => {
  const clean = await setup({ catalog: true, uri: 'http://127.0.0.1:9/api' });
  const ok = await cli('validate', '--config', clean.config);
  assert.equal(ok.code, 0, `${ok.out}${ok.err}`);
  const s = await setup({ catalog: true, uri: 'http://svc:pw-in-uri-5c1e@127.0.0.1:9/api' });
  const r = await cli('validate', '--config', s.config);
  assert.notEqual(r.code, 0);
  const said = `${r.out}${r.err}`;
  assert.match(said, /writerConfig\.catalog\.uri/, said);
  assert.match(said, /without user info, query or fragment \(the token goes in catalog\.token\)/, said);
  assert.equal(said.includes('pw-in-uri-5c1e'), false, said);
});
