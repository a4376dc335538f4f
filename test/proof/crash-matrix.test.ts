/**
 * The crash matrix (DESIGN §8): every named fault point of kernel/fault.ts is
 * crashed in a child process — a real SIGKILL — for each sink kind it lies on,
 * followed by a restart, more ingest, export and maintenance; then the oracle
 * checks that every destination holds each committed row exactly once. The
 * points are discovered from the facility itself: a point without a case fails.
 */
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, readdir, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { FAULT_POINTS } from '../../kernel/fault.js';
import { PG_SINK } from '../sim/pg.js';
import {
  type Answer,
  CacheView,
  ingest as ingestRows,
  Ledger,
  newWorker,
  Oracle,
  Problems,
  SINKS,
  type SinkName,
  settle,
  type Worker,
  writeScenarioConfig,
} from '../sim/harness.js';
import { startWorld, type World } from '../sim/world.js';
import type { WorkerOp } from '../sim/worker.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

interface Case {
  readonly point: string;
  readonly sink: SinkName | null;
  /** 'throw': HYPSINK_FAULT_ACTION=throw, the operation fails at the point and the same process goes on. */
  readonly action?: 'throw';
  /** The blob sinks' `keys.time`, with rows hours apart: a unit is several blobs. @ref LLP 0048 */
  readonly keys?: 'day';
}

/** Points of the cache itself, crashed under ingest, retention or compaction. */
const CACHE_POINTS = ['alloc.', 'spool.', 'flush.', 'partition.', 'retention.', 'compact.'];

/**
 * Which sink kinds a point lies on: export points on all four, sink-specific ones on theirs, cache points
 * on none. The Postgres sink's points and the export points on it are also thrown at (the unit failed
 * after the step, the process lives on): its next attempt must read from the database's watermark row
 * whether the unit committed. @ref LLP 0044
 */
function casesFor(point: string): Case[] {
  if (point.startsWith('export.')) return [...SINKS.map((sink): Case => ({ point, sink })), { point, sink: PG_SINK, action: 'throw' }];
  if (point.startsWith('postgres.')) return [{ point, sink: PG_SINK }, { point, sink: PG_SINK, action: 'throw' }];
  if (point.startsWith('localfs.')) return [{ point, sink: 'files' }];
  // Between two blobs of a multi-day unit (time keys): the restart writes only the missing ones.
  if (point.startsWith('blob.')) return [{ point, sink: 'files', keys: 'day' }, { point, sink: 'lake', keys: 'day' }];
  if (point.startsWith('s3.')) return [{ point, sink: 'lake' }];
  if (point.startsWith('receiver.')) return [{ point, sink: 'central' }];
  // Forgetting a sink left out of the config (files), whose watermarks are on disk.
  if (point.startsWith('forget.')) return [{ point, sink: null }];
  if (CACHE_POINTS.some((x) => point.startsWith(x))) return [{ point, sink: null }];
  // A point of a kind not known here (a new sink's) has no case: the test below names it.
  return [];
}

/**
 * The renaming of names made under the first name rule needs a tree made under
 * it: its points are crashed in test/cache/names-v1.test.ts, which fails when
 * one of them has no case there. The Iceberg writer's points need a table to
 * read back (icebird, avsc): they are crashed in test/iceberg/crash.test.ts, on
 * local-fs and S3, which discovers every `iceberg.` point and fails without a case.
 */
/**
 * The multi-aggregator claim's points need a claim table and two aggregators: they are crashed in
 * test/receiver/multi-aggregator.test.ts (LLP 0080); here a file receiver never reaches them, and their
 * case waited for a crash that never came until the test's 20-minute bound.
 */
/** A batch's spool moved away: crashed in test/cli/idempotent-ingest.test.ts, where an ingest retires a committed batch's spool (LLP 0085). */
const ELSEWHERE = ['names.', 'iceberg.', 'receiver.afterClaim', 'receiver.afterHold', 'receiver.afterStored', 'batch.'];

const ALL_CASES = Object.keys(FAULT_POINTS)
  .filter((p) => !ELSEWHERE.some((x) => p.startsWith(x)))
  .flatMap(casesFor);

/** CRASH_ONLY=<text> runs only the cases whose name holds the text (a local re-run; the suite runs them all). */
const caseName = (c: Case) => `${c.point}${c.sink ? ` × ${c.sink}` : ''}${c.action ? ` (${c.action})` : ''}`;
const only = process.env.CRASH_ONLY;
const CASES = only ? ALL_CASES.filter((c) => caseName(c).includes(only)) : ALL_CASES;

