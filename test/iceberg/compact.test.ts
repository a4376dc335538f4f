/**
 * Data file compaction in `maintain --tables` (issue 31, LLP 0078), on a real
 * local-fs table read back by icebird:
 * - 4 writers (each a cache of its own, one kernel each, in this process)
 *   append rounds of small units while 2 maintainers compact (and expire) the
 *   table over and over: every row exactly once with its values, replace
 *   snapshots committed, the current snapshot's data files and the files on
 *   disk far fewer than the units' files once the writers moved on;
 * - a maintainer held at its commit while a writer appends: it re-bases, every
 *   row once; held while a writer appends and another maintainer compacts the
 *   same files: it commits nothing, every row once;
 * - a writer killed after its commit (an open intent), the table compacted and
 *   expired, the writer restarted: its retry finds its unit, every row once.
 * @ref LLP 0078
 */
import assert from 'node:assert/strict';
import { existsSync, promises as fsp, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { tableFromIPC } from 'apache-arrow';
import * as pw from 'parquet-wasm/node';
import { decodeManifest, decodeManifestList } from '../../plugins/format-iceberg/src/avro.js';
import { compactTable } from '../../plugins/format-iceberg/src/compact.js';
import { expireSnapshots } from '../../plugins/format-iceberg/src/maintain.js';
import { TableStore } from '../../plugins/format-iceberg/src/table.js';
import type { BlobDestination } from '../../types/index.js';
import { avroFilesOf, checkAvroFiles, fileRoute, readIcebergTable, serveDir } from '../support/iceberg.js';
import { ingestText, type Json, openKernel, runBin, sampleConfig, writeConfig } from '../support/kernel.js';
import { localFs, overDestination } from '../support/local-fs.js';
import { tempDir } from '../support/tmp.js';

process.env.HYPSINK_LOG_LEVEL ??= 'warn';

const T0 = Date.UTC(2026, 0, 1);
const SOURCES = ['web', 'app'];
type Kernel = Awaited<ReturnType<typeof openKernel>>['k'];

/** Row `id`: its time (two days, so two day partitions a source) and a message, null for every fifth. */
const rowOf = (id: number) => ({ id, ts: T0 + (id % 2) * 86_400_000 + id * 1000, msg: id % 5 === 0 ? null : `m${id}` });
const lines = (ids: readonly number[]) => ids.map((id) => `${JSON.stringify({ ...rowOf(id), ts: new Date(rowOf(id).ts).toISOString() })}\n`).join('');

/** A cache of its own on the `lake` table at `lake` (absolute): a writer, or a maintainer when it ingests nothing. */
async function member(lake: string, writerConfig: Json = {}): Promise<string> {
  const dir = tempDir('hypsink-ice-compact-');
  const c = sampleConfig();
  delete (c.sinks as Record<string, unknown>).archive;
  c.sinks.lake = {
    writer: '@hypsink/format-iceberg',
    destination: '@hypsink/local-fs',
    config: { dir: lake },
    datasets: ['events'],
    unit: { maxRows: 4 },
    writerConfig: { commitAttempts: 400, manifestMinCountToMerge: 4, compactMinFiles: 2, compactTargetBytes: 1 << 20, ...writerConfig },
  };
  return writeConfig(dir, c);
}

async function ingest(k: Kernel, source: string, ids: readonly number[]): Promise<void> {
  const r = await ingestText(k, source, lines(ids));
  assert.equal(r.rejected, 0, JSON.stringify(r));
}

async function exportAll(k: Kernel): Promise<void> {
  const e = await k.export('lake');
  for (const p of e[0]!.partitions) assert.equal(p.error, null, JSON.stringify(p.error));
}

interface Snap {
  'snapshot-id': number;
  'manifest-list': string;
  summary: Record<string, string>;
}

function headOf(table: string): { 'current-snapshot-id': number; snapshots: Snap[] } {
  const v = Math.max(...readdirSync(join(table, 'metadata')).flatMap((n) => /^v(\d+)\.metadata\.json$/.exec(n)?.[1] ?? []).map(Number));
  return JSON.parse(readFileSync(join(table, 'metadata', `v${v}.metadata.json`), 'utf8'));
}

/** The data files a snapshot reads (live entries), as paths. */
function filesOf(s: Snap): string[] {
  const out: string[] = [];
  for (const mf of decodeManifestList(readFileSync(fileURLToPath(s['manifest-list'])))) {
    for (const e of decodeManifest(readFileSync(fileURLToPath(mf.manifestPath))).entries) if (e.status !== 2) out.push(fileURLToPath(e.dataFile.filePath));
  }
  return out;
}

/** The data files the current snapshot reads. */
function liveFiles(table: string): string[] {
  const m = headOf(table);
  return filesOf(m.snapshots.find((s) => s['snapshot-id'] === m['current-snapshot-id'])!);
}

async function parquetOnDisk(table: string): Promise<string[]> {
  return (await fsp.readdir(join(table, 'data'), { recursive: true })).filter((n) => n.endsWith('.parquet'));
}

/** Every row of the table read by icebird is one of `ids`, each once, with the values it was ingested with. */
async function assertRows(lake: string, ids: readonly number[], what: string): Promise<void> {
  const srv = await serveDir(lake);
  let rows: Record<string, unknown>[];
  try {
    ({ rows } = await readIcebergTable({ tableUrl: pathToFileURL(join(lake, 'events')).href, route: fileRoute(lake, srv.url) }));
  } finally {
    await srv.close();
  }
  const seen = new Map<number, number>();
  for (const r of rows) {
    const id = Number(r.id);
    seen.set(id, (seen.get(id) ?? 0) + 1);
    const want = rowOf(id);
    const ts = r.ts instanceof Date ? r.ts.getTime() : typeof r.ts === 'bigint' ? Number(r.ts / 1000n) : Number(r.ts);
    assert.deepEqual({ id, ts, msg: r.msg ?? null }, want, `${what}: row ${id}'s values`);
  }
  assert.deepEqual([...seen].filter(([, n]) => n > 1).map(([id]) => id), [], `${what}: rows read more than once`);
  assert.deepEqual(ids.filter((id) => !seen.has(id)), [], `${what}: rows missing`);
  assert.equal(rows.length, ids.length, `${what}: only the ingested rows`);
}

test('4 writers append while 2 maintainers compact and expire: every row once with its values, replace snapshots committed, far fewer files', { timeout: 600_000 }, async (t) => {
  const lake = tempDir('hypsink-ice-compact-lake-');
  const table = join(lake, 'events');
  const writers = await Promise.all([0, 1, 2, 3].map(() => member(lake)));
  // Expiry runs in every maintain, at its default age while the writers write (LLP 0078 says why), then at 1 ms.
  const maintainers = await Promise.all([0, 1].map(() => member(lake)));
  const expirer = await member(lake, { maxSnapshotAgeMs: 1 });
  const ks = await Promise.all([...writers, ...maintainers, expirer].map(async (c) => (await openKernel(c)).k));
  const all: number[] = [];
  const ROUNDS = 4;
  const PER = 12; // rows per writer, source and round: 3 units
  try {
    let writing = true;
    const done: string[] = [];
    const maintaining = ks.slice(4, 6).map(async (k) => {
      while (writing) done.push(...(await k.maintain({ tables: true })).tables!.map((t) => t.done));
    });
    await Promise.all(
      ks.slice(0, 4).map(async (k, w) => {
        for (let round = 0; round < ROUNDS; round++) {
          for (const [s, source] of SOURCES.entries()) {
            const ids = Array.from({ length: PER }, (_, i) => w * 100_000 + s * 10_000 + round * 100 + i);
            all.push(...ids);
            await ingest(k, source, ids);
          }
          await exportAll(k);
        }
      }),
    );
    writing = false;
    await Promise.all(maintaining);
    await assertRows(lake, all, 'while compacting');
    t.diagnostic(`${done.filter((d) => /compacted into/.test(d)).length} compactions committed, ${done.filter((d) => /another commit removed/.test(d)).length} gave way to another's, of ${done.length} runs`);
    const replaces = headOf(table).snapshots.filter((s) => s.summary.operation === 'replace');
    assert.ok(replaces.length > 0 || done.some((d) => /compacted into/.test(d)), `no compaction committed: ${done.slice(-6).join(' | ')}`);

    // One compaction after the last writes: how many ran while they wrote depends on the machine's load.
    done.push(...(await ks[4]!.maintain({ tables: true })).tables!.map((t) => t.done));
    // The writers move on (their newest snapshots after the compactions), then one last compaction and expiry.
    for (const [w, k] of ks.slice(0, 4).entries()) {
      for (const [s, source] of SOURCES.entries()) {
        const ids = Array.from({ length: 2 }, (_, i) => w * 100_000 + s * 10_000 + 9_000 + i);
        all.push(...ids);
        await ingest(k, source, ids);
      }
      await exportAll(k);
    }
    const last = (await ks[6]!.maintain({ tables: true })).tables!.map((t) => t.done).join(' | ');
    await assertRows(lake, all, 'after the last compaction and expiry');
    const live = liveFiles(table);
    const kept = new Set(headOf(table).snapshots.flatMap(filesOf));
    const disk = (await parquetOnDisk(table)).map((f) => join(table, 'data', f));
    // 2 sources × a few days: about a compacted file a partition.
    assert.ok(live.length <= 12, `the current snapshot reads ${live.length} data files (${last})`);
    // Every replaced file no kept snapshot reads is gone; what is left unread is a losing maintainer's rewrite (an orphan for cleanup).
    const unread = disk.filter((f) => !kept.has(f));
    assert.deepEqual(unread.filter((f) => !/\/compact-[^/]*\.parquet$/.test(f)), [], 'a unit\'s replaced file left on disk though no kept snapshot reads it');
    const units = 4 * SOURCES.length * (ROUNDS * 3 + 1);
    assert.ok(kept.size < units, `${kept.size} data files read by the kept snapshots, against ${units} units of a file or more each: ${last}`);
    for (const f of live) await fsp.access(f);
    const avro = await checkAvroFiles(await avroFilesOf(table));
    assert.ok(avro.manifests.length > 0);
  } finally {
    for (const k of ks) await k.close();
  }
});

/**
 * The real local-fs destination, its first `op` (a create, a read) of a key
 * `match` accepts held at `gate`, once, after `arrived()`.
 */
function heldOnce(inner: BlobDestination, op: 'putIfAbsent' | 'get', match: (key: string) => boolean, arrived: () => void, gate: Promise<void>): BlobDestination {
  let once = false;
  const hold = async (key: string) => {
    if (once || !match(key)) return;
    once = true;
    arrived();
    await gate;
  };
  return overDestination(inner, {
    async get(key, opts) {
      if (op === 'get') await hold(key);
      return inner.get!(key, opts);
    },
    async putIfAbsent(key, body, opts) {
      if (op === 'putIfAbsent') await hold(key);
      return inner.putIfAbsent(key, body, opts);
    },
  });
}

const log = { debug() {}, info() {}, warn() {}, error() {} };

/** Maintainer A, compacting through `compactTable` over the real local-fs, held before it creates its version. */
function heldMaintainer(lake: string, table: string) {
  let release!: () => void;
  let arrived!: () => void;
  const gate = new Promise<void>((r) => {
    release = r;
  });
  const there = new Promise<void>((r) => {
    arrived = r;
  });
  const inner = localFs(lake);
  const next = () => {
    const v = Math.max(...readdirSync(join(table, 'metadata')).flatMap((n) => /^v(\d+)\.metadata\.json$/.exec(n)?.[1] ?? []).map(Number));
    return `events/metadata/v${v + 1}.metadata.json`;
  };
  let target = '';
  const destination = heldOnce(inner, 'putIfAbsent', (key) => key === target, arrived, gate);
  const store = new TableStore('events', destination, 'lake', log as never);
  let id = 1;
  const run = () => {
    target = next();
    return compactTable({
      store,
      destination: destination as never,
      cfg: { compactTargetBytes: 1 << 20, compactMinFiles: 2, commitAttempts: 20, compression: 'zstd', rowGroupRows: 65_536 },
      signal: new AbortController().signal,
      fault: () => {},
      snapshotId: () => 7_000_000 + id++,
      partitionFields: (spec) => spec.fields.map((f) => ({ name: f.name, fieldId: f['field-id'], type: f.transform === 'day' ? 'int' : 'string' })),
    });
  };
  return { run, there, release };
}

test('a maintainer held at its commit while a writer appends re-bases and commits; held while a writer appends and another maintainer compacts the same files, it commits nothing; every row once', { timeout: 300_000 }, async () => {
  const lake = tempDir('hypsink-ice-compact-held-');
  const table = join(lake, 'events');
  const { k } = await openKernel(await member(lake));
  const { k: other } = await openKernel(await member(lake));
  const ids: number[] = [];
  let next = 1;
  const more = async (n: number) => {
    const batch = Array.from({ length: n }, () => next++);
    ids.push(...batch);
    await ingest(k, 'web', batch);
    await exportAll(k);
  };
  try {
    await more(16);
    const before = liveFiles(table).length;
    // A writer appends while A waits at its commit: A's create loses, it re-reads, its files are still live, it commits on the new head.
    const a = heldMaintainer(lake, table);
    const aDone = a.run();
    await a.there;
    await more(6);
    a.release();
    const said = await aDone;
    assert.match(said, /compacted into/, said);
    assert.ok(headOf(table).snapshots.some((s) => s.summary.operation === 'replace'), 'a replace snapshot');
    assert.ok(liveFiles(table).length < before, `files: ${before} before, ${liveFiles(table).length} after`);
    await assertRows(lake, ids, 'after a re-based compaction');
    // A compacted file is one engines read by field id: every column carries its id, the footer the table's schema once.
    const compacted = liveFiles(table).filter((f) => /\/compact-[^/]*\.parquet$/.test(f));
    assert.ok(compacted.length > 0, 'a compacted file in the current snapshot');
    for (const f of compacted) {
      const bytes = readFileSync(f);
      const fields = tableFromIPC(pw.readParquet(bytes).intoIPCStream()).schema.fields;
      assert.deepEqual(fields.filter((x) => !x.metadata.get('PARQUET:field_id')).map((x) => x.name), [], `${f}: columns without a field id`);
      const kv = (await pw.ParquetFile.fromFile(new Blob([bytes]))).metadata().fileMetadata().keyValueMetadata();
      const md = JSON.parse(readFileSync(join(table, 'metadata', `v${Math.max(...readdirSync(join(table, 'metadata')).flatMap((n) => /^v(\d+)\.metadata\.json$/.exec(n)?.[1] ?? []).map(Number))}.metadata.json`), 'utf8'));
      const current = md.schemas.find((x: { 'schema-id': number }) => x['schema-id'] === md['current-schema-id']);
      assert.deepEqual(JSON.parse(kv.get('iceberg.schema')), current, `${f}: its iceberg.schema`);
    }

    // Again, and this time another maintainer compacts the same files while A waits: A must commit nothing.
    await more(12);
    const b = heldMaintainer(lake, table);
    const bDone = b.run();
    await b.there;
    await more(5);
    const byOther = (await other.maintain({ tables: true })).tables!.map((t) => t.done).join(' | ');
    assert.match(byOther, /compacted into/, byOther);
    b.release();
    const second = await bDone;
    assert.match(second, /another commit removed the files/, second);
    await assertRows(lake, ids, 'after two maintainers raced');
    const replaces = headOf(table).snapshots.filter((s) => s.summary.operation === 'replace');
    assert.equal(replaces.length, 2, 'the first compaction and the other maintainer\'s, not the held one\'s');
  } finally {
    await k.close();
    await other.close();
  }
});

test('a writer killed after its commit (intent open): the table is compacted and expired, the restarted writer finds its unit; every row once', { timeout: 300_000 }, async () => {
  const lake = tempDir('hypsink-ice-compact-recover-');
  const table = join(lake, 'events');
  const writer = await member(lake);
  const maintainer = await member(lake, { maxSnapshotAgeMs: 1 });
  const ids: number[] = [];
  {
    const { k } = await openKernel(writer);
    try {
      for (let i = 1; i <= 20; i++) ids.push(i);
      await ingest(k, 'web', ids);
      await exportAll(k);
      for (let i = 21; i <= 24; i++) ids.push(i);
      await ingest(k, 'web', ids.slice(20));
    } finally {
      await k.close();
    }
  }
  const crashed = await runBin(['export', '--sink', 'lake', '--json', '--config', writer], { env: { HYPSINK_FAULT: 'iceberg.afterCommit' } });
  assert.equal(crashed.signal, 'SIGKILL', crashed.stderr);
  {
    const { k } = await openKernel(maintainer);
    try {
      const done = (await k.maintain({ tables: true })).tables!.map((t) => t.done).join(' | ');
      assert.match(done, /compacted into/, done);
    } finally {
      await k.close();
    }
  }
  await assertRows(lake, ids, 'compacted, the intent open');
  const units = () => headOf(table).snapshots.filter((s) => s.summary['hypsink.until'] !== undefined).length;
  const committed = units();
  const { k } = await openKernel(writer);
  try {
    const e = await k.export('lake');
    assert.equal(e[0]!.failed, 0, JSON.stringify(e));
  } finally {
    await k.close();
  }
  assert.equal(units(), committed, 'the retry found its unit: no new snapshot');
  await assertRows(lake, ids, 'after the retry');
});

test('replaced files expire like any other: once the snapshots that read them are expired, they leave the disk, though the compaction\'s manifest still names them DELETED', { timeout: 300_000 }, async () => {
  const lake = tempDir('hypsink-ice-compact-expire-');
  const table = join(lake, 'events');
  // Manifests never merge here, so the replace's manifest with its DELETED entries stays in every later snapshot.
  const { k } = await openKernel(await member(lake, { manifestMinCountToMerge: 1000 }));
  const { k: expirer } = await openKernel(await member(lake, { maxSnapshotAgeMs: 1, compact: false }));
  const ids: number[] = [];
  let next = 1;
  const more = async (n: number) => {
    const batch = Array.from({ length: n }, () => next++);
    ids.push(...batch);
    await ingest(k, 'web', batch);
    await exportAll(k);
  };
  try {
    await more(16);
    const small = liveFiles(table);
    const done = (await k.maintain({ tables: true })).tables!.map((t) => t.done).join(' | ');
    assert.match(done, /compacted into/, done);
    // The writer moves on in both of its day partitions: its newest snapshots read the compacted files, not the small ones.
    await more(2);
    const expired = (await expirer.maintain({ tables: true })).tables!.map((t) => t.done).join(' | ');
    const left = small.filter((f) => existsSync(f));
    assert.deepEqual(left, [], `replaced files still on disk after expiry (${expired})`);
    await assertRows(lake, ids, 'after expiry');
  } finally {
    await k.close();
    await expirer.close();
  }
});

/** A maintainer run (`run(store, destination)`) over the real local-fs, held at its first manifest list read; `there` once it is. */
function heldReader<T>(lake: string, run: (store: TableStore, destination: BlobDestination) => Promise<T>) {
  let release!: () => void;
  let arrived!: () => void;
  const gate = new Promise<void>((r) => {
    release = r;
  });
  const there = new Promise<void>((r) => {
    arrived = r;
  });
  const destination = heldOnce(localFs(lake), 'get', (key) => /\/metadata\/snap-[^/]*\.avro$/.test(key), arrived, gate);
  const done = run(new TableStore('events', destination, 'lake', log as never), destination);
  done.catch(() => undefined);
  return { done, there, release };
}

test('a maintainer reading a table whose files another maintainer expires meanwhile re-bases (expiry) or stops (compaction), never calls the table damaged; every row once', { timeout: 300_000 }, async () => {
  const lake = tempDir('hypsink-ice-expire-race-');
  const { k } = await openKernel(await member(lake));
  const { k: other } = await openKernel(await member(lake, { maxSnapshotAgeMs: 1, compact: false }));
  const all: number[] = [];
  let next = 0;
  const round = async () => {
    const ids = Array.from({ length: 4 }, () => next++);
    all.push(...ids);
    await ingest(k, 'web', ids);
    await exportAll(k);
  };
  try {
    for (let i = 0; i < 4; i++) await round();
    const cfg = { maxSnapshotAgeMs: 1, minSnapshotsToKeep: 1, commitAttempts: 20 };
    // Expiry: A reads the snapshots' manifest lists of its head while B expires (and removes) three of them.
    const a = heldReader(lake, (store, destination) => expireSnapshots(store, destination, cfg as never, { signal: new AbortController().signal, now: Date.now() }));
    await a.there;
    await round();
    assert.match((await other.maintain({ tables: true })).tables!.map((t) => t.done).join(' | '), /snapshot\(s\) expired/);
    a.release();
    // Re-based on B's version, A finds B's work done.
    assert.match(await a.done, /none expired/);
    // Compaction: A reads its head's current snapshot while a writer commits over it and B expires that snapshot.
    const c = heldReader(lake, (store, destination) =>
      compactTable({
        store,
        destination: destination as never,
        cfg: { compactTargetBytes: 1 << 20, compactMinFiles: 2, commitAttempts: 20, compression: 'zstd', rowGroupRows: 65_536 },
        signal: new AbortController().signal,
        fault: () => {},
        snapshotId: () => 8_000_000 + next,
        partitionFields: (spec) => spec.fields.map((f) => ({ name: f.name, fieldId: f['field-id'], type: f.transform === 'day' ? 'int' : 'string' })),
      }),
    );
    await c.there;
    await round();
    assert.match((await other.maintain({ tables: true })).tables!.map((t) => t.done).join(' | '), /snapshot\(s\) expired/);
    c.release();
    assert.match(await c.done, /another maintainer expired files this run was reading; nothing compacted, run maintain again/);
    await assertRows(lake, all, 'after the races');
    // Real damage stays damage: the head's own manifest list removed, the writer's next commit says so.
    const table = join(lake, 'events');
    const head = headOf(table);
    await fsp.rm(fileURLToPath(head.snapshots.find((s) => s['snapshot-id'] === head['current-snapshot-id'])!['manifest-list']));
    await ingest(k, 'web', [next++]);
    const [p] = (await k.export('lake'))[0]!.partitions;
    assert.match(String(p?.error?.message), /is not there; the table is damaged: restore it/);
  } finally {
    await k.close();
    await other.close();
  }
});
