/**
 * `hypsink replay` (LLP 0061): a hole `verify` finds (a blob deleted at the
 * destination) is sent again exactly once by naming its range; a second
 * replay finds it there and sends nothing; a range across a unit still held,
 * a range above the watermark and a range retention pruned are refused, and
 * nothing is written. The files are read back as JSON lines.
 */
import assert from 'node:assert/strict';
import { promises as fsp } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { cli, eventLines, ingestText, openKernel, runBin, sampleConfig, unitRange, walkFiles, writeConfig } from '../support/kernel.js';
import { tempDir } from '../support/tmp.js';

async function setup(): Promise<{ dir: string; config: string; lake: string }> {
  const dir = tempDir('hypsink-replay-');
  const c = sampleConfig();
  c.state = { dir: 'state' };
  c.sinks.archive = { ...c.sinks.archive, writer: '@hypsink/format-jsonl', unit: { maxRows: 10 }, config: { dir: 'lake' } };
  const config = await writeConfig(dir, c);
  const { k } = await openKernel(config);
  try {
    await ingestText(k, 'web', eventLines(1, 35));
  } finally {
    await k.close();
  }
  assert.equal((await cli('export', '--config', config)).code, 0);
  return { dir, config, lake: join(dir, 'lake') };
}

const files = async (lake: string) => (await walkFiles(lake, '.hypsink-tmp')).filter((f) => f.endsWith('.jsonl'));
const nameOf = (f: string) => f.slice(f.lastIndexOf('/') + 1);

async function ids(lake: string): Promise<number[]> {
  const out: number[] = [];
  for (const f of await files(lake)) for (const l of (await fsp.readFile(f, 'utf8')).split('\n')) if (l) out.push(Number(JSON.parse(l).id));
  return out.sort((a, b) => a - b);
}

const replay = (config: string, ...args: string[]) => cli('replay', 'archive', '--dataset', 'events', '--source', 'web', '--config', config, ...args);

test('a deleted unit is sent again once by naming the hole verify found; a second replay sends nothing', async () => {
  const { config, lake } = await setup();
  const blobs = (await files(lake)).sort((a, b) => unitRange(nameOf(a)).since - unitRange(nameOf(b)).since);
  assert.equal(blobs.length, 4);
  await fsp.unlink(blobs[1]!);
  const { since, until } = unitRange(nameOf(blobs[1]!));
  const v = await cli('verify', '--config', config);
  assert.equal(v.code, 1);
  assert.match(v.out, new RegExp(`hole \\(${since}, ${until}\\]`));

  // Through bin/hypsink.js, for its log on stderr.
  const r = await runBin(['replay', 'archive', '--dataset', 'events', '--source', 'web', '--since', String(since), '--until', String(until), '--json', '--config', config]);
  assert.equal(r.code, 0, r.stdout + r.stderr);
  const j = JSON.parse(r.stdout);
  assert.deepEqual([j.rows, j.duplicate, j.resumed], [10, false, false]);
  assert.match(r.stderr, /replaying an exported range/, 'the replay is logged');
  assert.deepEqual(await ids(lake), Array.from({ length: 35 }, (_, i) => i + 1), 'every row once again');
  assert.equal((await cli('verify', '--config', config)).code, 0);

  const again = await replay(config, '--since', String(since), '--until', String(until), '--json');
  assert.equal(again.code, 0, again.err);
  assert.equal(JSON.parse(again.out).duplicate, true);
  assert.deepEqual(await ids(lake), Array.from({ length: 35 }, (_, i) => i + 1));
});

test('a replay across a unit the destination holds, or above the watermark, is refused and writes nothing', async () => {
  const { config, lake } = await setup();
  const before = (await files(lake)).map(nameOf).sort();
  const first = unitRange(before[0]!);
  // Half of a unit still there: replaying it would lay rows over rows.
  const across = await replay(config, '--since', String(first.since + 2), '--until', String(first.until));
  assert.equal(across.code, 2, across.out + across.err);
  assert.match(across.err, /a replay fills a hole and never lays rows over rows already there/);
  const status = JSON.parse((await cli('status', '--json', '--config', config)).out);
  const w = Number(status.sinks[0].partitions[0].watermark);
  const above = await replay(config, '--since', String(w), '--until', String(w + 5));
  assert.equal(above.code, 2);
  assert.match(above.err, /reaches above its watermark/);
  const bad = await replay(config, '--until', 'ten');
  assert.equal(bad.code, 2);
  assert.match(bad.err, /--until "ten" is not a seq/);
  assert.deepEqual((await files(lake)).map(nameOf).sort(), before, 'nothing written');
});
