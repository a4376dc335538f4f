/**
 * The kernel, assembled from a loaded config: cache, hooks, plugin host, sinks
 * and driver. Every CLI command is a method here, so tests drive the same code.
 */
import { setMaxListeners } from 'node:events';
import { join } from 'node:path';
import pLimit from 'p-limit';
import { Readable } from 'node:stream';
import type { Logger as Pino } from 'pino';
import { HypsinkError, isHypsinkError } from '../types/errors.js';
import type { LifecycleHooks } from '../types/hooks.js';
import type { PartitionRef } from '../types/storage.js';
import { Cache, type FlushResult } from './cache.js';
import type { CompactResult } from './store/compaction.js';
import { forcedAbove } from './store/planner.js';
import type { RetentionPolicy, RetentionResult } from './store/retention.js';
import { parseDuration } from './config/duration.js';
import { type LoadedConfig, unsetVariables } from './config/load.js';
import { isBlobSink } from './config/schema.js';
import type { GuardedShipper } from './sinks/blob.js';
import { createHooks } from './hooks.js';
import { type IngestOptions, type IngestResult, ingestNdjson } from './ingest/ingest.js';
import { ParseWorker } from './ingest/parsers.js';
import { createLogger } from './log.js';
import { PluginHost } from './plugins/host.js';
import { type BuildEnv, buildSink, checkSinkPlugins, refuseSharedRoots } from './sinks/build.js';
import { type ConnectionCheck, checkConnection } from './sinks/connect.js';
import { SinkDriver, type PartitionReport, type TickReport } from './sinks/driver.js';
import type { SinkRuntime } from './sinks/exporter.js';
import { prunedForAll } from './sinks/plan.js';
import { type CopyEvidence, evidenceText, type Home, homeOf, suspectedCopy } from './identity.js';
import { type ReplayResult, replayRange } from './sinks/replay.js';
import { isDecimalSeq } from './io/durable.js';
import { SinkState, sinkStatesOnDisk, sinksRoot } from './sinks/states.js';
import { type SinkVerify, type VerifyReport, verifySink } from './sinks/verify.js';
import { renameStateNamesV1 } from './store/segments-v1.js';
import { mkdirs } from './io/mkdirs.js';

/** Partitions `status` reads at once (each holds a few files open meanwhile). */
const STATUS_READS = 8;

export interface RuntimeOptions {
  readonly log?: Pino;
}

/** A configured sink before it is built: what status, retention and locks need, no secrets. */
export interface SinkEntry {
  readonly name: string;
  readonly kind: 'blob' | 'request';
  readonly datasets: readonly string[];
  readonly state: SinkState;
}

/** A retention pass: the policy, and whether it holds rows back for every sink (ack-coupled). */
export interface RetentionPass {
  readonly maxAgeMs?: number;
  readonly maxRows?: number;
  readonly hardMaxRows?: number;
  readonly ackCoupled: boolean;
  readonly now?: number;
}

/** What `ingest` reads: row objects (of the dataset's columns), or NDJSON bytes. */
// `object`, not `Record<string, unknown>`: rows typed by an interface (no index signature) fit too.
export type IngestInput = Iterable<object> | AsyncIterable<object> | Readable;

export interface HostIngestOptions extends Pick<IngestOptions, 'batchId' | 'onProgress' | 'hold' | 'parseWorkerAfterBytes' | 'wire'> {
  /** The partition value (host or app name): every row's `source`. */
  readonly source: string;
}

/**
 * A kernel: the cache, its sinks and their state, opened from one config.
 * Members marked internal are not public API (LLP 0024).
 */
export class Hypsink {
  /** @internal */
  readonly driver: SinkDriver;
  /** @internal Where large ingests parse (LLP 0016). */
  readonly parsers = new ParseWorker();
  /**
   * @internal Flushes, exports and maintenance running now: they hold this thread in
   * stretches, so a reader that must answer promptly (the metrics server) answers
   * from what it last read while any runs. @ref LLP 0068
   */
  readonly busy = new Busy();
  private readonly abort = new AbortController();
  /** Aborted when a drain begins: no new unit starts; running ones go on under `signal`. */
  private readonly drainer = new AbortController();
  private draining: Promise<void> | undefined;
  /** Sinks built so far (their plugins loaded, `${VAR}` values resolved, shippers created). */
  private readonly built = new Map<string, SinkRuntime>();
  /** Builds run one at a time: two ticks asking for sinks at once build each once. */
  private builds: Promise<unknown> = Promise.resolve();
  private constructor(
    /** @internal */
    readonly loaded: LoadedConfig,
    /** @internal */
    readonly cache: Cache,
    /** @internal */
    readonly log: Pino,
    /** @internal */
    readonly hooks: LifecycleHooks,
    /** @internal Every configured sink, in config order. */
    readonly sinks: ReadonlyMap<string, SinkEntry>,
    private readonly buildEnv: BuildEnv,
    private readonly tickRequests: TickRequests,
  ) {
    const d = loaded.config.driver;
    // A fan-out: every unit in flight (sinks × concurrency) links its own signal to this one, and
    // unlinks when it ends, so a count here says how much runs, not that listeners leak. A leak
    // shows on a unit's own signal. @ref LLP 0069
    setMaxListeners(0, this.abort.signal);
    this.driver = new SinkDriver(
      { cache, hooks: this.hooks, log, signal: this.abort.signal, draining: this.drainer.signal },
      { concurrency: d.concurrency, lockWaitMs: d.lockWaitMs, outboxBaseMs: d.outboxBaseMs, outboxMaxMs: d.outboxMaxMs },
    );
  }

