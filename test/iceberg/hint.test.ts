/**
 * The version hint never goes backwards (issue 31). A reader that trusts
 * `version-hint.text` alone (DuckDB's `iceberg_scan`) must find, after
 * `maintain --tables`, a version whose every snapshot's files are there; and
 * under racing writers the hint ends on the newest version, even when one
 * writer's hint write lands after another's newer one: held at a proxy in
 * front of s3rver, and held in a wrapper of the real local-fs destination.
 * @ref LLP 0073
 */
import assert from 'node:assert/strict';
import { existsSync, promises as fsp, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { decodeManifest, decodeManifestList } from '../../plugins/format-iceberg/src/avro.js';
import { TableStore } from '../../plugins/format-iceberg/src/table.js';
import type { BlobDestination } from '../../types/index.js';
import { anyOf, type FaultRule } from '../support/fault-proxy.js';
import { fileRoute, readIcebergTable, s3Route, serveDir, startConditionalS3 } from '../support/iceberg.js';
import { eventLines, ingestText, type Json, sampleConfig, writeConfig, withKernel as run } from '../support/kernel.js';
import { localFs, overDestination } from '../support/local-fs.js';
import { S3RVER_ACCESS_KEY_ID } from '../support/s3server.js';
import { tempDir } from '../support/tmp.js';

type Conditional = Awaited<ReturnType<typeof startConditionalS3>>;
let s3: Conditional;
before(async () => {
  s3 = await startConditionalS3({ buckets: ['lake'] });
  process.env.AWS_ACCESS_KEY_ID = S3RVER_ACCESS_KEY_ID;
  process.env.AWS_SECRET_ACCESS_KEY = 'S3RVER';
  process.env.AWS_EC2_METADATA_DISABLED = 'true';
});
after(() => s3.stop());

/** A writer of its own (its own cache, so its own identity) on the `lake` table sink: local-fs at `lake`, or s3rver under `s3Prefix`. */
async function writer(opts: { lake?: string; s3Prefix?: string; writerConfig?: Json }): Promise<string> {
  const dir = tempDir('hypsink-ice-hint-');
  const c = sampleConfig();
  delete (c.sinks as Record<string, unknown>).archive;
  c.sinks.lake = {
    writer: '@hypsink/format-iceberg',
    datasets: ['events'],
    ...(opts.s3Prefix
      ? { destination: '@hypsink/s3', config: { bucket: 'lake', prefix: opts.s3Prefix, region: 'us-east-1', endpoint: s3.endpoint, forcePathStyle: true } }
      : { destination: '@hypsink/local-fs', config: { dir: opts.lake! } }),
    ...(opts.writerConfig ? { writerConfig: opts.writerConfig } : {}),
  };
  return writeConfig(dir, c);
}

async function ingestAndExport(config: string, source: string, from: number, n: number): Promise<void> {
  await run(config, async (k) => {
    const r = await ingestText(k, source, eventLines(from, n));
    assert.equal(r.rejected, 0, JSON.stringify(r));
    const e = await k.export('lake');
    for (const p of e[0]!.partitions) assert.equal(p.error, null, JSON.stringify(p.error));
  });
}

const range = (from: number, n: number) => Array.from({ length: n }, (_, i) => from + i);

function assertIds(rows: Record<string, unknown>[], want: number[], what: string): void {
  const got = rows.map((r) => Number(r.id)).sort((a, b) => a - b);
  assert.deepEqual(got, [...want].sort((a, b) => a - b), `${what}: the table's ids differ from the rows exported (or a row twice)`);
}

/** The table folder's versions on disk (`dir` holds `v<N>.metadata.json`, or s3rver's `…._S3rver_object`). */
function newestVersion(metadataDir: string, suffix = ''): number {
  let max = 0;
  for (const n of readdirSync(metadataDir)) {
    const m = new RegExp(`^v(\\d+)\\.metadata\\.json${suffix.replace(/\./g, '\\.')}$`).exec(n);
    if (m) max = Math.max(max, Number(m[1]));
  }
  return max;
}

/**
 * What a hint-trusting reader needs: every snapshot the hinted version lists
 * has its manifest list, every manifest it names, every data file those name.
 * `file` maps a location to a path on disk. Returns what is missing.
 */
function missingUnderHint(metadataDir: string, file: (location: string) => string, suffix = ''): string[] {
  const hinted = Number(readFileSync(join(metadataDir, `version-hint.text${suffix}`), 'utf8').trim());
  const m = JSON.parse(readFileSync(join(metadataDir, `v${hinted}.metadata.json${suffix}`), 'utf8')) as { snapshots: { 'snapshot-id': number; 'manifest-list': string }[] };
  const missing: string[] = [];
  for (const s of m.snapshots) {
    const list = file(s['manifest-list']);
    if (!existsSync(list)) {
      missing.push(`v${hinted} snapshot ${s['snapshot-id']}: ${s['manifest-list']}`);
      continue;
    }
    for (const mf of decodeManifestList(readFileSync(list))) {
      const path = file(mf.manifestPath);
      if (!existsSync(path)) {
        missing.push(`v${hinted} snapshot ${s['snapshot-id']}: ${mf.manifestPath}`);
        continue;
      }
      for (const e of decodeManifest(readFileSync(path)).entries) if (!existsSync(file(e.dataFile.filePath))) missing.push(`v${hinted}: ${e.dataFile.filePath}`);
    }
  }
  return missing;
}

test('local-fs: after maintain --tables the hint names the version expiry committed, and a reader trusting the hint finds every file its snapshots name', async () => {
  const lake = join(tempDir('hypsink-ice-hint-lake-'), 'lake');
  const a = await writer({ lake, writerConfig: { maxSnapshotAgeMs: 1, minSnapshotsToKeep: 1 } });
  for (let i = 0; i < 4; i++) await ingestAndExport(a, 'web', 1 + i * 10, 10);
  await ingestAndExport(a, 'app', 100, 5);
  const table = join(lake, 'events');
  const md = join(table, 'metadata');
  const before = newestVersion(md);
  const r = await run(a, (k) => k.maintain({ tables: true }));
  assert.match(r.tables[0]!.done, /3 snapshot\(s\) expired, 2 kept/);
  const head = newestVersion(md);
  assert.equal(head, before + 1, 'expiry committed one version');
  assert.equal(readFileSync(join(md, 'version-hint.text'), 'utf8').trim(), String(head), 'the hint names the version expiry committed');
  assert.deepEqual(missingUnderHint(md, (l) => fileURLToPath(l)), [], 'files the hinted version names were removed');
  const srv = await serveDir(lake);
  try {
    // icebird reads the hint (no metadata file named): every row once.
    const { rows, metadata } = await readIcebergTable({ tableUrl: `file://${table}`, route: fileRoute(lake, srv.url) });
    assert.equal(metadata.snapshots?.length, 2);
    assertIds(rows, [...range(1, 40), ...range(100, 5)], 'read through the hint after expiry');
  } finally {
    await srv.close();
  }
});

test('S3: one writer\'s hint PUT held at the proxy while another writer commits and hints; released, the hint still ends on the newest version', async () => {
  const a = await writer({ s3Prefix: 'race' });
  const b = await writer({ s3Prefix: 'race' });
  await ingestAndExport(a, 'web', 1, 10);
  await ingestAndExport(b, 'web', 1000, 10);
  const md = join(s3.s3.directory, 'lake', 'race', 'events', 'metadata');
  const suffix = '._S3rver_object';

  // Hold the next hint PUT (A's) before it reaches s3rver; B's goes through.
  let arrived!: () => void;
  const atProxy = new Promise<void>((res) => {
    arrived = res;
  });
  let release!: () => void;
  const gate = new Promise<void>((res) => {
    release = res;
  });
  let holding = true;
  const hold: FaultRule = async (r) => {
    if (holding && r.method === 'PUT' && r.key.endsWith('/metadata/version-hint.text')) {
      holding = false;
      arrived();
      await gate;
    }
    return undefined;
  };
  s3.proxy.setRule(anyOf(hold, s3.ifNoneMatch));
  try {
    const shipA = ingestAndExport(a, 'web', 11, 10);
    await atProxy;
    const aVersion = newestVersion(md, suffix);
    await ingestAndExport(b, 'web', 1010, 10);
    const bVersion = newestVersion(md, suffix);
    assert.equal(bVersion, aVersion + 1, 'B committed the version after A\'s');
    assert.equal(readFileSync(join(md, `version-hint.text${suffix}`), 'utf8').trim(), String(bVersion), 'B pointed the hint at its version');
    release();
    await shipA;
    const head = newestVersion(md, suffix);
    assert.equal(head, bVersion);
    assert.equal(readFileSync(join(md, `version-hint.text${suffix}`), 'utf8').trim(), String(head), 'A\'s late hint left the hint behind the newest version');
  } finally {
    release();
    s3.proxy.setRule(s3.ifNoneMatch);
  }
  const { rows } = await readIcebergTable({ tableUrl: 's3://lake/race/events', route: s3Route(s3.s3.endpoint) });
  assertIds(rows, [...range(1, 20), ...range(1000, 20)], 'read through the hint');
});

/** The real local-fs destination, its `replace` of the hint held at `gate` once. */
function heldHint(inner: BlobDestination, arrived: () => void, gate: Promise<void>): BlobDestination {
  let holding = true;
  return overDestination(inner, {
    async replace(key, bytes, opts) {
      if (holding && key.endsWith('/metadata/version-hint.text')) {
        holding = false;
        arrived();
        await gate;
      }
      return inner.replace!(key, bytes, opts);
    },
  });
}

test('local-fs: a hint write that lands after another writer committed and hinted a newer version is followed by the newest', async () => {
  const lake = join(tempDir('hypsink-ice-hint-race-'), 'lake');
  const b = await writer({ lake });
  await ingestAndExport(b, 'web', 1, 10);
  const md = join(lake, 'events', 'metadata');
  const v = newestVersion(md);
  let arrived!: () => void;
  const atGate = new Promise<void>((res) => {
    arrived = res;
  });
  let release!: () => void;
  const gate = new Promise<void>((res) => {
    release = res;
  });
  // Writer A has committed version v (an earlier attempt's commit, found again) and points the hint at it.
  const log = { debug() {}, info() {}, warn() {}, error() {}, child: () => log } as unknown as ConstructorParameters<typeof TableStore>[3];
  const store = new TableStore('events', heldHint(localFs(lake), arrived, gate), 'lake', log);
  const hinting = store.hint(v, new AbortController().signal);
  try {
    await atGate;
    // Meanwhile B commits v+1 and points the hint there.
    await ingestAndExport(b, 'web', 11, 10);
    assert.equal(newestVersion(md), v + 1);
    assert.equal(readFileSync(join(md, 'version-hint.text'), 'utf8').trim(), String(v + 1));
  } finally {
    release();
  }
  await hinting;
  assert.equal(readFileSync(join(md, 'version-hint.text'), 'utf8').trim(), String(v + 1), 'A\'s late hint left the hint on an older version');
  await fsp.access(join(md, `v${v + 1}.metadata.json`));
});

/** `inner` with its reads of metadata versions counted, by key. */
function countedGets(inner: BlobDestination, gets: string[]): BlobDestination {
  return overDestination(inner, {
    get(key, opts) {
      gets.push(key.slice(key.lastIndexOf('/') + 1));
      return inner.get!(key, opts);
    },
  });
}

test('local-fs: a hint pointed at the version just committed looks for a newer one once, after writing; behind two newer ones it ends on the newest', async () => {
  const lake = join(tempDir('hypsink-ice-hint-look-'), 'lake');
  const b = await writer({ lake });
  await ingestAndExport(b, 'web', 1, 10);
  await ingestAndExport(b, 'web', 11, 10);
  await ingestAndExport(b, 'web', 21, 10);
  const md = join(lake, 'events', 'metadata');
  const v = newestVersion(md);
  const log = { debug() {}, info() {}, warn() {}, error() {}, child: () => log } as unknown as ConstructorParameters<typeof TableStore>[3];
  const gets: string[] = [];
  const store = new TableStore('events', countedGets(localFs(lake), gets), 'lake', log);
  // The newest version: written, then one look for the next (before, a look came first too).
  assert.equal(await store.hint(v, new AbortController().signal), v);
  assert.deepEqual(gets, [`v${v + 1}.metadata.json`]);
  assert.equal(readFileSync(join(md, 'version-hint.text'), 'utf8').trim(), String(v));
  // Pointed two versions behind (a late writer): it ends on the newest, and the hint says so.
  gets.length = 0;
  assert.equal(await store.hint(v - 2, new AbortController().signal), v);
  assert.equal(readFileSync(join(md, 'version-hint.text'), 'utf8').trim(), String(v));
  assert.deepEqual(gets, [`v${v - 1}.metadata.json`, `v${v}.metadata.json`, `v${v + 1}.metadata.json`, `v${v + 1}.metadata.json`]);
});

test('local-fs: expiry removes nothing the version the hint names still reaches, when an older writer\'s late hint lands right after expiry\'s own', async () => {
  const lake = join(tempDir('hypsink-ice-hint-late-'), 'lake');
  const a = await writer({ lake });
  for (let i = 0; i < 4; i++) await ingestAndExport(a, 'web', 1 + i * 10, 10);
  await ingestAndExport(a, 'app', 100, 5);
  const md = join(lake, 'events', 'metadata');
  const before = newestVersion(md);
  const inner = localFs(lake);
  let late = true;
  // Expiry's hint write, followed at once by a late hint of the version before (a writer that committed it, slow).
  const dest = overDestination(inner, {
    async replace(key, bytes, opts) {
      await inner.replace!(key, bytes, opts);
      if (late && key.endsWith('/metadata/version-hint.text')) {
        late = false;
        await inner.replace!(key, new TextEncoder().encode(`${before}\n`), opts);
      }
    },
  });
  const log = { debug() {}, info() {}, warn() {}, error() {}, child: () => log } as unknown as ConstructorParameters<typeof TableStore>[3];
  const { expireSnapshots } = await import('../../plugins/format-iceberg/src/maintain.js');
  const cfg = { maxSnapshotAgeMs: 1, minSnapshotsToKeep: 1, commitAttempts: 40 } as Parameters<typeof expireSnapshots>[2];
  const done = await expireSnapshots(new TableStore('events', dest, 'lake', log), dest, cfg, { signal: new AbortController().signal, now: Date.now() });
  assert.match(done, /3 snapshot\(s\) expired, 2 kept; 0 file\(s\) removed/);
  assert.equal(newestVersion(md), before + 1);
  assert.equal(readFileSync(join(md, 'version-hint.text'), 'utf8').trim(), String(before), 'the late hint landed');
  assert.deepEqual(missingUnderHint(md, (l) => fileURLToPath(l)), [], 'files the hinted version names were removed');
});
