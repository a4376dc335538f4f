/**
 * Iceberg and a unit's content (issue 29): a copied cache (a cloned host, a
 * restored backup) hands out this cache's id and the same seqs again for other
 * rows. The table must then refuse the copy's unit loudly
 * (HYPSINK_ERR_CONFLICT, nothing counted, the unit stays pending), never call
 * it committed from its label; a crash-retry of the same unit is still found
 * committed, and a snapshot written before digests is taken by its label.
 * Real kernel from a config file, tables on real disk and on s3rver, read back
 * by icebird (a reader we did not write).
 * @ref LLP 0054, LLP 0058
 */
import assert from 'node:assert/strict';
import { cpSync, promises as fsp, readdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { unitDigest } from '../../kernel/sinks/digest.js';
import type { PartitionReport } from '../../kernel/sinks/driver.js';
import { eventLines, ingestText, type Json, openKernel, sampleConfig, unseenCopy, writeConfig } from '../support/kernel.js';
import { fileRoute, readIcebergTable, s3Route, serveDir, startConditionalS3 } from '../support/iceberg.js';
import { throwingAt } from '../support/fault.js';
import { S3RVER_ACCESS_KEY_ID } from '../support/s3server.js';
import { tempDir } from '../support/tmp.js';

let s3: Awaited<ReturnType<typeof startConditionalS3>>;
before(async () => {
  s3 = await startConditionalS3({ buckets: ['lake'] });
  process.env.AWS_ACCESS_KEY_ID = S3RVER_ACCESS_KEY_ID;
  process.env.AWS_SECRET_ACCESS_KEY = 'S3RVER';
  process.env.AWS_EC2_METADATA_DISABLED = 'true';
});
after(() => s3.stop());

type Kernel = Awaited<ReturnType<typeof openKernel>>['k'];

interface Host {
  /** The folder holding the config and the hypsink root (`.hypsink/`: cache and state). */
  readonly dir: string;
  readonly config: string;
}

/** A host with the `lake` Iceberg sink: local-fs at `lakeDir`, or s3rver under `s3Prefix`. */
async function host(opts: { lakeDir?: string; s3Prefix?: string }): Promise<Host> {
  const dir = tempDir('hypsink-iceberg-content-');
  const c = sampleConfig();
  delete (c.sinks as Record<string, unknown>).archive;
  c.sinks.lake = {
    writer: '@hypsink/format-iceberg',
    datasets: ['events'],
    ...(opts.s3Prefix
      ? { destination: '@hypsink/s3', config: { bucket: 'lake', prefix: opts.s3Prefix, region: 'us-east-1', endpoint: s3.endpoint, forcePathStyle: true } }
      : { destination: '@hypsink/local-fs', config: { dir: opts.lakeDir ?? join(dir, 'lake') } }),
  };
  return { dir, config: await writeConfig(dir, c) };
}

/** A second host whose hypsink root is a copy of `h`'s (a cloned VM image): same cache id, same seqs, same sink state. */
async function clone(h: Host, opts: { lakeDir?: string; s3Prefix?: string }): Promise<Host> {
  const twin = await host(opts);
  cpSync(join(h.dir, '.hypsink'), join(twin.dir, '.hypsink'), { recursive: true });
  assert.equal(cacheIdOf(twin), cacheIdOf(h));
  await unseenCopy(twin.config);
  return twin;
}

const cacheIdOf = (h: Host) => readFileSync(join(h.dir, '.hypsink', 'cache', 'cache.json'), 'utf8');

async function run<T>(config: string, fn: (k: Kernel) => Promise<T>): Promise<T> {
  const { k } = await openKernel(config);
  try {
    return await fn(k);
  } finally {
    await k.close();
  }
}

/** Ingest ids `from`..`from+n-1` into `web` and export `lake`: the one partition's report. */
async function ingestAndExport(h: Host, from: number, n: number): Promise<PartitionReport> {
  return run(h.config, async (k) => {
    if (n > 0) assert.equal((await ingestText(k, 'web', eventLines(from, n))).rejected, 0);
    const e = await k.export('lake');
    assert.equal(e[0]!.partitions.length, 1);
    return e[0]!.partitions[0]!;
  });
}

/** The watermark of `web` at `lake`: how far the host counts its rows as exported. */
async function watermarkOf(h: Host): Promise<{ seq: string | undefined; exported: number }> {
  return run(h.config, async (k) => {
    const w = await (await k.sink('lake')).watermarks.read(k.cache.partition('events', 'web'));
    return { seq: w.continuation?.seq, exported: w.exportedRowCount };
  });
}

async function readLocal(lake: string) {
  const srv = await serveDir(lake);
  try {
    return await readIcebergTable({ tableUrl: `file://${join(lake, 'events')}`, route: fileRoute(lake, srv.url) });
  } finally {
    await srv.close();
  }
}

/** Each id once: the ids of `rows` sorted, against `want`. */
function assertIds(rows: Record<string, unknown>[], want: number[], what: string): void {
  const got = rows.map((r) => Number(r.id)).sort((a, b) => a - b);
  assert.equal(new Set(got).size, got.length, `${what}: ${got.length - new Set(got).size} duplicate row(s)`);
  assert.deepEqual(got, [...want].sort((a, b) => a - b), `${what}: the table's ids differ from the rows exported`);
}

const range = (from: number, n: number) => Array.from({ length: n }, (_, i) => from + i);

/** A refusal of the copy's unit: HYPSINK_ERR_CONFLICT, no row counted for it. */
function assertConflict(p: PartitionReport, what: string, held: RegExp): void {
  assert.equal(p.error?.code, 'HYPSINK_ERR_CONFLICT', `${what}: ${p.error ? `${p.error.code}: ${p.error.message}` : 'no error: the unit was called delivered'}`);
  assert.match(p.error!.message, held);
  assert.match(p.error!.message, /a copy of another/);
  assert.equal(p.rows, 0, `${what}: rows counted for the refused unit`);
  assert.equal(p.units, 0, `${what}: a unit counted`);
}

function headOf(lake: string): { version: number; file: string; metadata: Json } {
  const dir = join(lake, 'events', 'metadata');
  const v = Math.max(...readdirSync(dir).flatMap((n) => (/^v(\d+)\.metadata\.json$/.exec(n) ? [Number(/^v(\d+)/.exec(n)![1])] : [])));
  const file = join(dir, `v${v}.metadata.json`);
  return { version: v, file, metadata: JSON.parse(readFileSync(file, 'utf8')) as Json };
}

const summaries = (lake: string) => (headOf(lake).metadata.snapshots as { summary: Record<string, string> }[]).map((s) => s.summary);

/** What the cache's rows of `web` in `(since, until]` digest to (since -1: the first unit). */
function digestOf(h: Host, since: bigint, until: string): Promise<string> {
  return run(h.config, (k) => unitDigest(k.cache, k.cache.partition('events', 'web'), since, until));
}

test('a cloned cache: the copy ingests other rows under the same seqs, its unit (0,5] is refused as HYPSINK_ERR_CONFLICT, never called committed; the table holds the original rows once', async () => {
  const a = await host({});
  const lake = join(a.dir, 'lake');
  await run(a.config, async () => undefined); // the cache id is made
  const b = await clone(a, { lakeDir: lake });

  const pa = await ingestAndExport(a, 1, 5);
  assert.equal(pa.error, null, String(pa.error?.message));
  assert.equal(pa.rows, 5);
  // The copy hands out seqs 1..5 again, for other rows: the same label, (0, 5].
  const pb = await ingestAndExport(b, 101, 5);
  assertConflict(pb, 'the clone', /the same range with digest u1-/);
  // Nothing of it counted: the unit stays pending, and is refused again on the next export.
  assert.deepEqual(await watermarkOf(b), { seq: undefined, exported: 0 });
  assertConflict(await ingestAndExport(b, 0, 0), 'the clone again', /the same range/);

  const { rows } = await readLocal(lake);
  assertIds(rows, range(1, 5), 'after the clone');
  // The snapshot records the unit's digest (a string, as the summary map holds), and inventory hands it to verify.
  const want = await digestOf(a, -1n, '5');
  const [s] = summaries(lake);
  assert.equal(summaries(lake).length, 1);
  assert.deepEqual([s!['hypsink.since'], s!['hypsink.until'], s!['hypsink.digest']], ['0', '5', want]);
  assert.notEqual(await digestOf(b, -1n, '5'), want);
  const held = await run(a.config, async (k) => {
    const out = [];
    for await (const u of (await k.sink('lake')).shipper.inventory!(k.cache.partition('events', 'web'), { signal: new AbortController().signal })) out.push(u);
    return out;
  });
  assert.deepEqual(
    held.map((u) => [u.since, u.until, u.digest]),
    [[null, '5', want]],
  );
  assert.equal((await run(a.config, (k) => k.verify('lake'))).ok, true);
});

test('a restored cache: rows ingested after a restore under seqs already exported are refused (same range, and overlapping), the table keeps the exported rows once', async () => {
  const a = await host({});
  const lake = join(a.dir, 'lake');
  const root = join(a.dir, '.hypsink');
  const backup = join(tempDir('hypsink-iceberg-backup-'), '.hypsink');
  await run(a.config, async () => undefined);
  // The backup, taken before rows 1..5 came in; they export, then the backup is restored over the cache.
  cpSync(root, backup, { recursive: true });
  assert.equal((await ingestAndExport(a, 1, 5)).error, null);
  rmSync(root, { recursive: true });
  cpSync(backup, root, { recursive: true });
  await unseenCopy(a.config);
  // Other rows under seqs 1..5: the same label, other content.
  assertConflict(await ingestAndExport(a, 201, 5), 'the restored cache', /the same range with digest u1-/);
  assert.deepEqual(await watermarkOf(a), { seq: undefined, exported: 0 });
  assertIds((await readLocal(lake)).rows, range(1, 5), 'after the restore');

  // A backup taken after rows 11..15 were cached and before they exported: restored, it exports them again
  // with rows of its own, (0, 10], overlapping the committed (0, 5]: the same situation, the same refusal.
  const c = await host({});
  const lakeC = join(c.dir, 'lake');
  const rootC = join(c.dir, '.hypsink');
  const backupC = join(tempDir('hypsink-iceberg-backup-'), '.hypsink');
  await run(c.config, (k) => ingestText(k, 'web', eventLines(11, 5)));
  cpSync(rootC, backupC, { recursive: true });
  assert.equal((await ingestAndExport(c, 0, 0)).error, null);
  rmSync(rootC, { recursive: true });
  cpSync(backupC, rootC, { recursive: true });
  await unseenCopy(c.config);
  assertConflict(await ingestAndExport(c, 301, 5), 'the restored cache, overlapping', /unit \(start, 5\] with digest u1-/);
  assertIds((await readLocal(lakeC)).rows, range(11, 5), 'after the overlapping restore');
});

test('S3: a clone whose original wrote its data files but did not commit never takes them as its own; the original is refused after', async () => {
  const prefix = `content${Date.now()}`;
  const a = await host({ s3Prefix: prefix });
  await run(a.config, async () => undefined);
  const b = await clone(a, { s3Prefix: prefix });
  // The original writes its data file for (0, 5] and stops before its manifest.
  const failed = await throwingAt('iceberg.afterDataFile', () => ingestAndExport(a, 1, 5));
  assert.match(String(failed.error?.message), /iceberg.afterDataFile/);
  // The copy ships (0, 5] with its own rows: first to commit that label, it owns it, with its own files.
  const pb = await ingestAndExport(b, 101, 5);
  assert.equal(pb.error, null, String(pb.error?.message));
  const read = () => readIcebergTable({ tableUrl: `s3://lake/${prefix}/events`, route: s3Route(s3.s3.endpoint) });
  assertIds((await read()).rows, range(101, 5), 'after the copy');
  // The original's retry finds its label holding other rows: refused, not called committed.
  assertConflict(await ingestAndExport(a, 0, 0), 'the original', /the same range with digest u1-/);
  assertIds((await read()).rows, range(101, 5), 'after the original');
});

test('a crash-retry of the same unit is still a duplicate (its digest matches); a snapshot recorded without a digest is taken by its label', async () => {
  const a = await host({});
  const lake = join(a.dir, 'lake');
  // Unit (0, 5] commits, then the export fails before the watermark moves.
  const failed = await throwingAt('iceberg.afterCommit', () => ingestAndExport(a, 1, 5));
  assert.match(String(failed.error?.message), /iceberg.afterCommit/);
  assert.equal(summaries(lake).length, 1);
  const retried = await ingestAndExport(a, 0, 0);
  assert.equal(retried.error, null, String(retried.error?.message));
  assert.equal(summaries(lake).length, 1, 'the retry committed the unit again');
  assert.deepEqual(await watermarkOf(a), { seq: '5', exported: 5 });

  // Unit (5, 10] commits and fails the same way; its snapshot then loses its digest (as one written before digests).
  assert.match(String((await throwingAt('iceberg.afterCommit', () => ingestAndExport(a, 6, 5))).error?.message), /iceberg.afterCommit/);
  const head = headOf(lake);
  const snaps = head.metadata.snapshots as { summary: Record<string, string> }[];
  assert.equal(snaps.length, 2);
  assert.equal(typeof snaps[1]!.summary['hypsink.digest'], 'string');
  delete snaps[1]!.summary['hypsink.digest'];
  await fsp.writeFile(head.file, JSON.stringify(head.metadata));
  const legacy = await ingestAndExport(a, 0, 0);
  assert.equal(legacy.error, null, String(legacy.error?.message));
  assert.equal(summaries(lake).length, 2, 'the retry committed the unit again');
  assert.deepEqual(await watermarkOf(a), { seq: '10', exported: 10 });
  assertIds((await readLocal(lake)).rows, range(1, 10), 'after the retries');
});

test('verify: a snapshot whose recorded digest is not the cache rows of its range is a content finding naming it (LLP 0054)', async () => {
  const a = await host({});
  const lake = join(a.dir, 'lake');
  assert.equal((await ingestAndExport(a, 1, 5)).error, null);
  assert.equal((await ingestAndExport(a, 6, 5)).error, null);
  const ok = await run(a.config, (k) => k.verify('lake'));
  assert.equal(ok.ok, true, JSON.stringify(ok));
  assert.equal(ok.sinks[0]!.partitions[0]!.contentChecked, 2);
  // Plant another digest in the head's summary of the second unit (an edit, or another writer's rows).
  const head = headOf(lake);
  const snaps = head.metadata.snapshots as { summary: Record<string, string> }[];
  const second = snaps.find((s) => s.summary['hypsink.since'] === '5')!;
  second.summary['hypsink.digest'] = `u1-${'C'.repeat(43)}`;
  await fsp.writeFile(head.file, JSON.stringify(head.metadata));
  const bad = await run(a.config, (k) => k.verify('lake'));
  assert.equal(bad.ok, false);
  const f = bad.sinks[0]!.findings;
  assert.deepEqual(f.map((x) => x.problem), ['content'], JSON.stringify(f));
  assert.match(f[0]!.message, /recorded digest u1-C{43}, the cache's u1-/);
});