  /** @internal Hosts call `open` of the `hypsink` entry. */
  static async open(loaded: LoadedConfig, opts: RuntimeOptions = {}): Promise<Hypsink> {
    const log = opts.log ?? createLogger();
    const c = loaded.config;
    // Plugins first: a config error must leave nothing behind, not even an empty cache.
    const hooks = createHooks();
    const host = new PluginHost(hooks, log, loaded.baseDir);
    for (const spec of c.plugins) await host.load(spec);
    const sinks = new Map<string, SinkEntry>();
    const tickRequests = new TickRequests();
    const opened: { cache?: Cache } = {};
    const env: BuildEnv = { loaded, log, host, cacheId: () => opened.cache?.id, copyTag: () => opened.cache?.copyTag ?? '', requestTick: (s) => tickRequests.request(s) };
    // Each sink's plugins must provide its role (by their plugin.json); the sink is built, its
    // plugins' code loaded, when a command first exports it. @ref LLP 0025
    for (const [name, sc] of Object.entries(c.sinks)) {
      await checkSinkPlugins(loaded, host, name, sc);
      sinks.set(name, { name, kind: isBlobSink(sc) ? 'blob' : 'request', datasets: sc.datasets, state: SinkState.of(loaded.stateDir, name) });
    }
    const cache = await Cache.open({
      root: loaded.cacheRoot,
      datasets: c.datasets,
      lockWaitMs: c.cache.lockWaitMs,
      seqBlockSize: c.cache.seqBlockSize,
      segmentBytes: c.cache.segmentBytes,
      rowGroupRows: c.cache.rowGroupRows,
      compression: c.cache.compression,
    });
    // Before any sink state is read: a watermark named under the first name rule would not be found.
    await renameStateNamesV1(loaded.stateDir, Object.keys(c.sinks), Object.keys(c.datasets));
    opened.cache = cache;
    return new Hypsink(loaded, cache, log, hooks, sinks, env, tickRequests);
  }

  /** @internal */
  get signal(): AbortSignal {
    return this.abort.signal;
  }

  /** @internal Listen for sinks asking for a prompt tick (`SinkBuildContext.requestTick`); returns the unsubscribe. */
  onTickRequest(listener: (sink: string) => void): () => void {
    return this.tickRequests.listen(listener);
  }

  /** @internal A configured sink, unbuilt. */
  entry(name: string): SinkEntry {
    const s = this.sinks.get(name);
    if (!s) {
      throw new HypsinkError('HYPSINK_ERR_CONFIG', `no sink named "${name}" (configured: ${[...this.sinks.keys()].join(', ') || 'none'})`, {
        hint: 'Name one of the configured sinks, or add this one to the config file.',
      });
    }
    return s;
  }

  /** @internal A configured sink, built on first use (with every other buildable sink: see `build`). */
  async sink(name: string): Promise<SinkRuntime> {
    this.entry(name);
    await this.build([name]);
    return this.built.get(name)!;
  }

  /**
   * Build the `named` sinks, and every other sink whose `${VAR}` values are all
   * set, then check that no two of them write one dataset to the same place.
   * A sink naming an unset variable is built only when named: its exports are
   * where the variable is needed.
   */
  private build(named: readonly string[]): Promise<void> {
    const run = async () => {
      for (const [name, sc] of Object.entries(this.loaded.config.sinks)) {
        if (this.built.has(name)) continue;
        if (!named.includes(name) && unsetVariables([sc.config, isBlobSink(sc) ? sc.writerConfig : {}]).length > 0) continue;
        this.built.set(name, await buildSink(this.buildEnv, name, sc, this.entry(name).state));
      }
      refuseSharedRoots(this.loaded, this.built.values());
    };
    const next = this.builds.then(run);
    this.builds = next.catch(() => undefined);
    return next;
  }

