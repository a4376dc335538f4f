/**
 * The kernel, assembled from a loaded config: cache, hooks, plugin host, sinks
 * and driver. Every CLI command is a method here, so tests drive the same code.
 */
import { ParseWorker } from './ingest/parsers.js';
import { promises as fsp } from 'node:fs';
import { join } from 'node:path';
import type { Logger as Pino } from 'pino';
import { HypsinkError } from '../types/errors.js';
import type { LifecycleHooks } from '../types/hooks.js';
import type { PartitionRef } from '../types/storage.js';
import type { BlobDestination, UnitShipper } from '../types/sinks.js';
import { Cache, type FlushResult } from './cache/cache.js';
import { forcedAbove } from './cache/planner.js';
import type { RetentionResult } from './cache/retention.js';
import type { CompactResult } from './cache/compaction.js';
import { encodeSegment } from './cache/segments.js';
import { parseDuration } from './config/duration.js';
import type { LoadedConfig } from './config/load.js';
import { isBlobSink, type SinkConfig } from './config/schema.js';
import { FAULT_POINTS, type FaultPoint, fault } from './fault.js';
import { createHooks } from './hooks.js';
import { createLogger } from './log.js';
import { PluginHost } from './plugins/host.js';
import { blobShipper } from './sinks/blob.js';
import { SinkDriver, type PartitionReport, type TickReport } from './sinks/driver.js';
import type { SinkRuntime } from './sinks/exporter.js';
import { WatermarkStore } from './sinks/watermarks.js';

/** "an encoder", "a sink". */
const a = (kind: string) => `${kind === 'encoder' ? 'an' : 'a'} ${kind}`;

/** Blob units default to large files; request sinks say their own bounds. */
const BLOB_LIMITS = { maxRows: 1_000_000, maxBytes: 256 * 1024 * 1024 };

export interface RuntimeOptions {
  readonly log?: Pino;
}

export class Hypsink {
  readonly driver: SinkDriver;
  /** Where large ingests parse (LLP 0016). */
  readonly parsers = new ParseWorker();
  private readonly abort = new AbortController();

  private constructor(
    readonly loaded: LoadedConfig,
    readonly cache: Cache,
    readonly log: Pino,
    readonly hooks: LifecycleHooks,
    readonly sinks: ReadonlyMap<string, SinkRuntime>,
    private readonly tickRequests: TickRequests,
  ) {
    const d = loaded.config.driver;
    this.driver = new SinkDriver(
      { cache, hooks: this.hooks, log, signal: this.abort.signal },
      { concurrency: d.concurrency, lockWaitMs: d.lockWaitMs, outboxBaseMs: d.outboxBaseMs, outboxMaxMs: d.outboxMaxMs },
    );
  }

  static async open(loaded: LoadedConfig, opts: RuntimeOptions = {}): Promise<Hypsink> {
    const log = opts.log ?? createLogger();
    const c = loaded.config;
    // Plugins and sinks first: a config error must leave nothing behind, not even an empty cache.
    const hooks = createHooks();
    const host = new PluginHost(hooks, log, loaded.baseDir);
    for (const spec of c.plugins) await host.load(spec);
    const sinks = new Map<string, SinkRuntime>();
    const tickRequests = new TickRequests();
    try {
      for (const [name, sc] of Object.entries(c.sinks)) sinks.set(name, await buildSink(loaded, log, host, name, sc, tickRequests));
      refuseSharedRoots(loaded, sinks);
    } catch (e) {
      for (const s of sinks.values()) await s.shipper.close().catch(() => undefined);
      throw e;
    } finally {
      host.close();
    }
    const cache = await Cache.open({
      root: loaded.cacheRoot,
      datasets: c.datasets,
      lockWaitMs: c.cache.lockWaitMs,
      seqBlockSize: c.cache.seqBlockSize,
      segmentBytes: c.cache.segmentBytes,
      rowGroupRows: c.cache.rowGroupRows,
    });
    if (loaded.unknownKeys.length > 0) {
      log.warn({ file: loaded.file, keys: loaded.unknownKeys }, `config keys ignored (unknown; a typo?): ${loaded.unknownKeys.join(', ')}`);
    }
    return new Hypsink(loaded, cache, log, hooks, sinks, tickRequests);
  }

  get signal(): AbortSignal {
    return this.abort.signal;
  }

