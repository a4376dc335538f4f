/**
 * Issue 29 for local-fs: a unit is known by its content, not only its name.
 * A cache restored from a backup, or copied to a second host, hands out the
 * same cache id and seqs again for other rows; their unit's key is already
 * taken by the rows shipped before. local-fs records each unit's digest in its
 * commit record and returns it when the key is found taken, so the kernel
 * refuses the unit (HYPSINK_ERR_CONFLICT) instead of counting it committed.
 * Real kernel, real disk, the CLI's own `main`; the files are read back with
 * parquet-wasm, not the kernel's reader.
 * @ref LLP 0054: a unit's digest
 * @ref LLP 0057: local-fs and S3 record it
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { promises as fsp } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { archive, assertExactlyOnce, cli, cliStatus, eventLines, type Json, partitionStatus, range, readExports, runSteps, sampleConfig, unseenCopy, writeConfig } from '../support/kernel.js';
import { localFs } from '../support/local-fs.js';
import { tempDir } from '../support/tmp.js';

process.env.HYPSINK_LOG_LEVEL ??= 'warn';

interface Host {
  readonly dir: string;
  readonly config: string;
  ingest(source: string, from: number, n: number, extra?: (id: number) => Json): Promise<void>;
  /** `hypsink export`: its exit code and output. */
  export(): Promise<{ code: number; out: string; err: string }>;
}

/** A hypsink root at `dir` (config, `.hypsink/` cache and state) exporting to `exports`, an absolute path shared by every host. */
async function host(dir: string, exports: string, keys?: Json): Promise<Host> {
  const c = sampleConfig();
  archive(c).config = { dir: exports };
  if (keys) archive(c).keys = keys;
  const config = await writeConfig(dir, c);
  let batch = 0;
  return {
    dir,
    config,
    async ingest(source, from, n, extra) {
      const file = join(dir, `in-${++batch}.ndjson`);
      await fsp.writeFile(file, eventLines(from, n, extra));
      const r = await cli('ingest', 'events', '--source', source, '--file', file, '--config', config);
      assert.equal(r.code, 0, r.err);
    },
    export: () => cli('export', '--config', config),
  };
}

/**
 * The whole hypsink root folder (`.hypsink`: cache and state) copied from
 * `from` to `to`: a backup, a restore, a cloned image. Copied into a host
 * (`config`), it is a copy the cache cannot see (a VM image, a restore in
 * place: LLP 0055 settled), so only the destination's check of the unit's
 * content stands between its rows and the original's.
 */
async function copyRoot(from: string, to: string, config?: string): Promise<void> {
  await fsp.rm(join(to, '.hypsink'), { recursive: true, force: true });
  await fsp.cp(join(from, '.hypsink'), join(to, '.hypsink'), { recursive: true });
  if (config) await unseenCopy(config);
}

/** The export refused the unit as another's content, naming the sink and the likely cause. */
function assertConflict(r: { code: number; out: string; err: string }): void {
  assert.equal(r.code, 1, `the export fails: ${r.out}${r.err}`);
  assert.match(r.err, /HYPSINK_ERR_CONFLICT/, r.err);
  assert.match(r.err, /sink "archive"/);
  assert.match(r.err, /restored backup/);
}

test("the issue's reproduction: a cache restored from a backup taken before its last export refuses the rows ingested after the restore, never reports them exported", async () => {
  const base = tempDir('hypsink-content-');
  const exports = join(base, 'exports');
  const h = await host(base, exports);
  const backup = join(base, 'backup');
  await fsp.mkdir(backup);
  await h.ingest('web', 1, 10);
  assert.equal((await h.export()).code, 0);
  await copyRoot(base, backup); // the backup: 10 rows exported
  await h.ingest('web', 11, 40);
  assert.equal((await h.export()).code, 0); // events.10-50 holds 11..50
  assertExactlyOnce(await readExports(exports), { web: range(1, 50) });
  const before = await fsp.readFile(join(exports, 'events/source=web/events.10-50.parquet'));

  await copyRoot(backup, base, h.config); // restored: the cache hands out seqs 10..50 again
  await h.ingest('web', 101, 40); // other rows under the same seqs
  assertConflict(await h.export());
  // Nothing of the refused unit is counted as exported, and it stays pending.
  const p = partitionStatus(await cliStatus(h.config), 'archive', 'web');
  assert.equal(p.exportedRows, 10, 'only the rows exported before the backup');
  assert.equal(p.pendingRows, 40);
  assert.equal(p.watermark, '10');
  assert.match(p.lastError ?? '', /HYPSINK_ERR_CONFLICT/);
  // The destination is untouched: 1..50 exactly once, the old file as it was.
  assertExactlyOnce(await readExports(exports), { web: range(1, 50) });
  assert.deepEqual(await fsp.readFile(join(exports, 'events/source=web/events.10-50.parquet')), before);
  // Exporting again refuses again: never committed later by its name.
  assertConflict(await h.export());
  assert.equal(partitionStatus(await cliStatus(h.config), 'archive', 'web').exportedRows, 10);
});