  /**
   * @internal Build every sink whose `${VAR}` values are set (the daemon, at
   * start: a sink's own config error stops it there, as at load before).
   */
  async buildSinks(): Promise<void> {
    await this.build([]);
  }

  /**
   * @internal Restart a sink (`hypsink ctl restart`): once no tick of it runs, its
   * shipper is closed and it is built again from its config, its stop by a
   * refused login and its backoff forgotten; its next tick tries it at once.
   * A build that fails throws, and the sink stays unbuilt (each tick tries again).
   * @ref LLP 0067
   */
  async restartSink(name: string): Promise<void> {
    const entry = this.entry(name);
    await this.driver.quiesce(
      [entry.state],
      async () => {
        const old = this.built.get(name);
        this.built.delete(name);
        this.driver.restart(name);
        await old?.shipper.close().catch((e: unknown) => this.log.warn({ sink: name, err: e }, 'closing the sink before its restart failed'));
      },
      'restart',
    );
    await this.build([name]);
  }

  /**
   * Build every sink as an export would, exporting nothing: each one's plugins
   * load, its `${VAR}` values resolve and its own config is checked. Returns
   * the sink names.
   */
  async validate(): Promise<string[]> {
    await this.build([...this.sinks.keys()]);
    return [...this.sinks.keys()];
  }

  /**
   * `validate`, then each sink's destination reached without writing anything
   * visible there (its plugin's `check`), every sink whatever another's
   * outcome, each bounded by `timeoutMs` (10 s). Results in config order; a
   * config error throws before any destination is reached. @ref LLP 0036
   */
  async checkConnections(opts: { timeoutMs?: number } = {}): Promise<ConnectionCheck[]> {
    const names = await this.validate();
    return Promise.all(names.map((n) => checkConnection(this.built.get(n)!, this.signal, opts.timeoutMs)));
  }

  /**
   * Read back what each sink's destination holds (or the named sink's) and
   * check it against its watermarks and the cache: per partition a chain of
   * units from the first to the watermark, no hole, no overlap, each unit's
   * row count the cache's where the cache still holds its rows, nothing beyond
   * the watermark but an open intent's. Each sink is read holding its export
   * lock, so no export moves its watermarks meanwhile. Writes nothing.
   * @ref LLP 0037
   */
  async verify(name?: string): Promise<VerifyReport> {
    const names = name === undefined ? [...this.sinks.keys()] : [this.entry(name).name];
    const sinks: SinkVerify[] = [];
    for (const n of names) {
      const s = await this.sink(n);
      sinks.push(await this.driver.quiesce([s.state], () => verifySink(this.cache, s, this.signal), 'verify'));
    }
    return { ok: sinks.every((s) => s.findings.length === 0), sinks, copy: this.cache.copied ? evidenceText(this.cache.copied) : null };
  }

  /**
   * Record rows as one batch, exactly once, then flush (LLP 0021). Retrying a
   * failed or interrupted ingest with the same `batchId` never adds a row
   * twice: a batch ingested whole before is acknowledged (`duplicate`), one cut
   * short goes on after its last durable line. Without a `batchId` one is made
   * and named in any error. Rows that fail the dataset's schema go to the dead
   * letter and are counted in `rejected`; an `IngestError` says whether none,
   * some or all of the batch is durable.
   */
  async ingest(dataset: string, rows: IngestInput, opts: HostIngestOptions): Promise<IngestResult> {
    this.cache.schema(dataset); // an unknown dataset fails before any row is read
    const input = rows instanceof Readable ? rows : Readable.from(ndjsonLines(rows));
    return ingestNdjson(this, dataset, opts.source, input, opts.batchId ? `batch ${opts.batchId}` : 'rows', opts);
  }

  /** Commit every spooled row to the cache's partitions. */
  async flush(): Promise<FlushResult> {
    return this.busy.run(async () => {
      const r = await this.cache.flushAll();
      if (r.partitions.length > 0) await this.hooks.cacheFlushed.promise({ partitions: r.partitions });
      return r;
    });
  }

  /**
   * One tick of the named sink, or of every sink. `onPending` hears, as each
   * sink's tick begins, the rows it has pending; `onUnit` each unit's rows as
   * its destination acknowledges it (for a progress bar).
   */
  async export(
    name?: string,
    opts: {
      respectBackoff?: boolean;
      onPartition?: (r: PartitionReport) => void;
      onPending?: (sink: string, rows: number) => void;
      onUnit?: (sink: string, rows: number) => void;
      /** @internal Aborted: each tick ends once the units it has recorded are finished (the daemon's pause). */
      halt?: AbortSignal;
    } = {},
  ): Promise<TickReport[]> {
    return this.busy.run(() => this.exportNow(name, opts));
  }