  sinkStateDir(name: string): string {
    return sinkStateDir(this.loaded, name);
  }

  /** Listen for sinks asking for a prompt tick (`SinkBuildContext.requestTick`); returns the unsubscribe. */
  onTickRequest(listener: (sink: string) => void): () => void {
    return this.tickRequests.listen(listener);
  }

  sink(name: string): SinkRuntime {
    const s = this.sinks.get(name);
    if (!s) {
      throw new HypsinkError('HYPSINK_ERR_CONFIG', `no sink named "${name}" (configured: ${[...this.sinks.keys()].join(', ') || 'none'})`);
    }
    return s;
  }

  async flush(): Promise<FlushResult> {
    const r = await this.cache.flushAll();
    if (r.partitions.length > 0) await this.hooks.cacheFlushed.promise({ partitions: r.partitions });
    return r;
  }

  /** One tick of the named sink, or of every sink. */
  async export(name?: string, opts: { respectBackoff?: boolean; onPartition?: (r: PartitionReport) => void } = {}): Promise<TickReport[]> {
    const targets = name ? [this.sink(name)] : [...this.sinks.values()];
    const out: TickReport[] = [];
    for (const s of targets) out.push(await this.driver.tick(s, opts.respectBackoff ?? false, opts.onPartition));
    return out;
  }

  /**
   * The lowest watermark over the sinks exporting a dataset: retention keeps
   * every row above it (ack-coupled). undefined when no sink exports it.
   * @ref LLP 0006: ack-coupled retention and gaps
   */
  async ackFloor(p: PartitionRef): Promise<bigint | undefined> {
    let floor: bigint | undefined;
    for (const s of this.sinks.values()) {
      if (!s.datasets.includes(p.dataset)) continue;
      const rec = await s.watermarks.read(p);
      const w = rec.continuation ? BigInt(rec.continuation.seq) : -1n;
      if (floor === undefined || w < floor) floor = w;
    }
    return floor;
  }

  /** Seq ranges of open intents over every sink: retention holds them even past the hard cap. */
  async inFlight(p: PartitionRef): Promise<[bigint, bigint][]> {
    const out: [bigint, bigint][] = [];
    for (const s of this.sinks.values()) {
      if (!s.datasets.includes(p.dataset)) continue;
      const { intent: i, next } = await s.watermarks.read(p);
      // The next unit may have shipped too: it is sent as soon as the intent is acknowledged.
      if (i) out.push([i.since === null ? 0n : BigInt(i.since) + 1n, BigInt((next ?? i).until)]);
    }
    return out;
  }

  /** What ack-coupled retention consults: the lowest watermark and the units in flight. */
  retentionGuards(): { ackFloor: (p: PartitionRef) => Promise<bigint | undefined>; inFlight: (p: PartitionRef) => Promise<[bigint, bigint][]> } {
    return { ackFloor: (p) => this.ackFloor(p), inFlight: (p) => this.inFlight(p) };
  }

  async maintain(what: { retention?: boolean; compact?: boolean }): Promise<{ retention: RetentionResult[]; compaction: CompactResult[] }> {
    const m = this.loaded.config.maintenance;
    const out = { retention: [] as RetentionResult[], compaction: [] as CompactResult[] };
    if (what.retention && m.retention) {
      const r = m.retention;
      const pass = (hardMaxRows: number | undefined) =>
        this.cache.retention({
          maxAgeMs: r.maxAge !== undefined ? (parseDuration(r.maxAge) ?? undefined) : undefined,
          maxRows: r.maxRows,
          hardMaxRows,
          ...(r.ackCoupled ? this.retentionGuards() : {}),
        });
      if (r.hardMaxRows === undefined || !r.ackCoupled) out.retention = await pass(r.hardMaxRows);
      else {
        // A forced prune runs with every export of the dataset's sinks held, so a unit
        // shipped but not yet advanced is always held back (LLP 0006).
        try {
          out.retention = await this.driver.quiesce([...this.sinks.values()], () => pass(r.hardMaxRows));
        } catch (e) {
          if (!(e instanceof HypsinkError && e.code === 'HYPSINK_ERR_LOCKED')) throw e;
          this.log.warn({ reason: e.message }, 'an export is running: this retention pass keeps to exported rows (no hard cap)');
          out.retention = await pass(undefined);
        }
      }
      for (const x of out.retention) {
        if (x.prunedRows === 0) continue;
        if (x.forcedRows > 0) {
          this.log.warn({ dataset: x.partition.dataset, source: x.partition.source, forcedRows: x.forcedRows }, 'hard cap pruned rows a sink had not exported');
        }
        await this.hooks.retentionDone.promise({ partition: x.partition, prunedRows: x.prunedRows, prunedThroughSeq: x.prunedThroughSeq, forcedRows: x.forcedRows });
      }
    }
    if (what.compact) {
      out.compaction = await this.cache.compact(undefined, m.compaction.minFiles);
      for (const x of out.compaction) await this.hooks.compactionDone.promise(x);
    }
    return out;
  }

