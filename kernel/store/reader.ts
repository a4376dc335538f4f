/**
 * The storage service: incremental reads in seq order. Files and row groups
 * whose seq range lies outside `(since, until]` are skipped from manifest
 * statistics without being opened; a read with nothing new opens no data file.
 * @ref LLP 0003: seq-stat pruning
 */
import { setImmediate as yieldToLoop } from 'node:timers/promises';
import { type Data, Field, makeData, RecordBatch, Schema, Struct, Utf8, type Vector } from 'apache-arrow';
import { HypsinkError } from '../../types/errors.js';
import type { ColumnSpec, DatasetSchema, Row } from '../../types/schema.js';
import type {
  BatchWithAfter,
  Continuation,
  PartitionRef,
  PartitionStats,
  ReadCounters,
  ReadRowsOptions,
  ReadSinceOptions,
  RowWithAfter,
  StorageService,
  TableRef,
} from '../../types/storage.js';
import { HASH128_CHARS } from '../flush/hash128.js';
import { isDecimalSeq } from '../io/durable.js';
import { arrowType, buildColumn, ROW_ID_COLUMN, SEQ_COLUMN, toRowValue } from './columns.js';
import { conformWithRowIds } from './legacy-ids.js';
import { effSeq, type FileEntry, manifestHighWater, manifestRows } from './manifest.js';
import { ParquetReader } from './parquet.js';
import { IdPagesAhead, type RowIdPages } from './row-id-pages.js';
import type { PartitionStore, Snapshot } from './partition.js';

export interface ReaderHost {
  store(table: TableRef): PartitionStore;
  schema(dataset: string): DatasetSchema;
  listPartitions(dataset?: string): Promise<PartitionRef[]>;
  partition(dataset: string, source: string): PartitionRef;
}

const NO_SINCE = -1n;
/** Decoded row groups kept for the next read (each up to a row group of all read columns). */
const RECENT_GROUPS = 3;

/** A continuation this reader understands (v1, decimal seq), else an input error: never a guess. */
function seqOf(c: Continuation, what: string): bigint {
  if (c?.v !== 1 || !isDecimalSeq(c.seq)) {
    throw new HypsinkError('HYPSINK_ERR_INPUT', `${what}: ${JSON.stringify(c)} is not a v1 continuation {"v":1,"seq":"<decimal>"}`);
  }
  return BigInt(c.seq);
}

function bounds(opts: ReadSinceOptions | undefined, snap: Snapshot): { lo: bigint; hi: bigint } | null {
  const hw = manifestHighWater(snap.manifest);
  if (hw === null) return null;
  const lo = opts?.since ? seqOf(opts.since, 'since') : NO_SINCE;
  const hi = opts?.until ? seqOf(opts.until, 'until') : BigInt(hw);
  return lo < hi || (lo === NO_SINCE && hi >= 0n) ? { lo, hi } : null;
}

const overlaps = (min: string | null, max: string | null, lo: bigint, hi: bigint) => effSeq(max) > lo && effSeq(min) <= hi;

/** First index in [0, n) whose seq is > x (seqs ascending, null as 0). */
/**
 * A batch's seqs as one typed array: the column's own buffer when it is one
 * chunk with no nulls (always, but in legacy files whose rows share 0), else
 * a copy with a null read as 0. Read per row through the Vector, a 1M-row
 * unit's seqs cost more than hashing them (the digest's bench figure).
 */
export function seqArray(vec: Vector | null, n: number): BigInt64Array {
  const d = vec?.data.length === 1 && vec.nullCount === 0 ? vec.data[0]! : undefined;
  if (d && d.values instanceof BigInt64Array) return d.values.subarray(d.offset, d.offset + n);
  const out = new BigInt64Array(n);
  for (let i = 0; i < n; i++) out[i] = (vec?.get(i) as bigint | null) ?? 0n;
  return out;
}

/**
 * Each seq above the one before (legacy rows may share 0). Compared as 32-bit
 * halves: reading a BigInt64Array element makes a heap BigInt, two per row here.
 */
export function ascending(seqs: BigInt64Array): boolean {
  const lo = new Uint32Array(seqs.buffer, seqs.byteOffset, seqs.length * 2);
  const hi = new Int32Array(seqs.buffer, seqs.byteOffset, seqs.length * 2);
  for (let i = 1; i < seqs.length; i++) {
    const h0 = hi[2 * i - 1]!;
    const h1 = hi[2 * i + 1]!;
    if (h1 !== h0) {
      if (h1 < h0) return false;
      continue;
    }
    const l0 = lo[2 * i - 2]!;
    const l1 = lo[2 * i]!;
    if (l1 < l0 || (l1 === l0 && (l1 !== 0 || h1 !== 0))) return false;
  }
  return true;
}

