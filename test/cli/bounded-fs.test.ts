/**
 * Every filesystem wait is bounded (LLP 0034). Node's `mkdir -p`
 * (`{ recursive: true }`) never returns for a folder under /proc: mkdir says
 * ENOENT, the parent exists, and it tries again, forever, at full CPU. A cache
 * root, a state dir, a local-fs dir or a receiver's data dir there must fail
 * at once, naming the path. Each child is killed after a generous bound: a
 * child that had to be killed is the failure (the assertion is about how it
 * ended and what it said, not about a time).
 */
import assert from 'node:assert/strict';
import { promises as fsp } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { mkdirs } from '../../kernel/io/mkdirs.js';
import { childTempDir, runCli } from '../support/cli-child.js';
import { eventLines, REPO, sampleConfig, writeConfig } from '../support/kernel.js';
import { tempDir } from '../support/tmp.js';

/** A folder under /proc that cannot be made: procfs takes no new entries. */
const UNDER_PROC = `/proc/1/hypsink-bounded-${process.pid}`;

async function world(edit: (c: ReturnType<typeof sampleConfig>) => void): Promise<string> {
  const dir = childTempDir();
  const c = sampleConfig();
  edit(c);
  await writeConfig(dir, c);
  await fsp.writeFile(join(dir, 'f.ndjson'), eventLines(1, 3));
  return dir;
}

function assertEnded(r: { code: number | null; signal: string | null; stderr: string }, code: string, path: string): void {
  assert.equal(r.signal, null, `the child ended by itself (it was killed: a wait without end): ${r.stderr}`);
  const line = r.stderr.split('\n').find((l) => l.startsWith('hypsink: ')) ?? '';
  assert.ok(line.startsWith(`hypsink: ${code}: `), r.stderr);
  assert.ok(line.includes(path), `names ${path}: ${line}`);
  assert.doesNotMatch(r.stderr, /^\s+at /m, 'no stack trace');
  assert.equal(r.code, 1, r.stderr);
}

test('a state dir under /proc: export fails at once naming the folder', async () => {
  const dir = await world((c) => {
    c.state = { dir: `${UNDER_PROC}/state` };
  });
  assert.equal((await runCli(['ingest', 'events', '--source', 'web', '--file', 'f.ndjson'], { cwd: dir, asSelf: true })).code, 0);
  const r = await runCli(['export'], { cwd: dir, asSelf: true });
  assertEnded(r, 'HYPSINK_ERR_ACCESS', UNDER_PROC);
  assert.match(r.stderr, /takes no new folders/);
});

test('a cache root under /proc: ingest and status fail at once naming the folder', async () => {
  const dir = await world((c) => {
    c.cache = { root: `${UNDER_PROC}/cache` };
  });
  assertEnded(await runCli(['ingest', 'events', '--source', 'web', '--file', 'f.ndjson'], { cwd: dir, asSelf: true }), 'HYPSINK_ERR_ACCESS', UNDER_PROC);
  assertEnded(await runCli(['status'], { cwd: dir, asSelf: true }), 'HYPSINK_ERR_ACCESS', UNDER_PROC);
});

test('a local-fs dir under /proc (and under /proc/self, a link): export fails at once naming the path', async () => {
  for (const d of [`${UNDER_PROC}/x`, '/proc/self/hypsink-bounded']) {
    const dir = await world((c) => {
      (c.sinks.archive as { config: { dir: string } }).config.dir = d;
    });
    assert.equal((await runCli(['ingest', 'events', '--source', 'web', '--file', 'f.ndjson'], { cwd: dir, asSelf: true })).code, 0);
    const r = await runCli(['export'], { cwd: dir, asSelf: true });
    assert.equal(r.signal, null, `the child ended by itself: ${r.stderr}`);
    assert.equal(r.code, 1, r.stderr);
    assert.match(r.stderr, /^hypsink: HYPSINK_ERR_(ACCESS|DESTINATION): sink "archive": /m);
    assert.ok(r.stderr.includes(d.startsWith('/proc/self') ? '/proc/self' : UNDER_PROC), r.stderr);
  }
});

test("a receiver's data dir under /proc: it refuses to start, naming the folder", async () => {
  const r = await runCli(['receiver', '--port', '0', '--data', `${UNDER_PROC}/data`, '--insecure-no-auth'], { cwd: tempDir(), asSelf: true });
  assertEnded(r, 'HYPSINK_ERR_ACCESS', UNDER_PROC);
});

test('mkdirs makes every missing level, takes an existing folder, races with itself, and refuses what is not a folder', async () => {
  const dir = tempDir();
  const deep = join(dir, 'a', 'b', 'c');
  await mkdirs(deep);
  assert.ok((await fsp.stat(deep)).isDirectory());
  await mkdirs(deep);
  await Promise.all(Array.from({ length: 8 }, (_, i) => mkdirs(join(dir, 'r', 's', String(i % 2)))));
  assert.deepEqual((await fsp.readdir(join(dir, 'r', 's'))).sort(), ['0', '1']);
  await fsp.writeFile(join(dir, 'file'), '');
  await assert.rejects(mkdirs(join(dir, 'file')), { code: 'EEXIST' });
  await assert.rejects(mkdirs(join(dir, 'file', 'x')), { code: 'ENOTDIR' });
  await assert.rejects(mkdirs(`${UNDER_PROC}/y`), (e: Error & { code?: string }) => e.code === 'HYPSINK_ERR_ACCESS' && e.message.includes(UNDER_PROC));
});

test('no mkdir -p in hypsink: every folder is made by mkdirs (Node never returns from one under /proc)', async () => {
  const found: string[] = [];
  const walk = async (d: string): Promise<void> => {
    for (const e of await fsp.readdir(d, { withFileTypes: true })) {
      const p = join(d, e.name);
      if (e.isDirectory()) {
        if (e.name !== 'node_modules' && e.name !== 'dist') await walk(p);
      } else if (/\.(ts|mjs|js)$/.test(e.name)) {
        const text = await fsp.readFile(p, 'utf8');
        if (/mkdir(Sync)?\([^)]*recursive:\s*true/.test(text)) found.push(p.slice(REPO.length));
      }
    }
  };
  for (const d of ['kernel', 'plugins', 'fixtures', 'testing', 'types']) await walk(join(REPO, d));
  assert.deepEqual(found, []);
});