  async status(): Promise<StatusReport> {
    const sinks: SinkStatus[] = [];
    for (const s of this.sinks.values()) {
      const partitions: PartitionStatus[] = [];
      for (const ds of s.datasets) {
        for (const p of await this.cache.listPartitions(ds)) {
          const rec = await s.watermarks.read(p);
          const stats = await this.cache.storage.stats(p);
          const since = rec.continuation;
          const pendingRows = await this.cache.storage.countRowsSince(p, { since });
          const gapPending = (await forcedAbove(this.cache.store(p), since ? BigInt(since.seq) : -1n)).reduce(
            (n, [a, b]) => n + Number(b - a + 1n),
            0,
          );
          partitions.push({
            dataset: p.dataset,
            source: p.source,
            watermark: since?.seq ?? null,
            highWater: stats.highWater,
            committedRows: stats.committedRows,
            pendingRows,
            exportedRows: rec.exportedRowCount,
            intent: rec.intent,
            gapRows: rec.gapRows + gapPending,
            lastExportAt: rec.lastExportAt,
            lastError: rec.lastError ? `${rec.lastError.code}: ${rec.lastError.message}` : null,
          });
        }
      }
      sinks.push({ name: s.name, kind: s.kind, partitions });
    }
    return { sinks };
  }

  /** Stop: abort parked waits, let plugins close, release destinations. */
  async close(): Promise<void> {
    this.abort.abort();
    await this.hooks.shutdown.promise();
    for (const s of this.sinks.values()) await s.shipper.close().catch(() => undefined);
    await this.cache.close();
    await this.parsers.close();
  }

  async deadLetterDir(): Promise<string> {
    const dir = join(this.loaded.stateDir, 'dead-letter');
    await fsp.mkdir(dir, { recursive: true });
    return dir;
  }
}

export interface PartitionStatus {
  dataset: string;
  source: string;
  watermark: string | null;
  highWater: string | null;
  /** Rows ever committed to the partition: exported + gap + pending, for every sink. */
  committedRows: number;
  pendingRows: number;
  exportedRows: number;
  intent: { since: string | null; until: string; unit: string } | null;
  gapRows: number;
  lastExportAt: string | null;
  lastError: string | null;
}
export interface SinkStatus {
  name: string;
  kind: 'blob' | 'request';
  partitions: PartitionStatus[];
}
export interface StatusReport {
  sinks: SinkStatus[];
}

/** A sink instance's own state dir: its watermarks and its export lock live here. */
function sinkStateDir(loaded: LoadedConfig, name: string): string {
  return join(loaded.stateDir, 'sinks', encodeSegment(name));
}

/** Where a destination puts its keys: its description of a key, less the key; undefined if it does not say. */
function destinationRoot(d: BlobDestination): string | undefined {
  const probe = 'hypsink-probe';
  const where = d.describe(probe);
  return where.endsWith(probe) ? where.slice(0, -probe.length) : undefined;
}

/**
 * Two blob sinks sharing a root and a dataset would put their units under the
 * same keys: the second would find the first's blob and count its own rows
 * delivered, or add the same rows again under other unit bounds.
 */
function refuseSharedRoots(loaded: LoadedConfig, sinks: ReadonlyMap<string, SinkRuntime>): void {
  const seen: SinkRuntime[] = [];
  for (const s of sinks.values()) {
    if (s.root === undefined) continue;
    const other = seen.find((o) => o.root === s.root && o.datasets.some((d) => s.datasets.includes(d)));
    if (other) {
      const shared = other.datasets.filter((d) => s.datasets.includes(d));
      throw new HypsinkError(
        'HYPSINK_ERR_CONFIG',
        `${loaded.file ?? 'embedded default config'}: sinks "${other.name}" and "${s.name}" both write dataset ${shared.map((d) => `"${d}"`).join(', ')} to ${s.root}; give each sink its own dir or prefix`,
      );
    }
    seen.push(s);
  }
}