/** The first index in `seqs` (ascending) whose seq is above `x`. */
function firstAbove(seqs: BigInt64Array, x: bigint): number {
  let a = 0;
  let b = seqs.length;
  while (a < b) {
    const m = (a + b) >> 1;
    if (seqs[m]! > x) b = m;
    else a = m + 1;
  }
  return a;
}

export function upperBound(seqs: Vector | null, n: number, x: bigint): number {
  let a = 0;
  let b = n;
  while (a < b) {
    const m = (a + b) >> 1;
    const v = seqs?.get(m) as bigint | null | undefined;
    if ((v ?? 0n) > x) b = m;
    else a = m + 1;
  }
  return a;
}

const MAX_EXACT = BigInt(Number.MAX_SAFE_INTEGER);

/**
 * The rows `[start, end)` of a row group within bounds `b`, when the manifest
 * says its seqs are contiguous (its rows are maxSeq - minSeq + 1, none a
 * legacy 0): then they are minSeq, minSeq + 1, ... without reading them. The
 * unit's own read checks the group's first and last seq and their order
 * (paired assertions), so a group that holds other seqs fails the unit that
 * ships it. Null otherwise: the seqs are read.
 */
function contiguous(rg: FileEntry['rowGroups'][number], b: { lo: bigint; hi: bigint }): [number, number] | null {
  if (rg.minSeq === null || rg.maxSeq === null || rg.rows <= 0) return null;
  const min = BigInt(rg.minSeq);
  const max = BigInt(rg.maxSeq);
  if (min < 1n || max > MAX_EXACT || max - min + 1n !== BigInt(rg.rows)) return null;
  const at = (x: bigint) => (x < min ? 0 : x - min + 1n >= BigInt(rg.rows) ? rg.rows : Number(x - min + 1n));
  const start = at(b.lo);
  const end = at(b.hi);
  return end > start ? [start, end] : null;
}

const groupRows = (f: FileEntry): number[] => f.rowGroups.map((x) => x.rows);

/** Open a digest's next file ahead, with the read of its first group's ids when they are read from pages. */
function openAhead(pages: IdPagesAhead, path: string, f: FileEntry, b: { lo: bigint; hi: bigint }): void {
  const first = f.rowGroups.findIndex((rg) => overlaps(rg.minSeq, rg.maxSeq, b.lo, b.hi));
  if (first >= 0 && contiguous(f.rowGroups[first]!, b)) pages.open(path, groupRows(f), f.chunks, first);
}

/** Seqs minSeq + start ... minSeq + end - 1 of a contiguous group, written by their 32-bit halves (no BigInt per row). */
export function seqRange(rg: Pick<FileEntry['rowGroups'][number], 'minSeq'>, start: number, end: number): BigInt64Array {
  const out = new BigInt64Array(end - start);
  const halves = new Uint32Array(out.buffer);
  // contiguous() takes only groups whose seqs are below 2^53: exact as numbers.
  const first = Number(rg.minSeq) + start;
  const high = Math.floor(first / 4294967296);
  const low = first - high * 4294967296;
  // The high half changes only where the low one wraps (at most once in a group, in practice never).
  for (let i = 0, lo = low, hi = high; i < out.length; i++, lo++) {
    if (lo === 4294967296) {
      lo = 0;
      hi++;
    }
    halves[2 * i] = lo;
    halves[2 * i + 1] = hi;
  }
  return out;
}

/** Rows [start, end) of a group's ids (22 bytes each) as a Utf8 column. */
function idData(ids: Uint8Array, start: number, end: number): Data<Utf8> {
  const n = end - start;
  const offsets = new Int32Array(n + 1);
  for (let i = 0; i <= n; i++) offsets[i] = i * HASH128_CHARS;
  return makeData({ type: new Utf8(), length: n, nullCount: 0, valueOffsets: offsets, data: ids.subarray(start * HASH128_CHARS, end * HASH128_CHARS) });
}

/** A batch of `n` rows and no column: what a digest's read yields beside the seqs and ids. */
function noColumns(n: number): RecordBatch {
  return new RecordBatch(new Schema([]), makeData({ type: new Struct([]), length: n, nullCount: 0, children: [] }));
}

