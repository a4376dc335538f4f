/**
 * The kernel cache: spools, partitions, the seq allocator, the writer lock and
 * the storage service, composed. Only this module writes partitions.
 */
import { promises as fsp, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { HypsinkError } from '../../types/errors.js';
import { type DatasetSchema, PARTITION_COLUMN } from '../../types/schema.js';
import type { PartitionRef, TableRef } from '../../types/storage.js';
import { fault } from '../fault.js';
import { fsyncDir, readJsonFile } from '../io/durable.js';
import { ProcessLock } from '../io/lock.js';
import { KeyedMutex } from '../mutex.js';
import { SeqAllocator } from './allocator.js';
import { commitRows } from './commit.js';
import { type CompactResult, compactPartition } from './compaction.js';
import { FlushEncoder } from './flush-encoder.js';
import { encodeFrameLine, partsOf } from './frames.js';
import { normalizeRow } from './normalize.js';
import { PartitionStore, partitionRef } from './partition.js';
import { DEFAULT_ROW_GROUP_ROWS } from './parquet.js';
import { CacheStorage } from './reader.js';
import { type RetentionPolicy, type RetentionResult, retainPartition } from './retention.js';
import { decodeSegment, encodeSegment } from './segments.js';
import { Spool, type SpoolRef } from './spool.js';

export interface CacheOptions {
  readonly root: string;
  readonly datasets: Readonly<Record<string, DatasetSchema>>;
  /** Bounded wait for the writer lock (ms). */
  readonly lockWaitMs?: number;
  readonly seqBlockSize?: number;
  /** A spool's current file is sealed past this size. */
  readonly segmentBytes?: number;
  readonly rowGroupRows?: number;
  /** Compaction output files hold at most this many rows. */
  readonly compactFileRows?: number;
  /** A sealed segment at least this big is built and encoded in a worker thread (LLP 0013). */
  readonly workerMinBytes?: number;
}

export interface FlushResult {
  segments: number;
  partitions: { partition: PartitionRef; rows: number; highWater: string }[];
}

export class Cache {
  readonly root: string;
  readonly storage: CacheStorage;
  readonly allocator: SeqAllocator;
  private readonly writer: ProcessLock;
  private readonly partitionMutex = new KeyedMutex();
  /** One flush per spool at a time in this process (across processes the writer lock serializes). */
  private readonly spoolMutex = new KeyedMutex();
  /** One Spool (and so one spool lock object) per spool in this process. */
  private readonly spools = new Map<string, Spool>();
  private readonly opts: Required<Omit<CacheOptions, 'datasets' | 'root'>>;
  private readonly encoder: FlushEncoder;

  private constructor(
    root: string,
    private readonly datasets: Readonly<Record<string, DatasetSchema>>,
    opts: CacheOptions,
  ) {
    this.root = root;
    this.opts = {
      lockWaitMs: opts.lockWaitMs ?? 10_000,
      seqBlockSize: opts.seqBlockSize ?? 1024,
      segmentBytes: opts.segmentBytes ?? 64 * 1024 * 1024,
      rowGroupRows: opts.rowGroupRows ?? DEFAULT_ROW_GROUP_ROWS,
      compactFileRows: opts.compactFileRows ?? 1_000_000,
      workerMinBytes: opts.workerMinBytes ?? 1024 * 1024,
    };
    this.encoder = new FlushEncoder(this.opts.rowGroupRows, this.opts.workerMinBytes);
    this.allocator = new SeqAllocator(root, this.opts.seqBlockSize);
    this.writer = new ProcessLock(root, `cache ${root}`, {
      waitMs: this.opts.lockWaitMs,
      onAcquire: () => this.allocator.invalidate(),
    });
    this.storage = new CacheStorage({
      store: (t) => this.store(t),
      schema: (d) => this.schema(d),
      listPartitions: (d) => this.listPartitions(d),
      partition: (d, s) => this.partition(d, s),
    });
  }

  static async open(opts: CacheOptions): Promise<Cache> {
    await fsp.mkdir(join(opts.root, 'datasets'), { recursive: true });
    await fsp.mkdir(join(opts.root, 'spools'), { recursive: true });
    return new Cache(opts.root, opts.datasets, opts);
  }

  /** Release what the cache holds beyond files (the flush worker). */
  async close(): Promise<void> {
    await this.encoder.close();
  }

  schema(dataset: string): DatasetSchema {
    const s = this.datasets[dataset];
    if (!s) {
      const known = Object.keys(this.datasets).join(', ') || 'none';
      throw new HypsinkError('HYPSINK_ERR_INPUT', `unknown dataset "${dataset}" (configured: ${known})`);
    }
    return s;
  }

  partition(dataset: string, source: string): PartitionRef {
    return partitionRef(dataset, source);
  }

  store(table: TableRef): PartitionStore {
    if (typeof table !== 'string') return new PartitionStore(this.root, table);
    const m = /^datasets\/([^/]+)\/source=([^/]+)$/.exec(table);
    // Only a path this cache would produce: a configured dataset's segment and a canonical source segment.
    const dataset = m ? Object.keys(this.datasets).find((d) => encodeSegment(d) === m[1]) : undefined;
    if (!m || dataset === undefined) {
      throw new HypsinkError('HYPSINK_ERR_INPUT', `"${table}" is not a partition path of this cache (datasets/<dataset>/source=<source>)`);
    }
    const source = decodeSegment(m[2]!);
    if (source !== undefined) return new PartitionStore(this.root, partitionRef(dataset, source));
    if (!/^[A-Za-z0-9_%-]+~[0-9a-f]{32}$/.test(m[2]!)) {
      throw new HypsinkError('HYPSINK_ERR_INPUT', `"${table}": "${m[2]}" is not an encoded partition value`);
    }
    // A cut (hashed) segment: only partition.json knows the value; an absent partition reads as empty.
    let meta: { dataset?: unknown; source?: unknown } = {};
    try {
      meta = JSON.parse(readFileSync(join(this.root, table, 'partition.json'), 'utf8'));
    } catch {
      // absent or unreadable: listPartitions reports a damaged one
    }
    if (typeof meta.source === 'string' && partitionRef(dataset, meta.source).path === table) {
      return new PartitionStore(this.root, partitionRef(dataset, meta.source));
    }
    return new PartitionStore(this.root, { dataset, source: '', path: table, key: `${m[1]}/source=${m[2]}` });
  }

  async listPartitions(dataset?: string): Promise<PartitionRef[]> {
    const out: PartitionRef[] = [];
    const root = join(this.root, 'datasets');
    for (const ds of await readdirOrEmpty(root)) {
      for (const p of await readdirOrEmpty(join(root, ds))) {
        if (!p.startsWith('source=')) continue;
        const file = join(root, ds, p, 'partition.json');
        const meta = await readJsonFile<{ dataset: string; source: string }>(
          file,
          (v) => {
            const m = v as { dataset?: unknown; source?: unknown } | null;
            return m && typeof m.dataset === 'string' && typeof m.source === 'string' ? null : 'expected {"dataset":"…","source":"…"}';
          },
          'partition file',
        );
        if (!meta) continue; // created by a crashed writer before partition.json: holds no committed rows
        const ref = partitionRef(meta.dataset, meta.source);
        if (ref.path !== `datasets/${ds}/${p}`) {
          throw new HypsinkError('HYPSINK_ERR_CORRUPT', `partition file ${file} names the partition at ${ref.path}, not this one`);
        }
        if (dataset !== undefined && meta.dataset !== dataset) continue;
        out.push(ref);
      }
    }
    return out.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
  }

  spool(ref: SpoolRef): Spool {
    this.schema(ref.dataset);
    if (!/^[A-Za-z0-9_-]{1,64}$/.test(ref.id)) {
      throw new HypsinkError('HYPSINK_ERR_INPUT', `spool id "${ref.id}" must be 1-64 characters of A-Z a-z 0-9 _ -`);
    }
    const key = `${ref.dataset}\0${ref.id}`;
    let spool = this.spools.get(key);
    if (!spool) {
      spool = new Spool(join(this.root, 'spools'), ref, this.opts.lockWaitMs);
      this.spools.set(key, spool);
    }
    return spool;
  }

  /**
   * Append rows durably to a spool. `columns` names the values of each row and
   * must include `source`, the partition value. Every row is validated first;
   * a bad row rejects the whole call (the caller sorts good from bad).
   */
  async appendRows(ref: SpoolRef, columns: readonly string[], rows: readonly (readonly unknown[])[]): Promise<void> {
    const schema = this.schema(ref.dataset);
    const srcIdx = columns.indexOf(PARTITION_COLUMN);
    if (srcIdx < 0) throw new HypsinkError('HYPSINK_ERR_INPUT', `appendRows: columns must include "${PARTITION_COLUMN}"`);
    const ignore = new Set([PARTITION_COLUMN]);
    const out: unknown[][] = [];
    rows.forEach((values, i) => {
      const source = values[srcIdx];
      if (typeof source !== 'string') {
        throw new HypsinkError('HYPSINK_ERR_INPUT', `row ${i + 1}: "${PARTITION_COLUMN}" must be a string`);
      }
      const obj: Record<string, unknown> = {};
      columns.forEach((c, ci) => {
        obj[c] = values[ci];
      });
      const r = normalizeRow(schema, obj, ignore);
      if (!r.ok) throw new HypsinkError('HYPSINK_ERR_INPUT', `dataset "${ref.dataset}" row ${i + 1}: ${r.reason}`);
      out.push([source, ...r.values]);
    });
    await this.appendValidated(ref, out);
  }

  /** Append rows already validated by `normalizeRow`, as `[source, ...values in schema order]`, as one frame. */
  async appendValidated(ref: SpoolRef, rows: readonly (readonly unknown[])[], opts: { seal?: boolean } = {}): Promise<void> {
    if (rows.length === 0) return;
    const { columns } = this.schema(ref.dataset);
    await this.appendFrame(ref, encodeFrameLine(columns, partsOf(columns.length, rows)), opts);
  }

  /**
   * Append one frame of validated rows (encodeFrameLine). With `seal`, the
   * spool's current file is sealed after it, and a large segment starts building
   * in the flush worker at once, so the flush that commits it finds it ready
   * (LLP 0013).
   */
  async appendFrame(ref: SpoolRef, frame: { readonly bytes: Uint8Array }, opts: { seal?: boolean } = {}): Promise<void> {
    const schema = this.schema(ref.dataset);
    const sealed = await this.spool(ref).append(frame.bytes, this.opts.segmentBytes, opts.seal);
    if (sealed) this.encoder.warm(sealed.path, ref.dataset, schema);
  }

  /**
   * Flush one spool: the single chokepoint into partitions. `sealCurrent: false`
   * commits only the segments sealed already, leaving the current file to fill.
   */
  async flushTable(ref: SpoolRef, opts: { sealCurrent?: boolean } = {}): Promise<FlushResult> {
    const spool = this.spool(ref);
    const schema = this.schema(ref.dataset);
    // Two flushes of one spool would both read (and delete) the same sealed segments.
    return this.spoolMutex.run(spool.key, () => this.writer.with('flush', async () => {
      const result: FlushResult = { segments: 0, partitions: [] };
      for (const seg of opts.sealCurrent === false ? await spool.sealed() : await spool.seal()) {
        const built = await this.encoder.segment(seg.path, ref.dataset, schema);
        try {
          for (const { source, rows } of built.partitions) {
            const store = new PartitionStore(this.root, partitionRef(ref.dataset, source));
            const res = await this.partitionMutex.run(store.ref.path, () =>
              commitRows(store, this.allocator, { rows, batchId: `${spool.key}#${seg.n}`, marker: { spool: spool.key, segment: seg.n } }),
            );
            if (res.committed && res.highWater) {
              result.partitions.push({ partition: store.ref, rows: res.rows, highWater: res.highWater });
            }
          }
        } finally {
          await built.release();
        }
        fault('flush.afterCommitAll');
        await fsp.rm(seg.path);
        await fsyncDir(spool.dir);
        result.segments += 1;
      }
      return result;
    }));
  }

  /** Every spool of every dataset (or one dataset). */
  async listSpools(dataset?: string): Promise<SpoolRef[]> {
    const out: SpoolRef[] = [];
    for (const ds of Object.keys(this.datasets)) {
      if (dataset !== undefined && ds !== dataset) continue;
      const dir = join(this.root, 'spools', encodeSegment(ds));
      for (const id of await readdirOrEmpty(dir)) out.push({ dataset: ds, id });
    }
    return out;
  }

  async flushAll(): Promise<FlushResult> {
    const all: FlushResult = { segments: 0, partitions: [] };
    for (const ref of await this.listSpools()) {
      const r = await this.flushTable(ref);
      all.segments += r.segments;
      all.partitions.push(...r.partitions);
    }
    return all;
  }

  /** One retention pass over every partition. */
  async retention(policy: RetentionPolicy): Promise<RetentionResult[]> {
    return this.writer.with('retention', async () => {
      const out: RetentionResult[] = [];
      for (const ref of await this.listPartitions()) {
        const schema = this.schema(ref.dataset);
        const store = new PartitionStore(this.root, ref);
        out.push(await this.partitionMutex.run(ref.path, () => retainPartition(store, schema, policy, this.opts.rowGroupRows)));
      }
      return out;
    });
  }

  /** Compact every partition with at least `minFiles` data files (or just `only`). */
  async compact(only?: PartitionRef, minFiles = 2): Promise<CompactResult[]> {
    return this.writer.with('compaction', async () => {
      const out: CompactResult[] = [];
      for (const ref of only ? [only] : await this.listPartitions()) {
        const schema = this.schema(ref.dataset);
        const store = new PartitionStore(this.root, ref);
        const r = await this.partitionMutex.run(ref.path, () =>
          compactPartition(store, schema, this.opts.rowGroupRows, this.opts.compactFileRows, minFiles),
        );
        if (r) out.push(r);
      }
      return out;
    });
  }
}

async function readdirOrEmpty(dir: string): Promise<string[]> {
  try {
    return (await fsp.readdir(dir)).sort();
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw e;
  }
}