  private async exportNow(name: string | undefined, opts: Parameters<Hypsink['export']>[1] & object): Promise<TickReport[]> {
    const targets = name ? [await this.sink(name)] : await Promise.all([...this.sinks.keys()].map((n) => this.sink(n)));
    const out: TickReport[] = [];
    for (const s of targets) {
      const { onPending, onUnit } = opts;
      const progress = { onPending: onPending && ((rows: number) => onPending(s.name, rows)), onUnit: onUnit && ((rows: number) => onUnit(s.name, rows)) };
      out.push(await this.driver.tick(s, opts.respectBackoff ?? false, opts.onPartition, progress, opts.halt));
    }
    return out;
  }

  /**
   * @internal Every sink that holds rows of a dataset: the configured ones exporting it,
   * and every sink state on disk that has exported it, configured now or not,
   * until the operator forgets it.
   * @ref LLP 0019: gaps are counted against every watermark on disk
   */
  async holders(): Promise<{ state: SinkState; datasets: ReadonlySet<string> }[]> {
    const out = new Map<string, { state: SinkState; datasets: Set<string> }>();
    for (const s of this.sinks.values()) out.set(s.state.dir, { state: s.state, datasets: new Set(s.datasets) });
    for (const state of await sinkStatesOnDisk(this.loaded.stateDir)) {
      const datasets = await state.datasets();
      const have = out.get(state.dir);
      if (have) for (const d of datasets) have.datasets.add(d);
      else if (datasets.size > 0) out.set(state.dir, { state, datasets });
    }
    return [...out.values()].sort((a, b) => (a.state.name < b.state.name ? -1 : a.state.name > b.state.name ? 1 : 0));
  }

  /**
   * @internal What retention consults, over every holder: the lowest watermark (-1 when a
   * holder has exported nothing of the partition; undefined when none holds its
   * dataset), and the units in flight, which even the hard cap keeps.
   * @ref LLP 0006: ack-coupled retention and gaps
   */
  async retentionGuards(): Promise<Required<Pick<RetentionPolicy, 'ackFloor' | 'inFlight'>>> {
    const holders = await this.holders();
    const records = async (p: PartitionRef) => {
      const out = [];
      for (const h of holders) if (h.datasets.has(p.dataset)) out.push(await h.state.watermarks.read(p));
      return out;
    };
    return {
      ackFloor: async (p) => {
        let floor: bigint | undefined;
        for (const rec of await records(p)) {
          const w = rec.continuation ? BigInt(rec.continuation.seq) : -1n;
          if (floor === undefined || w < floor) floor = w;
        }
        return floor;
      },
      inFlight: async (p) => {
        const out: [bigint, bigint][] = [];
        for (const { intent: i, next } of await records(p)) {
          // The next unit may have shipped too: it is sent as soon as the intent is acknowledged.
          if (i) out.push([i.since === null ? 0n : BigInt(i.since) + 1n, BigInt((next ?? i).until)]);
        }
        return out;
      },
    };
  }

  /**
   * @internal One retention pass. Rows above some holder's watermark are pruned only by
   * the hard cap, or by any prune when `ackCoupled` is off; either way they are
   * counted as that holder's gap, and the pass runs with every holder's exports
   * held (so a planned unit's rows never change under it). When an export is
   * running, the pass keeps to rows every holder has exported.
   * @ref LLP 0006: ack-coupled retention and gaps
   * @ref LLP 0019: gaps are counted against every watermark on disk
   */
  async retention(pass: RetentionPass): Promise<RetentionResult[]> {
    const run = async (p: RetentionPass) => this.cache.retention({ ...p, ...(await this.retentionGuards()) });
    if (pass.hardMaxRows === undefined && pass.ackCoupled) return run(pass);
    try {
      return await this.driver.quiesce((await this.holders()).map((h) => h.state), () => run(pass));
    } catch (e) {
      if (!(isHypsinkError(e) && e.code === 'HYPSINK_ERR_LOCKED')) throw e;
      this.log.warn({ reason: e.message }, 'an export is running: this retention pass keeps to rows every sink has exported (no hard cap)');
      return run({ ...pass, hardMaxRows: undefined, ackCoupled: true });
    }
  }

  async maintain(what: {
    retention?: boolean;
    compact?: boolean;
    tables?: boolean;
    scheduled?: boolean;
  }): Promise<{ retention: RetentionResult[]; compaction: CompactResult[]; tables: { sink: string; done: string }[] }> {
    return this.busy.run(() => this.maintainNow(what));
  }