let world: World;
const workers: Worker[] = [];
before(async () => {
  world = await startWorld();
});
after(async () => {
  for (const w of workers) await w.stop();
  await world.stop();
});

/** The receiver in a child process, so its own fault points can kill it. */
async function startReceiverChild(dataDir: string, port: number, fault?: string): Promise<{ child: ChildProcess; port: number; exited: Promise<string> }> {
  const env: NodeJS.ProcessEnv = { ...process.env, HYPSINK_TOKEN: world.token };
  delete env.HYPSINK_FAULT;
  if (fault) env.HYPSINK_FAULT = fault;
  const child = spawn(process.execPath, ['--import', 'tsx', 'fixtures/receiver/main.ts', '--port', String(port), '--data', dataDir, '--log-level', 'info'], {
    cwd: ROOT,
    env,
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const exited = new Promise<string>((res) => child.on('exit', (code, signal) => res(signal ?? `exit ${code}`)));
  const listening = await new Promise<number>((res, rej) => {
    const lines = createInterface({ input: child.stdout! });
    lines.on('line', (l) => {
      const m = JSON.parse(l) as { msg?: string; port?: number };
      if (m.msg === 'listening' && m.port) res(m.port);
    });
    child.once('exit', () => rej(new Error('receiver exited before listening')));
  });
  return { child, port: listening, exited };
}

async function runCase(c: Case, worker: Worker, index: number): Promise<string[]> {
  const problems = new Problems();
  const dir = await mkdtemp(join(tmpdir(), 'hypsink-crash-'));
  const prefix = `crash/${index}`;
  const receiverDir = join(dir, 'receiver');
  const onReceiver = c.point.startsWith('receiver.');
  const throwing = c.action === 'throw';
  let receiver = onReceiver ? await startReceiverChild(receiverDir, 0, c.point) : undefined;
  const options = {
    prefix,
    // Export points crash a unit that is not full, so rows ingested before the retry would
    // change a re-planned unit: only the recorded intent keeps the retry the same unit.
    unitRows: c.sink ? 400 : 6,
    rowGroupRows: 8,
    seqBlockSize: 16,
    partSize: 1024,
    centralUrl: receiver ? `http://127.0.0.1:${receiver.port}` : undefined,
    ...(c.keys ? { timeKeys: c.keys } : {}),
  };
  const configPath = await writeScenarioConfig(dir, world, options);
  await worker.use(configPath);
  worker.resetCounts();
  // Sources are unique per case: the world's receiver is shared.
  const src = (name: string) => `c${index}${name}`;
  // Time keys: rows 8 hours apart, so each unit spans days (three rows a day).
  const ledger = new Ledger(`c${index}`, 0, c.keys ? 8 * 3_600_000 : 1000);
  const oracle = new Oracle(world, ledger);
  const view = oracle.add(new CacheView('main', dir, ['web', 'app', 'new'].map(src), options));
  if (onReceiver) oracle.receiverDir = receiverDir;
  /** Ingest, then read the cache: the oracle sees every committed row before a prune can take it. */
  const ingestSpools = async (name: string, n: number, spools: number): Promise<Answer> => {
    const { answer } = await ingestRows(worker, ledger, 'main', src(name), ledger.fresh(n), spools);
    await oracle.observe(view);
    return answer;
  };
  const ingest = (name: string, n: number) => ingestSpools(name, n, 2);
  const forgetting = c.point.startsWith('forget.');
  /** The sinks configured after the crash: a forgotten one is left out. */
  const sinks = forgetting ? SINKS.filter((s) => s !== 'files') : SINKS;
  const exportAll = async (which: readonly SinkName[] = sinks) => {
    for (const sink of which) await worker.send({ op: 'export', sink });
  };

  // Before the crash: enough committed and exported rows that every operation has work.
  await ingest('web', 30);
  await ingest('app', 14);
  if (c.point.startsWith('retention.') || forgetting) await exportAll(SINKS);
  await ingest('web', 12);
  if (forgetting) await worker.use(await writeScenarioConfig(dir, world, { ...options, sinks }));
  let crashOp: WorkerOp | undefined;
  if (forgetting) crashOp = { op: 'forget', sink: 'files' };
  else if (c.point.startsWith('retention.')) crashOp = { op: 'retention', maxRows: 10 };
  else if (c.point.startsWith('compact.')) crashOp = { op: 'compact' };
  else if (c.sink) crashOp = { op: 'export', sink: c.sink };

  // The crash. The second unit of a tick is crashed too: at = 2 where a point is hit more than once.
  await worker.send({ op: 'arm', point: c.point, at: 1, ...(throwing ? { action: 'throw' as const } : {}) });
  const answer = crashOp ? await worker.send(crashOp) : await ingestSpools(c.point === 'partition.afterCursor' ? 'new' : 'web', 25, 3);
  if (throwing) {
    // The same process goes on: every later hit of the point would throw too.
    await worker.send({ op: 'disarm' });
    if ('died' in answer) problems.add('', `${c.point}: the worker died (${answer.died}) where the point was to throw`);
    else if (!JSON.stringify(answer).includes(`injected failure at fault point ${c.point}`)) {
      problems.add('', `${c.point}: the operation did not fail at the point (answer ${JSON.stringify(answer)})`);
    }
  } else if (onReceiver) {
    const how = await receiver!.exited;
    if (how !== 'SIGKILL') problems.add('', `${c.point}: the receiver was not killed at the point (${how})`);
    receiver = await startReceiverChild(receiverDir, receiver!.port);
  } else if (!('died' in answer) || answer.died !== 'SIGKILL') {
    problems.add('', `${c.point}: the worker was not killed at the point (answer ${JSON.stringify(answer)})`);
  }
  const st = await worker.send({ op: 'status' });
  await oracle.step('after the crash', view, 'ok' in st && st.ok ? (st as unknown as { status: never }).status : undefined, problems);
  // Time keys: the blobs stored before the crash (some of a unit's, not all) are never written again.
  const storedBefore = c.keys ? await blobFiles(c.sink === 'lake' ? join(world.s3.directory, 'simlake', ...prefix.split('/')) : join(dir, 'exports')) : undefined;
  if (storedBefore?.size === 0) problems.add('', `${c.point}: no blob of the unit was stored before the crash`);

  // The forgetting is done again after the restart: nothing of files is left to hold rows back.
  if (forgetting) await worker.send({ op: 'forget', sink: 'files' });
  // Restart: more ingest, export and maintenance, then the clean run and the oracle.
  await ingest('web', 9);
  await ingest('app', 5);
  await exportAll();
  await worker.send({ op: 'retention', maxRows: 1000 });
  await worker.send({ op: 'compact' });
  await ingest('web', 4);
  const status = await settle(worker, sinks, problems);
  await view.watch.check('clean run', problems);
  await oracle.final([status], problems);
  for (const [f, was] of storedBefore ?? []) {
    const now = await stat(f).catch(() => null);
    if (!now || now.ino !== was.ino || now.mtimeMs !== was.mtimeMs) problems.add('', `${f}: stored before the crash, then written again or removed`);
  }
  const absent = (status as { absent?: { name: string }[] }).absent ?? [];
  if (forgetting && absent.length > 0) problems.add('', `sinks still hold rows after their forgetting: ${absent.map((a) => a.name).join(', ')}`);
  if (receiver) {
    receiver.child.kill('SIGTERM');
    await receiver.exited;
  }
  if (problems.length === 0) await rm(dir, { recursive: true, force: true });
  else problems.add('', `state kept in ${dir}`);
  return problems.list.map((p) => `${caseName(c)}: ${p}`);
}

/** The blob files under a destination's dir (local-fs files, s3rver's objects), with what tells a rewrite. */
async function blobFiles(root: string): Promise<Map<string, { ino: number; mtimeMs: number }>> {
  const out = new Map<string, { ino: number; mtimeMs: number }>();
  const names = await readdir(root, { recursive: true }).catch(() => [] as string[]);
  for (const n of names) {
    if (!/\.(parquet|_S3rver_object)$/.test(n) || n.startsWith('.hypsink-tmp')) continue;
    const st = await stat(join(root, n));
    if (st.isFile()) out.set(join(root, n), { ino: st.ino, mtimeMs: st.mtimeMs });
  }
  return out;
}

test('every fault point has a case', () => {
  const covered = new Set(ALL_CASES.map((c) => c.point));
  const missing = Object.keys(FAULT_POINTS).filter((p) => !covered.has(p) && !ELSEWHERE.some((x) => p.startsWith(x)));
  assert.deepEqual(missing, []);
});

test('crash matrix: each fault point, each sink kind it lies on, recovers to exactly once', { timeout: 20 * 60_000 }, async () => {
  const lanes = 2;
  for (let i = 0; i < lanes; i++) workers.push(newWorker(world));
  const problems: string[] = [];
  let next = 0;
  await Promise.all(
    workers.map(async (w) => {
      while (next < CASES.length) {
        const i = next++;
        problems.push(...(await runCase(CASES[i]!, w, i)));
      }
    }),
  );
  console.log(`fault points: ${new Set(CASES.map((c) => c.point)).size} covered (${CASES.length} cases)`);
  assert.deepEqual(problems, []);
});
