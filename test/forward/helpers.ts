/** Building forward shippers and hand-made Units for tests, through the plugin's real activate(). */
import { readFile } from 'node:fs/promises';
import { AsyncParallelHook, AsyncSeriesHook, SyncHook } from 'tapable';
import activate from '../../plugins/forward/src/index.js';
import {
  type Continuation,
  continuation,
  type LifecycleHooks,
  type Logger,
  type PartitionRef,
  type PluginContext,
  type PluginManifest,
  type Row,
  type SinkFactory,
  type Unit,
  type UnitShipper,
} from '../../types/index.js';

export const MANIFEST_PATH = new URL('../../plugins/forward/plugin.json', import.meta.url);

/** A logger that keeps every line as text, to grep for secrets. */
export class CaptureLog implements Logger {
  readonly lines: string[] = [];
  private add(level: string, obj: object | string, msg?: string) {
    this.lines.push(JSON.stringify({ level, obj, msg }));
  }
  debug(obj: object | string, msg?: string) {
    this.add('debug', obj, msg);
  }
  info(obj: object | string, msg?: string) {
    this.add('info', obj, msg);
  }
  warn(obj: object | string, msg?: string) {
    this.add('warn', obj, msg);
  }
  error(obj: object | string, msg?: string) {
    this.add('error', obj, msg);
  }
  get text(): string {
    return this.lines.join('\n');
  }
}

function lifecycleHooks(): LifecycleHooks {
  return {
    cacheFlushed: new AsyncSeriesHook(['e']),
    retentionDone: new AsyncSeriesHook(['e']),
    compactionDone: new AsyncSeriesHook(['e']),
    tickStart: new AsyncSeriesHook(['e']),
    tickEnd: new AsyncSeriesHook(['e']),
    partitionExported: new AsyncSeriesHook(['e']),
    partitionFailed: new AsyncSeriesHook(['e']),
    watermarkAdvanced: new SyncHook(['e']),
    gapDetected: new AsyncSeriesHook(['e']),
    shutdown: new AsyncParallelHook([]),
  };
}

export interface Loaded {
  readonly manifest: PluginManifest;
  readonly factory: SinkFactory;
  readonly hooks: LifecycleHooks;
  readonly log: CaptureLog;
  build(config: Record<string, unknown>, sink?: string): UnitShipper;
}

/** Load the plugin the way the kernel does: manifest, activate(ctx), the registered factory. */
export async function loadForward(): Promise<Loaded> {
  const manifest = JSON.parse(await readFile(MANIFEST_PATH, 'utf8')) as PluginManifest;
  const hooks = lifecycleHooks();
  const log = new CaptureLog();
  const sinks: SinkFactory[] = [];
  const ctx: PluginContext = {
    manifest,
    log,
    hooks,
    registerSink: (f) => sinks.push(f),
    registerEncoder: () => {
      throw new Error('unexpected');
    },
    registerDestination: () => {
      throw new Error('unexpected');
    },
    registerTransform: () => {
      throw new Error('unexpected');
    },
  };
  await activate(ctx);
  const factory = sinks[0]!;
  return {
    manifest,
    factory,
    hooks,
    log,
    build: (config, sink = 'central') =>
      factory.create(config, { sink, stateDir: '/nonexistent/state', baseDir: '/nonexistent', cacheId: '00000000-0000-4000-8000-000000000000', log }),
  };
}

export function partition(dataset: string, source: string): PartitionRef {
  const enc = encodeURIComponent(source);
  return { dataset, source, path: `datasets/${dataset}/source=${enc}`, key: `source=${enc}` };
}

export interface UnitSpec {
  readonly shipper: UnitShipper;
  readonly partition: PartitionRef;
  readonly rows: readonly Row[];
  /** Seq of the row before this unit (null: the partition's first unit). */
  readonly since: number | null;
  readonly sink?: string;
  readonly id?: string;
  /** The unit digest the kernel would have computed (default: a fixed one). */
  readonly digest?: string;
  readonly signal?: AbortSignal;
}

/** A Unit over `rows`, seqs since+1..since+n, its id from the shipper (as the kernel would ask). */
export function makeUnit(spec: UnitSpec): Unit & { readCount(): number } {
  const since: Continuation | null = spec.since === null ? null : continuation(spec.since);
  const until = continuation((spec.since ?? 0) + spec.rows.length);
  let reads = 0;
  return {
    sink: spec.sink ?? 'central',
    partition: spec.partition,
    schema: { columns: [] },
    since,
    prior: since,
    until,
    id: spec.id ?? spec.shipper.unitId(spec.partition, since, until),
    digest: spec.digest ?? `u1-${'A'.repeat(43)}`,
    plannedRows: spec.rows.length,
    async *rows() {
      reads++;
      for (const r of spec.rows) yield r;
    },
    // biome-ignore lint/correctness/useYield: the forward sink never asks for Arrow batches
    async *batches() {
      throw new Error('forward reads rows, not batches');
    },
    signal: spec.signal ?? new AbortController().signal,
    readCount: () => reads,
  };
}

export function rowsFrom(start: number, n: number, extra: Record<string, unknown> = {}): Row[] {
  return Array.from({ length: n }, (_, i) => ({ n: start + i, ...extra }));
}

/** A port nothing listens on (bound, then released). */
export async function deadPort(): Promise<number> {
  const net = await import('node:net');
  return new Promise((resolve) => {
    const s = net.createServer();
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

/** Base config for tests: short waits everywhere. */
export function fastConfig(url: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    url,
    timeoutMs: 2000,
    ladderMs: [50, 100],
    maxInlineWaitMs: 5000,
    retry: { attempts: 3, baseMs: 10, maxMs: 40 },
    ...extra,
  };
}