export class CacheStorage implements StorageService {
  readonly counters: ReadCounters = { filesOpened: 0, rowGroupsRead: 0, bytesRead: 0, rowsRead: 0 };
  /**
   * The last few row groups decoded: the next unit of a sequential export starts
   * in one, and its plan has just decoded the one it ends in.
   */
  private readonly recentGroups = new Map<string, RecordBatch[]>();

  constructor(private readonly host: ReaderHost) {}

  listPartitions(dataset?: string): Promise<PartitionRef[]> {
    return this.host.listPartitions(dataset);
  }

  partition(dataset: string, source: string): PartitionRef {
    return this.host.partition(dataset, source);
  }

  schema(dataset: string): DatasetSchema {
    return this.host.schema(dataset);
  }

  async stats(table: TableRef): Promise<PartitionStats> {
    const snap = await this.host.store(table).snapshot();
    try {
      return {
        rows: manifestRows(snap.manifest),
        files: snap.manifest.files.length,
        highWater: manifestHighWater(snap.manifest),
        prunedThroughSeq: snap.manifest.prunedThroughSeq,
        committedRows: snap.manifest.committedRows ?? manifestRows(snap.manifest),
      };
    } finally {
      await snap.release();
    }
  }

  async *readRows(table: TableRef, columns?: readonly string[], opts?: ReadRowsOptions): AsyncIterable<Row> {
    for await (const { row } of this.readRowsSince(table, { since: opts?.since ?? null, columns })) yield row;
  }

  async *readRowsSince(table: TableRef, opts?: ReadSinceOptions): AsyncIterable<RowWithAfter> {
    const store = this.host.store(table);
    const cols = this.projection(store.ref.dataset, opts?.columns);
    for await (const { batch, seqs } of this.scan(store, opts, cols)) {
      const vectors = cols.map((c) => batch.getChild(c.name));
      for (let i = 0; i < batch.numRows; i++) {
        const row: Row = {};
        for (let c = 0; c < cols.length; c++) row[cols[c]!.name] = toRowValue(cols[c]!.type, vectors[c]?.get(i));
        const seq = (seqs[i] ?? 0n).toString();
        yield { row, after: { v: 1, seq } };
      }
    }
  }

  async *readBatchesSince(table: TableRef, opts?: ReadSinceOptions): AsyncIterable<BatchWithAfter> {
    const store = this.host.store(table);
    const cols = this.projection(store.ref.dataset, opts?.columns);
    for await (const { batch, seqs } of this.scan(store, opts, cols)) {
      const last = seqs[seqs.length - 1] ?? 0n;
      yield { batch, rows: batch.numRows, after: { v: 1, seq: last.toString() } };
    }
  }

  async countRowsSince(table: TableRef, opts?: ReadSinceOptions): Promise<number> {
    const store = this.host.store(table);
    const snap = await store.snapshot();
    try {
      const b = bounds(opts, snap);
      if (!b) return 0;
      let n = 0;
      for (const f of snap.manifest.files) {
        if (!overlaps(f.minSeq, f.maxSeq, b.lo, b.hi)) continue;
        const straddle: number[] = [];
        f.rowGroups.forEach((rg, i) => {
          if (!overlaps(rg.minSeq, rg.maxSeq, b.lo, b.hi)) return;
          if (effSeq(rg.minSeq) > b.lo && effSeq(rg.maxSeq) <= b.hi) n += rg.rows;
          else straddle.push(i);
        });
        if (straddle.length === 0) continue;
        // Only the row groups cut by a bound are opened, and only their seq column.
        const reader = await ParquetReader.open(`${snap.dir}/${f.name}`, this.counters, f);
        try {
          for (const i of straddle) {
            for (const batch of await reader.readRowGroup(i, [SEQ_COLUMN])) {
              const seqs = batch.getChild(SEQ_COLUMN);
              n += upperBound(seqs, batch.numRows, b.hi) - upperBound(seqs, batch.numRows, b.lo);
            }
          }
        } finally {
          reader.close();
        }
      }
      return n;
    } finally {
      await snap.release();
    }
  }

  private projection(dataset: string, columns?: readonly string[]): ColumnSpec[] {
    const schema = this.host.schema(dataset);
    if (!columns) return [...schema.columns];
    return columns.map((name) => {
      const c = schema.columns.find((x) => x.name === name);
      if (!c) throw new HypsinkError('HYPSINK_ERR_INPUT', `dataset "${dataset}" has no column "${name}"`);
      return c;
    });
  }

