/**
 * Issue 18, item 3: local-fs in a tree someone else can write to. Real files on
 * real disk, through the real export path (the CLI's `main`). local-fs never
 * follows a link it did not make inside its root, refuses a root whose path
 * has a link unless `followRootLinks` says so, never deletes what it did not
 * write, and counts an existing entry at a unit's key as that unit committed
 * only when it is a regular file with the unit's contents: by its commit
 * record, or read back. Anything else fails the export (exit 1) naming the
 * path, and the rows are not counted as exported.
 * @ref LLP 0028: local-fs never follows links it did not make
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { promises as fsp } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import {
  archive,
  assertExactlyOnce,
  cli,
  cliStatus,
  eventLines,
  type Json,
  partitionStatus,
  range,
  readExports,
  runSteps,
  sampleConfig,
  walkFiles,
  writeConfig,
} from '../support/kernel.js';
import { tempDir } from '../support/tmp.js';

process.env.HYPSINK_LOG_LEVEL ??= 'warn';

interface World {
  readonly dir: string;
  readonly config: string;
  /** The export root as configured (`<dir>/exports` unless told). */
  readonly exports: string;
  ingest(source: string, from: number, n: number, extra?: (id: number) => Json): Promise<void>;
  /** The final path of the first unit of `source` (the whole partition as it stands). */
  firstKey(source: string): Promise<string>;
}

async function world(opts: { dir?: string; followRootLinks?: boolean } = {}): Promise<World> {
  const dir = tempDir('hypsink-hostile-');
  const exportDir = opts.dir ?? 'exports';
  const c = sampleConfig();
  archive(c).config = { dir: exportDir, ...(opts.followRootLinks === undefined ? {} : { followRootLinks: opts.followRootLinks }) };
  const config = await writeConfig(dir, c);
  let batch = 0;
  return {
    dir,
    config,
    exports: join(dir, exportDir),
    async ingest(source, from, n, extra) {
      const file = join(dir, `in-${++batch}.ndjson`);
      await fsp.writeFile(file, eventLines(from, n, extra));
      const r = await cli('ingest', 'events', '--source', source, '--file', file, '--config', config);
      assert.equal(r.code, 0, r.err);
    },
    async firstKey(source) {
      const p = partitionStatus(await cliStatus(config), 'archive', source);
      assert.ok(p.highWater, `${source} has rows`);
      return join(dir, exportDir, `events/source=${source}/events.0-${p.highWater}.parquet`);
    },
  };
}

/** The export fails with local-fs's refusal (exit 1, HYPSINK_ERR_DESTINATION) and every `mention` in the error. */
async function refused(w: World, ...mention: (string | RegExp)[]): Promise<string> {
  const r = await cli('export', '--config', w.config);
  assert.equal(r.code, 1, `the export fails: ${r.out}${r.err}`);
  assert.match(r.err, /HYPSINK_ERR_DESTINATION/, r.err);
  for (const m of mention) {
    if (typeof m === 'string') assert.ok(r.err.includes(m), `the error names ${m}: ${r.err}`);
    else assert.match(r.err, m);
  }
  return r.err;
}

/** Nothing of `source` counted as exported: its rows pending, its last error local-fs's. */
async function notCounted(w: World, source: string, rows: number): Promise<void> {
  const p = partitionStatus(await cliStatus(w.config), 'archive', source);
  assert.deepEqual([p.exportedRows, p.pendingRows, p.intent !== null], [0, rows, true], `${source}: nothing counted as exported, the unit still open`);
  assert.match(p.lastError ?? '', /HYPSINK_ERR_DESTINATION/);
}

async function exportsOk(w: World, expected: Record<string, readonly number[]>, root = w.exports): Promise<void> {
  const r = await cli('export', '--config', w.config);
  assert.equal(r.code, 0, r.err);
  assertExactlyOnce(await readExports(root), expected);
  for (const [source, ids] of Object.entries(expected)) {
    const p = partitionStatus(await cliStatus(w.config), 'archive', source);
    assert.deepEqual([p.exportedRows, p.pendingRows, p.lastError], [ids.length, 0, null], `${source}: every row counted once`);
  }
}

/** Every entry under `dir`, links listed as links (not followed), with their contents for files. */
async function snapshot(dir: string): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  const walk = async (d: string, rel: string) => {
    for (const e of await fsp.readdir(d, { withFileTypes: true })) {
      const p = join(d, e.name);
      const r = rel ? `${rel}/${e.name}` : e.name;
      if (e.isSymbolicLink()) out[r] = `-> ${await fsp.readlink(p)}`;
      else if (e.isDirectory()) {
        out[r] = '<dir>';
        await walk(p, r);
      } else out[r] = await fsp.readFile(p, 'utf8');
    }
  };
  await walk(dir, '');
  return out;
}