  private async maintainNow(what: Parameters<Hypsink['maintain']>[0]): Promise<Awaited<ReturnType<Hypsink['maintain']>>> {
    const m = this.loaded.config.maintenance;
    const out = { retention: [] as RetentionResult[], compaction: [] as CompactResult[], tables: [] as { sink: string; done: string }[] };
    if (what.tables) out.tables = await this.maintainTables();
    if (what.retention && m.retention) {
      const r = m.retention;
      out.retention = await this.retention({
        maxAgeMs: r.maxAge !== undefined ? (parseDuration(r.maxAge) ?? undefined) : undefined,
        maxRows: r.maxRows,
        hardMaxRows: r.hardMaxRows,
        ackCoupled: r.ackCoupled,
      });
      for (const x of out.retention) {
        if (x.prunedRows === 0) continue;
        if (x.forcedRows > 0) {
          this.log.warn(
            { dataset: x.partition.dataset, source: x.partition.source, forcedRows: x.forcedRows },
            'retention pruned rows a sink had not exported (a gap, counted for that sink)',
          );
        }
        await this.hooks.retentionDone.promise({ partition: x.partition, prunedRows: x.prunedRows, prunedThroughSeq: x.prunedThroughSeq, forcedRows: x.forcedRows });
      }
    }
    if (what.retention) await this.cache.sweepBatches();
    if (what.compact) {
      // Documented defaults: 8 files on the schedule, 2 when asked for by hand.
      out.compaction = await this.cache.compact(undefined, m.compaction?.minFiles ?? (what.scheduled ? 8 : 2));
      for (const x of out.compaction) await this.hooks.compactionDone.promise(x);
    }
    return out;
  }

  /**
   * Each table sink's own maintenance (Iceberg: snapshot expiry), holding its
   * export lock so no unit of this process commits meanwhile. @ref LLP 0052
   */
  private async maintainTables(): Promise<{ sink: string; done: string }[]> {
    const out: { sink: string; done: string }[] = [];
    for (const name of this.sinks.keys()) {
      const sc = this.loaded.config.sinks[name]!;
      if (!isBlobSink(sc)) continue;
      const s = await this.sink(name);
      const maintain = (s.shipper as GuardedShipper).maintain;
      if (!maintain) continue;
      const done = await this.driver.quiesce([s.state], () => maintain({ signal: this.signal, now: Date.now(), datasets: s.datasets }), 'maintain');
      this.log.info({ sink: name, done }, 'table maintenance done');
      out.push({ sink: name, done });
    }
    return out;
  }

  /**
   * Add a table sink's tables to the catalog its writer names (`hypsink iceberg
   * register`), holding its export lock. @ref LLP 0077
   */
  async registerTables(name: string): Promise<string> {
    return this.busy.run(async () => {
      const s = await this.sink(name);
      const register = (s.shipper as GuardedShipper).register;
      if (!register) {
        throw new HypsinkError('HYPSINK_ERR_CONFIG', `sink "${name}": its writer keeps no table in a catalog; registering applies to a table writer (@hypsink/format-iceberg) with writerConfig.catalog`);
      }
      const done = await this.driver.quiesce([s.state], () => register({ signal: this.signal, datasets: s.datasets }), 'register');
      this.log.info({ sink: name, done }, 'table registration done');
      return done;
    });
  }

  /**
   * The status of one sink's partitions of its datasets, from durable state.
   * Partitions are read a few at a time, and each one's independent reads at
   * once: during a tick every await waits for a turn of a busy thread, so
   * status costs turns, not bytes. @ref LLP 0068
   */
  private async partitionsOf(state: SinkState, datasets: Iterable<string>): Promise<PartitionStatus[]> {
    const refs: PartitionRef[] = [];
    for (const ds of datasets) if (ds in this.loaded.config.datasets) refs.push(...(await this.cache.listPartitions(ds)));
    const limit = pLimit(STATUS_READS);
    return Promise.all(
      refs.map((p) =>
        limit(async (): Promise<PartitionStatus> => {
          const [found, stats] = await Promise.all([state.watermarks.find(p), this.cache.storage.stats(p)]);
          const rec = found ?? state.watermarks.empty(p);
          const since = rec.continuation;
          const [base, pendingRows, forced] = await Promise.all([
            found ? (found.baseRows ?? 0) : prunedForAll(this.cache, p),
            this.cache.storage.countRowsSince(p, { since }),
            forcedAbove(this.cache.store(p), since ? BigInt(since.seq) : -1n),
          ]);
          const gapPending = forced.reduce((n, [a, b]) => n + Number(b - a + 1n), 0);
          return {
            dataset: p.dataset,
            source: p.source,
            watermark: since?.seq ?? null,
            highWater: stats.highWater,
            committedRows: stats.committedRows - base,
            pendingRows,
            exportedRows: rec.exportedRowCount,
            intent: rec.intent && { since: rec.intent.since, until: rec.intent.until, unit: rec.intent.unit },
            gapRows: rec.gapRows + gapPending,
            rejectedRows: rec.rejectedRows ?? 0,
            lastExportAt: rec.lastExportAt,
            lastError: rec.lastError ? `${rec.lastError.code}: ${rec.lastError.message}` : null,
          };
        }),
      ),
    );
  }

