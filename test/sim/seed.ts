/**
 * One seed of the simulation: a random interleaving of ingest (several spools
 * into one partition at once), export for each sink, retention (with forced
 * prunes under a hard cap), compaction, receiver 429/503 bursts, S3 5xx and
 * slow answers, and crashes at random fault points — then a clean run and the
 * oracle: per sink and partition, delivered rows = committed rows minus the
 * reported gap, no duplicate, watermarks never decreased, no open intent.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { readdir, readFile, writeFile, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { tableFromIPC } from 'apache-arrow';
import * as pw from 'parquet-wasm/node';
import { readStored } from '../../fixtures/receiver/server.js';
import { encodeSegment } from '../../kernel/cache/segments.js';
import { FAULT_POINTS } from '../../kernel/fault.js';
import { rng } from '../../fixtures/demo/generate.js';
import type { FaultRule } from '../support/fault-proxy.js';
import type { World } from './world.js';
import type { WorkerOp } from './worker.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const WORKER = join(ROOT, 'test/sim/worker.ts');
const SINKS = ['files', 'lake', 'central'] as const;
/** The fault points each operation can reach (the receiver's own run in the driver process). */
const POINTS = Object.keys(FAULT_POINTS);
const starting = (...prefixes: string[]) => POINTS.filter((p) => prefixes.some((x) => p.startsWith(x)));
export const POINTS_BY_OP: Record<string, string[]> = {
  ingest: starting('alloc.', 'spool.', 'flush.', 'partition.'),
  'export files': starting('export.', 'localfs.'),
  'export lake': starting('export.', 's3.'),
  'export central': starting('export.'),
  retention: starting('retention.'),
  compact: starting('compact.'),
};
/** Every point the simulation can crash (the crash matrix covers the rest). */
export const SIM_POINTS = [...new Set(Object.values(POINTS_BY_OP).flat())];

export function newWorker(world: World): Worker {
  // The simulation kills processes, never the machine: the page cache survives, so fsync buys nothing here.
  const env: NodeJS.ProcessEnv = { ...process.env, SIM_TOKEN: world.token, HYPSINK_LOG_LEVEL: 'silent', HYPSINK_UNSAFE_NO_FSYNC: '1' };
  delete env.HYPSINK_FAULT;
  return new Worker(env);
}

export interface SeedResult {
  readonly seed: number;
  readonly ok: boolean;
  readonly problems: string[];
  readonly steps: number;
  readonly crashes: number;
  readonly replay: string;
}

type Answer = { ok: boolean; [k: string]: unknown } | { died: string };

/** A worker process, reused across the seeds of one lane and restarted after each crash. */
export class Worker {
  private child: ChildProcess | undefined;
  private lines: string[] = [];
  private waiting: ((a: Answer) => void) | undefined;
  private config = '';
  crashes = 0;

  constructor(private readonly env: NodeJS.ProcessEnv) {}

  /** Point the worker at a seed's config (opens a fresh kernel on it). */
  async use(config: string): Promise<void> {
    this.config = config;
    this.crashes = 0;
    if (this.child) await this.raw({ op: 'open', config });
  }

  private start(): void {
    const child = spawn(process.execPath, ['--import', 'tsx', WORKER], { cwd: ROOT, env: this.env, stdio: ['pipe', 'pipe', 'pipe'] });
    this.child = child;
    child.stderr?.resume();
    createInterface({ input: child.stdout! }).on('line', (l) => {
      const w = this.waiting;
      this.waiting = undefined;
      if (w) w(JSON.parse(l) as Answer);
      else this.lines.push(l);
    });
    child.on('exit', (code, signal) => {
      if (this.child === child) this.child = undefined;
      const w = this.waiting;
      this.waiting = undefined;
      w?.({ died: signal ?? `exit ${code}` });
    });
  }

