/**
 * Seqs are not burnt (issue 16): an ingest reserves the seqs its commits take,
 * not a block of 1024 or more that dies with its process, so in the common
 * case a unit's seq range `(since, until]` is close to its row count. Real CLI
 * processes, one after another and two at once; the observable is the
 * export's blob names and the cache's own data files.
 * @ref LLP 0039: a reservation sized by what the flush will take
 */
import assert from 'node:assert/strict';
import { promises as fsp } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { dumpPartition } from '../cache/helpers.js';
import { assertExactlyOnce, cli, eventLines, range, readExports, runBin, runSteps, sampleConfig, unitRange, writeConfig } from '../support/kernel.js';
import { tempDir } from '../support/tmp.js';

async function ingestFile(dir: string, config: string, name: string, from: number, n: number) {
  const file = join(dir, `${name}.ndjson`);
  await fsp.writeFile(file, eventLines(from, n));
  return runBin(['ingest', 'events', '--source', 'web', '--file', file, '--config', config]);
}

test('1 row, 1 row, 10 rows in three processes: the exports and cache files span 12 seqs', async () => {
  const dir = tempDir();
  const config = await writeConfig(dir, sampleConfig());
  for (const [i, [from, n]] of [[1, 1], [2, 1], [3, 10]].entries()) {
    const r = await ingestFile(dir, config, `in${i}`, from!, n!);
    assert.equal(r.code, 0, r.stderr);
    const e = await cli('export', '--config', config);
    assert.equal(e.code, 0, e.err);
  }
  const files = await readExports(join(dir, 'exports'));
  assertExactlyOnce(files, { web: range(1, 12) });
  const units = files.map((f) => ({ rows: f.rows.length, ...unitRange(f.name) })).sort((a, b) => a.since - b.since);
  // The chain (0, 1], (1, 2], (2, 12]: each unit's width is its row count (on the old allocator: (0,1], (1,1025], (1025,2058]).
  assert.deepEqual(units, [
    { rows: 1, since: 0, until: 1 },
    { rows: 1, since: 1, until: 2 },
    { rows: 10, since: 2, until: 12 },
  ]);
  const cached = await dumpPartition(join(dir, '.hypsink/cache/datasets/events/source=web'));
  assert.deepEqual(cached.map((r) => Number(r.seq)), range(1, 12), 'the cache stamped seqs 1..12');
  const reserved = JSON.parse(await fsp.readFile(join(dir, '.hypsink/cache/_hyp_ingest_seq.json'), 'utf8')) as { reservedThrough: string };
  assert.equal(reserved.reservedThrough, '12', 'nothing reserved beyond what was stamped');
});

test('two processes ingesting at once into one partition: distinct seqs, exported exactly once, none burnt', async (t) => {
  const dir = tempDir();
  const c = sampleConfig();
  c.cache = { root: '.hypsink/cache', lockWaitMs: 60_000 };
  const config = await writeConfig(dir, c);
  // Each process ingests 6 batches of 40 rows, one after another; the two processes run at once.
  const B = 6;
  const N = 40;
  const steps = async (name: string, base: number) => {
    const out: string[][] = [];
    for (let i = 0; i < B; i++) {
      const file = join(dir, `${name}${i}.ndjson`);
      await fsp.writeFile(file, eventLines(base + i * N, N));
      out.push(['ingest', 'events', '--source', 'web', '--file', file, '--config', config]);
    }
    return out;
  };
  const [a, b] = await Promise.all([runSteps(await steps('a', 1)), runSteps(await steps('b', 100_001))]);
  for (const r of [a, b]) {
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.steps.length, B);
    for (const s of r.steps) assert.equal(s.code, 0, s.err);
  }
  const cached = await dumpPartition(join(dir, '.hypsink/cache/datasets/events/source=web'));
  const seqs = cached.map((r) => BigInt(r.seq!));
  assert.equal(new Set(seqs).size, 2 * B * N, 'every row has its own seq');
  for (let i = 1; i < seqs.length; i++) assert.ok(seqs[i]! > seqs[i - 1]!, `commit order = seq order at row ${i}`);
  const batches = cached.map((r) => r.batchId!.split('#')[0]);
  let switches = 0;
  for (let i = 1; i < batches.length; i++) if (batches[i] !== batches[i - 1]) switches++;
  t.diagnostic(`${switches + 1} commits; seqs ${seqs[0]}..${seqs.at(-1)}`);
  // Each reservation was what its flush took, so two writers at once burn none either.
  assert.equal(seqs.at(-1), BigInt(2 * B * N), 'the last seq is the row count');
  const e = await cli('export', '--config', config);
  assert.equal(e.code, 0, e.err);
  assertExactlyOnce(await readExports(join(dir, 'exports')), { web: [...range(1, B * N), ...range(100_001, B * N)] });
});
