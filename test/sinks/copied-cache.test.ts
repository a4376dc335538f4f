/**
 * A cache folder copied to a second "host" or restored from a backup
 * (LLP 0055): the copy is seen at open (another folder), says so in status and
 * verify, exports nothing until the operator decides, and after
 * `hypsink identity --copy` exports its own rows exactly once under its own
 * identity, while the original goes on untouched. Both write JSON lines to one
 * local-fs folder, read back with JSON.parse.
 */
import assert from 'node:assert/strict';
import { promises as fsp } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { cli, eventLines, ingestText, openKernel, sampleConfig, walkFiles, writeConfig } from '../support/kernel.js';
import { tempDir } from '../support/tmp.js';

/** A host folder whose config exports `events` to the shared folder `lake` (an absolute path, kept by a copy). */
async function host(lake: string): Promise<{ dir: string; config: string }> {
  const dir = tempDir('hypsink-copy-host-');
  const c = sampleConfig();
  c.cache = { root: 'cache' };
  c.state = { dir: 'state' };
  c.sinks.archive = { ...c.sinks.archive, writer: '@hypsink/format-jsonl', unit: { maxRows: 7 }, config: { dir: lake } };
  return { dir, config: await writeConfig(dir, c) };
}

async function ingestInto(config: string, source: string, from: number, n: number): Promise<void> {
  const { k } = await openKernel(config);
  try {
    await ingestText(k, source, eventLines(from, n));
  } finally {
    await k.close();
  }
}

/** Every id in every JSON-lines file under the lake. */
async function idsIn(lake: string): Promise<number[]> {
  const ids: number[] = [];
  for (const f of await walkFiles(lake, '.hypsink-tmp')) {
    assert.match(f, /\.jsonl$/);
    for (const line of (await fsp.readFile(f, 'utf8')).split('\n')) if (line) ids.push(Number(JSON.parse(line).id));
  }
  return ids.sort((a, b) => a - b);
}

const range = (from: number, n: number) => Array.from({ length: n }, (_, i) => from + i);

test('a copied cache is seen at open, exports nothing until told, then exports its own rows once under its own identity', async () => {
  const lake = tempDir('hypsink-copy-lake-');
  const a = await host(lake);
  await ingestInto(a.config, 'h', 1, 12);
  assert.equal((await cli('export', '--config', a.config)).code, 0);

  // The image: A's whole folder, warm cache and sink state, on a second host.
  const bDir = tempDir('hypsink-copy-b-');
  await fsp.cp(a.dir, bDir, { recursive: true });
  const b = { dir: bDir, config: join(bDir, 'hypsink.config.json') };

  // A goes on.
  await ingestInto(a.config, 'h', 13, 3);
  // B: rows of its own are kept (ingest never stops), but nothing exports.
  await ingestInto(b.config, 'h', 1001, 5);
  const status = await cli('status', '--config', b.config);
  assert.equal(status.code, 0, status.err);
  assert.match(status.out, /this cache appears to be a copy of another \(same id, different history\): made at .*, now at .*hypsink-copy-b-/);
  const refused = await cli('export', '--config', b.config);
  assert.equal(refused.code, 1, refused.out + refused.err);
  assert.match(refused.err, /HYPSINK_ERR_CONFLICT/);
  assert.match(refused.err, /hypsink identity --copy/);
  const verifyB = await cli('verify', '--config', b.config);
  assert.match(verifyB.out, /this cache appears to be a copy of another/);

  const idBefore = JSON.parse(await fsp.readFile(join(b.dir, 'cache/cache.json'), 'utf8')).id;
  const renewed = await cli('identity', '--copy', '--json', '--config', b.config);
  assert.equal(renewed.code, 0, renewed.err);
  const r = JSON.parse(renewed.out) as { from: string; to: string; forkSeq: string; sinks: { sink: string; partitions: number; rows: number }[] };
  assert.equal(r.from, idBefore);
  assert.notEqual(r.to, r.from);
  // A had exported all 12 before the copy: nothing between its watermark and the fork is left over.
  assert.deepEqual(r.sinks, [{ sink: 'archive', partitions: 1, rows: 0 }]);

  assert.equal((await cli('export', '--config', b.config)).code, 0);
  assert.equal((await cli('export', '--config', a.config)).code, 0);
  assert.deepEqual(await idsIn(lake), [...range(1, 15), ...range(1001, 5)], 'every row of both hosts once');
  // Each verifies its own units: A the untagged ones, B those under its new identity.
  for (const h of [a, b]) {
    const v = await cli('verify', '--config', h.config);
    assert.equal(v.code, 0, v.out + v.err);
    assert.doesNotMatch(v.out, /appears to be a copy/);
  }
  const s = JSON.parse((await cli('status', '--json', '--config', b.config)).out);
  const p = s.sinks[0].partitions[0];
  assert.deepEqual([p.pendingRows, p.exportedRows, p.committedRows], [0, 17, 17], 'B: 12 shared rows exported before the copy, 5 of its own');
});

