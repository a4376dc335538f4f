/**
 * What the simulation and the crash matrix share: a worker process that runs
 * kernel operations and can be killed at a fault point, a config with all three
 * sinks over the world's services, a ledger of what was ingested, the clean
 * run, and the oracle that checks every destination.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { readdir, readFile, writeFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { tableFromIPC } from 'apache-arrow';
import * as pw from 'parquet-wasm/node';
import { readStored } from '../../fixtures/receiver/server.js';
import { encodeSegment } from '../../kernel/cache/segments.js';
import { FAULT_POINTS } from '../../kernel/fault.js';
import type { World } from './world.js';
import type { WorkerOp } from './worker.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const WORKER = join(ROOT, 'test/sim/worker.ts');
export const SINKS = ['files', 'lake', 'central'] as const;
export type SinkName = (typeof SINKS)[number];

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

export type Answer = { ok: boolean; [k: string]: unknown } | { died: string };

/** A worker process, reused across scenarios and restarted after each crash. */
export class Worker {
  private child: ChildProcess | undefined;
  private waiting: ((a: Answer) => void) | undefined;
  private config = '';
  crashes = 0;

  constructor(private readonly env: NodeJS.ProcessEnv) {}

  /** Point the worker at a scenario's config (opens a fresh kernel on it). */
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
      w?.(JSON.parse(l) as Answer);
    });
    child.on('exit', (code, signal) => {
      if (this.child === child) this.child = undefined;
      const w = this.waiting;
      this.waiting = undefined;
      w?.({ died: signal ?? `exit ${code}` });
    });
  }

  async send(op: WorkerOp): Promise<Answer> {
    if (!this.child) {
      this.start();
      const opened = await this.raw({ op: 'open', config: this.config });
      if (!('ok' in opened) || !opened.ok) throw new Error(`worker failed to open: ${JSON.stringify(opened)}`);
    }
    const a = await this.raw(op);
    if ('died' in a) this.crashes++;
    if (process.env.SIM_TRACE) {
      const brief = op.op === 'ingest' ? { ...op, rows: `${op.rows.length} rows from ${op.rows[0]?.id}` } : op;
      process.stderr.write(`  ${JSON.stringify(brief)} → ${JSON.stringify(a).slice(0, 300)}\n`);
    }
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

export function newWorker(world: World): Worker {
  // Kills only, never a machine crash: the page cache survives, so fsync buys nothing here.
  const env: NodeJS.ProcessEnv = { ...process.env, SIM_TOKEN: world.token, HYPSINK_LOG_LEVEL: 'silent', HYPSINK_UNSAFE_NO_FSYNC: '1' };
  delete env.HYPSINK_FAULT;
  return new Worker(env);
}

export interface ScenarioOptions {
  /** Keeps scenarios apart in the shared S3 bucket. */
  readonly prefix: string;
  readonly unitRows: number;
  readonly seqBlockSize?: number;
  readonly rowGroupRows?: number;
  readonly partSize?: number;
  /** Defaults to the world's receiver proxy. */
  readonly centralUrl?: string;
  /** A fourth sink, `spare` (local-fs into `spare/`), for cases that leave it out later and forget it. */
  readonly spare?: boolean;
}

/** A config with the `events` dataset and three sinks: files (local-fs), lake (S3), central (forward). */
export async function writeScenarioConfig(dir: string, world: World, o: ScenarioOptions): Promise<string> {
  const unit = { maxRows: o.unitRows };
  const config = {
    cache: { root: 'cache', lockWaitMs: 30_000, seqBlockSize: o.seqBlockSize ?? 1024, rowGroupRows: o.rowGroupRows ?? 65_536 },
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
      files: { writer: '@hypsink/format-parquet', destination: '@hypsink/local-fs', datasets: ['events'], config: { dir: 'exports' }, unit },
      lake: {
        writer: '@hypsink/format-parquet',
        destination: '@hypsink/s3',
        datasets: ['events'],
        unit,
        config: {
          bucket: 'simlake',
          prefix: o.prefix,
          region: 'us-east-1',
          endpoint: world.s3Proxy.endpoint,
          forcePathStyle: true,
          partSize: o.partSize ?? 8 * 1024 * 1024,
          retry: { attempts: 2, baseMs: 5, maxMs: 50 },
        },
      },
      central: {
        plugin: '@hypsink/forward',
        datasets: ['events'],
        unit,
        config: {
          url: o.centralUrl ?? world.receiverProxy.endpoint,
          // biome-ignore lint/suspicious/noTemplateCurlyInString: the config's ${ENV} syntax, interpolated by the kernel
          token: '${SIM_TOKEN}',
          ladderMs: [10, 20],
          maxInlineWaitMs: 60,
          timeoutMs: 5_000,
          retry: { attempts: 2, baseMs: 5, maxMs: 20 },
        },
      },
    },
  };
  if (o.spare) {
    (config.sinks as Record<string, unknown>).spare = {
      writer: '@hypsink/format-parquet',
      destination: '@hypsink/local-fs',
      datasets: ['events'],
      config: { dir: 'spare' },
      unit,
    };
  }
  const path = join(dir, o.spare ? 'with-spare.config.json' : 'hypsink.config.json');
  await writeFile(path, JSON.stringify(config));
  return path;
}

