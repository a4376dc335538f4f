/**
 * `hypsink receiver --config <file>`: the receiver as a hypsink host. Every
 * accepted batch is ingested into the config's cache by the kernel's
 * idempotent ingest (LLP 0021) under a batch id made of the client's name and
 * its own id, with the client's name in every row; the config's sinks export
 * from that cache on their schedules (the Daemon, in this process), as a
 * host's do. @ref LLP 0074
 */
import { promises as fsp } from 'node:fs';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { HypsinkError } from '../../types/errors.js';
import { Daemon } from '../daemon.js';
import { IngestError, RowRefused } from '../ingest/ingest.js';
import type { Hypsink } from '../runtime.js';
import { fault } from '../fault.js';
import { KeyedMutex } from '../mutex.js';
import type { SpoolRef } from '../spool/spool.js';
import { type ClaimOutcome, ClaimTable } from './claims.js';
import type { ReceiverCache } from './server.js';
import { type NewBatch, type WriteResult, WriteRefused } from './store.js';

/**
 * The column the receiver writes the authenticated client's name in, unless
 * --client-column names another. Not `_hyp_…`: the config reserves those for
 * the kernel's own columns, and this one is the user's, declared in the
 * dataset like any other. @ref LLP 0074
 */
export const CLIENT_COLUMN = 'hyp_client';

/**
 * Batches are request bodies, too small for an ingest to start the parse
 * worker for one (4 MiB, LLP 0016), but many and concurrent: the worker
 * parses them while this thread commits, answers and exports. A body of this
 * size starts the worker in the background (the batch that started it
 * parses here); one already running takes every block. Smaller bodies (a
 * quiet agent's few rows) never start it: a worker's start costs more than
 * their parse. @ref LLP 0087
 */
const PARSE_WORKER_AFTER_BYTES = 256 * 1024;

/**
 * The aggregator keeps its parse and flush workers this long after their last
 * job (a host's kernel: 5 s), twice a sink's default schedule (every 5
 * minutes): agents' exports come in bursts that far apart, and each burst
 * would otherwise start both workers again (≈ 0.2 s each, then their code
 * cold) on the path of its answers, a fifth of a 200,000-row burst's time on
 * this machine. The two threads, idle, hold about 70 MB. @ref LLP 0088
 */
export const SERVING_WORKER_IDLE_MS = 10 * 60_000;

/** The cache's size is measured at most this often (a walk of its folder); requests in between use the last figure. */
const SIZE_SAMPLE_MS = 1000;

export interface AggregateOptions {
  /** Answer 429 while the cache's folder holds more than this many bytes (default: no bound). */
  readonly maxCacheBytes?: number;
  /** The column the client's name goes in (default CLIENT_COLUMN). */
  readonly clientColumn?: string;
  /** Several aggregators behind one address: the shared claim table (LLP 0080). Without it, as before. */
  readonly claims?: {
    readonly url: string;
    /** This aggregator's name in the table (default: its cache's id, which outlives restarts). */
    readonly aggregator?: string;
    /** Default CLAIM_LEASE_MS. */
    readonly leaseMs?: number;
    /** Held batches are settled against the table this often (and at start). Default SETTLE_EVERY_MS. */
    readonly settleEveryMs?: number;
  };
}

/** A claim is an aggregator's this long (about a POST's timeout) before another may take it over. @ref LLP 0080 */
export const CLAIM_LEASE_MS = 30_000;
/** How often held batches (a crash, a lost database answer) are settled against the claim table. */
export const SETTLE_EVERY_MS = 10_000;

/** The key a held batch's spool names: its client and id. */
const claimKey = (client: string, id: string) => JSON.stringify([client, id]);

export interface Aggregate {
  readonly k: Hypsink;
  readonly cache: ReceiverCache;
  /** Where the receiver's ledger lives: `<state dir>/receiver`. */
  readonly ledgerDir: string;
  /** Stop the sinks (a drain, as `hypsink run` does) and close the kernel. Call after the receiver closed. */
  close(): Promise<void>;
}

/**
 * The kernel's batch id of a client's batch. Client names are [A-Za-z0-9._-]
 * (kernel/receiver/auth.ts), never ':', so two clients' ids never meet.
 */
export function cacheBatchId(client: string, id: string): string {
  return `rcv:${client}:${id}`;
}