  /**
   * The core scan: seq-ordered batches of user columns within bounds, with the
   * seq of every row (the exporter counts gaps with them). `reuse` keeps and
   * reuses recently decoded row groups — for the exporter's sequential units.
   */
  async *scan(
    store: PartitionStore,
    opts: ReadSinceOptions | undefined,
    cols: readonly ColumnSpec[],
    reuse = false,
    /** Also hand out each row's id (`_hyp_cache_row_id`), for a unit's digest. @ref LLP 0054 */
    withIds = false,
  ): AsyncIterable<{ batch: RecordBatch; seqs: BigInt64Array; ids?: Data<Utf8> }> {
    const snap = await store.snapshot();
    try {
      const b = bounds(opts, snap);
      if (!b) return;
      let prev = NO_SINCE;
      const files = snap.manifest.files.filter((f) => overlaps(f.minSeq, f.maxSeq, b.lo, b.hi));
      // A digest's read (the ids and seqs, no column) opens its files' id pages one file ahead. @ref LLP 0109
      const pages = withIds && cols.length === 0 ? new IdPagesAhead(this.counters) : null;
      try {
        for (const [i, f] of files.entries()) {
          const next = files[i + 1];
          const ahead = pages && next ? () => openAhead(pages, `${snap.dir}/${next.name}`, next, b) : undefined;
          yield* this.scanFile(`${snap.dir}/${f.name}`, f, b, cols, reuse, withIds, store.ref, pages, ahead, (first, last) => {
            // Paired assertion: rows come out in seq order (legacy rows share 0).
            if (first < prev || (first === prev && first !== 0n)) {
              throw new HypsinkError('HYPSINK_ERR_INVARIANT', `${store.dir}/${f.name}: seq ${first} read after ${prev}`);
            }
            prev = last;
          });
        }
      } finally {
        pages?.close();
      }
    } finally {
      await snap.release();
    }
  }

  private async *scanFile(
    path: string,
    f: FileEntry,
    b: { lo: bigint; hi: bigint },
    cols: readonly ColumnSpec[],
    reuse: boolean,
    withIds: boolean,
    p: PartitionRef,
    /** A digest's read: its id pages, and the next file's opening, started once this file's are read. */
    idPages: IdPagesAhead | null,
    ahead: (() => void) | undefined,
    order: (first: bigint, last: bigint) => void,
  ): AsyncIterable<{ batch: RecordBatch; seqs: BigInt64Array; ids?: Data<Utf8> }> {
    const groups = f.rowGroups.flatMap((rg, i) => (overlaps(rg.minSeq, rg.maxSeq, b.lo, b.hi) ? [i] : []));
    if (groups.length === 0) return;
    // Only the columns asked for and the seq (and the row id for a digest); batch ids are never decoded here.
    const wanted = [...cols.map((c) => c.name), SEQ_COLUMN, ...(withIds ? [ROW_ID_COLUMN] : [])];
    const file = new LazyFile(path, f, this.counters);
    // A digest's read (the ids and seqs, no column): the ids from their pages, where they read so. @ref LLP 0098
    let pages: Promise<RowIdPages | null> | undefined;
    try {
      for (let i = 0; i < groups.length; i++) {
        const g = groups[i]!;
        const rg = f.rowGroups[g]!;
        const seqs = idPages ? contiguous(rg, b) : null;
        if (idPages && seqs) {
          if (!pages) {
            pages = idPages.take(path, groupRows(f), f.chunks);
            ahead?.();
          }
          const next = groups[i + 1];
          const ids = await (await pages)?.ids(g, next !== undefined && contiguous(f.rowGroups[next]!, b) ? next : undefined);
          if (ids) {
            this.counters.rowGroupsRead += 1;
            const [start, end] = seqs;
            const range = seqRange(rg, start, end);
            order(range[0]!, range[range.length - 1]!);
            this.counters.rowsRead += range.length;
            yield { batch: noColumns(range.length), seqs: range, ids: idData(ids, start, end) };
            await yieldToLoop();
            continue;
          }
        }
        for (let raw of await this.readGroup(file, g, wanted, reuse)) {
          // A legacy file has no row ids: they are derived from the whole row, as compaction derives them.
          if (withIds && raw.getChild(ROW_ID_COLUMN) === null) raw = await this.legacyIds(file, g, p, raw);
          const all = seqArray(raw.getChild(SEQ_COLUMN), raw.numRows);
          const start = firstAbove(all, b.lo);
          const end = firstAbove(all, b.hi);
          if (end <= start) continue;
          const seqs = all.subarray(start, end);
          if (!ascending(seqs)) throw new HypsinkError('HYPSINK_ERR_INVARIANT', `${path}: seqs out of order in row group ${g}`);
          order(seqs[0]!, seqs[seqs.length - 1]!);
          this.counters.rowsRead += seqs.length;
          const slice = raw.slice(start, end);
          const ids = withIds ? (slice.getChild(ROW_ID_COLUMN)?.data[0] as Data<Utf8> | undefined) : undefined;
          yield { batch: project(slice, cols), seqs, ...(ids ? { ids } : {}) };
        }
      }
    } finally {
      file.close();
      if (pages) (await pages)?.close();
    }
  }