  async status(): Promise<StatusReport> {
    const sinks: SinkStatus[] = await Promise.all(
      [...this.sinks.values()].map(async (s) => ({ name: s.name, kind: s.kind, partitions: await this.partitionsOf(s.state, s.datasets) })),
    );
    // Sinks not in this config whose state still holds rows back from retention.
    const absent: AbsentSinkStatus[] = [];
    for (const h of await this.holders()) {
      const configured = this.sinks.get(h.state.name);
      const extra = [...h.datasets].filter((d) => !configured?.datasets.includes(d));
      if (extra.length === 0) continue;
      absent.push({ name: h.state.name, configured: configured !== undefined, datasets: extra, partitions: await this.partitionsOf(h.state, extra) });
    }
    return { sinks, absent, copy: this.cache.copied ? evidenceText(this.cache.copied) : null };
  }

  /** Where the cache is and whether it looks like a copy (`hypsink identity`). @ref LLP 0055 */
  async identity(): Promise<IdentityReport> {
    return { id: this.cache.id, copiedFrom: this.cache.copiedFrom ?? null, copy: this.cache.copied, home: await homeOf(this.cache.root) };
  }

  /**
   * The original stopped (a moved folder, a migrated host): clear the copy
   * evidence and keep the identity. @ref LLP 0055
   */
  async identityMoved(): Promise<void> {
    await this.cache.settle();
  }

  /**
   * Give this cache its own identity (`hypsink identity --copy`). Rows at or
   * below the fork seq are the original's: every sink that holds rows (configured
   * or on disk) moves its watermark of every partition up to the fork, counting
   * them as not its to deliver; rows above it then export under the new id
   * (unit ids and blob keys of their own), exactly once. Every sink's export
   * lock is held meanwhile. @ref LLP 0055
   */
  async identityCopy(opts: { forkSeq?: string } = {}): Promise<IdentityCopyReport> {
    const fork = opts.forkSeq ?? this.cache.copied?.forkSeq;
    if (fork === undefined) {
      throw new HypsinkError(
        'HYPSINK_ERR_USAGE',
        `cache ${this.cache.root} shows no evidence of being a copy (it is where it was made), so hypsink cannot tell which of its rows are its own`,
        { hint: 'Name the last seq the original may hold: "hypsink identity --copy --fork-seq N" (rows at or below N are left to the original; "hypsink status" shows each partition\'s watermark and high water).' },
      );
    }
    if (!isDecimalSeq(fork)) throw new HypsinkError('HYPSINK_ERR_USAGE', `--fork-seq ${JSON.stringify(fork)} is not a seq (a decimal integer)`);
    const holders = await this.holders();
    const sinks: IdentityCopyReport['sinks'] = [];
    const from = this.cache.id;
    const renewed = await this.driver.quiesce(
      holders.map((h) => h.state),
      async () => {
        for (const h of holders) {
          let partitions = 0;
          let rows = 0;
          for (const ds of h.datasets) {
            if (!(ds in this.loaded.config.datasets)) continue;
            for (const p of await this.cache.listPartitions(ds)) {
              rows += await handOver(this.cache, h.state, p, fork);
              partitions++;
            }
          }
          sinks.push({ sink: h.state.name, partitions, rows });
        }
        return this.cache.renew(fork);
      },
      'identity',
    );
    return { from, to: renewed.to, forkSeq: fork, sinks };
  }

  /**
   * What forgetting a sink (or one of its datasets) would drop: its watermarks
   * and the rows retention may then prune without counting them for it.
   */
  async forgetPlan(name: string, dataset?: string): Promise<ForgetPlan> {
    const configured = this.sinks.get(name);
    const state = configured?.state ?? (await this.holders()).find((h) => h.state.name === name)?.state;
    if (!state) {
      throw new HypsinkError('HYPSINK_ERR_CONFIG', `no sink named "${name}" in the config or in ${sinksRoot(this.loaded.stateDir)}; nothing to forget`, {
        hint: 'Name a sink of the config, or one "hypsink status" lists as holding rows back.',
      });
    }
    const datasets = dataset !== undefined ? [dataset] : [...(await state.datasets()), ...(configured?.datasets ?? [])].filter((d, i, all) => all.indexOf(d) === i);
    const partitions = await this.partitionsOf(state, datasets);
    return { sink: name, configured: configured !== undefined, dataset: dataset ?? null, state, partitions };
  }

