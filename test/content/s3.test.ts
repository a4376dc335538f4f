/**
 * Issue 29 for S3: a cache restored from a backup, or cloned to a second host,
 * hands out the same cache id and seqs again for other rows, and their unit's
 * key is already taken. The s3 destination stores each unit's digest as the
 * object's metadata and reads it back when the key is found taken (the HEAD
 * pre-check, or a 412 from a store that enforces If-None-Match), so the kernel
 * refuses the unit (HYPSINK_ERR_CONFLICT) instead of counting it committed.
 * Real kernel from a config file, real s3rver over loopback (behind the fault
 * proxy, which plays AWS's If-None-Match where asked), objects decoded with
 * parquet-wasm.
 * @ref LLP 0054: a unit's digest
 * @ref LLP 0057: local-fs and S3 record it
 */
import assert from 'node:assert/strict';
import { promises as fsp } from 'node:fs';
import { join } from 'node:path';
import { type TestContext, test } from 'node:test';
import { enforceIfNoneMatch } from '../support/fault-proxy.js';
import {
  assertExactlyOnce,
  cliExport,
  describeRun,
  type EventRow,
  events,
  FAST_RETRY,
  ingestWith,
  type LakeOptions,
  listKeys,
  readLake,
  startStack,
  statusOf,
  useCredentials,
  withKernel,
  writeConfig,
} from '../s3-e2e/helpers.js';
import { headObject } from '../s3/helpers.js';
import { unseenCopy } from '../support/kernel.js';
import { tempDir } from '../support/tmp.js';

useCredentials();

/**
 * The hypsink root (cache and state, as writeConfig lays them out) copied over
 * `to`'s: a backup, a restore, a cloned image. Copied into a host (`config`),
 * it is a copy the cache cannot see (a VM image, a restore in place: LLP 0055
 * settled), so only the destination's check of the unit's content stands
 * between its rows and the original's.
 */
async function copyRoot(from: string, to: string, config?: string): Promise<void> {
  for (const d of ['cache', 'state']) {
    await fsp.rm(join(to, d), { recursive: true, force: true });
    await fsp.cp(join(from, d), join(to, d), { recursive: true });
  }
  if (config) await unseenCopy(config);
}

async function exportLake(config: string) {
  const [r] = await withKernel(config, (k) => k.export('lake'));
  assert.ok(r);
  return r;
}

/** The tick refused the partition's unit as another's content; nothing of it was counted. */
function assertConflict(r: Awaited<ReturnType<typeof exportLake>>, source: string): void {
  const p = r.partitions.find((x) => x.partition.source === source);
  assert.ok(p?.error, `the export of ${source} failed: ${JSON.stringify(r.partitions.map((x) => [x.partition.source, x.error?.message]))}`);
  assert.equal(p.error.code, 'HYPSINK_ERR_CONFLICT', p.error.message);
  assert.match(p.error.message, /sink "lake"/);
  assert.match(p.error.message, /s3:\/\/lake\/hyp\/events\/source=/);
  assert.match(p.error.message, /restored backup/);
}

/** Two configs on one endpoint (the fault proxy before s3rver), each with its own hypsink root, the same bucket and prefix. */
async function twoRoots(t: TestContext, opts: LakeOptions & { enforce?: boolean } = {}) {
  const { s3, proxy, dir: a } = await startStack(t);
  // AWS enforces If-None-Match; s3rver does not, so the proxy plays it where a test asks.
  if (opts.enforce) proxy.setRule(enforceIfNoneMatch((bucket, key) => s3.objectExists(bucket, key)));
  const b = tempDir('hypsink-content-s3-');
  const lake: LakeOptions = { ...opts, config: { retry: FAST_RETRY, ...opts.config } };
  return { s3, proxy, a, b, configA: await writeConfig(a, proxy.endpoint, lake), configB: await writeConfig(b, proxy.endpoint, lake) };
}