/** Every dataset must carry the client column, declared as a STRING: the config says so, not the receiver behind its back. */
function checkDatasets(k: Hypsink, column: string): void {
  const file = k.loaded.file ?? 'the config';
  for (const [name, ds] of Object.entries(k.loaded.config.datasets)) {
    const col = ds.columns.find((c) => c.name === column);
    if (col && col.type === 'STRING') continue;
    throw new HypsinkError(
      'HYPSINK_ERR_CONFIG',
      `${file}: dataset "${name}" ${col ? `declares ${column} as ${col.type}` : `has no ${column} column`}: the receiver records the client that sent each row there`,
      { hint: `Add { "name": "${column}", "type": "STRING", "nullable": false } to datasets.${name}.columns (or name another column with --client-column), then start the receiver again.` },
    );
  }
}

async function folderBytes(dir: string): Promise<number> {
  let n = 0;
  for (const e of await fsp.readdir(dir, { recursive: true, withFileTypes: true }).catch(() => [])) {
    if (!e.isFile()) continue;
    // A file removed mid-walk (a flush, retention) counts nothing.
    n += await fsp.stat(join(e.parentPath, e.name)).then((s) => s.size, () => 0);
  }
  return n;
}

export async function openAggregate(k: Hypsink, opts: AggregateOptions = {}): Promise<Aggregate> {
  const column = opts.clientColumn ?? CLIENT_COLUMN;
  checkDatasets(k, column);
  k.keepWorkers(SERVING_WORKER_IDLE_MS);
  const failing = new Map<string, string>();
  const daemon = new Daemon(k, {
    onTick: (r) => {
      if (r.failed === 0) failing.delete(r.sink);
      else {
        failing.set(r.sink, r.partitions.find((p) => p.error)?.error?.message ?? `${r.failed} partition(s) failed`);
      }
    },
  });
  daemon.start();

  let size = { at: Number.NEGATIVE_INFINITY, bytes: 0 };
  let measuring: Promise<number> | null = null;
  const cacheBytes = (): Promise<number> => {
    if (performance.now() - size.at < SIZE_SAMPLE_MS) return Promise.resolve(size.bytes);
    measuring ??= folderBytes(k.cache.root).then((bytes) => {
      size = { at: performance.now(), bytes };
      measuring = null;
      return bytes;
    });
    return measuring;
  };

  const ingest = async (b: NewBatch, hold?: string): Promise<{ rows: number }> => {
    const batchId = cacheBatchId(b.client, b.id);
    try {
      // The client's lines are checked, and its name set on each row, by the ingest's parse. @ref LLP 0087
      const wire = { maxDepth: b.maxDepth, stamp: { column, value: b.client } };
      const r = await k.ingest(b.dataset, Readable.from([b.data]), { source: b.source, batchId, wire, parseWorkerAfterBytes: PARSE_WORKER_AFTER_BYTES, ...(hold !== undefined ? { hold } : {}) });
      if (r.rejected > 0) k.log.warn({ client: b.client, id: b.id, dataset: b.dataset, rejected: r.rejected, deadLetter: r.deadLetter }, 'rows refused by the dataset schema (dead-lettered)');
      return { rows: r.accepted };
    } catch (e) {
      // A line no client may send, found by the ingest's parse before any row was durable. @ref LLP 0087
      if (e instanceof RowRefused) throw new WriteRefused(400, e.reason, undefined, e.line);
      // Every row durable in the spool, the flush after it failed: the batch commits with the next flush (LLP 0021).
      if (e instanceof IngestError && e.durable === 'all' && e.code !== 'HYPSINK_ERR_INPUT') return { rows: e.result.accepted };
      throw e;
    }
  };

  const claims = opts.claims ? ClaimTable.open({ url: opts.claims.url, aggregator: opts.claims.aggregator ?? k.cache.id, leaseMs: opts.claims.leaseMs ?? CLAIM_LEASE_MS, log: k.log }) : null;
  /** One request or settlement of a batch at a time: a settlement never drops a spool a request is about to mark stored. */
  const perBatch = new KeyedMutex();

  /** Let a held batch's rows commit, and tell the sinks, as an ingest's own flush does. */
  const release = async (ref: SpoolRef) => {
    const r = await k.cache.releaseBatch(ref);
    if (r.partitions.length > 0) await k.hooks.cacheFlushed.promise({ partitions: r.partitions });
  };

  /**
   * The multi-aggregator rule: claim, spool held, mark stored, release.
   * Every refusal before the batch is marked stored leaves nothing of it to
   * commit here. @ref LLP 0080
   */
  const writeClaimed = (table: ClaimTable, b: NewBatch): Promise<WriteResult> => {
    const key = claimKey(b.client, b.id);
    return perBatch.run(key, async () => {
      const retry = 'retry (at any aggregator)';
      let c: ClaimOutcome;
      try {
        c = await table.claim(b);
      } catch (e) {
        throw new WriteRefused(503, `${(e as Error).message}; nothing of batch ${b.id} was stored; ${retry}`);
      }
      if (c.kind === 'storedElsewhere') return { rows: 0, elsewhere: true };
      if (c.kind === 'busy') throw new WriteRefused(503, `batch ${b.id} is being stored by aggregator ${c.aggregator} (its claim's lease has not passed); ${retry}`);
      if (c.kind === 'conflict') {
        throw new WriteRefused(409, `batch ${b.id}: the claim table holds it stored with another ${c.why === 'partition' ? 'dataset or source' : 'body'}`, c.why);
      }
      fault('receiver.afterClaim');
      const { rows } = await ingest(b, key);
      fault('receiver.afterHold');
      const ref = k.cache.batchSpool(b.dataset, cacheBatchId(b.client, b.id));
      if (c.kind === 'claimed') {
        let mine: boolean;
        try {
          mine = await table.markStored(b);
        } catch (e) {
          // Its answer lost, the update may have landed: never drop what may be stored; settlement decides.
          k.log.warn({ client: b.client, id: b.id, err: (e as Error).message }, 'claim not confirmed as stored; the batch stays held until settled');
          throw new WriteRefused(503, `${(e as Error).message}; batch ${b.id} is kept held until the claim database answers; ${retry}`);
        }
        if (!mine) {
          await k.cache.dropBatch(ref);
          throw new WriteRefused(503, `the claim on batch ${b.id} passed to another aggregator before it was stored here (its lease ran out); nothing was stored here; ${retry}`);
        }
        fault('receiver.afterStored');
      }
      await release(ref);
      return { rows };
    });
  };

  /**
   * Every held batch resolved against the claim table: stored here → released
   * and flushed; otherwise (another stored it, or nobody did) → dropped. The
   * database unreachable: they stay held for the next pass. @ref LLP 0080
   */
  const settle = async (table: ClaimTable): Promise<void> => {
    const held = await k.cache.heldSpools();
    const done = { released: 0, dropped: 0 };
    for (const { ref, key } of held) {
      const [client, id] = JSON.parse(key) as [string, string];
      await perBatch.run(key, async () => {
        // A request may have settled it meanwhile.
        if ((await k.cache.heldBy(ref)) === undefined) return;
        if ((await table.settle(client, id)) === 'storedHere') {
          await release(ref);
          done.released++;
        } else {
          await k.cache.dropBatch(ref);
          done.dropped++;
        }
      });
    }
    if (done.released + done.dropped > 0) k.log.warn({ ...done, claims: table.shown }, 'held batches settled against the claim table');
  };
  let settling: Promise<void> = Promise.resolve();
  const settleNow = (table: ClaimTable) => {
    settling = settling
      .then(() => settle(table))
      .catch((e: Error) => k.log.warn({ err: e.message }, 'held batches not settled yet (they stay held); next pass later'));
    return settling;
  };
  let timer: NodeJS.Timeout | undefined;
  if (claims) {
    await settleNow(claims);
    timer = setInterval(() => void settleNow(claims), opts.claims?.settleEveryMs ?? SETTLE_EVERY_MS);
    timer.unref();
  }

  const write = (b: NewBatch): Promise<WriteResult> => (claims ? writeClaimed(claims, b) : ingest(b));

  const cache: ReceiverCache = {
    clientColumn: column,
    hasDataset: (d) => Object.hasOwn(k.loaded.config.datasets, d),
    write,
    async pressure() {
      for (const sink of k.sinks.keys()) {
        const why = failing.get(sink) ?? daemon.tickError(sink)?.message;
        if (why !== undefined) return { status: 503, reason: `sink "${sink}" is failing (${why}); the receiver takes no new batch until it exports again` };
      }
      if (opts.maxCacheBytes !== undefined) {
        const bytes = await cacheBytes();
        if (bytes > opts.maxCacheBytes) {
          return { status: 429, reason: `the receiver's cache holds ${bytes} bytes, over its bound of ${opts.maxCacheBytes} (--max-cache-bytes); its sinks have not caught up yet` };
        }
      }
      return null;
    },
    describe: `cache ${k.cache.root}, sinks ${[...k.sinks.keys()].join(', ') || '(none)'}${claims ? `, claims ${claims.shown} as aggregator ${claims.aggregator}` : ''}`,
  };
  const close = async () => {
    clearInterval(timer);
    await settling;
    await claims?.close();
    await daemon.stop();
  };
  return { k, cache, ledgerDir: join(k.loaded.stateDir, 'receiver'), close };
}
