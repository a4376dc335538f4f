/**
 * The cache crash matrix: for every cache-layer fault point, a child process runs
 * a scripted ingest (two spools, three sources, concurrent flushes, retention,
 * compaction) and is SIGKILLed at that point; the test process then recovers
 * (flush, then maintenance) and checks the oracle:
 *   - every row appendRows acknowledged appears exactly once (old rows that
 *     retention may prune: at most once, and none after recovery's retention),
 *   - a row never acknowledged appears at most once, nothing else appears,
 *   - per partition, seqs strictly increase in commit (manifest) order,
 *   - no seq appears twice, and every seq issued after the crash lies above the
 *     allocator's reservation at the crash (never re-issued),
 *   - surviving rows keep their seqs through maintenance,
 *   - old generations, orphan files and spool segments are gone in the end.
 * @ref LLP 0001, LLP 0002, LLP 0004
 */
import assert from 'node:assert/strict';
import { existsSync, promises as fsp } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import type { Cache } from '../../kernel/cache.js';
import { FAULT_POINTS } from '../../kernel/fault.js';
import type { WorkerScript, WorkerStep } from '../support/cache-worker.js';
import { COLS, collect, openCache, rows, type WorkerCacheOptions } from '../support/datasets.js';
import { tempDir } from '../support/tmp.js';
import { currentManifest, dumpPartition, firstNonIncreasing, readJson, runWorker, seqsOnDisk, walk } from './helpers.js';

const CACHE_PREFIXES = ['alloc.', 'spool.', 'flush.', 'partition.', 'retention.', 'compact.'];

/** Fault point → which hit to crash on (HYPSINK_FAULT_AT), chosen to land mid-script. */
const CASES: Record<string, number> = {
  'alloc.afterReserve': 3,
  'spool.afterAppend': 5,
  'spool.afterSeal': 2,
  'flush.afterDataFile': 3,
  'flush.afterManifest': 4,
  'flush.afterCommitAll': 2,
  'flush.afterBatchRecord': 1,
  'partition.afterCursor': 2,
  'retention.afterNewGeneration': 2,
  'retention.afterCursorSwap': 1,
  'compact.beforeCursorSwap': 2,
  'compact.afterCursorSwap': 3,
};

const OLD = Date.parse('2020-01-01T00:00:00Z');
const NOW = Date.parse('2026-06-01T00:00:00Z');
const POLICY = { maxAgeMs: 365 * 24 * 3600 * 1000, now: NOW };
const OPTS: WorkerCacheOptions = { seqBlockSize: 16, segmentBytes: 1500, rowGroupRows: 8, lockWaitMs: 5000 };

const append = (spool: string, source: string, from: number, old = false): WorkerStep => ({
  op: 'append',
  spool,
  source,
  from,
  n: 10,
  ...(old ? { t0: OLD } : {}),
});

const STEPS: WorkerStep[] = [
  append('s1', 'web', 1, true),
  append('s1', 'app', 1, true),
  append('s2', 'web', 11),
  append('s2', 'api', 1),
  append('s1', 'web', 21),
  append('s2', 'app', 11),
  { op: 'flush', spools: ['s1', 's2'] },
  append('s1', 'web', 31),
  append('s1', 'api', 11),
  append('s2', 'web', 41),
  { op: 'flush', spools: ['s1', 's2'] },
  { op: 'retention', policy: POLICY },
  append('s1', 'app', 21),
  append('s2', 'web', 51),
  { op: 'flush', spools: ['s1', 's2'] },
  { op: 'compact' },
  append('s1', 'web', 61),
  append('s2', 'api', 21),
  { op: 'appendBatch', batch: 'host-1', source: 'web', from: 71, n: 10 },
  { op: 'flush', spools: ['s1', 's2'] },
  { op: 'flushAll' },
  { op: 'appendBatch', batch: 'host-2', source: 'app', from: 31, n: 10 },
  { op: 'compact' },
  { op: 'flushAll' },
];

/** The host retries every batch after the crash, as it does an ingest it was not sure of (LLP 0021). */
const BATCHES = STEPS.filter((s): s is Extract<WorkerStep, { op: 'appendBatch' }> => s.op === 'appendBatch');

