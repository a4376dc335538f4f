/**
 * What the simulation and the crash matrix share: a worker process that runs
 * kernel operations and can be killed at a fault point, a config with all four
 * sinks over the world's services, a ledger of what the host sent (batches,
 * acknowledged or not), the clean run, and the oracle.
 *
 * The oracle counts MULTISETS. The host may send identical rows in separate
 * batches, and a first hop that is not exactly once commits a batch twice, so
 * per cache and partition it records every committed row by its seq (read from
 * the cache's own manifests and data files after each step: a seq is never
 * re-issued, compaction copies it), and per sink and partition it reads the
 * destination back. At every step: exported + gap + pending = committed (status),
 * no destination holds a row more often than it was committed, and no batch is
 * committed more than once. After the clean run: delivered = committed − gap,
 * exactly; every acknowledged batch committed; no open intent; and two sinks
 * never disagree about a row both delivered.
 *
 * The Postgres sink (pg) is read back with plain SQL: its rows of a partition
 * are the table's rows of that source whose ids this cache was sent (ids are
 * never shared between the caches of a scenario), plus the rows its dead
 * letter holds under this cache's id; its watermark row must be where the
 * local record says the last unit ended (or an in-flight unit's end), and
 * after the clean run exactly there. @ref LLP 0043
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { promises as fsp, rmSync, type Stats } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { tableFromIPC } from 'apache-arrow';
import * as pw from 'parquet-wasm/node';
import { readStored } from '../../fixtures/receiver/server.js';
import { encodeSegment } from '../../kernel/store/segments.js';
import { FAULT_POINTS } from '../../kernel/fault.js';
import { ICE_SINK, iceDiffer, type IceRows, readIce, readIceWithIcebird } from './ice.js';
import { cacheIdOf, localRecord, PG_SINK, pgRejected, pgRows, pgWatermark, REFUSE_MARK, watermarkDisagrees } from './pg.js';
import type { World } from './world.js';
import type { IngestPart, WorkerOp } from './worker.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const WORKER = join(ROOT, 'test/sim/worker.ts');
export const SINKS = ['files', 'lake', 'central', PG_SINK, ICE_SINK] as const;
export type SinkName = (typeof SINKS)[number];
const SEQ = '_hyp_ingest_seq';

/** The Iceberg points `maintain --tables` reaches (compaction), not an export. */
const ICE_MAINTAIN_POINTS = ['iceberg.afterCompactFiles', 'iceberg.afterReplaceCommit'];
/** The fault points each operation can reach (the receiver's own run in the driver process). */
const POINTS = Object.keys(FAULT_POINTS);
const starting = (...prefixes: string[]) => POINTS.filter((p) => prefixes.some((x) => p.startsWith(x)));
export const POINTS_BY_OP: Record<string, string[]> = {
  ingest: starting('alloc.', 'spool.', 'flush.', 'partition.', 'batch.'),
  'export files': starting('export.', 'localfs.'),
  'export lake': starting('export.', 's3.'),
  'export central': starting('export.'),
  [`export ${PG_SINK}`]: starting('export.', 'postgres.'),
  // The Iceberg writer's own points, and local-fs's under each of its puts (data files, manifests, the metadata version).
  [`export ${ICE_SINK}`]: starting('export.', 'iceberg.', 'localfs.').filter((p) => !ICE_MAINTAIN_POINTS.includes(p)),
  retention: starting('retention.'),
  compact: starting('compact.'),
  // `maintain --tables` on the ice table: its compaction's points, and local-fs's under its puts. @ref LLP 0078
  tables: [...ICE_MAINTAIN_POINTS, ...starting('localfs.')],
};

export type Answer = { ok: boolean; [k: string]: unknown } | { died: string; stderr?: string };

/**
 * The worker's code as plain JavaScript: every .ts file of kernel/, plugins/,
 * types/ and test/sim/ transpiled (esbuild, file by file, as tsx would) into a
 * mirror tree with node_modules linked. A worker started on it loads without
 * tsx's loader hooks, which cost most of a process start (≈1 CPU-second per
 * crash). The .ts files are copied too, for kernel worker threads that
 * register tsx themselves; plugin entry points only as .js, which the plugin
 * host finds after index.ts. SIM_TSX=1 runs the worker under tsx instead.
 */
let built: Promise<string | undefined> | undefined;
function workerBuild(): Promise<string | undefined> {
  built ??= (async () => {
    if (process.env.SIM_TSX) return undefined;
    try {
      const { transform } = await import('esbuild');
      const out = await fsp.mkdtemp(join(tmpdir(), 'hypsink-sim-js-'));
      process.once('exit', () => rmSync(out, { recursive: true, force: true }));
      const files: string[] = [];
      for (const top of ['kernel', 'plugins', 'types', 'test/sim']) files.push(...(await walk(join(ROOT, top), '')));
      await Promise.all(
        files.map(async (f) => {
          const rel = relative(ROOT, f);
          const dest = join(out, rel);
          await fsp.mkdir(dirname(dest), { recursive: true });
          if (!f.endsWith('.ts')) return fsp.copyFile(f, dest);
          const code = (await transform(await fsp.readFile(f, 'utf8'), { loader: 'ts', format: 'esm', target: 'node20', sourcefile: f })).code;
          await fsp.writeFile(dest.replace(/\.ts$/, '.js'), code);
          if (!/^plugins\/[^/]+\/src\/index\.ts$/.test(rel)) await fsp.copyFile(f, dest);
        }),
      );
      // The mirror's own package: `hypsink/plugin` and the other entries resolve to its transpiled sources.
      const pkg = JSON.parse(await fsp.readFile(join(ROOT, 'package.json'), 'utf8')) as { exports: Record<string, string | Record<string, string>> };
      for (const [k, v] of Object.entries(pkg.exports)) if (typeof v === 'object') pkg.exports[k] = v['hypsink-source']!.replace(/\.ts$/, '.js');
      await fsp.writeFile(join(out, 'package.json'), JSON.stringify(pkg));
      await fsp.symlink(join(ROOT, 'node_modules'), join(out, 'node_modules'));
      return join(out, 'test/sim/worker.js');
    } catch (e) {
      process.stderr.write(`sim: running the worker under tsx (no JavaScript build: ${(e as Error).message})\n`);
      return undefined;
    }
  })();
  return built;
}

/** One worker process: JSON lines in, one JSON line out per operation. */
class Proc {
  private waiting: ((a: Answer) => void) | undefined;
  alive = true;
  stderr = '';
  /** How it ended (a signal, or `exit <code>`); its death counted (as a crash or an unexpected one) once. */
  ended: string | undefined;
  counted = false;
  readonly child: ChildProcess;

  constructor(env: NodeJS.ProcessEnv, js: string | undefined) {
    const prof = process.env.SIM_CPU_PROF ? ['--cpu-prof', '--cpu-prof-dir', process.env.SIM_CPU_PROF] : [];
    const args = js ? [...prof, js] : [...prof, '--import', 'tsx', WORKER];
    const child = spawn(process.execPath, args, { cwd: ROOT, env, stdio: ['pipe', 'pipe', 'pipe'] });
    this.child = child;
    // A request written as the process dies fails with EPIPE: its death is what answers the request (the exit below).
    child.stdin?.on('error', () => undefined);
    // The last of what it wrote to stderr: why a process died that no fault point killed.
    child.stderr?.on('data', (d: Buffer) => {
      this.stderr = (this.stderr + d.toString('utf8')).slice(-4000);
    });
    createInterface({ input: child.stdout! }).on('line', (l) => {
      const w = this.waiting;
      this.waiting = undefined;
      w?.(JSON.parse(l) as Answer);
    });
    child.on('exit', (code, signal) => {
      this.alive = false;
      this.ended = signal ?? `exit ${code}`;
      const w = this.waiting;
      this.waiting = undefined;
      w?.({ died: signal ?? `exit ${code}`, ...(signal === 'SIGKILL' ? {} : { stderr: this.stderr }) });
    });
  }

  request(op: WorkerOp): Promise<Answer> {
    if (!this.alive) return Promise.resolve({ died: 'gone' });
    return new Promise((res) => {
      this.waiting = res;
      this.child.stdin!.write(`${JSON.stringify(op)}\n`);
    });
  }

  async stop(): Promise<void> {
    if (!this.alive) return;
    await new Promise<void>((res) => {
      this.child.once('exit', () => res());
      this.child.stdin!.end();
    });
  }
}

/**
 * A worker process, reused across scenarios and restarted after each crash. A
 * spare process is kept started (its module loading done), so a crash costs
 * the next operation an `open`, not a process start. Its `partner()` is a
 * second process, for a second cache running at the same time (no spare).
 */