/** A pid no process has now: a child that has exited. */
function deadPid(): number {
  const r = spawnSync(process.execPath, ['-e', '0']);
  assert.ok(r.pid > 0);
  return r.pid;
}

for (const [name, dir] of [
  ['the root itself', 'link'],
  ["an ancestor of the root", 'link/exports'],
] as const) {
  test(`a link in the root's path (${name}) is refused, naming it and its real path; followRootLinks follows it`, async () => {
    const w = await world({ dir });
    const real = join(w.dir, 'real');
    await fsp.mkdir(real);
    await fsp.symlink(real, join(w.dir, 'link'));
    await w.ingest('web', 1, 5);
    const realRoot = join(real, dir.slice('link'.length));
    const err = await refused(w, `${join(w.dir, 'link')} is a symbolic link (to ${real})`, 'followRootLinks', `config.dir to the real path (${realRoot})`);
    assert.doesNotMatch(err, /retried on a later tick/);
    assert.deepEqual(await snapshot(real), {}, 'nothing written through the link');
    await notCounted(w, 'web', 5);

    const c = sampleConfig();
    archive(c).config = { dir, followRootLinks: true };
    await writeConfig(w.dir, c);
    await exportsOk(w, { web: range(1, 5) }, realRoot);
  });
}

for (const [name, at, make] of [
  ['a link at a dataset folder', 'events', (p: string, away: string) => fsp.symlink(away, p)],
  ['a link at a source folder', 'events/source=web', (p: string, away: string) => fsp.symlink(away, p)],
  ['a regular file at a dataset folder', 'events', (p: string) => fsp.writeFile(p, 'not a folder')],
] as const) {
  test(`${name} is refused; nothing is written outside the root`, async () => {
    const w = await world();
    const away = join(w.dir, 'elsewhere');
    await fsp.mkdir(away);
    await fsp.writeFile(join(away, 'theirs.txt'), 'theirs');
    const path = join(w.exports, at);
    await fsp.mkdir(join(path, '..'), { recursive: true });
    await make(path, away);
    await w.ingest('web', 1, 5);
    await refused(w, path, make.length === 2 ? `is a symbolic link (to ${away})` : 'is a regular file, not a folder');
    assert.deepEqual(await snapshot(away), { 'theirs.txt': 'theirs' }, 'nothing written where the link points');
    await notCounted(w, 'web', 5);

    await fsp.rm(path);
    await exportsOk(w, { web: range(1, 5) });
    assert.deepEqual(await snapshot(away), { 'theirs.txt': 'theirs' });
  });
}

test('a link at the temp folder is refused, and nothing where it points is deleted', async () => {
  const w = await world();
  const away = join(w.dir, 'elsewhere');
  await fsp.mkdir(away);
  const dead = deadPid();
  // Named exactly like a dead writer's temp, and not: both are someone else's files here.
  const theirs = { [`${dead}-0123456789ab.part`]: 'looks like a temp', 'notes.txt': 'notes', [`${dead}-x.part`]: 'x' };
  for (const [n, text] of Object.entries(theirs)) await fsp.writeFile(join(away, n), text);
  await fsp.mkdir(w.exports);
  await fsp.symlink(away, join(w.exports, '.hypsink-tmp'));
  await w.ingest('web', 1, 5);
  await refused(w, `${join(w.exports, '.hypsink-tmp')} is a symbolic link (to ${away})`);
  assert.deepEqual(await snapshot(away), theirs, 'every file there kept, nothing added');
  await notCounted(w, 'web', 5);
});