const key = (source: string, id: number) => `${source}#${id}`;

/** Every row the script appends, and whether retention (by age) may prune it. */
const UNIVERSE = new Map<string, { old: boolean }>();
for (const s of STEPS) {
  if (s.op !== 'append' && s.op !== 'appendBatch') continue;
  for (let i = 0; i < s.n; i++) UNIVERSE.set(key(s.source, s.from + i), { old: s.op === 'append' && s.t0 === OLD });
}

async function acked(ackFile: string): Promise<Set<string>> {
  const out = new Set<string>();
  let text = '';
  try {
    text = await fsp.readFile(ackFile, 'utf8');
  } catch {
    return out;
  }
  for (const line of text.split('\n')) {
    if (!line) continue;
    const a = JSON.parse(line) as { source: string; from: number; n: number };
    for (let i = 0; i < a.n; i++) out.add(key(a.source, a.from + i));
  }
  return out;
}

interface Observed {
  /** row key → seqs it was found at (more than one = duplicated). */
  rows: Map<string, string[]>;
  seqs: string[];
}

/** Read every partition from its files and through the reader; check per-partition order. */
async function observe(root: string, cache: Cache): Promise<Observed> {
  const rows = new Map<string, string[]>();
  const seqs: string[] = [];
  for (const p of await cache.listPartitions()) {
    const dump = await dumpPartition(join(root, p.path));
    const pseqs = dump.map((r) => r.seq);
    assert.equal(firstNonIncreasing(pseqs), -1, `${p.source}: seqs strictly increase in commit order (${pseqs.join(',')})`);
    assert.ok(
      pseqs.every((s) => s !== null),
      `${p.source}: every row carries a seq`,
    );
    for (const r of dump) {
      const k = key(p.source, r.id);
      rows.set(k, [...(rows.get(k) ?? []), r.seq!]);
      seqs.push(r.seq!);
    }
    // The reader agrees with the files, row for row and seq for seq.
    const read = await collect(cache.storage.readRowsSince(p));
    assert.deepEqual(
      read.map((r) => [r.row.id, r.after.seq]),
      dump.map((r) => [r.id, r.seq]),
      `${p.source}: reader = files`,
    );
  }
  return { rows, seqs };
}

function checkRows(obs: Observed, ack: Set<string>, phase: 'recovered' | 'maintained') {
  for (const [k, at] of obs.rows) {
    assert.ok(UNIVERSE.has(k), `${k} was never appended`);
    assert.equal(at.length, 1, `${phase}: ${k} appears ${at.length} times (seqs ${at.join(',')})`);
  }
  for (const k of ack) {
    const n = obs.rows.get(k)?.length ?? 0;
    if (UNIVERSE.get(k)!.old) {
      if (phase === 'maintained') assert.equal(n, 0, `${k} is older than the retention age`);
    } else {
      assert.equal(n, 1, `${phase}: acknowledged ${k} appears ${n} times`);
    }
  }
  assert.equal(new Set(obs.seqs).size, obs.seqs.length, `${phase}: no seq is used twice`);
}

async function checkTidy(root: string, cache: Cache) {
  for (const p of await cache.listPartitions()) {
    const dir = join(root, p.path);
    const { generation, manifest } = await currentManifest(dir);
    const gens = (await fsp.readdir(dir)).filter((n) => n.startsWith('table-'));
    assert.deepEqual(gens, [`table-${generation}`], `${p.source}: only the current generation is left`);
    const parquet = (await fsp.readdir(join(dir, `table-${generation}`))).filter((n) => n.endsWith('.parquet')).sort();
    assert.deepEqual(parquet, manifest.files.map((f) => f.name).sort(), `${p.source}: no orphan data file`);
  }
  const spoolFiles = (await walk(join(root, 'spools'))).filter((f) => f.endsWith('.ndjson'));
  for (const f of spoolFiles) {
    assert.ok(!/seg-\d+\.ndjson$/.test(f), `sealed segment ${f} left unflushed`);
    assert.equal((await fsp.stat(join(root, 'spools', f))).size, 0, `${f} holds unflushed frames`);
  }
}