test('a restored cache whose backup is older than several exports: a refused key that is not the last one written in its folder is refused too', async () => {
  const base = tempDir('hypsink-content-');
  const exports = join(base, 'exports');
  const h = await host(base, exports);
  await h.ingest('web', 1, 30);
  assert.equal((await h.export()).code, 0); // events.0-30
  await h.ingest('web', 31, 20);
  assert.equal((await h.export()).code, 0); // events.30-50, the folder's last commit
  // Restored from a backup taken before the first ingest: an empty root.
  await fsp.rm(join(base, '.hypsink'), { recursive: true, force: true });
  await h.ingest('web', 101, 30); // a fresh cache: seqs 0..30 again, other rows
  assertConflict(await h.export());
  const p = partitionStatus(await cliStatus(h.config), 'archive', 'web');
  assert.equal(p.exportedRows, 0);
  assert.equal(p.pendingRows, 30);
  assertExactlyOnce(await readExports(exports), { web: range(1, 50) });
});

test('a cloned cache: both copies ingest other rows and export to the same folder; each row lands once or the copy is refused', async () => {
  const base = tempDir('hypsink-content-');
  const exports = join(base, 'exports');
  await fsp.mkdir(join(base, 'a'));
  const a = await host(join(base, 'a'), exports);
  await a.ingest('web', 1, 10);
  await a.ingest('app', 1, 5);
  assert.equal((await a.export()).code, 0);
  await fsp.mkdir(join(base, 'b'));
  const b = await host(join(base, 'b'), exports);
  await copyRoot(a.dir, b.dir, b.config); // the cloned image
  await a.ingest('web', 11, 20); // seqs 10..30 on both hosts, other rows
  await b.ingest('web', 201, 20);
  await b.ingest('app', 206, 7); // app: seqs 5..12 on b only
  assert.equal((await a.export()).code, 0);
  const r = await b.export();
  assertConflict(r);
  // b's web unit is refused and pending; its app unit had no twin and was written.
  const pb = partitionStatus(await cliStatus(b.config), 'archive', 'web');
  assert.equal(pb.exportedRows, 10);
  assert.equal(pb.pendingRows, 20);
  assert.equal(partitionStatus(await cliStatus(b.config), 'archive', 'app').exportedRows, 12);
  assertExactlyOnce(await readExports(exports), { web: range(1, 30), app: [...range(1, 5), ...range(206, 7)] });
  // The first host goes on undisturbed.
  await a.ingest('web', 31, 5);
  assert.equal((await a.export()).code, 0);
  assertExactlyOnce(await readExports(exports), { web: range(1, 35), app: [...range(1, 5), ...range(206, 7)] });
});

test('a crash after the link, then the retry: the same unit is a duplicate (its digest is the recorded one), exported once, no error', async () => {
  const base = tempDir('hypsink-content-');
  const exports = join(base, 'exports');
  const h = await host(base, exports);
  await h.ingest('web', 1, 25);
  const crashed = await runSteps([['export', '--config', h.config]], { HYPSINK_FAULT: 'localfs.afterLink' });
  assert.equal(crashed.signal, 'SIGKILL', `killed at localfs.afterLink: ${crashed.stderr}`);
  assert.equal(partitionStatus(await cliStatus(h.config), 'archive', 'web').exportedRows, 0, 'the advance was lost');
  const r = await h.export();
  assert.equal(r.code, 0, r.err);
  assert.equal(partitionStatus(await cliStatus(h.config), 'archive', 'web').exportedRows, 25);
  assertExactlyOnce(await readExports(exports), { web: range(1, 25) });
});

test('time keys: every blob of a unit records the digest; a restored cache whose unit lands on a taken day key is refused', async () => {
  const base = tempDir('hypsink-content-');
  const exports = join(base, 'exports');
  const h = await host(base, exports, { time: 'hour' });
  const backup = join(base, 'backup');
  await fsp.mkdir(backup);
  await h.ingest('web', 1, 5);
  assert.equal((await h.export()).code, 0);
  await copyRoot(base, backup);
  // eventLines puts row id at 2026-01-01 + id seconds: ids 6..40 all in hour 00.
  await h.ingest('web', 6, 35);
  assert.equal((await h.export()).code, 0);
  await copyRoot(backup, base, h.config);
  await h.ingest('web', 3601, 35); // hour 01: another time key than the one taken, but the same unit
  const ok = await h.export();
  // The unit's blob for hour 01 is new, so written; none of its keys is taken, so it is no conflict.
  assert.equal(ok.code, 0, ok.err);
  assertExactlyOnce(await readExports(exports), { web: [...range(1, 40), ...range(3601, 35)] });
  // Once more from the backup, with rows in hour 00 again: that key is taken by other rows.
  await copyRoot(backup, base, h.config);
  await h.ingest('web', 41, 35);
  assertConflict(await h.export());
  assert.equal(partitionStatus(await cliStatus(h.config), 'archive', 'web').exportedRows, 5);
  assertExactlyOnce(await readExports(exports), { web: [...range(1, 40), ...range(3601, 35)] });
});