test("the issue's reproduction on S3: a cache restored from a backup taken before its last export refuses the rows ingested after the restore", { timeout: 60_000 }, async (t) => {
  const { s3, a: dir, b: backup, configA: config } = await twoRoots(t);
  const base = events(1, 10);
  const old = events(11, 40);
  await ingestWith(config, 'web', base);
  assert.equal((await exportLake(config)).failed, 0);
  await copyRoot(dir, backup); // the backup: 10 rows exported
  await ingestWith(config, 'web', old);
  assert.equal((await exportLake(config)).failed, 0);
  const before = await listKeys(s3, 'hyp/');
  assert.deepEqual(before, ['hyp/events/source=web/events.0-10.parquet', 'hyp/events/source=web/events.10-50.parquet']);
  assert.match((await headObject(s3.endpoint, 'lake', before[1]!)).Metadata?.['hypsink-digest'] ?? '', /^u1-[A-Za-z0-9_-]{43}$/, 'the digest is the object metadata');

  await copyRoot(backup, dir, config); // restored: seqs 10..50 handed out again
  await ingestWith(config, 'web', events(101, 40));
  assertConflict(await exportLake(config), 'web');
  const p = await statusOf(config, 'web');
  assert.equal(p.exportedRows, 10, 'only the rows exported before the backup');
  assert.equal(p.pendingRows, 40);
  assert.equal(p.watermark, '10');
  assert.match(p.lastError ?? '', /HYPSINK_ERR_CONFLICT/);
  assertExactlyOnce(await readLake(s3), { web: [...base, ...old] });
  // The CLI says so too: exit 1, the code on stderr; still nothing counted.
  const r = await cliExport(config);
  assert.equal(r.code, 1, describeRun(r));
  assert.match(r.stderr, /HYPSINK_ERR_CONFLICT/, describeRun(r));
  assert.equal((await statusOf(config, 'web')).exportedRows, 10);
  assertExactlyOnce(await readLake(s3), { web: [...base, ...old] });
});

test('a cloned cache on a store that enforces If-None-Match (412), multipart units: the clone is refused, each row once, no upload left', { timeout: 90_000 }, async (t) => {
  // Padded rows and 16 KiB parts: every unit of 200 rows goes multipart, the 412 comes at its completion.
  const { s3, proxy, a, b, configA, configB } = await twoRoots(t, { enforce: true, config: { createIfAbsent: 'header', partSize: 16 * 1024 } });
  const pad = 600;
  const first = events(1, 200, pad);
  await ingestWith(configA, 'web', first);
  assert.equal((await exportLake(configA)).failed, 0);
  await copyRoot(a, b, configB); // the cloned image
  const onA = events(1001, 200, pad);
  const onB = events(2001, 200, pad);
  const appB = events(3001, 5);
  await ingestWith(configA, 'web', onA);
  await ingestWith(configB, 'web', onB);
  await ingestWith(configB, 'app', appB); // no twin on a: written
  assert.equal((await exportLake(configA)).failed, 0);
  const r = await exportLake(configB);
  assertConflict(r, 'web');
  assert.equal(r.partitions.find((x) => x.partition.source === 'app')?.error, null);
  const pb = await statusOf(configB, 'web');
  assert.equal(pb.exportedRows, 200);
  assert.equal(pb.pendingRows, 200);
  assert.equal((await statusOf(configB, 'app')).exportedRows, 5);
  assertExactlyOnce(await readLake(s3), { web: [...first, ...onA], app: appB });
  assert.deepEqual(await s3.pendingUploads('lake'), [], 'the refused upload was aborted');
  // b's web unit went multipart; its completion was refused (412), then its digest read with HEAD.
  const key = 'hyp/events/source=web/events.200-400.parquet';
  const seen = proxy.log.filter((l) => l.req.key === key).map((l) => `${l.req.method}${l.req.query.has('uploadId') && l.req.method === 'POST' ? ':complete' : ''}:${l.action}`);
  assert.deepEqual(seen.filter((x) => x.startsWith('POST:complete')), ['POST:complete:forward', 'POST:complete:respond']);
  assert.equal(seen.at(-1), 'HEAD:forward');
  // a goes on undisturbed.
  const more = events(1201, 3);
  await ingestWith(configA, 'web', more);
  assert.equal((await exportLake(configA)).failed, 0);
  assertExactlyOnce(await readLake(s3), { web: [...first, ...onA, ...more], app: appB });
});

test('a crash after the unit is stored, then the retry (412 path): the same unit is a duplicate, exported once', { timeout: 60_000 }, async (t) => {
  const { s3, proxy, configA: config } = await twoRoots(t, { enforce: true, config: { createIfAbsent: 'header' } });
  const rows: EventRow[] = events(1, 30);
  await ingestWith(config, 'web', rows);
  const crashed = await cliExport(config, { HYPSINK_FAULT: 'export.afterShip' });
  assert.equal(crashed.signal, 'SIGKILL', describeRun(crashed));
  assert.equal((await statusOf(config, 'web')).exportedRows, 0, 'the advance was lost');
  const r = await exportLake(config);
  assert.equal(r.failed, 0, JSON.stringify(r.partitions.map((p) => p.error?.message)));
  const p = await statusOf(config, 'web');
  assert.equal(p.exportedRows, 30);
  // The retry's PutObject was refused (412) and the digest read back: its own.
  const seen = proxy.log.filter((l) => l.req.key === 'hyp/events/source=web/events.0-30.parquet').map((l) => `${l.req.method}:${l.action}`);
  assert.deepEqual(seen, ['PUT:forward', 'PUT:respond', 'HEAD:forward']);
  assertExactlyOnce(await readLake(s3), { web: rows }, { web: p.watermark });
});
