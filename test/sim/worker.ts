/**
 * The simulation's worker: a long-lived process that runs operations sent as
 * JSON lines on stdin and answers each with one JSON line on stdout. A crash
 * is armed by setting HYPSINK_FAULT before an operation; the worker then dies
 * by SIGKILL at that point, exactly as a real process would, and the driver
 * starts a new one (with HYPSINK_FAULT_ACTION=throw a kernel that knows it
 * throws at the point instead: a failed operation).
 *
 * The same worker drives today's kernel and the one that replaces it: APIs
 * the older kernel lacks (ingest batch ids, forgetSink, acceptDestination, a
 * retention entry point) are called through feature detection and fall back to
 * what today's kernel does.
 */
import { createInterface } from 'node:readline';
import { Readable } from 'node:stream';
import { resetFaultHits } from '../../kernel/fault.js';
import { loadConfig } from '../../kernel/config/load.js';
import { type IngestOptions, ingestNdjson } from '../../kernel/ingest/ingest.js';
import { createLogger } from '../../kernel/log.js';
import { Hypsink } from '../../kernel/runtime.js';
import { unitDigest } from '../../kernel/sinks/digest.js';
import { type Aggregate, openAggregate } from '../../kernel/receiver/aggregate.js';
import { type Receiver, startReceiver } from '../../kernel/receiver/server.js';

export interface IngestPart {
  readonly batchId: string;
  readonly rows: Record<string, unknown>[];
}

export type WorkerOp =
  | { op: 'open'; config: string }
  /**
   * Open the config's cache as an aggregator: `hypsink receiver --config` in
   * this process (openAggregate + the receiver on `port`, its sinks' daemon
   * running), the cache the other ops then act on. @ref LLP 0074, LLP 0082
   */
  | { op: 'aggregate'; config: string; tokensFile: string; port: number }
  /** Close the open cache (and its lock); the process waits for the next `open`. */
  | { op: 'close' }
  | { op: 'arm'; point: string; at: number; action?: 'kill' | 'throw' }
  | { op: 'disarm' }
  /** Several parts into one partition at once (each its own spool and batch id): their flushes race for the commit section. */
  | { op: 'ingest'; source: string; parts: IngestPart[] }
  | { op: 'export'; sink: string }
  | { op: 'retention'; maxRows?: number; hardMaxRows?: number; ackCoupled?: boolean }
  | { op: 'compact' }
  | { op: 'tables' }
  | { op: 'flush' }
  | { op: 'status' }
  /** The operator resets a sink (drops its watermarks and destination identity). */
  | { op: 'forget'; sink: string }
  /** The operator accepts a moved destination. */
  | { op: 'accept'; sink: string }
  /** Reads of data files whose path holds this substring fail with EIO (a kernel that knows HYPSINK_FAULT_READ). */
  | { op: 'readFault'; path: string | null }
  /** `hypsink identity --moved` (`moved`) or `--copy [--fork-seq N]` (`copy`) on the open cache. @ref LLP 0055 */
  | { op: 'identity'; mode: 'moved' | 'copy'; forkSeq?: string }
  /** The seq allocator's reserved top (what a copy's fork seq is when the copy is seen). */
  | { op: 'reserved' }
  /**
   * Every unit the sinks' destinations hold (their `inventory`) whose digest is
   * recorded, against `unitDigest` of this cache's rows for its range (units whose
   * range retention reached are left out). @ref LLP 0054
   */
  | { op: 'digests' }
  /** The open cache's spools (batches not yet removed after their commit, and any left behind). */
  | { op: 'spools' }
  /** Answers once the process is ready. */
  | { op: 'ping' }
  /** A spare process's warm-up: open a scratch cache and close it (plugins loaded, sinks built once). */
  | { op: 'warm'; config: string };

/** The kernel as the sim sees it: today's API plus what a newer kernel may add. */
type Kernel = Hypsink & {
  forgetSink?: (name: string) => Promise<unknown>;
  acceptDestination?: (name: string) => Promise<unknown>;
  retention?: (o: { maxRows?: number; hardMaxRows?: number; ackCoupled?: boolean }) => Promise<unknown>;
};

let k: Kernel | undefined;
/** The receiver and its aggregate while this process is an aggregator. */
let aggregator: { recv: Receiver; agg: Aggregate } | undefined;