export class Worker {
  private proc: Proc | undefined;
  private spare: Promise<Proc> | undefined;
  private mate: Worker | undefined;
  private agg: Worker | undefined;
  private config = '';
  /** What (re)opens the cache in a new process: `open` on the config, unless `use` named another op (an aggregator's). */
  private opener: WorkerOp | undefined;
  crashes = 0;
  starts = 0;
  /** Deaths no fault point caused, since the last `takeUnexpected`. */
  private unexpected: string[] = [];

  constructor(
    private readonly env: NodeJS.ProcessEnv,
    private readonly world?: World,
    private readonly spares = true,
  ) {}

  /** The second process of this lane, started on first use. */
  partner(): Worker {
    this.mate ??= new Worker(this.env, this.world, false);
    return this.mate;
  }

  /** The lane's aggregator process, started on first use; with a spare, as its crashes are many. @ref LLP 0082 */
  aggregator(): Worker {
    this.agg ??= new Worker(this.env, this.world, true);
    return this.agg;
  }

  /** Deaths no fault point caused (this process's, its partner's and the aggregator's), each once. */
  takeUnexpected(): string[] {
    const out = [...this.unexpected.splice(0), ...(this.mate?.takeUnexpected() ?? []), ...(this.agg?.takeUnexpected() ?? [])];
    return out;
  }

  /** Crashes of the lane's aggregator process. */
  get aggCrashes(): number {
    return this.agg?.crashes ?? 0;
  }

  /** Crashes of this process and its partner. */
  get allCrashes(): number {
    return this.crashes + (this.mate?.crashes ?? 0);
  }

  /** Close the open cache (its lock goes with it); the process stays for the next `use`. */
  async release(): Promise<void> {
    if (this.proc?.alive) await this.raw({ op: 'close' });
    this.config = '';
    this.opener = undefined;
  }

  get current(): string {
    return this.config;
  }

  /** Point the worker at a scenario's config (opens a fresh kernel on it). */
  async use(config: string, opener?: WorkerOp): Promise<Answer | undefined> {
    this.config = config;
    this.opener = opener;
    if (this.proc?.alive) return this.raw(this.openOp());
    return undefined;
  }

  private openOp(): WorkerOp {
    return this.opener ?? { op: 'open', config: this.config };
  }

  /**
   * A death between operations (an aggregator killed at a fault point while it
   * served another process's request), counted once: a crash when SIGKILL,
   * else unexpected. Returns how it ended, or undefined while it lives.
   */
  reap(): string | undefined {
    const p = this.proc;
    if (!p || p.alive || p.counted) return undefined;
    p.counted = true;
    this.crashes++;
    if (p.ended !== 'SIGKILL') this.unexpected.push(`between operations: the worker died (${p.ended}) on its own: ${p.stderr.trim().split('\n').slice(0, 6).join(' | ')}`);
    return p.ended;
  }

  /** Start counting crashes for a new scenario. */
  resetCounts(): void {
    this.crashes = 0;
    this.starts = 0;
    this.mate?.resetCounts();
    this.agg?.resetCounts();
  }

  /** Start a process and warm it on a scratch cache whose sinks reach the world's servers directly (no seed's proxy rules). */
  private async launch(): Promise<Proc> {
    const p = new Proc(this.env, await workerBuild());
    await p.request({ op: 'ping' });
    if (this.world) {
      const dir = await fsp.mkdtemp(join(tmpdir(), 'hypsink-sim-warm-'));
      try {
        const direct = {
          ...this.world,
          s3Proxy: { endpoint: this.world.s3.endpoint },
          receiverProxy: { endpoint: this.world.receiver.url },
          pgUrl: this.world.pgDirectUrl,
        } as unknown as World;
        const config = await writeScenarioConfig(dir, direct, { prefix: 'warm', unitRows: 2, rowGroupRows: 2 });
        await p.request({ op: 'warm', config });
      } finally {
        await fsp.rm(dir, { recursive: true, force: true });
      }
    }
    return p;
  }

  async send(op: WorkerOp): Promise<Answer> {
    this.reap();
    if (!this.proc?.alive) {
      const t1 = performance.now();
      this.proc = await (this.spare ?? this.launch());
      const t2 = performance.now();
      this.spare = this.spares ? this.launch() : undefined;
      this.spare?.catch(() => undefined);
      this.starts++;
      const opened = await this.raw(this.openOp());
      if (!('ok' in opened) || !opened.ok) throw new Error(`worker failed to open: ${JSON.stringify(opened)}`);
      if (process.env.SIM_TRACE) process.stderr.write(`  (worker: waited ${(t2 - t1).toFixed(0)} ms for a process, open ${(performance.now() - t2).toFixed(0)} ms)\n`);
    }
    const t0 = performance.now();
    const a = await this.raw(op);
    if ('died' in a) {
      this.proc!.counted = true;
      this.crashes++;
      // Only a fault point kills (SIGKILL): any other death is a bug in what the worker ran.
      if (a.died !== 'SIGKILL') this.unexpected.push(`${op.op}${op.op === 'export' ? ` ${op.sink}` : ''}: the worker died (${a.died}) on its own: ${String(a.stderr ?? '').trim().split('\n').slice(0, 6).join(' | ')}`);
    }
    if (process.env.SIM_TRACE) {
      const brief = op.op === 'ingest' ? { ...op, parts: op.parts.map((p) => `${p.batchId}: ${p.rows.length} rows from ${p.rows[0]?.id}`) } : op;
      process.stderr.write(`  ${(performance.now() - t0).toFixed(0).padStart(4)} ms ${JSON.stringify(brief)} → ${JSON.stringify(a).slice(0, 300)}\n`);
    }
    return a;
  }

  private raw(op: WorkerOp): Promise<Answer> {
    return this.proc!.request(op);
  }

  async stop(): Promise<void> {
    const spare = this.spare;
    this.spare = undefined;
    await this.proc?.stop();
    if (spare) await (await spare.catch(() => undefined))?.stop();
    await this.mate?.stop();
    await this.agg?.stop();
  }
}

export function newWorker(world: World): Worker {
  // Kills only, never a machine crash: the page cache survives, so fsync buys nothing here.
  const env: NodeJS.ProcessEnv = { ...process.env, SIM_TOKEN: world.token, HYPSINK_LOG_LEVEL: 'silent', HYPSINK_UNSAFE_NO_FSYNC: '1' };
  delete env.HYPSINK_FAULT;
  delete env.HYPSINK_FAULT_ACTION;
  delete env.HYPSINK_FAULT_READ;
  return new Worker(env, world);
}

export interface ScenarioOptions {
  /** Keeps scenarios apart in the shared S3 bucket: the lake sink's prefix. */
  readonly prefix: string;
  readonly unitRows: number;
  readonly seqBlockSize?: number;
  readonly rowGroupRows?: number;
  /** The cache's codec (`cache.compression`); the default when absent. */
  readonly cacheCompression?: 'lz4' | 'zstd';
  readonly partSize?: number;
  /** Defaults to the world's receiver proxy. */
  readonly centralUrl?: string;
  /** The forward sink's token (default the world's receiver's, from SIM_TOKEN): an aggregator's client's own. */
  readonly centralToken?: string;
  /** The sinks configured (default all three). */
  readonly sinks?: readonly SinkName[];
  /** The files sink's dir, relative to the config (default `exports`). */
  readonly filesDir?: string;
  /** Per-sink unit row limits (default unitRows). */
  readonly unitRowsBySink?: Partial<Record<SinkName, number>>;
  /** The nullable STRING column `extra` was added to the dataset. */
  readonly extraColumn?: boolean;
  /** The pg sink's database URL (default the world's, through its TCP proxy). */
  readonly pgUrl?: string;
  /** `keys.time` of the blob sinks (files, lake): one blob per day or hour of a unit. @ref LLP 0048 */
  readonly timeKeys?: 'day' | 'hour';
  /** The ice sink's local-fs dir (default `ice` beside the config): the caches of a scenario share one, so one table. */
  readonly iceDir?: string;
  /** The ice sink's compactTargetBytes (default the plugin's). */
  readonly iceTargetBytes?: number;
}