/** What was sent to ingest, and what ingest acknowledged, per source. */
export class Ledger {
  readonly attempted = new Map<string, Set<number>>();
  readonly acked = new Map<string, Set<number>>();
  private nextId = 1;

  rows(source: string, n: number): Record<string, unknown>[] {
    if (!this.attempted.has(source)) {
      this.attempted.set(source, new Set());
      this.acked.set(source, new Set());
    }
    return Array.from({ length: n }, () => {
      const id = this.nextId++;
      this.attempted.get(source)!.add(id);
      return { id, ts: new Date(Date.UTC(2026, 0, 1) + id * 1000).toISOString(), msg: `m${id}` };
    });
  }

  ack(source: string, rows: Record<string, unknown>[]): void {
    for (const r of rows) this.acked.get(source)!.add(r.id as number);
  }
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

async function decodeIds(files: string[]): Promise<number[]> {
  const ids: number[] = [];
  for (const f of files) {
    const t = tableFromIPC(pw.readParquet(await readFile(f)).intoIPCStream());
    if (t.schema.fields.some((x) => x.name.startsWith('_hyp_'))) throw new Error(`${f} carries an internal column`);
    for (const v of t.getChild('id')!.toArray() as BigInt64Array) ids.push(Number(v));
  }
  return ids;
}

/** Watermarks never move backwards: compare every record with the last reading. */
export class WatermarkWatch {
  private marks = new Map<string, bigint>();
  constructor(private readonly stateDir: string) {}

  async check(when: string, problems: string[]): Promise<void> {
    const now = new Map<string, bigint>();
    for (const f of await walk(join(this.stateDir, 'sinks'), '.json')) {
      if (!f.includes('/watermarks/')) continue;
      try {
        const rec = JSON.parse(await readFile(f, 'utf8')) as { continuation: { seq: string } | null };
        now.set(f, rec.continuation ? BigInt(rec.continuation.seq) : -1n);
      } catch {
        // a write-file-atomic temp file mid-rename: not a record
      }
    }
    for (const [f, seq] of now) {
      const before = this.marks.get(f);
      if (before !== undefined && seq < before) problems.push(`${when}: watermark ${f} went back from ${before} to ${seq}`);
    }
    for (const [f, seq] of this.marks) if (!now.has(f)) problems.push(`${when}: watermark ${f} (at ${seq}) disappeared`);
    this.marks = now;
  }
}

interface PartitionFacts {
  source: string;
  pendingRows: number;
  intent: unknown;
  gapRows: number;
  committedRows: number;
  lastError: string | null;
}
interface StatusFacts {
  sinks: { name: string; partitions: PartitionFacts[] }[];
}

/** The clean run: no faults, export every sink until nothing is pending. Returns the final status. */
export async function settle(worker: Worker, problems: string[]): Promise<StatusFacts> {
  let status: StatusFacts | undefined;
  for (let round = 0; round < 6; round++) {
    await worker.send({ op: 'disarm' });
    await worker.send({ op: 'flush' });
    for (const sink of SINKS) await worker.send({ op: 'export', sink });
    const st = (await worker.send({ op: 'status' })) as unknown as { status?: StatusFacts };
    status = st.status;
    if (status?.sinks.every((s) => s.partitions.every((p) => p.pendingRows === 0 && p.intent === null && p.lastError === null))) return status;
  }
  problems.push(`the clean run did not settle: ${JSON.stringify(status)}`);
  return status ?? { sinks: [] };
}

/**
 * Per sink and partition: no row twice, no row that was not ingested there,
 * every acknowledged row delivered unless reported in the gap, and
 * delivered + gap = committed. `receiverDir` defaults to the world's.
 */
export async function checkDestinations(
  dir: string,
  world: World,
  prefix: string,
  ledger: Ledger,
  status: StatusFacts,
  problems: string[],
  receiverDir = world.receiverDir,
): Promise<void> {
  const stored = await readStored(receiverDir);
  for (const sink of status.sinks) {
    for (const p of sink.partitions) {
      const seg = encodeSegment(p.source);
      let delivered: number[];
      if (sink.name === 'files') delivered = await decodeIds(await walk(join(dir, 'exports', 'events', `source=${seg}`), '.parquet'));
      else if (sink.name === 'lake') {
        delivered = await decodeIds(await walk(join(world.s3.directory, 'simlake', ...prefix.split('/'), 'events', `source=${seg}`), '._S3rver_object'));
      } else delivered = (stored.rows.events?.[p.source] ?? []).map((row) => Number(row.id));
      const where = `${sink.name} ${p.source}`;
      const seen = new Set<number>();
      for (const id of delivered) {
        if (seen.has(id)) problems.push(`${where}: row ${id} delivered twice`);
        seen.add(id);
        if (!ledger.attempted.get(p.source)?.has(id)) problems.push(`${where}: row ${id} was never ingested here`);
      }
      const missing = [...(ledger.acked.get(p.source) ?? [])].filter((id) => !seen.has(id));
      if (missing.length > p.gapRows) {
        problems.push(`${where}: ${missing.length} acknowledged rows missing (first ${missing.slice(0, 5)}), gap reported ${p.gapRows}`);
      }
      if (seen.size + p.gapRows !== p.committedRows) problems.push(`${where}: delivered ${seen.size} + gap ${p.gapRows} ≠ committed ${p.committedRows}`);
      if (p.intent !== null) problems.push(`${where}: intent left open ${JSON.stringify(p.intent)}`);
    }
  }
}