/** The receiver first (no new batch), then its sinks' daemon, then the kernel: as `hypsink receiver` stops. */
async function closeAll(): Promise<void> {
  const a = aggregator;
  aggregator = undefined;
  if (a) {
    await a.recv.close();
    await a.agg.close();
  }
  await k?.close();
  k = undefined;
}

const errText = (e: unknown) => `${(e as Error).name}: ${(e as Error).message}`;

/** Sum a retention result of either kernel: today's is a list of per-partition results. */
function retentionSums(r: unknown): { pruned: number; forced: number } {
  const list = Array.isArray(r) ? r : ((r as { partitions?: unknown[]; retention?: unknown[] } | undefined)?.partitions ?? (r as { retention?: unknown[] })?.retention ?? []);
  let pruned = 0;
  let forced = 0;
  for (const x of list as { prunedRows?: number; forcedRows?: number }[]) {
    pruned += x.prunedRows ?? 0;
    forced += x.forcedRows ?? 0;
  }
  return { pruned, forced };
}

async function run(m: WorkerOp): Promise<unknown> {
  switch (m.op) {
    case 'ping':
      return { ok: true };
    case 'warm': {
      // Loads the plugins and builds every sink once; the scratch cache is opened and closed.
      const w = await Hypsink.open(await loadConfig(m.config), { log: createLogger('silent') });
      await w.validate().finally(() => w.close());
      return { ok: true };
    }
    case 'close':
      await closeAll();
      return { ok: true };
    case 'open':
      await closeAll();
      k = (await Hypsink.open(await loadConfig(m.config), { log: createLogger('silent') })) as Kernel;
      return { ok: true };
    case 'aggregate': {
      await closeAll();
      k = (await Hypsink.open(await loadConfig(m.config), { log: createLogger('silent') })) as Kernel;
      const agg = await openAggregate(k);
      try {
        const recv = await startReceiver({ port: m.port, dataDir: agg.ledgerDir, tokensFile: m.tokensFile, cache: agg.cache, log: createLogger('silent') });
        aggregator = { recv, agg };
      } catch (e) {
        await agg.close();
        throw e;
      }
      return { ok: true };
    }
    case 'arm':
      process.env.HYPSINK_FAULT = m.point;
      process.env.HYPSINK_FAULT_AT = String(m.at);
      if (m.action === 'throw') process.env.HYPSINK_FAULT_ACTION = 'throw';
      else delete process.env.HYPSINK_FAULT_ACTION;
      resetFaultHits();
      return { ok: true };
    case 'disarm':
      delete process.env.HYPSINK_FAULT;
      delete process.env.HYPSINK_FAULT_ACTION;
      resetFaultHits();
      return { ok: true };
    case 'readFault':
      if (m.path === null) delete process.env.HYPSINK_FAULT_READ;
      else process.env.HYPSINK_FAULT_READ = m.path;
      return { ok: true };
    case 'ingest': {
      const parts = await Promise.allSettled(
        m.parts.map((p) => {
          // A kernel with idempotent ingest acknowledges a batch id it already has without adding rows.
          const opts = { batchId: p.batchId } as unknown as IngestOptions;
          return ingestNdjson(k!, 'events', m.source, Readable.from(p.rows.map((r) => `${JSON.stringify(r)}\n`)), 'sim', opts);
        }),
      );
      const out = parts.map((r, i) =>
        r.status === 'fulfilled'
          ? { batchId: m.parts[i]!.batchId, ok: true, accepted: r.value.accepted }
          : { batchId: m.parts[i]!.batchId, ok: false, error: errText(r.reason) },
      );
      const failed = out.find((p) => !p.ok);
      return { ok: !failed, parts: out, ...(failed ? { error: failed.error } : {}) };
    }
    case 'export': {
      const [r] = await k!.export(m.sink);
      const errs = r?.partitions.flatMap((p) => (p.error ? [p.error] : [])) ?? [];
      return { ok: true, rows: r?.rows ?? 0, failed: r?.failed ?? 0, errors: errs.map((e) => e.message), codes: errs.map((e) => (e as { code?: string }).code ?? null) };
    }
    case 'retention': {
      const ackCoupled = m.ackCoupled ?? true;
      if (typeof k!.retention === 'function') {
        // The newer kernel's one entry point: its own guards and quiescing.
        return { ok: true, ...retentionSums(await k!.retention({ maxRows: m.maxRows, hardMaxRows: m.hardMaxRows, ackCoupled })) };
      }
      // The kernel of 4d83d35 (the seeds in LLP 0023 replay on it), as its `maintain` took it:
      // guards only when ack-coupled; a forced prune holds every export.
      const old = k as unknown as {
        cache: { retention(p: object): Promise<unknown> };
        retentionGuards(): object;
        driver: { quiesce(s: unknown[], f: () => Promise<unknown>): Promise<unknown> };
        sinks: Map<string, unknown>;
      };
      const pass = () => old.cache.retention({ maxRows: m.maxRows, hardMaxRows: m.hardMaxRows, ...(ackCoupled ? old.retentionGuards() : {}) });
      const r = m.hardMaxRows === undefined ? await pass() : await old.driver.quiesce([...old.sinks.values()], pass);
      return { ok: true, ...retentionSums(r) };
    }
    case 'compact':
      await k!.cache.compact();
      return { ok: true };
    case 'tables':
      // maintain --tables: the table sinks' compaction, expiry and orphan cleanup.
      return { ok: true, tables: (await k!.maintain({ tables: true })).tables };
    case 'flush':
      await k!.flush();
      return { ok: true };
    case 'status':
      return { ok: true, status: await k!.status() };
    case 'forget':
      if (typeof k!.forgetSink !== 'function') return { ok: true, supported: false };
      await k!.forgetSink(m.sink);
      return { ok: true, supported: true };
    case 'identity':
      if (m.mode === 'moved') await k!.identityMoved();
      else await k!.identityCopy(m.forkSeq === undefined ? {} : { forkSeq: m.forkSeq });
      return { ok: true, id: k!.cache.id };
    case 'reserved':
      return { ok: true, reserved: (await k!.cache.allocator.readReserved()).toString(), id: k!.cache.id };
    case 'digests':
      return { ok: true, id: k!.cache.id, units: await digests() };
    case 'spools':
      return { ok: true, spools: (await k!.cache.listSpools()).map((r) => `${r.dataset}/${r.id}`) };
    case 'accept':
      if (typeof k!.acceptDestination !== 'function') return { ok: true, supported: false };
      await k!.acceptDestination(m.sink);
      return { ok: true, supported: true };
  }
}