/** A config with the `events` dataset and (up to) five sinks: files (local-fs), lake (S3), central (forward), pg (postgres), ice (Iceberg over local-fs). */
export async function writeScenarioConfig(dir: string, world: World, o: ScenarioOptions): Promise<string> {
  const unit = (s: SinkName) => ({ maxRows: o.unitRowsBySink?.[s] ?? o.unitRows });
  const keys = o.timeKeys ? { keys: { time: o.timeKeys } } : {};
  const all = {
    files: { writer: '@hypsink/format-parquet', destination: '@hypsink/local-fs', datasets: ['events'], config: { dir: o.filesDir ?? 'exports' }, unit: unit('files'), ...keys },
    lake: {
      writer: '@hypsink/format-parquet',
      destination: '@hypsink/s3',
      datasets: ['events'],
      unit: unit('lake'),
      ...keys,
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
      unit: unit('central'),
      config: {
        url: o.centralUrl ?? world.receiverProxy.endpoint,
        // biome-ignore lint/suspicious/noTemplateCurlyInString: the config's ${ENV} syntax, interpolated by the kernel
        token: o.centralToken ?? '${SIM_TOKEN}',
        ladderMs: [10, 20],
        maxInlineWaitMs: 60,
        timeoutMs: 5_000,
        retry: { attempts: 2, baseMs: 5, maxMs: 20 },
      },
    },
    [PG_SINK]: {
      plugin: '@hypsink/postgres',
      datasets: ['events'],
      unit: unit(PG_SINK),
      config: {
        // The driver's database, shared by its seeds (they keep apart by source, and the cache id as writer).
        url: o.pgUrl ?? world.pgUrl,
        poolSize: 2,
        // A refused connection answers at once; a hang is a bug to see, not to wait out for minutes.
        connectTimeoutMs: 5_000,
        statementTimeoutMs: 20_000,
        retry: { attempts: 3, baseMs: 5, maxMs: 20 },
      },
    },
    [ICE_SINK]: {
      writer: '@hypsink/format-iceberg',
      destination: '@hypsink/local-fs',
      datasets: ['events'],
      unit: unit(ICE_SINK),
      config: { dir: o.iceDir ?? 'ice' },
      // Small row groups: a unit's data file has several (the default would make each one).
      // A partition's data files compact once there are two, into files of a few KB in some seeds (so a bin
      // closes and a file can be left as it is), and a snapshot expires once it is a millisecond old: only
      // the rule that keeps a writer's newest snapshot per partition stands between expiry and recovery. @ref LLP 0078, LLP 0052, LLP 0082
      writerConfig: {
        rowGroupRows: o.rowGroupRows ?? 65_536,
        compactMinFiles: 2,
        ...(o.iceTargetBytes ? { compactTargetBytes: o.iceTargetBytes } : {}),
        maxSnapshotAgeMs: 1,
      },
    },
  };
  const config = {
    cache: { root: 'cache', lockWaitMs: 30_000, seqBlockSize: o.seqBlockSize ?? 1024, rowGroupRows: o.rowGroupRows ?? 65_536, ...(o.cacheCompression ? { compression: o.cacheCompression } : {}) },
    state: { dir: 'state' },
    driver: { lockWaitMs: 30_000, outboxBaseMs: 1, concurrency: 2 },
    datasets: { events: eventsDataset(o.extraColumn ? ['extra'] : []) },
    sinks: Object.fromEntries((o.sinks ?? SINKS).map((s) => [s, all[s]])),
  };
  const path = join(dir, 'hypsink.config.json');
  await fsp.writeFile(path, JSON.stringify(config));
  return path;
}

/** The scenario's `events` dataset: id, ts, msg, then these nullable and these required STRING columns. */
function eventsDataset(nullable: readonly string[], required: readonly string[] = []) {
  return {
    columns: [
      { name: 'id', type: 'INT64', nullable: false },
      { name: 'ts', type: 'TIMESTAMP', nullable: false },
      { name: 'msg', type: 'STRING', nullable: true },
      ...nullable.map((name) => ({ name, type: 'STRING', nullable: true })),
      ...required.map((name) => ({ name, type: 'STRING', nullable: false })),
    ],
    timestampColumn: 'ts',
  };
}

/** The column the aggregator records each row's client in (the receiver's default). @ref LLP 0074 */
export const CLIENT_COLUMN = 'hyp_client';
/** The aggregator's one sink: local-fs Parquet, read back by the oracle as the agents' `central` delivery. */
export const AGG_SINK = 'files';
/** The client name a cache forwards to the aggregator as (its line in the tokens file). */
export const clientOf = (cache: string) => `sim-${cache}`;
/** That client's token. */
export const tokenOf = (cache: string) => `tok-sim-${cache}-Vq7Rz2Lk9Xw4`;

/**
 * The aggregator of a scenario (`hypsink receiver --config`): its own cache and
 * state, the agents' dataset with the nullable column a config change may add
 * and the client column, and one local-fs Parquet sink exporting on its
 * schedule and at once when a batch is flushed (the daemon). The tokens file
 * names a client per cache. @ref LLP 0074, LLP 0082
 */
export async function writeAggregatorConfig(dir: string, caches: readonly string[], unitRows: number): Promise<{ config: string; tokensFile: string }> {
  await fsp.mkdir(dir, { recursive: true });
  const tokensFile = join(dir, 'tokens');
  await fsp.writeFile(tokensFile, caches.map((c) => `${clientOf(c)} ${tokenOf(c)}\n`).join(''), { mode: 0o600 });
  const config = {
    cache: { root: 'cache', lockWaitMs: 30_000 },
    state: { dir: 'state' },
    driver: { lockWaitMs: 30_000, outboxBaseMs: 1, concurrency: 2 },
    datasets: { events: eventsDataset(['extra'], [CLIENT_COLUMN]) },
    sinks: {
      [AGG_SINK]: { writer: '@hypsink/format-parquet', destination: '@hypsink/local-fs', datasets: ['events'], schedule: '* * * * *', unit: { maxRows: unitRows }, config: { dir: 'exports' } },
    },
  };
  const path = join(dir, 'hypsink.config.json');
  await fsp.writeFile(path, JSON.stringify(config));
  return { config: path, tokensFile };
}

export interface SimRow {
  readonly id: number;
  readonly ts: string;
  readonly msg: string;
}

/** One ingest as the host sends it: a batch id and its rows, sent again (same id, same rows) until acknowledged. */
export interface Batch {
  readonly id: string;
  readonly cache: string;
  readonly source: string;
  readonly rows: readonly SimRow[];
  acked: boolean;
  attempts: number;
}

/**
 * What the host sent and what ingest acknowledged, per cache and source, as
 * multisets over row ids. The older per-source sets (`rows(source, n)`,
 * `ack(source, rows)`, `attempted`, `acked`) stay for `checkDestinations`.
 */
export class Ledger {
  private nextId = 1;
  private nextBatch = 1;
  readonly batches: Batch[] = [];
  /** `${cache}\0${source}` → row id → batches holding it / acknowledged batches holding it. */
  private readonly index = new Map<string, Map<number, { sent: number; acked: number }>>();
  /** source → every row id sent for it (any cache); source → every acknowledged one. */
  readonly attempted = new Map<string, Set<number>>();
  readonly acked = new Map<string, Set<number>>();

  /**
   * @param refuseEvery every row whose id is a multiple of it carries REFUSE_MARK in its
   * msg: the world's PostgreSQL table refuses it (the pg sink's dead letter keeps it).
   */
  constructor(
    private readonly tag = 'b',
    readonly refuseEvery = 0,
    /** The time between consecutive ids' timestamps (hours apart: a unit spans days, for time keys). */
    readonly tsStepMs = 1000,
  ) {}

  /** A row's content follows from its id. */
  msgOf(id: number): string {
    return this.refuseEvery > 0 && id % this.refuseEvery === 0 ? `m${id}${REFUSE_MARK}` : `m${id}`;
  }
  tsOf(id: number): string {
    return new Date(Date.UTC(2026, 0, 1) + id * this.tsStepMs).toISOString();
  }

  /** Fresh rows: each id, and so each row's content, is new. */
  fresh(n: number): SimRow[] {
    return Array.from({ length: n }, () => {
      const id = this.nextId++;
      return { id, ts: this.tsOf(id), msg: this.msgOf(id) };
    });
  }

  /** Fresh rows of a source, counted as attempted there (for `checkDestinations`). */
  rows(source: string, n: number): Record<string, unknown>[] {
    const rows = this.fresh(n);
    this.sets(source);
    for (const r of rows) this.attempted.get(source)!.add(r.id);
    return rows.map((r) => ({ ...r }));
  }

  /** Record a batch the host is about to send. */
  batch(cache: string, source: string, rows: readonly SimRow[]): Batch {
    const b: Batch = { id: `${this.tag}-${cache}-${this.nextBatch++}`, cache, source, rows, acked: false, attempts: 0 };
    this.batches.push(b);
    const m = this.slot(cache, source);
    this.sets(source);
    for (const r of rows) {
      const e = m.get(r.id) ?? { sent: 0, acked: 0 };
      e.sent++;
      m.set(r.id, e);
      this.attempted.get(source)!.add(r.id);
    }
    return b;
  }

