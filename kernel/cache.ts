/**
 * The kernel cache: spools, partitions, the seq allocator, the writer lock and
 * the storage service, composed. Only this module writes partitions.
 */
import { createHash, randomUUID } from 'node:crypto';
import { promises as fsp, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { HypsinkError, isHypsinkError } from '../types/errors.js';
import { type DatasetSchema, PARTITION_COLUMN } from '../types/schema.js';
import type { PartitionRef, TableRef } from '../types/storage.js';
import { fault } from './fault.js';
import { createJsonOnce, exists, fsyncDir, readdirOrEmpty, readJsonFile, writeJsonAtomic } from './io/durable.js';
import { type CopyEvidence, checkHome, settleHome } from './identity.js';
import { ProcessLock } from './io/lock.js';
import { KeyedMutex } from './mutex.js';
import { SeqAllocator } from './flush/allocator.js';
import { commitRows } from './flush/commit.js';
import { type CompactResult, compactPartition } from './store/compaction.js';
import { FlushEncoder } from './flush/flush-encoder.js';
import { type BatchMark, encodeFrameLine, partsOf } from './spool/frames.js';
import { normalizeRow } from './ingest/normalize.js';
import { effSeq } from './store/manifest.js';
import { PartitionStore, partitionRef } from './store/partition.js';
import { type CacheCompression, DEFAULT_CACHE_COMPRESSION, DEFAULT_ROW_GROUP_ROWS, type DataFileLayout } from './store/parquet.js';
import { CacheStorage } from './store/reader.js';
import { type RetentionPolicy, type RetentionResult, retainPartition } from './store/retention.js';
import { CUT_SEGMENT, decodeSegment, encodeSegment } from './store/segments.js';
import { renameCacheNamesV1 } from './store/segments-v1.js';
import { Spool, type SpoolRef } from './spool/spool.js';
import { mkdirs } from './io/mkdirs.js';

export interface CacheOptions {
  readonly root: string;
  readonly datasets: Readonly<Record<string, DatasetSchema>>;
  /** Bounded wait for the writer lock (ms). */
  readonly lockWaitMs?: number;
  readonly seqBlockSize?: number;
  /** A spool's current file is sealed past this size. */
  readonly segmentBytes?: number;
  readonly rowGroupRows?: number;
  /** The codec of the data files the cache writes from now on (default lz4). @ref LLP 0103 */
  readonly compression?: CacheCompression;
  /** Compaction output files hold at most this many rows. */
  readonly compactFileRows?: number;
  /** A sealed segment at least this big is built and encoded in a worker thread (LLP 0013). */
  readonly workerMinBytes?: number;
}

export interface FlushResult {
  segments: number;
  partitions: { partition: PartitionRef; rows: number; highWater: string }[];
}

/**
 * A batch whose every row is committed: kept so a retry of it is acknowledged
 * without adding rows, for as long as the cache may still hold its rows.
 * @ref LLP 0021: idempotent ingest
 */
export interface BatchRecord {
  readonly v: 1;
  /** The host's batch id. */
  readonly id: string;
  readonly dataset: string;
  /** Input lines and their SHA-256: a retry must send the same input. */
  readonly lines: number;
  readonly hash: string;
  readonly accepted: number;
  readonly rejected: number;
  readonly committedAt: string;
  /** Every row of the batch has a seq at or below this (the allocator's reservation then). */
  readonly maxSeq: string;
}

function checkBatchRecord(v: unknown): string | null {
  const r = v as BatchRecord;
  if (r?.v !== 1 || typeof r.id !== 'string' || typeof r.dataset !== 'string' || typeof r.hash !== 'string') return 'not a v1 batch record';
  if (!Number.isSafeInteger(r.lines) || !Number.isSafeInteger(r.accepted) || !Number.isSafeInteger(r.rejected) || typeof r.maxSeq !== 'string') return 'bad counts';
  return null;
}

/** Spools of batches are named by a hash of the batch id, so every retry of a batch finds its spool. */
const BATCH_SPOOL = /^b-[0-9a-f]{40}$/;

/** A batch id: what a host may pass as `--batch-id`. */
export function checkBatchId(id: string): string | null {
  return /^[\x21-\x7e]{1,256}$/.test(id) ? null : 'a batch id is 1-256 visible ASCII characters (no spaces)';
}

export class Cache {
  readonly root: string;
  readonly storage: CacheStorage;
  readonly allocator: SeqAllocator;
  private readonly writer: ProcessLock;
  private readonly partitionMutex = new KeyedMutex();
  /** One flush per spool at a time in this process (across processes the writer lock serializes). */
  private readonly spoolMutex = new KeyedMutex();
  /** One ingest per batch at a time in this process (across processes its spool's lock). */
  private readonly batchMutex = new KeyedMutex();
  /** One Spool (and so one spool lock object) per spool in this process. */
  private readonly spools = new Map<string, Spool>();
  private readonly opts: Required<Omit<CacheOptions, 'datasets' | 'root' | 'rowGroupRows' | 'compression'>>;
  private readonly encoder: FlushEncoder;
  /** How every data file this cache writes is laid out: flush, compaction, retention. */
  private readonly layout: DataFileLayout;

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
      compactFileRows: opts.compactFileRows ?? 1_000_000,
      workerMinBytes: opts.workerMinBytes ?? 1024 * 1024,
    };
    this.layout = { rowGroupRows: opts.rowGroupRows ?? DEFAULT_ROW_GROUP_ROWS, compression: opts.compression ?? DEFAULT_CACHE_COMPRESSION };
    this.encoder = new FlushEncoder(this.layout, this.opts.workerMinBytes);
    this.writer = new ProcessLock(root, `cache ${root}`, {
      waitMs: this.opts.lockWaitMs,
      onAcquire: () => this.allocator.invalidate(),
    });
    this.allocator = new SeqAllocator(root, this.opts.seqBlockSize, this.writer);
    this.storage = new CacheStorage({
      store: (t) => this.store(t),
      schema: (d) => this.schema(d),
      listPartitions: (d) => this.listPartitions(d),
      partition: (d, s) => this.partition(d, s),
    });
  }

  static async open(opts: CacheOptions): Promise<Cache> {
    await mkdirs(join(opts.root, 'datasets'));
    await mkdirs(join(opts.root, 'spools'));
    await renameCacheNamesV1(opts.root, Object.keys(opts.datasets));
    const cache = new Cache(opts.root, opts.datasets, opts);
    const file = await cacheFile(opts.root);
    cache.id = file.id;
    cache.copiedFrom = file.copiedFrom ?? null;
    // Before any seq is handed out: a copy's fork seq must not include rows of its own. Rows the
    // original spooled (acknowledged) but had not flushed are the original's: flushed first, so
    // they land at or below the fork, not above it as the copy's (sim seed 103). @ref LLP 0055
    cache.copied = await checkHome(opts.root, async () => {
      await cache.flushAll();
      return (await cache.allocator.readReserved()).toString();
    });
    return cache;
  }

  /** The cache this one was copied from and the fork seq, once `identity --copy` gave it its own identity. */
  copiedFrom: CacheFile['copiedFrom'] | null = null;

  /**
   * What a blob key of this cache carries so that a copy's keys never meet the
   * original's (blob keys name no cache id): '' for a cache never copied, else
   * 8 characters of its id. @ref LLP 0055
   */
  get copyTag(): string {
    return this.copiedFrom ? this.id.replace(/-/g, '').slice(0, 8) : '';
  }

  /** Set when this cache was opened away from its home (a suspected copy); exports stop until `identity` settles it. */
  copied: CopyEvidence | null = null;

  /**
   * Give this cache its own identity (`hypsink identity --copy`): a new id,
   * recording the one it was copied from and the fork seq. Its sinks' state is
   * moved to the fork by the caller. @ref LLP 0055
   */
  async renew(forkSeq: string): Promise<{ from: string; to: string }> {
    const from = this.id;
    const to = randomUUID();
    // Every seq this cache stamps from now on lies above the fork, even a fork above its own reservation.
    await this.writer.with('identity', () => this.allocator.reserveThrough(BigInt(forkSeq)));
    const copiedFrom = { id: from, forkSeq, at: new Date().toISOString() };
    await writeJsonAtomic(join(this.root, 'cache.json'), { v: 1, id: to, copiedFrom } satisfies CacheFile);
    await settleHome(this.root);
    this.id = to;
    this.copiedFrom = copiedFrom;
    this.copied = null;
    return { from, to };
  }

  /** The original stopped (a moved folder, a migrated host): this is the cache's home now. */
  async settle(): Promise<void> {
    await settleHome(this.root);
    this.copied = null;
  }

  /** This cache's stable id (`cache.json`), made once when the cache is first opened. @ref LLP 0021 */
  id = '';

  /** Keep the flush worker `ms` after its last segment (a server's ingests come seconds apart). @ref LLP 0088 */
  keepWorkers(ms: number): void {
    this.encoder.keepIdle(ms);
  }

  /** Release what the cache holds beyond files (the flush worker). */
  async close(): Promise<void> {
    await this.encoder.close();
  }

  schema(dataset: string): DatasetSchema {
    const s = this.datasets[dataset];
    if (!s) {
      const known = Object.keys(this.datasets).join(', ') || 'none';
      throw new HypsinkError('HYPSINK_ERR_INPUT', `unknown dataset "${dataset}" (configured: ${known})`, {
        hint: 'Name one of the configured datasets, or add this one to the config file; nothing was read.',
      });
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
    if (!CUT_SEGMENT.test(m[2]!)) {
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
    await this.appendValidated(ref, this.validate(ref.dataset, columns, rows));
  }

  /**
   * Append rows as one batch, exactly once: a batch id already committed or
   * spooled is acknowledged again (`duplicate`) without adding a row, once its
   * rows are checked to be the same. The rows are one frame with the batch's
   * end mark, so they are durable together or not at all; a flush commits them.
   * @ref LLP 0021: idempotent ingest
   */
  async appendBatch(dataset: string, batchId: string, columns: readonly string[], rows: readonly (readonly unknown[])[]): Promise<{ duplicate: boolean }> {
    const ref = this.batchSpool(dataset, batchId);
    const values = this.validate(dataset, columns, rows);
    const hash = createHash('sha256').update(JSON.stringify(values, (_k, v) => (typeof v === 'bigint' ? v.toString() : v))).digest('hex');
    return this.withBatch(ref, async (progress) => {
      const done = (await this.batchRecord(ref)) ?? (await progress());
      if (done && ('end' in done ? done.end : true)) {
        if (done.hash !== hash) {
          throw new HypsinkError('HYPSINK_ERR_INPUT', `batch ${batchId} was ingested before with other content; nothing was added. New rows need a new batch id`);
        }
        return { duplicate: true };
      }
      const { columns: cols } = this.schema(dataset);
      const mark: BatchMark = { id: batchId, lines: rows.length, hash, end: true, accepted: rows.length, rejected: 0 };
      await this.appendFrame(ref, encodeFrameLine(cols, values.length > 0 ? partsOf(cols.length, values) : [], mark));
      return { duplicate: false };
    });
  }

  /** Validate rows given as `columns` (with `source`): `[source, ...values in schema order]`, or an error naming the row. */
  private validate(dataset: string, columns: readonly string[], rows: readonly (readonly unknown[])[]): unknown[][] {
    const schema = this.schema(dataset);
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
      if (!r.ok) throw new HypsinkError('HYPSINK_ERR_INPUT', `dataset "${dataset}" row ${i + 1}: ${r.reason}`);
      out.push([source, ...r.values]);
    });
    return out;
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
  async flushTable(ref: SpoolRef, opts: { sealCurrent?: boolean; skipBusy?: boolean } = {}): Promise<FlushResult> {
    const spool = this.spool(ref);
    const schema = this.schema(ref.dataset);
    // Two flushes of one spool would both read (and delete) the same sealed segments.
    return this.spoolMutex.run(spool.key, () => this.writer.with('flush', async () => {
      const result: FlushResult = { segments: 0, partitions: [] };
      // A held batch commits only once released: its rows must not reach a sink before the host says so. @ref LLP 0080
      if (await exists(heldPath(spool.dir))) return result;
      const segments = opts.sealCurrent === false ? await spool.sealed() : await spool.seal(opts.skipBusy ?? false);
      // Held by its ingest in another process, which flushes it itself.
      if (segments === null) return result;
      for (const seg of segments) {
        const built = await this.encoder.segment(seg.path, ref.dataset, schema);
        try {
          // The seqs this segment's commits will take from here on: a reservation covers no more (LLP 0039).
          let ahead = built.partitions.reduce((n, p) => n + p.rows.rows, 0);
          for (const { source, rows } of built.partitions) {
            const store = new PartitionStore(this.root, partitionRef(ref.dataset, source), this.writer);
            const coming = ahead;
            ahead -= rows.rows;
            const res = await this.partitionMutex.run(store.ref.path, () =>
              commitRows(store, this.allocator, {
                rows,
                ahead: coming,
                batchId: `${spool.key}#${seg.n}`,
                marker: { spool: spool.key, segment: seg.n },
                spoolExists: (key) => exists(join(this.root, 'spools', key)),
              }),
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
      await this.completeBatch(spool, opts.skipBusy ?? false);
      return result;
    }));
  }

  /** The spool of a batch, named by a hash of its id: a retry of the batch finds it. */
  batchSpool(dataset: string, batchId: string): SpoolRef {
    this.schema(dataset);
    const problem = checkBatchId(batchId);
    if (problem) throw new HypsinkError('HYPSINK_ERR_INPUT', `batch id ${JSON.stringify(batchId)}: ${problem}`);
    return { dataset, id: `b-${createHash('sha256').update(batchId).digest('hex').slice(0, 40)}` };
  }

  private batchRecordPath(ref: SpoolRef): string {
    return join(this.root, 'batches', encodeSegment(ref.dataset), `${ref.id}.json`);
  }

  /** The record of a batch whose every row is committed, if there is one. */
  batchRecord(ref: SpoolRef): Promise<BatchRecord | undefined> {
    return readJsonFile<BatchRecord>(this.batchRecordPath(ref), checkBatchRecord, 'batch record');
  }

  /**
   * Run `fn` as the only ingest of this batch, here or in any process: it holds
   * the batch spool's lock throughout (a flush elsewhere passes the spool by),
   * and finds how far an earlier try got (`progress`).
   */
  async withBatch<T>(ref: SpoolRef, fn: (progress: () => Promise<BatchMark | null>) => Promise<T>): Promise<T> {
    const spool = this.spool(ref);
    await mkdirs(spool.dir);
    return this.batchMutex.run(spool.key, () => spool.processLock.with('ingest', () => fn(() => spool.progress())));
  }

  /**
   * After a flush of a batch spool: if its last frame (the end mark) is
   * committed, record the batch as committed. Caller holds the writer lock.
   */
  private async completeBatch(spool: Spool, skipBusy: boolean): Promise<void> {
    if (!BATCH_SPOOL.test(spool.ref.id)) return;
    const lock = spool.processLock;
    await (skipBusy ? lock.tryWith.bind(lock) : lock.with.bind(lock))('complete', async () => {
      const mark = await spool.progress();
      if (!mark?.end || (await spool.sealed()).length > 0 || (await spool.hasCurrent())) return;
      const path = this.batchRecordPath(spool.ref);
      if (await exists(path)) return;
      const record: BatchRecord = {
        v: 1,
        id: mark.id,
        dataset: spool.ref.dataset,
        lines: mark.lines,
        hash: mark.hash,
        accepted: mark.accepted ?? 0,
        rejected: mark.rejected ?? 0,
        committedAt: new Date().toISOString(),
        maxSeq: (await this.allocator.readReserved()).toString(),
      };
      await mkdirs(dirname(path));
      await writeJsonAtomic(path, record);
      fault('flush.afterBatchRecord');
    });
  }

  /**
   * Hold a batch's spool: no flush commits it (flushTable, flushAll, the
   * ingest's own) until `releaseBatch` or `dropBatch`. The marker, naming the
   * host's key for the batch, is durable before the caller appends a frame.
   * @ref LLP 0080
   */
  async holdBatch(ref: SpoolRef, key: string): Promise<void> {
    const spool = this.spool(ref);
    await mkdirs(spool.dir);
    await writeJsonAtomic(heldPath(spool.dir), { v: 1, key } satisfies HeldMarker);
  }

  /** Every held spool and the key its holder named. @ref LLP 0080 */
  async heldSpools(): Promise<{ ref: SpoolRef; key: string }[]> {
    const out: { ref: SpoolRef; key: string }[] = [];
    for (const ref of await this.listSpools()) {
      const key = await this.heldBy(ref);
      if (key !== undefined) out.push({ ref, key });
    }
    return out;
  }

  /** The key a held spool's marker names; undefined when it is not held. @ref LLP 0080 */
  async heldBy(ref: SpoolRef): Promise<string | undefined> {
    const path = heldPath(this.spool(ref).dir);
    return (await readJsonFile<HeldMarker>(path, (v) => (typeof (v as HeldMarker)?.key === 'string' ? null : 'expected {"key":<text>}'), 'held marker'))?.key;
  }

  /** Let a held batch commit: the marker removed durably, then the spool flushed. @ref LLP 0080 */
  async releaseBatch(ref: SpoolRef): Promise<FlushResult> {
    const spool = this.spool(ref);
    await this.spoolMutex.run(spool.key, async () => {
      await fsp.rm(heldPath(spool.dir), { force: true });
      await fsyncDir(spool.dir).catch((e: NodeJS.ErrnoException) => {
        if (e.code !== 'ENOENT') throw e;
      });
    });
    const r = await this.flushTable(ref);
    await this.retireBatch(ref);
    return r;
  }

  /**
   * Remove a held batch's spool unflushed: none of its rows ever reaches a
   * partition (a retry of the batch here starts it afresh). Refuses a spool
   * not held: its rows may already be acknowledged as the cache's. @ref LLP 0080
   */
  async dropBatch(ref: SpoolRef): Promise<void> {
    const spool = this.spool(ref);
    // The ingest's order (batch, then the spool's lock): a flush meanwhile sees the marker and passes by.
    await this.batchMutex.run(spool.key, async () => {
      if (!(await exists(spool.dir))) return;
      if (!(await this.moveSpoolAway(ref, 'wait', (sp) => exists(heldPath(sp.dir))))) {
        throw new HypsinkError('HYPSINK_ERR_INVARIANT', `spool ${spool.dir} is not held: only a held batch is dropped unflushed`);
      }
    });
  }

  /** Every spool of every dataset (or one dataset). */
  async listSpools(dataset?: string): Promise<SpoolRef[]> {
    const out: SpoolRef[] = [];
    for (const ds of Object.keys(this.datasets)) {
      if (dataset !== undefined && ds !== dataset) continue;
      const dir = join(this.root, 'spools', encodeSegment(ds));
      for (const id of await readdirOrEmpty(dir)) if (!id.startsWith('.')) out.push({ dataset: ds, id });
    }
    return out;
  }

  /**
   * Maintenance: remove the spools of committed batches (their rows are in the
   * partitions, their record stays), and forget a batch once no partition of
   * its dataset may still hold a row of it (none at or below its `maxSeq`): for
   * as long as the cache keeps a batch's rows, a retry of it adds nothing.
   * @ref LLP 0021: idempotent ingest
   */
  async sweepBatches(): Promise<{ spools: number; records: number }> {
    const out = { spools: 0, records: 0 };
    for (const ds of Object.keys(this.datasets)) {
      const recordsDir = join(this.root, 'batches', encodeSegment(ds));
      const spoolsDir = join(this.root, 'spools', encodeSegment(ds));
      for (const name of await readdirOrEmpty(spoolsDir)) {
        if (name.startsWith('.trash-')) await fsp.rm(join(spoolsDir, name), { recursive: true, force: true });
        if (!BATCH_SPOOL.test(name) || !(await exists(join(recordsDir, `${name}.json`)))) continue;
        if (await this.removeSpool({ dataset: ds, id: name })) out.spools++;
      }
      let lowest: bigint | null = null;
      for (const p of await this.listPartitions(ds)) {
        const first = (await new PartitionStore(this.root, p).peekManifest()).files[0];
        if (first && (lowest === null || effSeq(first.minSeq) < lowest)) lowest = effSeq(first.minSeq);
      }
      for (const name of await readdirOrEmpty(recordsDir)) {
        if (!name.endsWith('.json')) continue;
        const rec = await readJsonFile<BatchRecord>(join(recordsDir, name), checkBatchRecord, 'batch record');
        if (!rec || (lowest !== null && lowest <= BigInt(rec.maxSeq))) continue;
        if (await exists(join(spoolsDir, name.slice(0, -5)))) continue; // its spool first (next pass)
        await fsp.rm(join(recordsDir, name), { force: true });
        out.records++;
      }
    }
    return out;
  }

  /**
   * After a batch's ingest: remove its spool once the batch is recorded as
   * committed (nothing of it left to flush). Kept until maintenance's sweep,
   * every batch spool cost each later commit of the partition a look (the
   * manifest's spool entries) and each flushAll a visit: an aggregator's
   * cache, one spool per forwarded batch, slowed with every batch between
   * sweeps. Not removed (busy, held, not yet committed, or the removal
   * failed): the sweep removes it later, as before. Whether it went.
   * @ref LLP 0085
   */
  async retireBatch(ref: SpoolRef): Promise<boolean> {
    if (!BATCH_SPOOL.test(ref.id) || !(await exists(this.batchRecordPath(ref)))) return false;
    // A removal that fails loses nothing (the batch is committed and recorded): the sweep tries again.
    return this.removeSpool(ref).catch(() => false);
  }

  /**
   * After an ingest that left nothing of its batch durable (its input refused
   * before the first frame, its read failed): the empty spool its lock made
   * goes, if it is still empty, not held, and nobody holds it. Left, every
   * such spool costs each flushAll a flush, and a client sending refused
   * bodies under new ids would pile them up. Whether it went. @ref LLP 0087
   */
  async abandonBatch(ref: SpoolRef): Promise<boolean> {
    if (!BATCH_SPOOL.test(ref.id)) return false;
    const empty = async (spool: Spool) =>
      (await spool.progress()) === null && (await spool.sealed()).length === 0 && !(await spool.hasCurrent()) && !(await exists(heldPath(spool.dir)));
    return this.batchMutex.run(this.spool(ref).key, () => this.moveSpoolAway(ref, 'try', empty)).catch(() => false);
  }

  /** Remove a committed batch's spool, if nobody holds it and it holds no frame: one rename, then the removal. */
  private removeSpool(ref: SpoolRef): Promise<boolean> {
    // Busy (a retry of the batch): removed by a later pass. The ingest's order: the batch, then the spool.
    return this.batchMutex.run(this.spool(ref).key, () =>
      this.moveSpoolAway(ref, 'try', async (spool) => (await spool.sealed()).length === 0 && !(await spool.hasCurrent())),
    );
  }

  /**
   * Rename a spool out of the way under its lock (`try`: not if it is busy), if
   * `ok` says so there, then remove it. Whether it went.
   */
  private async moveSpoolAway(ref: SpoolRef, how: 'try' | 'wait', ok: (spool: Spool) => Promise<boolean>): Promise<boolean> {
    const spool = this.spool(ref);
    const trash = join(dirname(spool.dir), `.trash-${randomUUID()}`);
    let moved = false;
    const lock = spool.processLock;
    try {
      // Under the spool's mutex as a flush is: the process lock is re-entrant within a process, so a flush here
      // (flushAll, the daemon's) holding it would not keep the spool from moving away under it.
      await this.spoolMutex.run(spool.key, async () => {
        await (how === 'try' ? lock.tryWith.bind(lock) : lock.with.bind(lock))('remove', async () => {
          if (!(await ok(spool))) return;
          await fsp.rename(spool.dir, trash);
          moved = true;
          fault('batch.afterSpoolMovedAway');
        });
      });
    } catch (e) {
      // The lock's own folder went with the rename: releasing it may say it was lost.
      if (!(moved && isHypsinkError(e) && e.code === 'HYPSINK_ERR_LOCKED')) throw e;
    }
    this.spools.delete(`${ref.dataset}\0${ref.id}`);
    if (moved) {
      await fsyncDir(dirname(spool.dir));
      await fsp.rm(trash, { recursive: true, force: true });
    }
    return moved;
  }

  /**
   * Flush every spool with something to flush. A spool held by its ingest in
   * another process is passed by: that ingest flushes it (and if it dies, its
   * lock is free for the next flush).
   */
  async flushAll(): Promise<FlushResult> {
    const all: FlushResult = { segments: 0, partitions: [] };
    for (const ref of await this.listSpools()) {
      const spool = this.spool(ref);
      const idle = !(await spool.hasCurrent()) && (await spool.sealed()).length === 0;
      // Nothing to commit, and no batch whose end may be committed but not yet recorded.
      if (idle && (!BATCH_SPOOL.test(ref.id) || (await exists(this.batchRecordPath(ref))))) continue;
      const r = await this.flushTable(ref, { skipBusy: true });
      all.segments += r.segments;
      all.partitions.push(...r.partitions);
      // A batch this flush completed (one a crash left spooled, committed at open): its spool goes now. @ref LLP 0085
      await this.retireBatch(ref);
    }
    return all;
  }

  /** One retention pass over every partition. */
  async retention(policy: RetentionPolicy): Promise<RetentionResult[]> {
    return this.writer.with('retention', async () => {
      const out: RetentionResult[] = [];
      for (const ref of await this.listPartitions()) {
        const schema = this.schema(ref.dataset);
        const store = new PartitionStore(this.root, ref, this.writer);
        out.push(await this.partitionMutex.run(ref.path, () => retainPartition(store, schema, policy, this.layout)));
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
        const store = new PartitionStore(this.root, ref, this.writer);
        const r = await this.partitionMutex.run(ref.path, () =>
          compactPartition(store, schema, this.layout, this.opts.compactFileRows, minFiles),
        );
        if (r) out.push(r);
      }
      return out;
    });
  }
}

interface CacheFile {
  v: 1;
  id: string;
  /**
   * Set by `hypsink identity --copy`: the id this cache was copied from, and the
   * fork seq (seqs at or below it are the original's to export). @ref LLP 0055
   */
  copiedFrom?: { id: string; forkSeq: string; at: string };
}
const checkCacheFile = (v: unknown) => ((v as CacheFile)?.v === 1 && /^[0-9a-f-]{36}$/.test((v as CacheFile).id) ? null : 'expected {"v":1,"id":"<uuid>"}');

/** A held batch spool's marker: the key its holder named (a claim). @ref LLP 0080 */
interface HeldMarker {
  v: 1;
  key: string;
}

const heldPath = (spoolDir: string) => join(spoolDir, 'held.json');

/** The id in `<root>/cache.json`, written once (create-if-absent: two first openers agree on one). */
async function cacheFile(root: string): Promise<CacheFile> {
  const path = join(root, 'cache.json');
  const found = await readJsonFile<CacheFile>(path, checkCacheFile, 'cache id file');
  return found ?? (await createJsonOnce<CacheFile>(path, { v: 1, id: randomUUID() }, checkCacheFile, 'cache id file'));
}