async function crashAndRecover(point: string | null, at: number, extra: WorkerCacheOptions = {}) {
  const root = tempDir();
  const ackFile = join(root, 'acks.ndjson'); // beside the cache's own files; the cache ignores it
  const script: WorkerScript = { root, opts: { ...OPTS, ...extra }, ackFile, steps: STEPS };
  const run = await runWorker(script, point ? { HYPSINK_FAULT: point, HYPSINK_FAULT_AT: String(at) } : {});
  if (point) {
    assert.equal(run.signal, 'SIGKILL', `the child must die at ${point} (hit ${at}); it exited ${run.code}: ${run.stderr}`);
  } else {
    assert.equal(run.code, 0, run.stderr);
  }
  const ack = await acked(ackFile);

  // What the crash left: every seq on disk (orphans and old generations too) and the reservation.
  const before = new Set((await seqsOnDisk(root)).map(String));
  const alloc = existsSync(join(root, '_hyp_ingest_seq.json'))
    ? BigInt((await readJson<{ reservedThrough: string }>(join(root, '_hyp_ingest_seq.json'))).reservedThrough)
    : 0n;

  // Recovery, part 1: the host retries its batches; flush what the spools hold.
  const cache = await openCache(root, { ...OPTS, ...extra, lockWaitMs: 3000 });
  for (const b of BATCHES) {
    await cache.appendBatch('events', b.batch, COLS, rows(b.source, b.from, b.n));
    for (let i = 0; i < b.n; i++) ack.add(key(b.source, b.from + i));
  }
  await cache.flushAll();
  const recovered = await observe(root, cache);
  checkRows(recovered, ack, 'recovered');
  for (const s of recovered.seqs) {
    if (!before.has(s)) assert.ok(BigInt(s) > alloc, `seq ${s} issued after the crash is above the reservation ${alloc}`);
  }
  // Part 2: maintenance (retention, compaction, and a second pass that sweeps).
  await cache.retention(POLICY);
  await cache.compact();
  await cache.compact();
  const maintained = await observe(root, cache);
  checkRows(maintained, ack, 'maintained');
  for (const [k, at] of maintained.rows) assert.deepEqual(at, recovered.rows.get(k), `${k} kept its seq through maintenance`);
  await checkTidy(root, cache);
  // Every acknowledged (young) row is there; the totals agree.
  const young = [...ack].filter((k) => !UNIVERSE.get(k)!.old);
  assert.ok(
    young.every((k) => maintained.rows.has(k)),
    'no acknowledged row lost',
  );
  await cache.close();
  return { run, ack, maintained };
}

describe('cache crash matrix', { concurrency: 3 }, () => {
  test('every cache-layer fault point has a case', () => {
    const points = Object.keys(FAULT_POINTS).filter((p) => CACHE_PREFIXES.some((x) => p.startsWith(x)));
    assert.ok(points.length >= 11);
    for (const p of points) assert.ok(p in CASES, `fault point ${p} has no crash case`);
    for (const p of Object.keys(CASES)) assert.ok(p in FAULT_POINTS, `case ${p} is not a fault point`);
  });

  test('control: the script without a fault passes the same oracle', async () => {
    const { ack, maintained } = await crashAndRecover(null, 0);
    assert.equal(ack.size, UNIVERSE.size);
    assert.equal(maintained.rows.size, [...UNIVERSE.values()].filter((v) => !v.old).length);
  });

  for (const [point, at] of Object.entries(CASES)) {
    test(`crash at ${point} (hit ${at})`, async () => {
      await crashAndRecover(point, at);
    });
  }

  // The flush points again with every segment built and encoded in the flush worker
  // (LLP 0013): the worker writes nothing, so the same oracle holds.
  for (const [point, at] of Object.entries(CASES).filter(([p]) => p.startsWith('flush.') || p.startsWith('alloc.'))) {
    test(`crash at ${point} (hit ${at}), flush worker`, async () => {
      const { run } = await crashAndRecover(point, at, { workerMinBytes: 0 });
      assert.equal(run.signal, 'SIGKILL');
    });
  }
});