/** One held unit with a recorded digest, and the digest of this cache's rows for its range. */
export interface HeldDigest {
  readonly sink: string;
  readonly source: string;
  readonly unit: string;
  readonly since: string | null;
  readonly until: string;
  readonly recorded: string;
  readonly cached: string;
}

async function digests(): Promise<HeldDigest[]> {
  const out: HeldDigest[] = [];
  const signal = new AbortController().signal;
  for (const name of k!.sinks.keys()) {
    const s = await k!.sink(name);
    const inventory = s.shipper.inventory?.bind(s.shipper);
    if (!inventory) continue;
    for (const p of await k!.cache.listPartitions('events')) {
      const stats = await k!.cache.storage.stats(p);
      const pruned = stats.prunedThroughSeq === null ? -1n : BigInt(stats.prunedThroughSeq);
      for await (const u of inventory(p, { signal })) {
        const recorded = u.digest !== undefined ? u.digest : u.readDigest ? await u.readDigest() : null;
        if (recorded === null || recorded === undefined) continue;
        const lo = u.since === null ? -1n : BigInt(u.since);
        // A first unit's since is "0" in a blob key: no row has seq 0, so it reads as the start.
        const since = lo === 0n ? -1n : lo;
        // Rows at or below the pruned seq are gone from the cache: its digest cannot be told.
        if (pruned > since) continue;
        const cached = await unitDigest(k!.cache, p, since, u.until);
        out.push({ sink: name, source: p.source, unit: u.id, since: u.since, until: u.until, recorded, cached });
      }
    }
  }
  return out;
}

const lines = createInterface({ input: process.stdin });
// Operations run one at a time, in order.
let chain = Promise.resolve();
lines.on('line', (line) => {
  chain = chain.then(async () => {
    let answer: unknown;
    const cpu = process.cpuUsage();
    try {
      answer = await run(JSON.parse(line) as WorkerOp);
    } catch (e) {
      answer = { ok: false, error: errText(e), code: (e as { code?: string }).code };
    }
    if (process.env.SIM_TRACE) {
      const d = process.cpuUsage(cpu);
      answer = { ...(answer as object), cpuMs: Math.round((d.user + d.system) / 1000) };
    }
    process.stdout.write(`${JSON.stringify(answer)}\n`);
  });
});
lines.on('close', () => {
  void chain.then(async () => {
    await closeAll();
    process.exit(0);
  });
});