  /** A batch was acknowledged; or (older form) rows of a source were. */
  ack(b: Batch | string, rows?: readonly Record<string, unknown>[]): void {
    if (typeof b === 'string') {
      this.sets(b);
      for (const r of rows ?? []) this.acked.get(b)!.add(r.id as number);
      return;
    }
    if (b.acked) return;
    b.acked = true;
    const m = this.slot(b.cache, b.source);
    for (const r of b.rows) {
      m.get(r.id)!.acked++;
      this.acked.get(b.source)!.add(r.id);
    }
  }

  /** row id → batches holding it (sent) and acknowledged batches holding it. */
  counts(cache: string, source: string): ReadonlyMap<number, { sent: number; acked: number }> {
    return this.slot(cache, source);
  }

  wasSent(source: string, id: number): boolean {
    return this.attempted.get(source)?.has(id) ?? false;
  }

  /** Rows of acknowledged batches of a source, to send again as identical rows. */
  ackedRows(cache: string, source: string): SimRow[] {
    return this.batches.filter((b) => b.acked && b.cache === cache && b.source === source).flatMap((b) => b.rows);
  }

  private sets(source: string): void {
    if (!this.attempted.has(source)) {
      this.attempted.set(source, new Set());
      this.acked.set(source, new Set());
    }
  }

  private slot(cache: string, source: string): Map<number, { sent: number; acked: number }> {
    const key = `${cache}\0${source}`;
    let m = this.index.get(key);
    if (!m) {
        m = new Map();
        this.index.set(key, m);
      }
    return m;
  }
}

/** Send batches as one ingest op (one part per batch, concurrently); record which were acknowledged. */
export async function sendBatches(worker: Worker, ledger: Ledger, batches: readonly Batch[]): Promise<Answer> {
  const parts: IngestPart[] = batches.map((b) => ({ batchId: b.id, rows: b.rows.map((r) => ({ ...r })) }));
  for (const b of batches) b.attempts++;
  const a = await worker.send({ op: 'ingest', source: batches[0]!.source, parts });
  if ('ok' in a) {
    const answered = (a.parts as { batchId: string; ok: boolean }[] | undefined) ?? [];
    for (const b of batches) if (a.ok || answered.find((p) => p.batchId === b.id)?.ok) ledger.ack(b);
  }
  return a;
}

/** New rows of one source split into `spools` batches, sent at once. */
export async function ingest(
  worker: Worker,
  ledger: Ledger,
  cache: string,
  source: string,
  rows: readonly SimRow[],
  spools: number,
): Promise<{ answer: Answer; batches: Batch[] }> {
  const per = Math.ceil(rows.length / spools);
  const batches = Array.from({ length: spools }, (_, i) => rows.slice(i * per, (i + 1) * per))
    .filter((p) => p.length)
    .map((p) => ledger.batch(cache, source, p));
  return { answer: await sendBatches(worker, ledger, batches), batches };
}