test('rows the copy shared but the original had not exported yet are left to the original, not sent twice', async () => {
  const lake = tempDir('hypsink-copy-lake-');
  const a = await host(lake);
  await ingestInto(a.config, 'h', 1, 10);
  assert.equal((await cli('export', '--config', a.config)).code, 0);
  await ingestInto(a.config, 'h', 11, 6); // not exported when the image is taken

  const bDir = tempDir('hypsink-copy-b-');
  await fsp.cp(a.dir, bDir, { recursive: true });
  const b = { dir: bDir, config: join(bDir, 'hypsink.config.json') };
  await ingestInto(b.config, 'h', 2001, 4);
  const renewed = await cli('identity', '--copy', '--json', '--config', b.config);
  assert.equal(renewed.code, 0, renewed.err);
  assert.equal(JSON.parse(renewed.out).sinks[0].rows, 6, 'the 6 shared rows A had not exported are left to A');

  assert.equal((await cli('export', '--config', b.config)).code, 0);
  assert.equal((await cli('export', '--config', a.config)).code, 0);
  assert.deepEqual(await idsIn(lake), [...range(1, 16), ...range(2001, 4)]);
  for (const h of [a, b]) assert.equal((await cli('verify', '--config', h.config)).code, 0);
});

test('a folder moved on the same machine: identity --moved keeps the identity and exports go on', async () => {
  const lake = tempDir('hypsink-copy-lake-');
  const a = await host(lake);
  await ingestInto(a.config, 'h', 1, 5);
  assert.equal((await cli('export', '--config', a.config)).code, 0);
  const moved = tempDir('hypsink-moved-');
  await fsp.rm(moved, { recursive: true });
  await fsp.rename(a.dir, moved);
  const config = join(moved, 'hypsink.config.json');
  await ingestInto(config, 'h', 6, 5);
  assert.equal((await cli('export', '--config', config)).code, 1, 'a moved folder is a suspected copy until told');
  const shown = await cli('identity', '--config', config);
  assert.match(shown.out, /hypsink identity --moved/);
  const id = JSON.parse(await fsp.readFile(join(moved, 'cache/cache.json'), 'utf8')).id;
  assert.equal((await cli('identity', '--moved', '--config', config)).code, 0);
  assert.equal(JSON.parse(await fsp.readFile(join(moved, 'cache/cache.json'), 'utf8')).id, id, 'same identity');
  assert.equal((await cli('export', '--config', config)).code, 0);
  assert.deepEqual(await idsIn(lake), range(1, 10));
  assert.equal((await cli('verify', '--config', config)).code, 0);
});

test('identity --copy on a cache with no evidence asks for the fork seq instead of guessing', async () => {
  const a = await host(tempDir('hypsink-copy-lake-'));
  await ingestInto(a.config, 'h', 1, 3);
  const r = await cli('identity', '--copy', '--config', a.config);
  assert.equal(r.code, 2, r.out + r.err);
  assert.match(r.err, /no evidence of being a copy.*--fork-seq N/s);
});

