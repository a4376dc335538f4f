/**
 * Permission errors are permanent (LLP 0033): a path hypsink cannot write or
 * read (export folder, cache, state dir, dead-letter file, input file) fails
 * with HYPSINK_ERR_ACCESS naming the path and the user the process runs as,
 * and a hint to give that user access or choose another path; never
 * HYPSINK_ERR_RETRYABLE "a passing fault", never a stack trace. The CLI runs
 * as a user permissions bind (test/support/cli-child.ts). EPERM comes from a
 * real mkdir under /sys; this container has no read-only mount, so EROFS is
 * checked on the classifier every one of these paths goes through.
 */
import assert from 'node:assert/strict';
import { promises as fsp } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { HypsinkError, accessError } from '../../types/index.js';
import { CHILD_USER, childTempDir, lockOut, runCli } from '../support/cli-child.js';
import { eventLines, runBin, SAMPLE_CONFIG_TEXT, writeConfig } from '../support/kernel.js';

const USER = new RegExp(`user "${CHILD_USER.name}" \\(uid ${CHILD_USER.uid}\\)`);

/** A folder of the child's with the sample config and an input file of 3 rows. */
async function world(): Promise<string> {
  const dir = childTempDir();
  await writeConfig(dir, SAMPLE_CONFIG_TEXT);
  await fsp.writeFile(join(dir, 'f.ndjson'), eventLines(1, 3));
  return dir;
}

const ingest = (dir: string, file = 'f.ndjson') => runCli(['ingest', 'events', '--source', 'web', '--file', file], { cwd: dir });

/** The CLI's error line and hint line. */
function failure(stderr: string): { line: string; hint: string } {
  const lines = stderr.split('\n');
  const i = lines.findIndex((l) => l.startsWith('hypsink: '));
  assert.ok(i >= 0, `an error line: ${stderr}`);
  assert.doesNotMatch(stderr, /^\s+at /m, `no stack trace: ${stderr}`);
  return { line: lines[i]!, hint: lines[i + 1] ?? '' };
}

