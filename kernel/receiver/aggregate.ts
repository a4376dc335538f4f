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
import { IngestError } from '../ingest/ingest.js';
import type { Hypsink } from '../runtime.js';
import type { ReceiverCache } from './server.js';
import type { NewBatch } from './store.js';

/**
 * The column the receiver writes the authenticated client's name in, unless
 * --client-column names another. Not `_hyp_…`: the config reserves those for
 * the kernel's own columns, and this one is the user's, declared in the
 * dataset like any other. @ref LLP 0074
 */
export const CLIENT_COLUMN = 'hyp_client';

/** The cache's size is measured at most this often (a walk of its folder); requests in between use the last figure. */
const SIZE_SAMPLE_MS = 1000;

export interface AggregateOptions {
  /** Answer 429 while the cache's folder holds more than this many bytes (default: no bound). */
  readonly maxCacheBytes?: number;
  /** The column the client's name goes in (default CLIENT_COLUMN). */
  readonly clientColumn?: string;
}

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

  const write = async (b: NewBatch): Promise<{ rows: number }> => {
    const batchId = cacheBatchId(b.client, b.id);
    try {
      const r = await k.ingest(b.dataset, Readable.from([b.data]), { source: b.source, batchId });
      if (r.rejected > 0) k.log.warn({ client: b.client, id: b.id, dataset: b.dataset, rejected: r.rejected, deadLetter: r.deadLetter }, 'rows refused by the dataset schema (dead-lettered)');
      return { rows: r.accepted };
    } catch (e) {
      // Every row durable in the spool, the flush after it failed: the batch commits with the next flush (LLP 0021).
      if (e instanceof IngestError && e.durable === 'all' && e.code !== 'HYPSINK_ERR_INPUT') return { rows: e.result.accepted };
      throw e;
    }
  };

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
    describe: `cache ${k.cache.root}, sinks ${[...k.sinks.keys()].join(', ') || '(none)'}`,
  };
  return { k, cache, ledgerDir: join(k.loaded.stateDir, 'receiver'), close: () => daemon.stop() };
}