  /** A legacy row group read whole, its row ids derived from each row's values (compaction's rule). */
  private async legacyIds(file: LazyFile, g: number, p: PartitionRef, raw: RecordBatch): Promise<RecordBatch> {
    const whole = await (await file.open()).readRowGroup(g);
    const rows = whole.reduce((n, x) => n + x.numRows, 0);
    if (rows !== raw.numRows || whole.length !== 1) throw new HypsinkError('HYPSINK_ERR_CORRUPT', `${file.path}: row group ${g} reads as ${rows} rows whole, ${raw.numRows} by column`);
    return conformWithRowIds(p, whole[0]!, this.host.schema(p.dataset).columns);
  }

  /**
   * Decode one row group (these columns). With `reuse`, the last few decoded are
   * kept and reused: units smaller than a row group, and the planner before
   * them, decode it once, not once per unit. Safe: data files never change.
   */
  async readGroup(file: LazyFile, g: number, columns: readonly string[], reuse: boolean): Promise<RecordBatch[]> {
    const key = `${file.path}#${g}#${columns.join(',')}`;
    const hit = reuse ? this.recentGroups.get(key) : undefined;
    if (hit) {
      this.recentGroups.delete(key);
      this.recentGroups.set(key, hit);
      return hit;
    }
    this.counters.rowGroupsRead += 1;
    const batches = await (await file.open()).readRowGroup(g, columns);
    // A turn of the event loop per decoded row group: what the caller does with it (encode,
    // hash, transform) runs on this thread in microtasks, and without a turn between row
    // groups a whole unit's reads and encoding ran as one stretch that no timer or socket
    // (a scrape, a status request) could get between. @ref LLP 0068
    await yieldToLoop();
    if (reuse) {
      this.recentGroups.set(key, batches);
      if (this.recentGroups.size > RECENT_GROUPS) this.recentGroups.delete(this.recentGroups.keys().next().value!);
    }
    return batches;
  }
}

/** Strip internal columns and fit the file's columns to the current schema (missing → null). */
export function project(batch: RecordBatch, cols: readonly ColumnSpec[]): RecordBatch {
  const fields: Field[] = [];
  const children: Data[] = [];
  for (const c of cols) {
    const type = arrowType(c.type);
    const child = batch.getChild(c.name);
    fields.push(new Field(c.name, type, true));
    if (!child) {
      // A nullable column added to the schema after this file was written reads as null.
      children.push(buildColumn(c.type, new Array(batch.numRows).fill(null)));
    } else if (String(child.type) !== String(type)) {
      throw new HypsinkError(
        'HYPSINK_ERR_CONFIG',
        `column "${c.name}" is ${child.type} in the cache but ${c.type} in the schema; only adding nullable columns is allowed`,
        { hint: `Give column "${c.name}" its type back in the dataset's schema; for another type, add a new nullable column.` },
      );
    } else {
      children.push(child.data[0]!);
    }
  }
  const schema = new Schema(fields);
  const data = makeData({ type: new Struct(fields), length: batch.numRows, nullCount: 0, children });
  return new RecordBatch(schema, data);
}

/** A data file opened on first need, once, and closed by its user. */
export class LazyFile {
  private reader: ParquetReader | undefined;

  constructor(
    readonly path: string,
    private readonly entry: FileEntry,
    private readonly counters: ReadCounters,
  ) {}

  async open(): Promise<ParquetReader> {
    this.reader ??= await ParquetReader.open(this.path, this.counters, this.entry);
    return this.reader;
  }

  close(): void {
    this.reader?.close();
    this.reader = undefined;
  }
}