test('time keys: a unit whose first row lands on a new hour and whose others land on a taken one is refused before any of its blobs is written', async () => {
  const base = tempDir('hypsink-content-');
  const exports = join(base, 'exports');
  const h = await host(base, exports, { time: 'hour' });
  const backup = join(base, 'backup');
  await fsp.mkdir(backup);
  await h.ingest('web', 1, 5);
  assert.equal((await h.export()).code, 0);
  await copyRoot(base, backup);
  await h.ingest('web', 6, 35); // hour 00, unit (5, 40]
  assert.equal((await h.export()).code, 0);
  const before = (await readExports(exports)).map((f) => f.rel).sort();
  await copyRoot(backup, base, h.config);
  // The same seqs again: the first row in hour 01 (a key not taken), the rest in hour 00 (taken by other rows).
  await h.ingest('web', 3601, 1);
  await h.ingest('web', 41, 34);
  assertConflict(await h.export());
  assert.deepEqual((await readExports(exports)).map((f) => f.rel).sort(), before, 'no blob of the refused unit was written');
  assertExactlyOnce(await readExports(exports), { web: range(1, 40) });
});

test('a commit record written before digests (one per partition folder, no digest) is still read: a crash retry after compaction is a duplicate', async () => {
  const base = tempDir('hypsink-content-');
  const exports = join(base, 'exports');
  const h = await host(base, exports);
  // Four cache files of large rows, so compaction re-cuts the unit and its bytes change: only the record knows the file.
  const big = (id: number) => ({ msg: createHash('sha256').update(String(id)).digest('hex').repeat(32) });
  for (let b = 0; b < 4; b++) await h.ingest('web', 1 + b * 300, 300, big);
  const crashed = await runSteps([['export', '--config', h.config]], { HYPSINK_FAULT: 'localfs.afterLink' });
  assert.equal(crashed.signal, 'SIGKILL', `killed at localfs.afterLink: ${crashed.stderr}`);
  // The record as local-fs wrote it before LLP 0057: named by the folder, without a digest.
  const commits = join(exports, '.hypsink-tmp/commits');
  const names = await fsp.readdir(commits);
  assert.equal(names.length, 1);
  const rec = JSON.parse(await fsp.readFile(join(commits, names[0]!), 'utf8')) as Json;
  assert.equal(typeof rec.digest, 'string', 'the record now holds the unit digest');
  assert.match(rec.digest as string, /^u1-[A-Za-z0-9_-]{43}$/);
  await fsp.rm(join(commits, names[0]!));
  const folder = createHash('sha256').update('events/source=web').digest('hex');
  await fsp.writeFile(join(commits, `${folder}.json`), `${JSON.stringify({ v: 1, key: rec.key, size: rec.size, sha256: rec.sha256 })}\n`);
  const c = await cli('maintain', '--compact', '--config', h.config);
  assert.equal(c.code, 0, c.err);
  assert.match(c.out, /compacted [1-9]\d* partition/);
  await h.ingest('web', 1201, 3, big);
  const r = await h.export();
  assert.equal(r.code, 0, r.err);
  assertExactlyOnce(await readExports(exports), { web: range(1, 1203) });
});

test('digestOf: the digest recorded with every blob of a folder, not only the last one; null for a blob recorded before digests or replaced since', async () => {
  const base = tempDir('hypsink-content-');
  const exports = join(base, 'exports');
  const h = await host(base, exports);
  await h.ingest('web', 1, 10);
  assert.equal((await h.export()).code, 0);
  await h.ingest('web', 11, 10);
  assert.equal((await h.export()).code, 0);
  const dest = localFs(exports);
  const signal = new AbortController().signal;
  const first = await dest.digestOf!('events/source=web/events.0-10.parquet', { signal });
  const second = await dest.digestOf!('events/source=web/events.10-20.parquet', { signal });
  assert.match(first ?? '', /^u1-[A-Za-z0-9_-]{43}$/);
  assert.match(second ?? '', /^u1-[A-Za-z0-9_-]{43}$/);
  assert.notEqual(first, second);
  assert.equal(await dest.digestOf!('events/source=web/events.20-30.parquet', { signal }), null, 'no blob');
  // A put of another unit at a taken key answers the digest recorded there.
  const body = await fsp.readFile(join(exports, 'events/source=web/events.0-10.parquet'));
  const put = await dest.putIfAbsent('events/source=web/events.0-10.parquet', (async function* () {
    yield new Uint8Array([1, 2, 3]);
  })(), { contentType: 'application/octet-stream', signal, digest: 'u1-other' });
  assert.deepEqual(put, { created: false, bytes: body.length, digest: first });
  // Replaced by other bytes of another size: the record no longer describes it.
  await fsp.rm(join(exports, 'events/source=web/events.10-20.parquet'));
  await fsp.writeFile(join(exports, 'events/source=web/events.10-20.parquet'), 'not the unit');
  assert.equal(await dest.digestOf!('events/source=web/events.10-20.parquet', { signal }), null);
  await dest.close();
});