  /**
   * Drop a sink's state (watermarks, intents, the destination they belong to),
   * holding its lock so no export of it runs meanwhile. A sink still configured
   * starts again from the oldest row in the cache.
   */
  async forget(plan: ForgetPlan): Promise<void> {
    await this.driver.quiesce([plan.state], () => plan.state.forget(plan.dataset ?? undefined));
    this.log.warn({ sink: plan.sink, dataset: plan.dataset, partitions: plan.partitions.length }, 'sink state forgotten');
  }

  /** The operator moved a sink's data: its watermarks now belong to its configured destination. */
  async acceptDestination(name: string): Promise<{ from: string | null; to: string }> {
    const s = await this.sink(name);
    if (s.destination === null && (await s.state.read())?.delivers === (s.delivers || undefined)) {
      throw new HypsinkError('HYPSINK_ERR_CONFIG', `sink "${name}": its plugin does not say where its units go, so there is no destination to accept`, {
        hint: 'Nothing to do: a sink whose plugin names no destination is never refused for a moved one.',
      });
    }
    const to = s.destination ?? '(unknown)';
    const from = await this.driver.quiesce([s.state], () => s.state.acceptDestination(s.destination, s.delivers));
    this.log.warn({ sink: name, from, to }, 'destination accepted: the watermarks now belong to it');
    return { from, to };
  }

  /**
   * Send one exported range of one sink again, exactly once (`hypsink replay`):
   * the way back when `verify` finds a hole. @ref LLP 0061
   */
  async replay(name: string, dataset: string, source: string, since: string | null, until: string): Promise<ReplayResult> {
    const s = await this.sink(name);
    if (!s.datasets.includes(dataset)) throw new HypsinkError('HYPSINK_ERR_USAGE', `sink "${name}" does not export dataset "${dataset}" (it exports ${s.datasets.join(', ')})`);
    const p = this.cache.partition(dataset, source);
    if (this.cache.copied) throw suspectedCopy(this.cache.copied, `sink "${name}": replay of ${p.key}`);
    return this.driver.quiesce([s.state], () => replayRange({ cache: this.cache, hooks: this.hooks, log: this.log, signal: this.abort.signal }, s, p, since, until), 'replay');
  }

  /** Forget a sink by name, whatever it holds (for tests and embedding hosts; the CLI asks first). */
  async forgetSink(name: string, dataset?: string): Promise<ForgetPlan> {
    const plan = await this.forgetPlan(name, dataset);
    await this.forget(plan);
    return plan;
  }

  /**
   * Begin a drain: no new unit starts, plugins end their parked waits (the
   * shutdown hook, run once), while running units go on under `signal`.
   * Idempotent; close() drains first.
   */
  drain(): Promise<void> {
    this.drainer.abort();
    this.draining ??= this.hooks.shutdown.promise();
    return this.draining;
  }

  /**
   * @internal Keep the parse and flush workers `ms` after their last job, not
   * the default seconds: for a process that serves ingests (the aggregator),
   * whose every burst would otherwise start both workers cold again. @ref LLP 0088
   */
  keepWorkers(ms: number): void {
    this.parsers.keepIdle(ms);
    this.cache.keepWorkers(ms);
  }

  /** Stop: end parked waits (drain), abort running units, release destinations. */
  async close(): Promise<void> {
    this.abort.abort();
    await this.drain();
    for (const s of this.built.values()) await s.shipper.close().catch(() => undefined);
    await this.cache.close();
    await this.parsers.close();
  }

  /** @internal */
  async deadLetterDir(): Promise<string> {
    const dir = join(this.loaded.stateDir, 'dead-letter');
    await mkdirs(dir);
    return dir;
  }
}

async function* ndjsonLines(rows: Iterable<object> | AsyncIterable<object>): AsyncGenerator<string> {
  for await (const row of rows) yield `${JSON.stringify(row)}\n`;
}

/** `hypsink identity`: the cache's id, what it was copied from, the copy evidence and where it is now. */
export interface IdentityReport {
  readonly id: string;
  readonly copiedFrom: { id: string; forkSeq: string; at: string } | null;
  readonly copy: CopyEvidence | null;
  readonly home: Home;
}

/** What `hypsink identity --copy` did: the ids, the fork, and per sink the partitions moved and rows left to the original. */
export interface IdentityCopyReport {
  readonly from: string;
  readonly to: string;
  readonly forkSeq: string;
  readonly sinks: { sink: string; partitions: number; rows: number }[];
}