  async send(op: WorkerOp): Promise<Answer> {
    const t0 = Date.now();
    if (!this.child) {
      this.start();
      const opened = await this.raw({ op: 'open', config: this.config });
      if (!('ok' in opened) || !opened.ok) throw new Error(`worker failed to open: ${JSON.stringify(opened)}`);
      if (process.env.SIM_TRACE) process.stderr.write(`  start+open ${Date.now() - t0} ms\n`);
    }
    const t1 = Date.now();
    const a = await this.raw(op);
    if (process.env.SIM_TRACE) process.stderr.write(`  ${op.op}${'sink' in op ? ` ${op.sink}` : ''} ${Date.now() - t1} ms\n`);
    if ('died' in a) this.crashes++;
    return a;
  }

  private raw(op: WorkerOp): Promise<Answer> {
    return new Promise((res) => {
      this.waiting = res;
      this.child!.stdin!.write(`${JSON.stringify(op)}\n`);
    });
  }

  async stop(): Promise<void> {
    const c = this.child;
    if (!c) return;
    await new Promise<void>((res) => {
      c.once('exit', () => res());
      c.stdin!.end();
    });
  }
}

async function decodeIds(files: string[]): Promise<number[]> {
  const ids: number[] = [];
  for (const f of files) {
    const t = tableFromIPC(pw.readParquet(await readFile(f)).intoIPCStream());
    if (t.schema.fields.some((x) => x.name.startsWith('_hyp_'))) throw new Error(`${f} carries an internal column`);
    for (const v of t.getChild('id')!.toArray() as BigInt64Array) ids.push(Number(v));
  }
  return ids;
}

async function walk(dir: string, suffix: string): Promise<string[]> {
  const out: string[] = [];
  let entries: import('node:fs').Dirent[] = [];
  try {
    entries = await readdir(dir, { withFileTypes: true });
  } catch {
    return out;
  }
  for (const e of entries) {
    const p = join(dir, e.name);
    if (e.isDirectory()) out.push(...(await walk(p, suffix)));
    else if (e.name.endsWith(suffix)) out.push(p);
  }
  return out;
}

async function readWatermarks(stateDir: string): Promise<Map<string, bigint>> {
  const out = new Map<string, bigint>();
  for (const f of await walk(join(stateDir, 'sinks'), '.json')) {
    if (!f.includes('/watermarks/')) continue;
    try {
      const rec = JSON.parse(await readFile(f, 'utf8')) as { continuation: { seq: string } | null };
      out.set(f, rec.continuation ? BigInt(rec.continuation.seq) : -1n);
    } catch {
      // a temp file of write-file-atomic mid-rename: not a record
    }
  }
  return out;
}