async function walk(dir: string, suffix: string): Promise<string[]> {
  const out: string[] = [];
  let entries: import('node:fs').Dirent[] = [];
  try {
    entries = await fsp.readdir(dir, { withFileTypes: true });
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

/** Decoded Parquet files, by path and version (size, mtime): blobs and cache files never change in place but for damage. */
const decoded = new Map<string, { key: string; ids: number[]; seqs: (string | null)[] }>();
const fileKey = (st: Stats) => `${st.size}:${st.mtimeMs}:${st.ino}`;

function decodeParquet(bytes: Uint8Array, path: string, withSeq: boolean): { ids: number[]; seqs: (string | null)[] } {
  let t: ReturnType<typeof tableFromIPC>;
  try {
    t = tableFromIPC(pw.readParquet(bytes, withSeq ? { columns: ['id', SEQ] } : undefined).intoIPCStream());
  } catch (e) {
    throw new Error(`${path} (${bytes.length} bytes) does not decode: ${String(e)}`);
  }
  if (!withSeq && t.schema.fields.some((x) => x.name.startsWith('_hyp_'))) throw new Error(`${path} carries an internal column`);
  const ids = Array.from(t.getChild('id')!.toArray() as BigInt64Array, Number);
  const s = withSeq ? t.getChild(SEQ) : null;
  const seqs = withSeq ? Array.from({ length: t.numRows }, (_, i) => (s?.get(i) as bigint | null)?.toString() ?? null) : [];
  return { ids, seqs };
}

/** Keeps the decoded table of a data file the world damaged, so the oracle reads what it held. */
export const damagedInodes = new Map<string, { ids: number[]; seqs: (string | null)[] }>();

async function readParquetFile(path: string, withSeq: boolean): Promise<{ ids: number[]; seqs: (string | null)[] } | undefined> {
  let st: Stats;
  try {
    st = await fsp.stat(path);
  } catch {
    return undefined;
  }
  const k = fileKey(st);
  const hit = decoded.get(path);
  if (hit?.key === k) return hit;
  const dmg = damagedInodes.get(`${st.dev}:${st.ino}`);
  if (dmg) return dmg;
  const v = { key: k, ...decodeParquet(await fsp.readFile(path), path, withSeq) };
  decoded.set(path, v);
  return v;
}

/** Decoded files of aggregators' sinks (written once, never changed), by path. */
const aggDecoded = new Map<string, { id: number; client: string | null }[]>();

/** An aggregator's Parquet file: each row's id and client. */
async function readAggFile(path: string): Promise<{ id: number; client: string | null }[]> {
  let hit = aggDecoded.get(path);
  if (!hit) {
    const t = tableFromIPC(pw.readParquet(await fsp.readFile(path), { columns: ['id', CLIENT_COLUMN] }).intoIPCStream());
    const ids = t.getChild('id')!;
    const clients = t.getChild(CLIENT_COLUMN)!;
    hit = Array.from({ length: t.numRows }, (_, i) => ({ id: Number(ids.get(i) as bigint), client: (clients.get(i) as string | null) ?? null }));
    aggDecoded.set(path, hit);
  }
  return hit;
}

/** Forget decoded files under a dir (a scenario's dir, once it is removed). */
export function forgetDecoded(dir: string): void {
  for (const p of decoded.keys()) if (p.startsWith(dir)) decoded.delete(p);
  for (const p of aggDecoded.keys()) if (p.startsWith(dir)) aggDecoded.delete(p);
}

/** Watermarks never move backwards: compare every record with the last reading. */
export class WatermarkWatch {
  private marks = new Map<string, bigint>();
  constructor(private readonly stateDir: string) {}

  /** The state dir was restored from a backup: its records went back with it. */
  reset(): void {
    this.marks.clear();
  }

  /** A reset sink starts over: its records may go back or disappear. */
  forget(sink: string): void {
    const dir = `${join(this.stateDir, 'sinks', encodeSegment(sink))}/`;
    for (const f of [...this.marks.keys()]) if (f.startsWith(dir)) this.marks.delete(f);
  }

  async check(when: string, problems: Problems | string[]): Promise<void> {
    const add = (what: string) => (Array.isArray(problems) ? problems.push(`${when}: ${what}`) : problems.add(when, what));
    const now = new Map<string, bigint>();
    for (const f of await walk(join(this.stateDir, 'sinks'), '.json')) {
      if (!f.includes('/watermarks/')) continue;
      try {
        const rec = JSON.parse(await fsp.readFile(f, 'utf8')) as { continuation: { seq: string } | null };
        now.set(f, rec.continuation ? BigInt(rec.continuation.seq) : -1n);
      } catch {
        // a write-file-atomic temp file mid-rename: not a record
      }
    }
    for (const [f, seq] of now) {
      const before = this.marks.get(f);
      if (before !== undefined && seq < before) add(`watermark ${relative(this.stateDir, f)} went back from ${before} to ${seq}`);
    }
    for (const [f, seq] of this.marks) if (!now.has(f)) add(`watermark ${relative(this.stateDir, f)} (at ${seq}) disappeared`);
    this.marks = now;
  }
}

/** Problems of one scenario, each distinct one reported once (at the step it first showed). */
export class Problems {
  private readonly seen = new Set<string>();
  readonly list: string[] = [];

  /** `key` names the kind of problem and where: only its first showing is reported (default: the text). */
  add(when: string, what: string, key = what): void {
    if (this.seen.has(key)) return;
    this.seen.add(key);
    this.list.push(when ? `${when}: ${what}` : what);
  }

  get length(): number {
    return this.list.length;
  }
}

export interface PartitionFacts {
  source: string;
  watermark?: string | null;
  pendingRows: number;
  exportedRows: number;
  intent: unknown;
  gapRows: number;
  committedRows: number;
  /** Rows the destination refused, kept in the sink's dead letter. */
  rejectedRows?: number;
  lastError: string | null;
}
export interface StatusFacts {
  sinks: { name: string; partitions: PartitionFacts[] }[];
}

type Counts = Map<number, number>;

interface PgFacts {
  readonly rows: Awaited<ReturnType<typeof pgRows>>;
  readonly rejected: Awaited<ReturnType<typeof pgRejected>>;
  readonly writer: string | undefined;
  readonly delivered: Counts;
}
const bump = (m: Counts, id: number, n = 1) => m.set(id, (m.get(id) ?? 0) + n);

/** Committed rows of one partition, by seq, as read from the cache after each step. */
interface PartitionSeen {
  /** seq → row id, and the observation at which it was first seen. */
  readonly seqs: Map<string, { id: number; tick: number }>;
  /** Seqs in the current generation. */
  present: Set<string>;
}

/** A sink's destination as the oracle reads it: the files dir or the lake prefix. */
export interface Destination {
  /** The current one. */
  where: string;
  /** Earlier ones still read too: a move the operator has not decided yet. */
  also: string[];
}

/** A sink reset by the operator: it owes the rows in the cache at the reset and every row committed after. */
interface Reset {
  readonly tick: number;
  readonly present: Map<string, Set<string>>;
}

/** One cache of a scenario: its dir, its config, what it committed, and where its sinks deliver. */
export class CacheView {
  readonly watch: WatermarkWatch;
  readonly parts = new Map<string, PartitionSeen>();
  readonly dest: Record<'files' | 'lake', Destination>;
  readonly resets = new Map<SinkName, Reset>();
  configPath = '';
  private writerId: string | undefined;
  /**
   * A copy of another cache's root (a cloned host, a restored backup): seqs it
   * holds from the original, per source. They are the original's to deliver,
   * never this cache's. @ref LLP 0055
   */
  inherited: Map<string, Set<string>> | undefined;
  /** Its destinations are another cache's too (a copy exports where the original does): read only the ids this cache was sent. */
  shared = false;
  /** A copy that still has the original's id (not given its own by `identity --copy` yet). */
  twin = false;
  /** A copy's gap right after `identity --copy`, per sink and source: the original's history, not its own rows. */
  readonly baseGap = new Map<string, number>();
  /** A copy's rejected count right after `identity --copy`, per sink and source: kept in the dead letter under the original's id. */
  readonly baseRejected = new Map<string, number>();
  /**
   * Rows of a history a restore from a backup threw away (committed by the
   * original after the backup was taken, not in the backup), per source: the
   * original may have delivered each, so a destination may hold it as often
   * as it was committed then; this cache owes none of them. @ref LLP 0062
   */
  readonly lost = new Map<string, Counts>();
  /**
   * Seqs a sink of a restored backup left to the original at `identity --copy`
   * (above its watermark, at or below the fork), per sink and source: the
   * original exported them after the backup, or nobody will (the README's
   * rule); held at most once, not owed. @ref LLP 0055, LLP 0062
   */
  readonly left = new Map<string, Set<string>>();
  /** The ids this cache had before `identity --copy`: the pg dead letter keeps its earlier refusals under them. */
  readonly formerWriters: string[] = [];

  constructor(
    readonly name: string,
    readonly dir: string,
    readonly sources: readonly string[],
    public opts: ScenarioOptions,
  ) {
    this.watch = new WatermarkWatch(join(dir, 'state'));
    this.dest = { files: { where: opts.filesDir ?? 'exports', also: [] }, lake: { where: opts.prefix, also: [] } };
  }

  get sinks(): readonly SinkName[] {
    return this.opts.sinks ?? SINKS;
  }

  /** The ice sink's table (`<iceDir>/events`, shared by the caches of a scenario). */
  get iceTable(): string {
    return join(resolve(this.dir, this.opts.iceDir ?? 'ice'), 'events');
  }

  /** The cache's id: the pg sink's `writer` (known once the cache was opened). */
  async writer(): Promise<string | undefined> {
    this.writerId ??= await cacheIdOf(join(this.dir, 'cache'));
    return this.writerId;
  }

  /** The cache was given a new id (`identity --copy`): read it again. */
  forgetWriter(): void {
    if (this.writerId !== undefined) this.formerWriters.push(this.writerId);
    this.writerId = undefined;
  }

  /**
   * The root was restored from a backup taken at observation `tick`: rows first
   * seen after it are the lost history's (their seqs are handed out again).
   */
  rewind(tick: number): void {
    for (const [source, seen] of this.parts) {
      let lost = this.lost.get(source);
      for (const [seq, e] of seen.seqs) {
        if (e.tick <= tick) continue;
        seen.seqs.delete(seq);
        seen.present.delete(seq);
        if (!lost) {
          lost = new Map();
          this.lost.set(source, lost);
        }
        bump(lost, e.id);
      }
    }
    this.watch.reset();
  }

  /** What a sink may hold of a partition beyond what it owes: the lost history's rows, and those it left to the original. */
  allowance(source: string, sink: SinkName): Counts {
    const out: Counts = new Map(this.lost.get(source) ?? []);
    const left = this.left.get(`${sink}\0${source}`);
    const seqs = this.parts.get(source)?.seqs;
    if (left && seqs) for (const seq of left) if (seqs.has(seq)) bump(out, seqs.get(seq)!.id);
    return out;
  }

  partitionDir(source: string): string {
    return join(this.dir, 'cache', 'datasets', 'events', `source=${encodeSegment(source)}`);
  }

  /** The data files of a partition's current generation, in manifest order, with their seq ranges. */
  async currentFiles(source: string): Promise<{ path: string; rows: number; minSeq: string | null; maxSeq: string | null }[] | undefined> {
    const pdir = this.partitionDir(source);
    let gen: number;
    try {
      gen = (JSON.parse(await fsp.readFile(join(pdir, 'cursor.json'), 'utf8')) as { generation: number }).generation;
    } catch {
      return undefined;
    }
    const gdir = join(pdir, `table-${gen}`);
    try {
      const m = JSON.parse(await fsp.readFile(join(gdir, 'manifest.json'), 'utf8')) as {
        files: { name: string; rows: number; minSeq: string | null; maxSeq: string | null }[];
      };
      return m.files.map((f) => ({ path: join(gdir, f.name), rows: f.rows, minSeq: f.minSeq, maxSeq: f.maxSeq }));
    } catch {
      return undefined;
    }
  }

  /** Read what the cache holds now: new seqs are committed rows. */
  async observe(tick: number): Promise<void> {
    for (const source of this.sources) {
      const files = await this.currentFiles(source);
      if (!files) continue;
      let seen = this.parts.get(source);
      if (!seen) {
        seen = { seqs: new Map(), present: new Set() };
        this.parts.set(source, seen);
      }
      const present = new Set<string>();
      for (const f of files) {
        // A file that cannot be read now (damaged behind the world's back) holds seqs seen before.
        const t = await readParquetFile(f.path, true).catch(() => undefined);
        if (!t) continue;
        t.ids.forEach((id, i) => {
          const seq = t.seqs[i] ?? `legacy:${f.path}:${i}`;
          present.add(seq);
          if (!seen.seqs.has(seq)) seen.seqs.set(seq, { id, tick });
        });
      }
      seen.present = present;
    }
  }

  /** Committed multiset of a partition (for a reset sink: what it owes since the reset). */
  committed(source: string, sink?: SinkName): Counts {
    const out: Counts = new Map();
    const seen = this.parts.get(source);
    if (!seen) return out;
    const reset = sink ? this.resets.get(sink) : undefined;
    const atReset = reset?.present.get(source);
    const inherited = this.inherited?.get(source);
    const left = sink ? this.left.get(`${sink}\0${source}`) : undefined;
    for (const [seq, { id, tick }] of seen.seqs) {
      if (inherited?.has(seq) || left?.has(seq)) continue;
      if (reset && !(atReset?.has(seq) || tick > reset.tick)) continue;
      bump(out, id);
    }
    return out;
  }

  /** What a files or lake destination holds for a partition, every place it is read from. */
  async delivered(world: World, sink: 'files' | 'lake', source: string): Promise<Counts> {
    const out: Counts = new Map();
    const seg = `source=${encodeSegment(source)}`;
    const d = this.dest[sink];
    for (const where of [d.where, ...d.also]) {
      const files =
        sink === 'files'
          ? await walk(join(this.dir, where, 'events', seg), '.parquet')
          : await walk(join(world.s3.directory, 'simlake', ...where.split('/'), 'events', seg), '._S3rver_object');
      for (const f of files) for (const id of (await readParquetFile(f, false))?.ids ?? []) bump(out, id);
    }
    return out;
  }
}

/** The clean run: no faults, export every configured sink until nothing is pending. Returns the final status. */
export async function settle(worker: Worker, sinks: readonly string[], problems: Problems, label = '', refusedOk = false): Promise<StatusFacts> {
  // A copy that shares the original's id: a unit the destination refused (HYPSINK_ERR_CONFLICT) stays refused, its rows pending.
  const done = (p: PartitionFacts) => (p.pendingRows === 0 && p.intent === null && p.lastError === null) || (refusedOk && conflict(p));
  let status: StatusFacts | undefined;
  for (let round = 0; round < 6; round++) {
    await worker.send({ op: 'disarm' });
    await worker.send({ op: 'flush' });
    for (const sink of sinks) await worker.send({ op: 'export', sink });
    const st = (await worker.send({ op: 'status' })) as unknown as { status?: StatusFacts };
    status = st.status;
    if (status?.sinks.every((s) => s.partitions.every(done))) return status;
  }
  problems.add('clean run', `${label}did not settle: ${JSON.stringify(status)}`);
  return status ?? { sinks: [] };
}

/**
 * The older oracle, over sets (every row distinct, acknowledged rows per source):
 * per sink and partition, no row twice, no row that was not ingested there,
 * every acknowledged row delivered unless reported in the gap, and
 * delivered + gap = committed. `receiverDir` defaults to the world's. The pg
 * sink's rows are the table's rows of the source and its dead letter's, read
 * with SQL; its dead letter holds as many rows as status counts rejected, only
 * rows the table refuses, and its watermark row agrees with the local record.
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
      const where = `${sink.name} ${p.source}`;
      let delivered: number[] = [];
      if (sink.name === PG_SINK) {
        delivered = (await pgRows(world, p.source)).map((r) => r.id);
        const writer = await cacheIdOf(join(dir, 'cache'));
        const rejected = writer ? await pgRejected(world, writer, p.source) : [];
        delivered.push(...rejected.map((r) => r.id));
        if (rejected.length !== (p.rejectedRows ?? 0)) problems.push(`${where}: the dead letter holds ${rejected.length} rows, status counts ${p.rejectedRows ?? 0} rejected`);
        const unrefused = rejected.filter((r) => !r.msg?.includes(REFUSE_MARK)).map((r) => r.id);
        if (unrefused.length) problems.push(`${where}: rows ${unrefused.slice(0, 5)} are in the dead letter, but the table takes them`);
        const bad = watermarkDisagrees(writer ? await pgWatermark(world, writer, p.source) : null, await localRecord(join(dir, 'state'), p.source), p.intent === null);
        if (bad) problems.push(`${where}: ${bad}`);
      } else if (sink.name === ICE_SINK) {
        const table = join(dir, 'ice', 'events');
        const rows = await readIce(table);
        const theirs = await readIceWithIcebird(table, rows.version);
        const differ = iceDiffer(rows, theirs);
        if (differ) problems.push(`${where}: icebird and our read disagree: ${differ}`);
        delivered = [...(theirs.bySource.get(p.source) ?? [])];
      } else if (sink.name === 'files') {
        for (const f of await walk(join(dir, 'exports', 'events', `source=${seg}`), '.parquet')) delivered.push(...((await readParquetFile(f, false))?.ids ?? []));
      } else if (sink.name === 'lake') {
        for (const f of await walk(join(world.s3.directory, 'simlake', ...prefix.split('/'), 'events', `source=${seg}`), '._S3rver_object')) {
          delivered.push(...((await readParquetFile(f, false))?.ids ?? []));
        }
      } else delivered = (stored.rows.events?.[p.source] ?? []).map((row) => Number(row.id));
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

/** Ice tables whose version hint named an older version than the newest after a clean run (readers that walk forward still find the head). */
export const iceStaleHints = { count: 0 };

const conflict = (p: PartitionFacts) => p.lastError?.startsWith('HYPSINK_ERR_CONFLICT') === true;
const firstIds = (ids: number[]) => ids.slice(0, 5).join(',') + (ids.length > 5 ? ',…' : '');

/**
 * The oracle over a scenario's caches (one, or two forwarding to the one
 * receiver: its rows of a partition are the two caches' central deliveries).
 */
export class Oracle {
  readonly views: CacheView[] = [];
  private tick = 0;
  /** Rows of the receiver read from this dir with readStored (a receiver of the scenario's own), else the world's. */
  receiverDir: string | undefined;
  /**
   * A scenario whose caches forward to an aggregator: `central` is what the
   * aggregator's sink holds (its files under `dir`), each row under the client
   * of the cache that was sent it; `status` is the aggregator's, after its
   * clean run (its gap is the central sink's too). @ref LLP 0074
   */
  aggregator: { readonly dir: string; status?: StatusFacts } | undefined;

  constructor(
    private readonly world: World,
    readonly ledger: Ledger,
  ) {}

  add(view: CacheView): CacheView {
    this.views.push(view);
    return view;
  }

  async observe(view: CacheView): Promise<number> {
    await view.observe(++this.tick);
    return this.tick;
  }

  /** The operator reset a sink of a cache: from now on it owes what the cache holds and what comes after. */
  async reset(view: CacheView, sink: SinkName): Promise<void> {
    const tick = await this.observe(view);
    const present = new Map<string, Set<string>>();
    for (const [source, seen] of view.parts) present.set(source, new Set(seen.present));
    view.resets.set(sink, { tick, present });
    view.watch.forget(sink);
  }

  /**
   * The aggregator's sink's rows of a source: each under the client of the
   * cache that was sent its id (a row under another client, or without one, is
   * a problem when `problems` is given).
   */
  private async aggCentral(dir: string, source: string, when?: string, problems?: Problems): Promise<Counts> {
    const out: Counts = new Map();
    const wrong: string[] = [];
    const owners = this.views.map((v) => ({ client: clientOf(v.name), ids: this.ledger.counts(v.name, source) }));
    for (const f of await walk(join(dir, 'exports', 'events', `source=${encodeSegment(source)}`), '.parquet')) {
      for (const r of await readAggFile(f)) {
        bump(out, r.id);
        const owner = owners.find((o) => o.ids.has(r.id));
        if (owner && owner.client !== r.client) wrong.push(`${r.id} under ${JSON.stringify(r.client)}, sent by ${owner.client}`);
      }
    }
    if (wrong.length && problems && when !== undefined) {
      problems.add(when, `aggregator ${AGG_SINK} ${source}: ${wrong.length} rows under another client than the one that sent them: ${wrong.slice(0, 4).join(', ')}`, `aggregator ${source} client`);
    }
    return out;
  }

  private async central(source: string, when?: string, problems?: Problems): Promise<Counts> {
    if (this.aggregator) return this.aggCentral(this.aggregator.dir, source, when, problems);
    const out: Counts = new Map();
    const rows = this.receiverDir
      ? ((await readStored(this.receiverDir)).rows.events?.[source] ?? [])
      : await this.world.receiverRows('events', source);
    for (const r of rows) bump(out, Number(r.id));
    return out;
  }

  private async delivered(view: CacheView, sink: string, source: string): Promise<Counts> {
    if (sink === 'central') return this.central(source);
    if (sink === PG_SINK) return (await this.pgFacts(view, source)).delivered;
    if (sink === ICE_SINK) return this.iceDelivered(view, source, await readIce(view.iceTable));
    const all = await view.delivered(this.world, sink as 'files' | 'lake', source);
    if (!view.shared) return all;
    // A destination a copy shares with its original: this cache's rows are the ids it was sent.
    const mine = this.ledger.counts(view.name, source);
    return new Map([...all].filter(([id]) => mine.has(id)));
  }

  /** Rows a sink's destination holds of a partition that this cache was sent (for a copy's checks between its exports). */
  async heldOf(view: CacheView, sink: SinkName, source: string): Promise<number> {
    const mine = this.ledger.counts(view.name, source);
    let n = 0;
    for (const [id, k] of await this.delivered(view, sink, source)) if (mine.has(id)) n += k;
    return n;
  }

  /** The ice table's rows of a source that this cache was sent (the table may hold another cache's too). */
  private iceDelivered(view: CacheView, source: string, rows: IceRows): Counts {
    const mine = this.ledger.counts(view.name, source);
    const out: Counts = new Map();
    for (const id of rows.bySource.get(source) ?? []) if (mine.has(id)) bump(out, id);
    return out;
  }

  /** The ice table holds no row no cache of the scenario was sent for that source (a row under another source is one). */
  private iceStrays(when: string, table: string, rows: IceRows, problems: Problems): void {
    for (const [source, ids] of rows.bySource) {
      const strays = ids.filter((id) => !this.ledger.wasSent(source, id));
      if (strays.length) problems.add(when, `${ICE_SINK} ${source}: table rows no cache was sent for this source (first ${firstIds(strays)}) in ${table} v${rows.version}`, `${ICE_SINK} ${source} strays`);
    }
  }

  /** Our own read of the ice table now; a table that cannot be read is a problem (and holds nothing). */
  private async iceNow(when: string, view: CacheView, problems: Problems): Promise<IceRows | undefined> {
    try {
      const rows = await readIce(view.iceTable);
      this.iceStrays(when, view.iceTable, rows, problems);
      return rows;
    } catch (e) {
      problems.add(when, `${ICE_SINK}: the table ${view.iceTable} cannot be read: ${(e as Error).message}`, `${ICE_SINK} unreadable`);
      return undefined;
    }
  }

  /**
   * After the clean run: the table's newest version read by icebird too, which must agree with our read;
   * the version hint names a version that is there (a hint-trusting reader opens it). Once per table.
   */
  private async iceFinal(when: string, view: CacheView, problems: Problems, done: Map<string, IceRows | undefined>): Promise<IceRows | undefined> {
    if (done.has(view.iceTable)) return done.get(view.iceTable);
    let out = await this.iceNow(when, view, problems);
    if (out && out.version > 0) {
      try {
        const theirs = await readIceWithIcebird(view.iceTable, out.version);
        const differ = iceDiffer(out, theirs);
        if (differ) problems.add(when, `${ICE_SINK} v${out.version}: icebird and our read disagree: ${differ}`);
        out = theirs;
      } catch (e) {
        problems.add(when, `${ICE_SINK}: icebird cannot read ${view.iceTable} v${out.version}: ${(e as Error).message}`);
      }
      if (!(out.hint >= 1 && out.hint <= out.version)) problems.add(when, `${ICE_SINK}: version-hint.text names ${out.hint}, the newest version is v${out.version}`);
      else if (out.hint < out.version) iceStaleHints.count++;
    }
    done.set(view.iceTable, out);
    return out;
  }

  /**
   * What the pg sink delivered of a cache's partition: the table's rows of the source
   * with an id this cache was sent, and the dead letter's rows under its cache id.
   */
  private async pgFacts(view: CacheView, source: string): Promise<PgFacts> {
    const mine = this.ledger.counts(view.name, source);
    const rows = await pgRows(this.world, source);
    const writer = await view.writer();
    const rejected = writer ? await pgRejected(this.world, writer, source) : [];
    const delivered: Counts = new Map();
    for (const r of rows) if (mine.has(r.id)) bump(delivered, r.id);
    // A twin (the original's id still) reads the original's dead letter too: only its own ids are its.
    for (const r of rejected) if (!view.twin || mine.has(r.id)) bump(delivered, r.id);
    // Rows refused before `identity --copy` stay in the dead letter under the id the cache had then.
    for (const w of view.formerWriters) if (w !== writer) for (const r of await pgRejected(this.world, w, source)) if (mine.has(r.id)) bump(delivered, r.id);
    return { rows, rejected, writer, delivered };
  }

  /**
   * The pg sink's own facts: the table holds no row no cache was sent and each
   * row as it was sent; the dead letter only rows the table refuses (after the
   * clean run: as many as status counts); the watermark row where the local
   * record says (after the clean run: exactly where the watermark is).
   */
  private async pgCheck(when: string, view: CacheView, p: PartitionFacts, facts: PgFacts, problems: Problems, settled: boolean): Promise<void> {
    const tag = this.views.length > 1 ? `cache ${view.name} ` : '';
    const where = `${tag}${PG_SINK} ${p.source}`;
    const strays: number[] = [];
    const changed: string[] = [];
    for (const r of facts.rows) {
      if (!this.ledger.wasSent(p.source, r.id)) strays.push(r.id);
      else if (r.msg !== this.ledger.msgOf(r.id) || r.ts !== this.ledger.tsOf(r.id)) changed.push(`${r.id} (${JSON.stringify(r.msg)} at ${r.ts})`);
    }
    if (strays.length) problems.add(when, `${PG_SINK} ${p.source}: table rows no cache was sent (first ${firstIds(strays)})`, `${PG_SINK} ${p.source} strays`);
    if (changed.length) problems.add(when, `${PG_SINK} ${p.source}: table rows not as sent: ${changed.slice(0, 4).join(', ')}`, `${PG_SINK} ${p.source} changed`);
    const unrefused = facts.rejected.filter((r) => !r.msg?.includes(REFUSE_MARK)).map((r) => r.id);
    if (unrefused.length) problems.add(when, `${where}: rows the table takes are in the dead letter (first ${firstIds(unrefused)})`, `${where} unrefused`);
    // A renewed copy's dead letter under its own id holds what it refused since `identity --copy`.
    const before = view.baseRejected.get(`${PG_SINK}\0${p.source}`) ?? 0;
    if (settled && !view.twin && facts.rejected.length !== (p.rejectedRows ?? 0) - before) {
      problems.add(when, `${where}: the dead letter holds ${facts.rejected.length} rows, status counts ${p.rejectedRows ?? 0} rejected${before ? ` (${before} of them before identity --copy)` : ''}`);
    }
    // While a copy shares the original's id, the watermark row is both caches'.
    if (!facts.writer || this.views.some((v) => v.twin)) return;
    const bad = watermarkDisagrees(await pgWatermark(this.world, facts.writer, p.source), await localRecord(join(view.dir, 'state'), p.source), settled);
    if (bad) problems.add(when, `${where}: ${bad}`, `${where} watermark row`);
  }

  /** What a sink owes of a partition: committed, by this cache (central: by every cache of the scenario). */
  private owed(view: CacheView, sink: string, source: string): Counts {
    if (sink !== 'central') return view.committed(source, sink as SinkName);
    const out: Counts = new Map();
    for (const v of this.views) for (const [id, n] of v.committed(source, 'central')) bump(out, id, n);
    return out;
  }

  /** What a sink may hold of a partition: what it owes, and the rows of a restored cache's lost history or left to its original. */
  private mayHold(view: CacheView, sink: string, source: string, owed = this.owed(view, sink, source)): Counts {
    const out: Counts = new Map(owed);
    for (const v of sink === 'central' ? this.views : [view]) for (const [id, n] of v.allowance(source, sink as SinkName)) bump(out, id, n);
    return out;
  }

  private overDelivery(when: string, where: string, source: string, delivered: Counts, owed: Counts, problems: Problems): void {
    const never: number[] = [];
    const over: string[] = [];
    for (const [id, n] of delivered) {
      const m = owed.get(id) ?? 0;
      if (n <= m) continue;
      if (!this.ledger.wasSent(source, id)) never.push(id);
      else over.push(`${id} (${n}×, committed ${m}×)`);
    }
    if (never.length) problems.add(when, `${where}: ${never.length} rows never ingested here (first ${firstIds(never)})`, `${where} never`);
    if (over.length) {
      problems.add(when, `${where}: ${over.length} rows delivered more often than committed: ${over.slice(0, 4).join(', ')}${over.length > 4 ? ', …' : ''}`, `${where} over`);
    }
  }

  /** The first hop: no batch committed twice (a retried ingest, same batch id, same rows). */
  private firstHop(when: string, view: CacheView, problems: Problems, final: boolean): void {
    for (const source of view.sources) {
      const sent = this.ledger.counts(view.name, source);
      const committed = view.committed(source);
      const twice: string[] = [];
      for (const [id, n] of committed) {
        const s = sent.get(id)?.sent ?? 0;
        if (n > s) twice.push(`${id} (${n}×, in ${s} batch${s === 1 ? '' : 'es'})`);
      }
      const tag = this.views.length > 1 ? `cache ${view.name} ` : '';
      if (twice.length) {
        const what = `${tag}${source}: ${twice.length} rows committed more often than sent (first hop): ${twice.slice(0, 4).join(', ')}${twice.length > 4 ? ', …' : ''}`;
        problems.add(when, what, `${tag}${source} twice`);
      }
      if (!final) continue;
      const lost: number[] = [];
      // A row of a history a restore threw away was committed there.
      const gone = view.lost.get(source);
      for (const [id, c] of sent) if ((committed.get(id) ?? 0) + (gone?.get(id) ?? 0) < c.acked) lost.push(id);
      if (lost.length) problems.add(when, `${tag}${source}: ${lost.length} acknowledged rows never committed (first ${firstIds(lost)})`);
    }
  }

  /** The checks after every step, on the cache open now (`status` its status; absent when it could not be read). */
  async step(when: string, view: CacheView, status: StatusFacts | undefined, problems: Problems, skipIdentity = false): Promise<void> {
    await this.observe(view);
    await view.watch.check(when, problems);
    this.firstHop(when, view, problems, false);
    const tag = this.views.length > 1 ? `cache ${view.name} ` : '';
    for (const sink of status?.sinks ?? []) {
      for (const p of sink.partitions) {
        const where = `${tag}${sink.name} ${p.source}`;
        if (!skipIdentity && !view.resets.has(sink.name as SinkName) && p.exportedRows + p.gapRows + p.pendingRows !== p.committedRows) {
          problems.add(when, `${where}: exported ${p.exportedRows} + gap ${p.gapRows} + pending ${p.pendingRows} ≠ committed ${p.committedRows}`, `${where} identity`);
        }
        let d: Counts;
        if (sink.name === PG_SINK) {
          const facts = await this.pgFacts(view, p.source);
          await this.pgCheck(when, view, p, facts, problems, false);
          d = facts.delivered;
        } else if (sink.name === ICE_SINK) {
          const rows = await this.iceNow(when, view, problems);
          d = rows ? this.iceDelivered(view, p.source, rows) : new Map();
        } else if (sink.name === 'central') d = await this.central(p.source, when, problems);
        else d = await this.delivered(view, sink.name, p.source);
        this.overDelivery(when, sink.name === 'central' ? `central ${p.source}` : where, p.source, d, this.mayHold(view, sink.name, p.source), problems);
      }
    }
  }

  /** After the clean run of every cache: `statuses` in the order of `views`. */
  async final(statuses: readonly StatusFacts[], problems: Problems, label = ''): Promise<void> {
    const when = `after the clean run${label}`;
    const centralGap = new Map<string, number>();
    const perView: { view: CacheView; sink: string; source: string; delivered: Counts; gap: number; reset: boolean }[] = [];
    const iceRead = new Map<string, IceRows | undefined>();
    for (let i = 0; i < this.views.length; i++) {
      const view = this.views[i]!;
      const st = statuses[i] ?? { sinks: [] };
      await this.observe(view);
      this.firstHop(when, view, problems, true);
      const tag = this.views.length > 1 ? `cache ${view.name} ` : '';
      for (const sink of st.sinks) {
        for (const p of sink.partitions) {
          const where = `${tag}${sink.name} ${p.source}`;
          const reset = view.resets.has(sink.name as SinkName);
          // A twin's refused unit: its rows are refused, pending (not delivered, not lost).
          const refused = view.twin && conflict(p) ? p.pendingRows : 0;
          const base = view.baseGap.get(`${sink.name}\0${p.source}`) ?? 0;
          if (sink.name === 'central') centralGap.set(p.source, (centralGap.get(p.source) ?? 0) + p.gapRows - base + refused);
          if (p.intent !== null && !refused) problems.add(when, `${where}: intent left open ${JSON.stringify(p.intent)}`);
          if (!reset && p.exportedRows + p.gapRows + p.pendingRows !== p.committedRows) {
            problems.add(when, `${where}: exported ${p.exportedRows} + gap ${p.gapRows} + pending ${p.pendingRows} ≠ committed ${p.committedRows}`, `${where} identity final`);
          }

          let delivered: Counts;
          if (sink.name === PG_SINK) {
            const facts = await this.pgFacts(view, p.source);
            await this.pgCheck(when, view, p, facts, problems, p.intent === null);
            delivered = facts.delivered;
          } else if (sink.name === ICE_SINK) {
            const rows = await this.iceFinal(when, view, problems, iceRead);
            delivered = rows ? this.iceDelivered(view, p.source, rows) : new Map();
          } else delivered = await this.delivered(view, sink.name, p.source);
          perView.push({ view, sink: sink.name, source: p.source, delivered, gap: p.gapRows, reset });
          if (sink.name === 'central') continue;
          const owed = view.committed(p.source, sink.name as SinkName);
          this.overDelivery(when, where, p.source, delivered, this.mayHold(view, sink.name, p.source, owed), problems);
          if (refused) this.refusedPending(when, where, delivered, owed, p.gapRows + refused, problems);
          else this.missing(when, where, delivered, owed, p.gapRows - base, reset, problems, view.allowance(p.source, sink.name as SinkName));
        }
      }
    }
    // The receiver: every cache's central rows of a partition together.
    // The aggregator's own gap (rows it never exported) is the central sink's too.
    for (const p of this.aggregator?.status?.sinks.flatMap((x) => x.partitions) ?? []) {
      if (centralGap.has(p.source)) centralGap.set(p.source, centralGap.get(p.source)! + p.gapRows);
    }
    for (const [source, gap] of centralGap) {
      const delivered = await this.central(source, when, problems);
      const owed = this.owed(this.views[0]!, 'central', source);
      this.overDelivery(when, `central ${source}`, source, delivered, this.mayHold(this.views[0]!, 'central', source, owed), problems);
      const spare: Counts = new Map();
      for (const v of this.views) for (const [id, n] of v.allowance(source, 'central')) bump(spare, id, n);
      this.missing(when, `central ${source}`, delivered, owed, gap, false, problems, spare);
    }
    // Two sinks of a cache never disagree about a row both delivered (unless the one with fewer copies reports a gap).
    for (const view of this.views) {
      for (const source of view.sources) {
        const mine = perView.filter((x) => x.view === view && x.source === source);
        // A row committed in a history a restore threw away may be at one destination from then, not another;
        // so may a row one sink left to the original at `identity --copy` (the original exported it, or nobody will).
        const spare = new Map(mine.map((x) => [x.sink, view.allowance(source, x.sink as SinkName)]));
        for (let a = 0; a < mine.length; a++) {
          for (let b = a + 1; b < mine.length; b++) {
            const x = mine[a]!;
            const y = mine[b]!;
            const differ: string[] = [];
            for (const [id, n] of x.delivered) {
              const m = y.delivered.get(id) ?? 0;
              if (m === 0 || m === n || spare.get(x.sink)?.has(id) || spare.get(y.sink)?.has(id)) continue;
              const fewer = n < m ? x : y;
              if (fewer.gap > 0 || fewer.reset) continue;
              differ.push(`${id} (${n}× vs ${m}×)`);
            }
            if (differ.length) {
              const tag = this.views.length > 1 ? `cache ${view.name} ` : '';
              problems.add(when, `${tag}${source}: ${x.sink} and ${y.sink} disagree on ${differ.length} rows both delivered: ${differ.slice(0, 4).join(', ')}`);
            }
          }
        }
      }
    }
  }

  /** A twin's refused rows: delivered at most the gap and its refused pending rows short (none over: the over-delivery check). */
  private refusedPending(when: string, where: string, delivered: Counts, owed: Counts, allowed: number, problems: Problems): void {
    const short: number[] = [];
    for (const [id, n] of owed) if ((delivered.get(id) ?? 0) < n) short.push(id);
    if (short.length > allowed) problems.add(when, `${where}: ${short.length} committed rows not delivered (first ${firstIds(short)}), more than its gap and refused pending rows (${allowed})`);
  }

  /**
   * delivered = owed − gap, exactly (for a reset sink: at most the gap short).
   * A row a sink may hold beyond what it owes (`spare`: a restored cache's lost
   * history, rows left to the original) and owes again (the same row ingested
   * anew) is one row twice: which of its copies arrived cannot be told, so the
   * gap may count it either way.
   */
  private missing(when: string, where: string, delivered: Counts, owed: Counts, gap: number, reset: boolean, problems: Problems, spare?: Counts): void {
    const short: number[] = [];
    let deficit = 0;
    let most = 0;
    for (const [id, n] of owed) {
      const d = delivered.get(id) ?? 0;
      if (d < n) {
        deficit += n - d;
        short.push(id);
      }
      most += Math.max(0, n - Math.max(0, d - (spare?.get(id) ?? 0)));
    }
    if (reset ? deficit > gap : gap < deficit || gap > most) {
      const what = reset ? 'rows in the cache at its reset or committed since' : this.views.length > 1 && where.startsWith('central') ? 'rows committed by the caches' : 'committed rows';
      problems.add(when, `${where}: ${deficit} ${what} not delivered (first ${firstIds(short)}), gap reported ${gap}`);
    }
  }
}