/** Build one sink from its config: the plugins it names must provide what its role needs. */
/** Prompt-tick requests from sinks, for whoever schedules ticks (the daemon); dropped when nobody listens. */
class TickRequests {
  private readonly listeners = new Set<(sink: string) => void>();

  listen(listener: (sink: string) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  request(sink: string): void {
    for (const l of this.listeners) l(sink);
  }
}

async function buildSink(
  loaded: LoadedConfig,
  log: Pino,
  host: PluginHost,
  name: string,
  sc: SinkConfig,
  tickRequests: TickRequests,
): Promise<SinkRuntime> {
  const where = `${loaded.file ?? 'embedded default config'}: sink "${name}"`;
  const need = async (field: string, spec: string, want: 'sink' | 'encoder' | 'destination') => {
    if (!host.kindOf(spec)) {
      try {
        await host.load(spec);
      } catch (e) {
        throw new HypsinkError('HYPSINK_ERR_CONFIG', `${where}: ${field}: ${(e as Error).message}`, { cause: e });
      }
    }
    const kind = host.kindOf(spec);
    if (kind !== want) {
      const hint =
        want === 'destination' && kind === 'sink'
          ? `; a request sink is configured with "plugin": "${spec}", without "writer"`
          : want === 'sink' && kind !== undefined
            ? `; ${a(kind)} belongs in a blob sink ("writer" + "destination")`
            : '';
      throw new HypsinkError('HYPSINK_ERR_CONFIG', `${where}: ${field}: "${spec}" is ${kind ? a(kind) : 'not registered by its plugin'}, not ${a(want)}${hint}`);
    }
  };
  const stateDir = sinkStateDir(loaded, name);
  const build = {
    sink: name,
    stateDir,
    baseDir: loaded.baseDir,
    log: log.child({ sink: name }),
    fault: (point: string) => {
      if (!(point in FAULT_POINTS)) throw new HypsinkError('HYPSINK_ERR_INVARIANT', `fault point "${point}" is not declared in kernel/fault.ts`);
      fault(point as FaultPoint);
    },
    requestTick: () => tickRequests.request(name),
  };
  let shipper: UnitShipper;
  let root: string | undefined;
  try {
    if (isBlobSink(sc)) {
      await need('writer', sc.writer, 'encoder');
      await need('destination', sc.destination, 'destination');
      const encoder = host.registry.encoders.get(sc.writer)!.create(sc.writerConfig, build);
      const destination = host.registry.destinations.get(sc.destination)!.create(sc.config, build);
      shipper = blobShipper(encoder, destination, BLOB_LIMITS);
      root = destinationRoot(destination);
    } else {
      await need('plugin', sc.plugin, 'sink');
      shipper = host.registry.sinks.get(sc.plugin)!.create(sc.config, build);
    }
  } catch (e) {
    // A plugin's own config check names the sink and field; add the file.
    if (e instanceof HypsinkError && e.code === 'HYPSINK_ERR_CONFIG' && !e.message.includes(where)) {
      throw new HypsinkError('HYPSINK_ERR_CONFIG', `${loaded.file ?? 'embedded default config'}: ${e.message}`, { cause: e });
    }
    if (e instanceof HypsinkError) throw e;
    throw new HypsinkError('HYPSINK_ERR_CONFIG', `${where}: ${(e as Error).message}`, { cause: e });
  }
  return {
    name,
    kind: isBlobSink(sc) ? 'blob' : 'request',
    datasets: sc.datasets,
    shipper,
    watermarks: new WatermarkStore(stateDir),
    root,
    policy: {
      minRows: sc.minRows,
      maxDelayMs: sc.maxDelay !== undefined ? (parseDuration(sc.maxDelay) ?? 0) : sc.minRows > 1 ? 3_600_000 : 0,
      limits: {
        maxRows: sc.unit.maxRows ?? shipper.limits.maxRows,
        maxBytes: sc.unit.maxBytes ?? shipper.limits.maxBytes,
      },
    },
  };
}