export async function runSeed(seed: number, world: World, worker: Worker): Promise<SeedResult> {
  const r = rng(seed);
  const int = (lo: number, hi: number) => lo + Math.floor(r() * (hi - lo + 1));
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(r() * xs.length)]!;
  const dir = await mkdtemp(join(tmpdir(), `hypsink-sim-${seed}-`));
  const sources = [`s${seed}a`, `s${seed}b`].slice(0, int(1, 2));
  const unitRows = int(3, 40);
  const config = {
    cache: { root: 'cache', lockWaitMs: 30_000, seqBlockSize: int(1, 64), rowGroupRows: int(4, 50) },
    state: { dir: 'state' },
    driver: { lockWaitMs: 30_000, outboxBaseMs: 1, concurrency: 2 },
    datasets: {
      events: {
        columns: [
          { name: 'id', type: 'INT64', nullable: false },
          { name: 'ts', type: 'TIMESTAMP', nullable: false },
          { name: 'msg', type: 'STRING', nullable: true },
        ],
        timestampColumn: 'ts',
      },
    },
    sinks: {
      files: { writer: '@hypsink/format-parquet', destination: '@hypsink/local-fs', datasets: ['events'], config: { dir: 'exports' }, unit: { maxRows: unitRows } },
      lake: {
        writer: '@hypsink/format-parquet',
        destination: '@hypsink/s3',
        datasets: ['events'],
        unit: { maxRows: unitRows },
        config: {
          bucket: 'simlake',
          prefix: `sim/${seed}`,
          region: 'us-east-1',
          endpoint: world.s3Proxy.endpoint,
          forcePathStyle: true,
          partSize: pick([1024, 8 * 1024 * 1024]),
          retry: { attempts: 2, baseMs: 5, maxMs: 50 },
        },
      },
      central: {
        plugin: '@hypsink/forward',
        datasets: ['events'],
        unit: { maxRows: unitRows },
        config: {
          url: world.receiverProxy.endpoint,
          // biome-ignore lint/suspicious/noTemplateCurlyInString: the config's ${ENV} syntax, interpolated by the kernel
          token: "${SIM_TOKEN}",
          ladderMs: [10, 20],
          maxInlineWaitMs: 60,
          timeoutMs: 5_000,
          retry: { attempts: 2, baseMs: 5, maxMs: 20 },
        },
      },
    },
  };
  const configPath = join(dir, 'hypsink.config.json');
  await writeFile(configPath, JSON.stringify(config));
  await worker.use(configPath);
  const problems: string[] = [];
  const attempted = new Map<string, Set<number>>(sources.map((s) => [s, new Set()]));
  const acked = new Map<string, Set<number>>(sources.map((s) => [s, new Set()]));
  let nextId = 1;
  let marks = new Map<string, bigint>();
  const checkMarks = async (when: string) => {
    const now = await readWatermarks(join(dir, 'state'));
    for (const [f, seq] of now) {
      const before = marks.get(f);
      if (before !== undefined && seq < before) problems.push(`${when}: watermark ${f} went back from ${before} to ${seq}`);
    }
    for (const [f, seq] of marks) if (!now.has(f)) problems.push(`${when}: watermark ${f} (at ${seq}) disappeared`);
    marks = now;
  };

  const steps = int(8, 18);
  let armed = 0;
  let crashes = 0;
  try {
    for (let step = 0; step < steps; step++) {
      const crash = armed < 2 && r() < 0.06;
      const x = r();
      let op: WorkerOp;
      if (x < 0.35) {
        const source = pick(sources);
        const n = int(1, 40);
        const rows = Array.from({ length: n }, () => {
          const id = nextId++;
          attempted.get(source)!.add(id);
          return { id, ts: new Date(Date.UTC(2026, 0, 1) + id * 1000).toISOString(), msg: `m${id}` };
        });
        op = { op: 'ingest', source, rows, spools: int(1, 3) };
      } else if (x < 0.7) {
        op = { op: 'export', sink: pick(SINKS) };
      } else if (x < 0.8) {
        op = { op: 'retention', maxRows: int(5, 80), hardMaxRows: r() < 0.4 ? int(10, 60) : undefined };
      } else if (x < 0.87) {
        op = { op: 'compact' };
      } else if (x < 0.94) {
        const left = { n: int(1, 4) };
        const status = pick([429, 503]);
        const retryAfter = pick(['0', '1', 'garbage', undefined]);
        const rule: FaultRule = () => {
          if (left.n <= 0) return undefined;
          left.n--;
          return { kind: 'respond', status, headers: retryAfter === undefined ? {} : { 'retry-after': retryAfter } };
        };
        world.setReceiverRule(rule);
        op = { op: 'export', sink: 'central' };
      } else {
        const left = { n: int(1, 3) };
        const slow = r() < 0.5;
        world.setS3Rule(() => {
          if (left.n <= 0) return undefined;
          left.n--;
          return slow ? { kind: 'delay', ms: 30 } : { kind: 'respond', status: 500, body: '<Error><Code>InternalError</Code></Error>' };
        });
        op = { op: 'export', sink: 'lake' };
      }
      if (crash) {
        armed++;
        const points = POINTS_BY_OP[op.op === 'export' ? `export ${op.sink}` : op.op] ?? [];
        if (points.length) await worker.send({ op: 'arm', point: pick(points), at: int(1, 2) });
      }
      const answer = await worker.send(op);
      if (op.op === 'ingest' && 'ok' in answer && answer.ok) for (const row of op.rows) acked.get(op.source)!.add(row.id as number);
      if ('ok' in answer && !answer.ok && op.op !== 'export') problems.push(`step ${step} ${op.op} failed: ${String(answer.error)}`);
      if (crash && !('died' in answer)) await worker.send({ op: 'disarm' });
      world.setReceiverRule(undefined);
      world.setS3Rule(undefined);
      await checkMarks(`step ${step} (${op.op})`);
    }

    // The clean run: no faults, then export until nothing is pending.
    let settled = false;
    for (let round = 0; round < 6 && !settled; round++) {
      await worker.send({ op: 'disarm' });
      for (const sink of SINKS) await worker.send({ op: 'export', sink });
      const st = await worker.send({ op: 'status' });
      const status = (st as { status?: { sinks: { name: string; partitions: { pendingRows: number; intent: unknown; lastError: string | null }[] }[] } }).status;
      settled = !!status && status.sinks.every((s) => s.partitions.every((p) => p.pendingRows === 0 && p.intent === null && p.lastError === null));
    }
    await checkMarks('clean run');
    const facts = (await worker.send({ op: 'status' })) as unknown as {
      status: {
        sinks: {
          name: string;
          partitions: { source: string; pendingRows: number; intent: unknown; gapRows: number; committedRows?: number; watermark: string | null; highWater: string | null; lastError: string | null }[];
        }[];
      };
    };
    if (!settled) problems.push(`the clean run did not settle: ${JSON.stringify(facts.status)}`);

    const stored = await readStored(world.receiverDir);
    for (const sink of facts.status.sinks) {
      for (const p of sink.partitions) {
        const seg = encodeSegment(p.source);
        let delivered: number[];
        if (sink.name === 'files') delivered = await decodeIds(await walk(join(dir, 'exports', 'events', `source=${seg}`), '.parquet'));
        else if (sink.name === 'lake') delivered = await decodeIds(await walk(join(world.s3.directory, 'simlake', 'sim', String(seed), 'events', `source=${seg}`), '._S3rver_object'));
        else delivered = (stored.rows.events?.[p.source] ?? []).map((row) => Number(row.id));
        const where = `${sink.name} ${p.source}`;
        const seen = new Set<number>();
        for (const id of delivered) {
          if (seen.has(id)) problems.push(`${where}: row ${id} delivered twice`);
          seen.add(id);
          if (!attempted.get(p.source)?.has(id)) problems.push(`${where}: row ${id} was never ingested here`);
        }
        const missing = [...(acked.get(p.source) ?? [])].filter((id) => !seen.has(id));
        if (missing.length > p.gapRows) problems.push(`${where}: ${missing.length} acknowledged rows missing (first ${missing.slice(0, 5)}), gap reported ${p.gapRows}`);
        if (p.committedRows !== undefined && seen.size + p.gapRows !== p.committedRows) {
          problems.push(`${where}: delivered ${seen.size} + gap ${p.gapRows} ≠ committed ${p.committedRows}`);
        }
        if (p.intent !== null) problems.push(`${where}: intent left open ${JSON.stringify(p.intent)}`);
      }
    }
  } catch (e) {
    problems.push(`harness: ${(e as Error).stack}`);
  } finally {
    crashes = worker.crashes;
    if (problems.length === 0) await rm(dir, { recursive: true, force: true });
  }
  const replay = `npm run sim -- --seeds 1 --start ${seed}`;
  if (problems.length) problems.push(`state kept in ${dir}`);
  return { seed, ok: problems.length === 0, problems, steps, crashes, replay };
}