/**
 * Move one sink's watermark of `p` up to the fork: the rows between are the
 * original's, counted in `baseRows` (with those a hard cap pruned between, not
 * yet counted as this sink's gap: else they fell out of its status). Its chain under the new identity starts
 * at the higher of the two (`handedOver`), and no unit of the new identity has
 * shipped yet (`shippedUntil` null: a destination keeping its own watermark
 * per writer, Postgres, finds none). An open unit at or below the fork is the
 * original's (it finishes it). One reaching above it holds this copy's own
 * rows under the old identity: dropped when its last attempt was refused as
 * other rows (HYPSINK_ERR_CONFLICT: nothing of it was written), else it must
 * be exported first. Returns the rows left to the original.
 * @ref LLP 0055
 */
async function handOver(cache: Cache, state: SinkState, p: PartitionRef, fork: string): Promise<number> {
  const found = await state.watermarks.find(p);
  const rec = found ?? { ...state.watermarks.empty(p), baseRows: await prunedForAll(cache, p) };
  const w = rec.continuation ? BigInt(rec.continuation.seq) : -1n;
  const open = [rec.intent, rec.next ?? null].find((i) => i !== null && BigInt(i.until) > BigInt(fork));
  if (open && rec.lastError?.code !== 'HYPSINK_ERR_CONFLICT') {
    throw new HypsinkError(
      'HYPSINK_ERR_CONFLICT',
      `sink "${state.name}": its open unit (${open.since ?? 'start'}, ${open.until}] of ${p.dataset}/source=${p.source} reaches above the fork seq ${fork}, so it holds rows of this copy's own under the old identity, and it may have been delivered; nothing was changed`,
      { hint: 'Export that sink once (the unit finishes under the old identity), then run "hypsink identity --copy" again; or choose a fork seq at or above the unit\'s until.' },
    );
  }
  const above = w >= BigInt(fork);
  const top = BigInt(fork);
  // Rows a hard cap pruned above the watermark were still to be counted as this sink's gap; at or
  // below the fork they are the original's history too: left with the rows still there.
  const pruned = above ? 0 : (await forcedAbove(cache.store(p), w)).reduce((n, [lo, hi]) => (lo > top ? n : n + Number((hi < top ? hi : top) - lo + 1n)), 0);
  const rows = above ? 0 : pruned + (await cache.storage.countRowsSince(p, { since: rec.continuation, until: { v: 1, seq: fork } }));
  const to = above ? rec.continuation! : { v: 1 as const, seq: fork };
  await state.watermarks.write(p, rec, {
    ...rec,
    continuation: to,
    intent: null,
    next: null,
    shippedUntil: null,
    lastError: null,
    baseRows: (rec.baseRows ?? 0) + rows,
    handedOver: to.seq,
  });
  return rows;
}

/** What `hypsink forget` shows before it drops anything. */
export interface ForgetPlan {
  readonly sink: string;
  readonly configured: boolean;
  readonly dataset: string | null;
  readonly state: SinkState;
  readonly partitions: PartitionStatus[];
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
  /** Rows the destination refused one by one, kept in the sink's dead letter. @ref LLP 0042 */
  rejectedRows: number;
  lastExportAt: string | null;
  lastError: string | null;
}
export interface SinkStatus {
  name: string;
  kind: 'blob' | 'request';
  partitions: PartitionStatus[];
}
/**
 * A sink whose state on disk holds rows of datasets it does not export in this
 * config (absent from it, or no longer exporting them): retention keeps those
 * rows until the sink comes back or is forgotten.
 */
export interface AbsentSinkStatus {
  name: string;
  /** The sink is in the config, but not with these datasets. */
  configured: boolean;
  datasets: string[];
  partitions: PartitionStatus[];
}
export interface StatusReport {
  sinks: SinkStatus[];
  absent: AbsentSinkStatus[];
  /** The evidence that this cache is a copy of another, in words; null when it is where it was made. @ref LLP 0055 */
  copy?: string | null;
}

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


/** Work in progress that holds the kernel's thread in stretches: counted, with a listener told when it begins and ends. */
export class Busy {
  private running = 0;
  private readonly listeners = new Set<(busy: boolean) => void>();

  get active(): boolean {
    return this.running > 0;
  }

  /** Told `true` when work begins with none running, `false` when the last ends; returns the unsubscribe. */
  listen(listener: (busy: boolean) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  async run<T>(fn: () => Promise<T>): Promise<T> {
    if (this.running++ === 0) for (const l of this.listeners) l(true);
    try {
      return await fn();
    } finally {
      if (--this.running === 0) for (const l of this.listeners) l(false);
    }
  }
}
