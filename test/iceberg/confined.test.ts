/**
 * Issue 26: everything an Iceberg table's metadata names is confined to the
 * table. Someone who may write inside the sink's root (docs/THREAT_MODEL.md)
 * rewrites a manifest, a manifest list or a metadata file so that a location
 * in it lies outside the table: through `..`, percent-encoded dots, a symbolic
 * link inside the root, an absolute path or a `file:` URI elsewhere, another
 * bucket or another prefix. Expiry (`maintain --tables`), the recovery of an
 * interrupted commit, and verify refuse, naming the file that named it and the
 * location, and read, write and remove nothing outside: the victim files are
 * still there, byte for byte. Real kernel, real disk, s3rver over loopback.
 * @ref LLP 0063
 */
import assert from 'node:assert/strict';
import { promises as fsp, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { after, before, test } from 'node:test';
import { GetObjectCommand, PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { decodeManifestList } from '../../plugins/format-iceberg/src/avro.js';
import { locationKey } from '../../plugins/format-iceberg/src/table.js';
import { isHypsinkError } from '../../types/index.js';
import { eventLines, ingestText, type Json, sampleConfig, writeConfig, withKernel as run } from '../support/kernel.js';
import { rewriteManifest, rewriteManifestList, startConditionalS3 } from '../support/iceberg.js';
import { throwingAt } from '../support/fault.js';
import { localFs } from '../support/local-fs.js';
import { S3RVER_ACCESS_KEY_ID } from '../support/s3server.js';
import { tempDir } from '../support/tmp.js';
import { baseConfig, makeDestination } from '../s3/helpers.js';

type Conditional = Awaited<ReturnType<typeof startConditionalS3>>;
let s3: Conditional;
let client: S3Client;
before(async () => {
  s3 = await startConditionalS3({ buckets: ['lake', 'other'] });
  process.env.AWS_ACCESS_KEY_ID = S3RVER_ACCESS_KEY_ID;
  process.env.AWS_SECRET_ACCESS_KEY = 'S3RVER';
  process.env.AWS_EC2_METADATA_DISABLED = 'true';
  client = new S3Client({ endpoint: s3.s3.endpoint, forcePathStyle: true, region: 'us-east-1', credentials: { accessKeyId: S3RVER_ACCESS_KEY_ID, secretAccessKey: 'S3RVER' } });
});
after(async () => {
  client.destroy();
  await s3.stop();
});

interface Setup {
  readonly dir: string;
  readonly config: string;
  /** The table's folder on disk (local-fs), or its key prefix in bucket `lake` (s3). */
  readonly table: string;
  /** The table's location as its metadata names it. */
  readonly location: string;
  /** A folder outside the sink's root, with `victim.txt` in it. */
  readonly outside: string;
  readonly victim: string;
}

const VICTIM = 'not yours to delete\n';

/** An Iceberg sink `lake` over local-fs at `<dir>/lake` (or s3rver under `s3Prefix`) whose snapshots all expire but the newest. */
async function setup(s3Prefix?: string): Promise<Setup> {
  const dir = tempDir('hypsink-confined-');
  const c = sampleConfig();
  delete (c.sinks as Record<string, unknown>).archive;
  c.sinks.lake = {
    writer: '@hypsink/format-iceberg',
    datasets: ['events'],
    ...(s3Prefix
      ? { destination: '@hypsink/s3', config: { bucket: 'lake', prefix: s3Prefix, region: 'us-east-1', endpoint: s3.endpoint, forcePathStyle: true } }
      : { destination: '@hypsink/local-fs', config: { dir: 'lake' } }),
    writerConfig: { maxSnapshotAgeMs: 1, minSnapshotsToKeep: 1 },
  };
  const outside = join(dir, 'outside');
  await fsp.mkdir(outside);
  await fsp.writeFile(join(outside, 'victim.txt'), VICTIM);
  const table = s3Prefix ? `${s3Prefix}/events` : join(dir, 'lake', 'events');
  return {
    dir,
    config: await writeConfig(dir, c),
    table,
    location: s3Prefix ? `s3://lake/${table}` : pathToFileURL(table).href,
    outside,
    victim: join(outside, 'victim.txt'),
  };
}

/** Ingest and export; the partitions' errors (null for none). */
async function exportRows(s: Setup, from: number, n: number) {
  return run(s.config, async (k) => {
    assert.equal((await ingestText(k, 'web', eventLines(from, n))).rejected, 0);
    return (await k.export('lake'))[0]!.partitions.map((p) => p.error);
  });
}

/** Run `fn` with the fault point armed to throw. */
// ------------------------------------------------------------ the table's files, as the attacker reaches them

interface Files {
  get(key: string): Promise<Uint8Array>;
  put(key: string, bytes: Uint8Array): Promise<void>;
  /** The table-relative key of a location hypsink wrote. */
  keyOf(location: string): string;
  /** The newest metadata version's key. */
  head(): Promise<string>;
}

function localFiles(s: Setup): Files {
  return {
    get: async (k) => fsp.readFile(join(s.table, k)),
    put: (k, b) => fsp.writeFile(join(s.table, k), b),
    keyOf: (loc) => decodeURIComponent(loc.slice(s.location.length + 1)),
    head: async () => {
      const v = Math.max(...readdirSync(join(s.table, 'metadata')).map((n) => Number(/^v(\d+)\.metadata\.json$/.exec(n)?.[1] ?? 0)));
      return `metadata/v${v}.metadata.json`;
    },
  };
}

function s3Files(s: Setup): Files {
  const get = async (Key: string) => {
    const r = await client.send(new GetObjectCommand({ Bucket: 'lake', Key }));
    return r.Body!.transformToByteArray();
  };
  return {
    get: (k) => get(`${s.table}/${k}`),
    put: async (k, b) => {
      await client.send(new PutObjectCommand({ Bucket: 'lake', Key: `${s.table}/${k}`, Body: b }));
    },
    keyOf: (loc) => loc.slice(s.location.length + 1),
    head: async () => {
      let v = 1;
      while (await get(`${s.table}/metadata/v${v + 1}.metadata.json`).then(() => true, () => false)) v++;
      return `metadata/v${v}.metadata.json`;
    },
  };
}

/** Two units of `web`: the first snapshot expires at the next maintain (it is neither the newest of its writer nor current). */
async function twoSnapshots(s: Setup, f: Files): Promise<{ head: string; metadata: Json; expiredList: string }> {
  for (const e of await exportRows(s, 1, 10)) assert.equal(e, null);
  for (const e of await exportRows(s, 11, 10)) assert.equal(e, null);
  const head = await f.head();
  const metadata = JSON.parse(new TextDecoder().decode(await f.get(head))) as Json;
  const first = (metadata.snapshots as Json[])[0]!;
  return { head, metadata, expiredList: f.keyOf(first['manifest-list'] as string) };
}

/**
 * The attack on expiry: a manifest of the attacker's, naming `dataFile`, added
 * to the expired snapshot's manifest list (no kept list names it, so expiry
 * would remove the data files it names). Returns the manifest's location.
 */
async function plantManifest(s: Setup, f: Files, expiredList: string, dataFile: string): Promise<string> {
  const list = decodeManifestList(await f.get(expiredList));
  const theirs = f.keyOf(list[0]!.manifestPath);
  await f.put('metadata/planted-m0.avro', rewriteManifest(await f.get(theirs), () => dataFile));
  const planted = `${s.location}/metadata/planted-m0.avro`;
  await f.put(expiredList, rewriteManifestList(await f.get(expiredList), (ms) => [...ms, { ...ms[0]!, manifestPath: planted }]));
  return planted;
}

/** The refusal: a HypsinkError naming the file that named the location, the location, and what to do. */
function refusal(named: string, location: string, where: string): (e: unknown) => boolean {
  return (e: unknown) => {
    assert.ok(isHypsinkError(e), `a HypsinkError: ${String(e)}`);
    assert.equal(e.code, 'HYPSINK_ERR_DESTINATION', e.message);
    assert.ok(e.message.includes(named), `names the file that named it (${named}): ${e.message}`);
    assert.ok(e.message.includes(location), `names the location (${location}): ${e.message}`);
    assert.match(e.message, new RegExp(where), e.message);
    assert.match(e.message, /restore|remove|rewrite/, `says what to do: ${e.message}`);
    return true;
  };
}

async function assertVictim(s: Setup): Promise<void> {
  assert.equal(await fsp.readFile(s.victim, 'utf8'), VICTIM, 'the file outside the table is untouched');
}

// ------------------------------------------------------------ local-fs: expiry

const LOCAL_CASES: { name: string; path: (s: Setup) => string; via?: 'link' }[] = [
  { name: 'a `..` through a symbolic link inside the root', path: (s) => `${s.location}/data/..//////evil/victim.txt`, via: 'link' },
  { name: '`..` out of the table', path: (s) => `${s.location}/data/../../../outside/victim.txt` },
  { name: 'percent-encoded `..`', path: (s) => `${s.location}/data/%2e%2e/%2E%2E/%2e%2e/outside/victim.txt` },
  { name: 'an encoded slash', path: (s) => `${s.location}/data/..%2f..%2f..%2foutside/victim.txt` },
  { name: 'an absolute path elsewhere', path: (s) => s.victim },
  { name: 'a file: URI elsewhere', path: (s) => pathToFileURL(s.victim).href },
  { name: 'a file: URI with a host', path: (s) => `file://elsewhere${s.victim}` },
  { name: 'another scheme', path: (s) => `hdfs://nn${s.victim}` },
];

for (const c of LOCAL_CASES) {
  test(`local-fs: expiry refuses a data file named by a planted manifest through ${c.name}; nothing outside is removed`, async () => {
    const s = await setup();
    const f = localFiles(s);
    const { expiredList } = await twoSnapshots(s, f);
    if (c.via === 'link') await fsp.symlink(s.outside, join(s.table, 'evil'));
    const planted = await plantManifest(s, f, expiredList, c.path(s));
    const listBefore = await f.get(expiredList);
    await assert.rejects(
      run(s.config, (k) => k.maintain({ tables: true })),
      c.via === 'link'
        ? (e: unknown) => {
            // Inside the table once normalised: local-fs's remove refuses the link on the way, and expiry names the manifest.
            assert.ok(isHypsinkError(e), String(e));
            assert.match(e.message, /evil is a symbolic link/);
            assert.ok(e.message.includes(planted), `names the manifest: ${e.message}`);
            return true;
          }
        : refusal(planted, c.path(s), 'outside the table'),
    );
    await assertVictim(s);
    if (c.via !== 'link') {
      // Refused before the expiry committed: the expired snapshot's list is still there, unchanged.
      assert.deepEqual(await f.get(expiredList), listBefore);
    }
  });
}

test('local-fs: expiry refuses an expired snapshot whose manifest list is named outside the table, naming the metadata file', async () => {
  const s = await setup();
  const f = localFiles(s);
  const { head, metadata } = await twoSnapshots(s, f);
  const bad = pathToFileURL(s.victim).href;
  (metadata.snapshots as Json[])[0]!['manifest-list'] = bad;
  await f.put(head, new TextEncoder().encode(JSON.stringify(metadata)));
  await assert.rejects(
    run(s.config, (k) => k.maintain({ tables: true })),
    refusal(head, bad, 'outside the table'),
  );
  await assertVictim(s);
});

test("local-fs: a metadata file that moves the table's location, or names a metadata-log entry elsewhere, is refused", async () => {
  const s = await setup();
  const f = localFiles(s);
  const { head, metadata } = await twoSnapshots(s, f);
  const moved = pathToFileURL(s.dir).href;
  await f.put(head, new TextEncoder().encode(JSON.stringify({ ...metadata, location: moved })));
  await assert.rejects(
    run(s.config, (k) => k.maintain({ tables: true })),
    refusal(head, moved, 'not the table'),
  );
  const log = [...(metadata['metadata-log'] as Json[]), { 'timestamp-ms': 1, 'metadata-file': `${s.location}/metadata/../../../outside/victim.txt` }];
  await f.put(head, new TextEncoder().encode(JSON.stringify({ ...metadata, 'metadata-log': log })));
  await assert.rejects(
    run(s.config, (k) => k.verify('lake')),
    refusal(head, `${s.location}/metadata/../../../outside/victim.txt`, 'outside the table'),
  );
  await assertVictim(s);
});

// ------------------------------------------------------------ local-fs: recovery of an interrupted commit

test("local-fs: the retry of an interrupted commit refuses a head whose manifest list is reached through a link, reading nothing outside; the rows stay pending", async () => {
  const s = await setup();
  const f = localFiles(s);
  for (const e of await exportRows(s, 1, 10)) assert.equal(e, null);
  // The second unit's data files and manifest are written, its commit never made.
  await throwingAt('iceberg.afterManifest', () => exportRows(s, 11, 10));
  const head = await f.head();
  const metadata = JSON.parse(new TextDecoder().decode(await f.get(head))) as Json;
  const snap = (metadata.snapshots as Json[])[0]!;
  // A valid manifest list outside the root, reached through a link inside the table.
  await fsp.copyFile(join(s.table, f.keyOf(snap['manifest-list'] as string)), join(s.outside, 'list.avro'));
  await fsp.symlink(s.outside, join(s.table, 'evil'));
  snap['manifest-list'] = `${s.location}/evil/list.avro`;
  await f.put(head, new TextEncoder().encode(JSON.stringify(metadata)));
  const versions = readdirSync(join(s.table, 'metadata')).filter((n) => n.endsWith('.metadata.json')).length;
  const errors = await run(s.config, async (k) => (await k.export('lake'))[0]!.partitions.map((p) => p.error));
  const err = errors.find((e) => e !== null);
  assert.ok(err, 'the retry fails');
  assert.match(err.message, /evil is a symbolic link/);
  assert.ok(err.message.includes(head), `names the metadata file: ${err.message}`);
  assert.equal(readdirSync(join(s.table, 'metadata')).filter((n) => n.endsWith('.metadata.json')).length, versions, 'nothing committed');
  await assertVictim(s);

  // The same with the list named outside the table outright: refused by the rule, before any read.
  snap['manifest-list'] = pathToFileURL(join(s.outside, 'list.avro')).href;
  await f.put(head, new TextEncoder().encode(JSON.stringify(metadata)));
  const again = await run(s.config, async (k) => (await k.export('lake'))[0]!.partitions.map((p) => p.error));
  const refused = again.find((e) => e !== null);
  assert.ok(refused && refusal(head, snap['manifest-list'] as string, 'outside the table')(refused));
});

test('local-fs: a parent manifest list naming a manifest outside the table is refused by the retry, not copied into a new snapshot', async () => {
  const s = await setup();
  const f = localFiles(s);
  for (const e of await exportRows(s, 1, 10)) assert.equal(e, null);
  const head = await f.head();
  const metadata = JSON.parse(new TextDecoder().decode(await f.get(head))) as Json;
  const listKey = f.keyOf((metadata.snapshots as Json[])[0]!['manifest-list'] as string);
  const bad = `${s.location}/metadata/../../../outside/m0.avro`;
  await f.put(listKey, rewriteManifestList(await f.get(listKey), (ms) => [...ms, { ...ms[0]!, manifestPath: bad }]));
  const errors = await exportRows(s, 11, 10);
  const err = errors.find((e) => e !== null);
  assert.ok(err && refusal(listKey, bad, 'outside the table')(err));
  assert.equal(await f.head(), head, 'nothing committed');
});

// ------------------------------------------------------------ S3: another bucket, another prefix, `..`

const S3_CASES: { name: string; path: (s: Setup, prefix: string) => string; victim: { bucket: string; key: string } }[] = [
  { name: '`..` out of the prefix', path: (s) => `${s.location}/data/../../../victim/v.txt`, victim: { bucket: 'lake', key: 'victim/v.txt' } },
  { name: 'another bucket', path: (_s, p) => `s3://other/${p}/events/data/v.txt`, victim: { bucket: 'other', key: 'PFX/events/data/v.txt' } },
  { name: 'another prefix', path: () => 's3://lake/victim/v.txt', victim: { bucket: 'lake', key: 'victim/v.txt' } },
  { name: 'the prefix without its table', path: (_s, p) => `s3://lake/${p}/v.txt`, victim: { bucket: 'lake', key: 'PFX/v.txt' } },
  { name: 'a file: URI', path: (s) => pathToFileURL(s.victim).href, victim: { bucket: 'lake', key: 'victim/v.txt' } },
];

for (const c of S3_CASES) {
  test(`S3: expiry refuses a data file named by a planted manifest through ${c.name}; the object there is kept`, async () => {
    const prefix = `t${Date.now()}${Math.random().toString(36).slice(2, 6)}`;
    const s = await setup(prefix);
    const f = s3Files(s);
    const victim = { Bucket: c.victim.bucket, Key: c.victim.key.replace('PFX', prefix) };
    await client.send(new PutObjectCommand({ ...victim, Body: VICTIM }));
    const { expiredList } = await twoSnapshots(s, f);
    const planted = await plantManifest(s, f, expiredList, c.path(s, prefix));
    await assert.rejects(
      run(s.config, (k) => k.maintain({ tables: true })),
      refusal(planted, c.path(s, prefix), 'outside the table'),
    );
    const r = await client.send(new GetObjectCommand(victim));
    assert.equal(await r.Body!.transformToString(), VICTIM, 'the object outside the table is kept');
    await assertVictim(s);
  });
}

// ------------------------------------------------------------ the one rule

test('locationKey: a location names a key of the table only when, normalised, it lies under the table', () => {
  const own = 'file:///srv/lake/events';
  const ok: [string, string][] = [
    ['file:///srv/lake/events/data/a.parquet', 'events/data/a.parquet'],
    ['file:/srv/lake/events/data/a.parquet', 'events/data/a.parquet'],
    ['file://localhost/srv/lake/events/data/a.parquet', 'events/data/a.parquet'],
    ['FILE:///srv/lake/events//data/./a.parquet', 'events/data/a.parquet'],
    ['file:///srv/lake/events/data/x/../a.parquet', 'events/data/a.parquet'],
    ['file:///srv/lake/events/data/source%3Da%2520b/a.parquet', 'events/data/source=a%20b/a.parquet'],
    ['/srv/lake/events/metadata/m.avro', 'events/metadata/m.avro'],
  ];
  for (const [loc, key] of ok) assert.equal(locationKey(own, 'events', loc), key, loc);
  const refused = [
    'file:///srv/lake/events',
    'file:///srv/lake/events/',
    'file:///srv/lake/eventsX/a',
    'file:///srv/lake/events/../other/a',
    'file:///srv/lake/events/%2e%2e/other/a',
    'file:///srv/lake/events/a%2f..%2f..%2fother',
    'file:///srv/lake/events/a%5cb',
    'file:///srv/lake/events/a%00b',
    'file:///srv/lake/events/a%zz',
    'file://host/srv/lake/events/a',
    's3://srv/lake/events/a',
    'relative/events/a',
    '',
    'file:///srv/lake/events/a?x=1',
  ];
  for (const loc of refused) assert.equal(typeof locationKey(own, 'events', loc), 'object', loc);
  const s3own = 's3://lake/hyp/events';
  assert.equal(locationKey(s3own, 'events', 's3://lake/hyp/events/data/source=a%20b/x.parquet'), 'events/data/source=a%20b/x.parquet', 'S3 keys are taken as they are, never decoded');
  assert.equal(locationKey(s3own, 'events', 's3a://lake/hyp/events/data/x.parquet'), 'events/data/x.parquet');
  for (const loc of ['s3://other/hyp/events/x', 's3://lake/other/events/x', 's3://lake/hyp/events/../../x', 's3://lake/hyp/x', 'gs://lake/hyp/events/x', 's3://lake/hyp/events/%2e%2e/x']) {
    const r = locationKey(s3own, 'events', loc);
    // `%2e%2e` is a literal S3 key segment, so it stays inside; every other is refused.
    if (loc.includes('%2e')) assert.equal(r, 'events/%2e%2e/x', loc);
    else assert.equal(typeof r, 'object', loc);
  }
});

// ------------------------------------------------------------ the destinations themselves

test('local-fs: remove, get and read through a link to a folder inside the root are refused, naming the link; the file behind it is kept', async () => {
  const dir = tempDir('hypsink-confined-');
  const root = join(dir, 'root');
  const outside = join(dir, 'outside');
  await fsp.mkdir(join(root, 'events', 'data'), { recursive: true });
  await fsp.mkdir(outside);
  await fsp.writeFile(join(outside, 'victim.txt'), VICTIM);
  await fsp.symlink(outside, join(root, 'events', 'evil'));
  const dest = localFs(root);
  const signal = new AbortController().signal;
  const refused = (e: unknown) => {
    assert.ok(isHypsinkError(e), String(e));
    assert.equal(e.code, 'HYPSINK_ERR_DESTINATION');
    assert.ok(e.message.includes(join(root, 'events', 'evil')) && /is a symbolic link/.test(e.message), e.message);
    return true;
  };
  for (const key of ['events/evil/victim.txt', 'events/data/../evil/victim.txt']) {
    await assert.rejects(dest.remove!(key, { signal }), refused, key);
    await assert.rejects(dest.get!(key, { signal }), refused, key);
    await assert.rejects(dest.read!(key, { offset: 0, length: 4 }, { signal }), refused, key);
    await assert.rejects(dest.digestOf!(key, { signal }), refused, key);
  }
  assert.equal(await fsp.readFile(join(outside, 'victim.txt'), 'utf8'), VICTIM);
  // A missing folder is nothing there, not a refusal; a real one is read and removed as before.
  assert.equal(await dest.get!('events/nothing/x.txt', { signal }), null);
  await fsp.writeFile(join(root, 'events', 'data', 'x.txt'), 'x');
  assert.equal(new TextDecoder().decode((await dest.get!('events/data/x.txt', { signal }))!), 'x');
  await dest.remove!('events/data/x.txt', { signal });
  assert.deepEqual(await fsp.readdir(join(root, 'events', 'data')), []);
});

test('S3: a blob key with a "." or ".." name is refused before any request; the object it would reach is kept', async () => {
  const { dest } = makeDestination(baseConfig(s3.s3.endpoint));
  const signal = new AbortController().signal;
  await client.send(new PutObjectCommand({ Bucket: 'lake', Key: 'victim/dots.txt', Body: VICTIM }));
  for (const key of ['events/../../victim/dots.txt', 'events/./x', '../victim/dots.txt']) {
    await assert.rejects(dest.remove!(key, { signal }), /has a "\." or "\.\." name/, key);
    await assert.rejects(dest.get!(key, { signal }), /has a "\." or "\.\." name/, key);
  }
  const r = await client.send(new GetObjectCommand({ Bucket: 'lake', Key: 'victim/dots.txt' }));
  assert.equal(await r.Body!.transformToString(), VICTIM);
});