test("the temp sweep removes only a dead writer's own temp files: every other entry in the temp folder is kept", async () => {
  const w = await world();
  const tmp = join(w.exports, '.hypsink-tmp');
  await fsp.mkdir(tmp, { recursive: true });
  const dead = deadPid();
  const outside = join(w.dir, 'outside.txt');
  await fsp.writeFile(outside, 'outside');
  const keep: Record<string, string> = {
    'notes.txt': 'notes',
    [`${dead}-0123456789ab.part.keep`]: 'suffix',
    [`${dead}-0123456789AB.part`]: 'upper-case hex',
    [`${dead}-0123456789a.part`]: '11 hex',
    '0-0123456789ab.part': 'pid 0',
    [`x${dead}-0123456789ab.part`]: 'prefix',
  };
  for (const [n, text] of Object.entries(keep)) await fsp.writeFile(join(tmp, n), text);
  // A folder and a link named exactly like a temp: not regular files, so not local-fs's.
  await fsp.mkdir(join(tmp, `${dead}-aaaaaaaaaaaa.part`));
  await fsp.writeFile(join(tmp, `${dead}-aaaaaaaaaaaa.part`, 'inner'), 'inner');
  await fsp.symlink(outside, join(tmp, `${dead}-bbbbbbbbbbbb.part`));
  // A temp of a live writer (this process) and one of a dead one: only the dead one goes.
  await fsp.writeFile(join(tmp, `${process.pid}-cccccccccccc.part`), 'live');
  await fsp.writeFile(join(tmp, `${dead}-dddddddddddd.part`), 'dead');
  await w.ingest('web', 1, 5);
  await exportsOk(w, { web: range(1, 5) });
  const after = await snapshot(tmp);
  const records = Object.keys(after).filter((k) => k.startsWith('commits/'));
  assert.equal(records.length, 1, 'one commit record for the one partition folder');
  for (const r of records) delete after[r];
  assert.deepEqual(after, {
    ...keep,
    commits: '<dir>',
    [`${dead}-aaaaaaaaaaaa.part`]: '<dir>',
    [`${dead}-aaaaaaaaaaaa.part/inner`]: 'inner',
    [`${dead}-bbbbbbbbbbbb.part`]: `-> ${outside}`,
    [`${process.pid}-cccccccccccc.part`]: 'live',
  });
  assert.equal(await fsp.readFile(outside, 'utf8'), 'outside');
});

for (const [name, make, mention] of [
  ['a dangling link', (final: string, w: World) => fsp.symlink(join(w.dir, 'nowhere.parquet'), final), 'which does not exist'],
  [
    'a live link to a file outside the root',
    async (final: string, w: World) => {
      await fsp.writeFile(join(w.dir, 'outside.parquet'), 'outside');
      await fsp.symlink(join(w.dir, 'outside.parquet'), final);
    },
    'is a symbolic link',
  ],
  ['a folder', (final: string) => fsp.mkdir(final), 'is a folder'],
] as const) {
  test(`${name} at a unit's key fails the export naming it; the rows are not counted as exported`, async () => {
    const w = await world();
    await w.ingest('web', 1, 5);
    await w.ingest('app', 1, 3);
    const final = await w.firstKey('web');
    await fsp.mkdir(join(final, '..'), { recursive: true });
    await make(final, w);
    const before = await snapshot(w.dir);
    await refused(w, final, mention, /remove it/);
    await notCounted(w, 'web', 5);
    // Nothing was written at or through the entry.
    const now = await snapshot(w.dir);
    for (const [k, v] of Object.entries(before)) if (!k.startsWith('.hypsink/') && !k.startsWith('exports/.hypsink-tmp')) assert.equal(now[k], v, k);
    await assert.rejects(fsp.access(join(w.dir, 'nowhere.parquet')), 'nothing written where a dangling link points');
    // The other partition is not held back by it.
    assert.equal(partitionStatus(await cliStatus(w.config), 'archive', 'app').exportedRows, 3);

    await fsp.rm(final, { recursive: true });
    await exportsOk(w, { web: range(1, 5), app: range(1, 3) });
    if (name.startsWith('a live')) assert.equal(await fsp.readFile(join(w.dir, 'outside.parquet'), 'utf8'), 'outside');
  });
}

test("a regular file of other contents at a unit's key fails the export, naming the path and both sizes; moved aside, the unit is written", async () => {
  const w = await world();
  await w.ingest('web', 1, 5);
  const final = await w.firstKey('web');
  await fsp.mkdir(join(final, '..'), { recursive: true });
  await fsp.writeFile(final, 'someone else');
  const err = await refused(w, final, "is not this unit's blob", '12 bytes there', /move it aside/);
  assert.match(err, /the unit \d+ bytes/);
  await notCounted(w, 'web', 5);
  assert.equal(await fsp.readFile(final, 'utf8'), 'someone else', 'never overwritten');

  await fsp.rename(final, `${final}.aside`);
  await fsp.rm(`${final}.aside`);
  await exportsOk(w, { web: range(1, 5) });
});

/**
 * Ingest `batches` NDJSON files of `per` rows into `source`: one cache data file
 * each, so the unit is encoded from that many batches. With `big`, each row has
 * a 2 KiB message of its own: the Parquet writer then cuts pages where the batch
 * boundaries fall, and the same rows in other batches encode to other bytes.
 */