test('rows a hard cap pruned above a watermark before the fork stay counted after identity --copy (a restored backup found it)', async () => {
  // The simulation's restore episode, seed 2 (SIM_EPISODE=restore): the forced prune's rows vanished
  // from the status of a sink that had not exported them, once --copy moved its watermark to the fork.
  const lake = tempDir('hypsink-copy-lake-');
  const a = await host(lake);
  await ingestInto(a.config, 'h', 1, 6);
  await ingestInto(a.config, 'h', 7, 6);
  const { k } = await openKernel(a.config);
  try {
    await k.retention({ hardMaxRows: 6, ackCoupled: false });
    const [before] = (await k.status()).sinks[0]!.partitions;
    assert.ok(before!.gapRows > 0, `the hard cap pruned rows ahead of the sink: ${JSON.stringify(before)}`);
    const fork = (await k.cache.allocator.readReserved()).toString();
    await k.identityCopy({ forkSeq: fork });
    await ingestText(k, 'h', eventLines(100, 4));
    await k.export('archive');
    const [p] = (await k.status()).sinks[0]!.partitions;
    assert.equal(p!.exportedRows + p!.gapRows + p!.pendingRows, p!.committedRows, JSON.stringify(p));
    assert.equal(p!.exportedRows, 4, JSON.stringify(p));
    assert.equal(p!.pendingRows, 0, JSON.stringify(p));
  } finally {
    await k.close();
  }
  assert.deepEqual(await idsIn(lake), range(100, 4));
});

test('identity --copy with a fork seq above the reserved top: rows ingested after it still export', async () => {
  // The README's in-place restore names N "the highest seq the original may hold": it may lie above
  // what the restored cache ever reserved, and its own rows must not get seqs at or below it.
  const lake = tempDir('hypsink-copy-lake-');
  const a = await host(lake);
  await ingestInto(a.config, 'h', 1, 3);
  const { k } = await openKernel(a.config);
  try {
    const top = await k.cache.allocator.readReserved();
    await k.identityCopy({ forkSeq: (top + 5000n).toString() });
    await ingestText(k, 'h', eventLines(100, 4));
    await k.export('archive');
    const [p] = (await k.status()).sinks[0]!.partitions;
    assert.equal(p!.exportedRows + p!.gapRows + p!.pendingRows, p!.committedRows, JSON.stringify(p));
    assert.equal(p!.exportedRows, 4, JSON.stringify(p));
  } finally {
    await k.close();
  }
  assert.deepEqual(await idsIn(lake), range(100, 4));
});

test('rows the original had spooled but not flushed when it was copied are the original’s: each exported once, not once per copy (sim seed 103)', async () => {
  const lake = tempDir('hypsink-copy-lake-');
  const a = await host(lake);
  await ingestInto(a.config, 'h', 1, 6);
  assert.equal((await cli('export', '--config', a.config)).code, 0);
  // Acknowledged rows still in a spool (an ingest killed before its flush): no seq yet.
  const { k } = await openKernel(a.config);
  try {
    const ts = (id: number) => new Date(Date.UTC(2026, 0, 1) + id * 1000).toISOString();
    await k.cache.appendRows({ dataset: 'events', id: 'left' }, ['id', 'ts', 'msg', 'source'], range(7, 5).map((id) => [id, ts(id), `m${id}`, 'h']));
  } finally {
    await k.close();
  }
  const bDir = tempDir('hypsink-copy-b-');
  await fsp.cp(a.dir, bDir, { recursive: true });
  const b = join(bDir, 'hypsink.config.json');
  assert.equal((await cli('export', '--config', a.config)).code, 0);
  assert.notEqual((await cli('export', '--config', b)).code, 0, 'the copy is seen and refused');
  assert.equal((await cli('identity', '--copy', '--config', b)).code, 0);
  await ingestInto(b, 'h', 101, 3);
  assert.equal((await cli('export', '--config', b)).code, 0);
  assert.deepEqual(await idsIn(lake), [...range(1, 11), 101, 102, 103]);
});