function assertAccess(r: { code: number | null; signal: string | null; stderr: string }, path: RegExp): { line: string; hint: string } {
  assert.equal(r.signal, null, `the child ended by itself: ${r.stderr}`);
  const f = failure(r.stderr);
  assert.match(f.line, /^hypsink: HYPSINK_ERR_ACCESS: /, f.line);
  assert.match(f.line, path, `names the path: ${f.line}`);
  assert.match(f.line, USER, `names the user: ${f.line}`);
  assert.match(f.line, /EACCES|EPERM/);
  assert.match(f.hint, /→ Give user "[^"]+" \(uid \d+\) (write )?access to /, f.hint);
  assert.match(f.hint, /, or (choose another path|pass another --file|set this sink's config.dir to a folder|run hypsink as the user that owns the cache)/, f.hint);
  assert.doesNotMatch(r.stderr, /passing fault|valid rows were kept/);
  assert.equal(r.code, 1, r.stderr);
  return f;
}

test('export into a folder its user cannot write: HYPSINK_ERR_ACCESS naming the folder and the user, also in status', async () => {
  const dir = await world();
  assert.equal((await ingest(dir)).code, 0);
  await fsp.mkdir(join(dir, 'exports'));
  await lockOut(join(dir, 'exports'));
  const r = await runCli(['export'], { cwd: dir });
  assertAccess(r, new RegExp(`sink "archive": cannot write .*: mkdir ${join(dir, "exports")}/`));
  const st = await runCli(['status', '--json'], { cwd: dir });
  assert.equal(st.code, 0, st.stderr);
  assert.match(st.stdout, /"lastError":"HYPSINK_ERR_ACCESS: /);
});

test('ingest into a cache its user cannot write: HYPSINK_ERR_ACCESS with the batch id to retry with', async () => {
  const dir = await world();
  assert.equal((await ingest(dir)).code, 0);
  await lockOut(join(dir, '.hypsink/cache/spools'));
  const r = await ingest(dir);
  const f = assertAccess(r, new RegExp(`${join(dir, '.hypsink/cache/spools')}/events`));
  assert.match(f.line, /no row of batch \S+ is durable; retry with --batch-id/);
});

test('a cache root its user cannot create, and status over a cache it cannot write: HYPSINK_ERR_ACCESS, no stack', async () => {
  const dir = await world();
  await fsp.mkdir(join(dir, '.hypsink'));
  await lockOut(join(dir, '.hypsink'));
  assertAccess(await ingest(dir), new RegExp(`${join(dir, '.hypsink')}/cache`));

  const other = await world();
  assert.equal((await ingest(other)).code, 0);
  await lockOut(join(other, '.hypsink/cache/datasets'));
  assertAccess(await runCli(['status'], { cwd: other }), new RegExp(`${join(other, '.hypsink/cache/datasets')}/events/`));
});

test('a dead-letter file and a state dir its user cannot write: HYPSINK_ERR_ACCESS', async () => {
  const dir = await world();
  assert.equal((await ingest(dir)).code, 0);
  await fsp.mkdir(join(dir, '.hypsink/state/dead-letter'), { recursive: true });
  await fsp.writeFile(join(dir, '.hypsink/state/dead-letter/events.ndjson'), '');
  await lockOut(join(dir, '.hypsink/state/dead-letter'));
  await fsp.writeFile(join(dir, 'bad.ndjson'), `${eventLines(10, 1)}{"id":"x"}\n`);
  assertAccess(await ingest(dir, 'bad.ndjson'), new RegExp(`${join(dir, '.hypsink/state/dead-letter/events.ndjson')}`));
  await lockOut(join(dir, '.hypsink/state'));
  assertAccess(await runCli(['export'], { cwd: dir }), new RegExp(`${join(dir, '.hypsink/state')}/`));
});

test('a cache data file its user cannot read is HYPSINK_ERR_ACCESS, not a damaged file', async () => {
  const dir = await world();
  assert.equal((await ingest(dir)).code, 0);
  const table = join(dir, '.hypsink/cache/datasets/events/source=web/table-0');
  const data = (await fsp.readdir(table)).find((n) => n.endsWith('.parquet'))!;
  await lockOut(join(table, data), true);
  const f = assertAccess(await runCli(['export'], { cwd: dir }), new RegExp(`data file ${join(table, data)}: .*open ${join(table, data)}: permission denied`));
  assert.match(f.hint, /or run hypsink as the user that owns the cache/);
  assert.doesNotMatch(f.line, /CORRUPT|damaged/);
});

test('an input file its user cannot read: HYPSINK_ERR_ACCESS naming the file, the hint says another --file, not "valid rows were kept"', async () => {
  const dir = await world();
  await lockOut(join(dir, 'f.ndjson'), true);
  const f = assertAccess(await ingest(dir), new RegExp(`${join(dir, 'f.ndjson')}`));
  assert.match(f.hint, /--file/);
});

test('a missing input file and an unknown dataset say nothing was read', async () => {
  const dir = await world();
  const missing = await runBin(['ingest', 'events', '--source', 'web', '--file', 'nope.ndjson'], { cwd: dir });
  assert.equal(missing.code, 2, missing.stderr);
  const m = failure(missing.stderr);
  assert.match(m.line, /^hypsink: HYPSINK_ERR_INPUT: .*nope\.ndjson.*(ENOENT|does not exist)/);
  assert.match(m.hint, /--file/);
  assert.match(m.hint, /nothing was read/);
  assert.doesNotMatch(missing.stderr, /valid rows were kept/);
  const unknown = await runBin(['ingest', 'evnts', '--source', 'web', '--file', 'f.ndjson'], { cwd: dir });
  assert.equal(unknown.code, 2, unknown.stderr);
  assert.match(failure(unknown.stderr).hint, /nothing was read/);
  assert.doesNotMatch(unknown.stderr, /valid rows were kept/);
});

test('EPERM on a path (mkdir under /sys) is HYPSINK_ERR_ACCESS naming the path, not a passing fault', async () => {
  const dir = await world();
  const cfg = JSON.parse(SAMPLE_CONFIG_TEXT) as { sinks: { archive: { config: { dir: string } } } };
  cfg.sinks.archive.config.dir = '/sys/hypsink-access-test';
  await writeConfig(dir, cfg);
  assert.equal((await ingest(dir)).code, 0);
  const r = await runCli(['export'], { cwd: dir, asSelf: true });
  assert.equal(r.signal, null);
  const f = failure(r.stderr);
  assert.match(f.line, /^hypsink: HYPSINK_ERR_ACCESS: sink "archive": .*\/sys\/hypsink-access-test.*\((EPERM|EACCES)\)/, f.line);
  assert.match(f.hint, /write access to \/sys \(/, f.hint);
  assert.equal(r.code, 1);
});

test('EROFS and EPERM are classified like EACCES; EPERM of a liveness check is not a path error', () => {
  const rofs = Object.assign(new Error("EROFS: read-only file system, open '/mnt/ro/x'"), { code: 'EROFS', syscall: 'open', path: '/mnt/ro/x', errno: -30 });
  const e = accessError(rofs, { context: 'sink "archive"' });
  assert.ok(e instanceof HypsinkError);
  assert.equal(e.code, 'HYPSINK_ERR_ACCESS');
  assert.equal(e.retryable, false);
  assert.equal(e.exitCode, 1);
  assert.match(e.message, /^sink "archive": open \/mnt\/ro\/x: read-only file system \(EROFS\), for user "[^"]+" \(uid \d+\)/);
  assert.match(e.hint, /\/mnt\/ro\/x is on a read-only filesystem: mount it read-write or choose another path/);
  const perm = accessError(Object.assign(new Error('EPERM'), { code: 'EPERM', syscall: 'rename', path: '/a', dest: '/b' }));
  assert.match(perm!.message, /rename \/a → \/b: operation not permitted \(EPERM\)/);
  assert.equal(accessError(Object.assign(new Error('x'), { code: 'ENOSPC', path: '/a' })), undefined);
  assert.equal(accessError(new Error('plain')), undefined);
});