async function ingestBatches(w: World, source: string, batches: number, per: number, big = false): Promise<void> {
  const msg = (id: number) => ({ msg: createHash('sha256').update(String(id)).digest('hex').repeat(32) });
  for (let b = 0; b < batches; b++) await w.ingest(source, 1 + b * per, per, big ? msg : undefined);
}

test('a file committed without a commit record (an older hypsink) is recognised by reading the unit back', async () => {
  const w = await world();
  // The same rows as the compaction case below, not compacted: the re-encoded unit is byte for byte the file.
  await ingestBatches(w, 'web', 4, 300, true);
  // The put fails right after the link: the unit is committed, its intent still open.
  process.env.HYPSINK_FAULT = 'localfs.afterLink';
  process.env.HYPSINK_FAULT_ACTION = 'throw';
  try {
    const r = await cli('export', '--config', w.config);
    assert.equal(r.code, 1, r.err);
  } finally {
    delete process.env.HYPSINK_FAULT;
    delete process.env.HYPSINK_FAULT_ACTION;
  }
  const final = await w.firstKey('web');
  await fsp.access(final);
  await fsp.rm(join(w.exports, '.hypsink-tmp/commits'), { recursive: true, force: true });
  await exportsOk(w, { web: range(1, 1200) });
});

for (const withRecord of [true, false]) {
  test(`a crash after the link, then compaction, then the retry: ${withRecord ? 'committed by its record, no duplicate, no error' : 'without the record the re-encoded bytes differ and the file is refused'}`, async () => {
    const w = await world();
    // Four cache files: the unit is encoded from four batches; after compaction, from one.
    await ingestBatches(w, 'web', 4, 300, true);
    const crashed = await runSteps([['export', '--config', w.config]], { HYPSINK_FAULT: 'localfs.afterLink' });
    assert.equal(crashed.signal, 'SIGKILL', `killed at localfs.afterLink: ${crashed.stderr}`);
    const final = await w.firstKey('web');
    const committed = await fsp.readFile(final);
    const c = await cli('maintain', '--compact', '--config', w.config);
    assert.equal(c.code, 0, c.err);
    assert.match(c.out, /compacted [1-9]\d* partition/, 'the partition was compacted');
    await w.ingest('web', 1201, 3);
    if (withRecord) {
      await exportsOk(w, { web: range(1, 1203) });
      assert.deepEqual(await fsp.readFile(final), committed, 'the committed file is untouched');
      const again = await cli('export', '--json', '--config', w.config);
      assert.equal((JSON.parse(again.out) as { sinks: { rows: number }[] }).sinks[0]!.rows, 0, 'nothing more to export');
    } else {
      await fsp.rm(join(w.exports, '.hypsink-tmp/commits'), { recursive: true, force: true });
      await refused(w, final, "is not this unit's blob");
      assert.deepEqual(await fsp.readFile(final), committed, 'never overwritten');
      assert.deepEqual(
        (await walkFiles(w.exports, '.hypsink-tmp')).map((p) => p.slice(w.exports.length + 1)),
        [final.slice(w.exports.length + 1)],
        'no other blob written',
      );
    }
  });
}

test('sources that differ only in case, and device names, export to files no case-folding filesystem confuses', async () => {
  const w = await world();
  const sources = ['web', 'WEB', 'Web', 'con', 'CON', 'nul'];
  for (const [i, s] of sources.entries()) await w.ingest(s, 1 + i * 100, 3);
  const r = await cli('export', '--config', w.config);
  assert.equal(r.code, 0, r.err);
  assertExactlyOnce(await readExports(w.exports), Object.fromEntries(sources.map((s, i) => [s, range(1 + i * 100, 3)])));
  // A simulated case-insensitive filesystem: two paths that fold to one would be one file there.
  const everything = [...(await walkFiles(w.exports)), ...(await walkFiles(join(w.dir, '.hypsink')))];
  const folded = new Map<string, string>();
  for (const path of everything) {
    const prev = folded.get(path.toLowerCase());
    assert.equal(prev, undefined, `${path} and ${prev} are one file where case folds`);
    folded.set(path.toLowerCase(), path);
    // Windows reserves device names whatever follows a dot.
    for (const seg of path.slice(w.dir.length + 1).split('/')) assert.doesNotMatch(seg, /^(con|prn|aux|nul|com[0-9]|lpt[0-9])(\..*)?$/i, path);
  }
});
