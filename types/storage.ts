/**
 * The storage contract: how sinks read the kernel cache incrementally.
 * Declared here, implemented by the kernel. @ref LLP 0003 (seq-stat pruning)
 */
import type { RecordBatch } from 'apache-arrow';
import type { DatasetSchema, Row } from './schema.js';

/**
 * Opaque, versioned position in a partition's seq order. Persist it once the rows
 * before it are durably shipped; pass it back as `since` to read only what came after.
 * `seq` is a decimal int64. `"0"` means "legacy rows (written before seqs existed) consumed".
 */
export interface Continuation {
  readonly v: 1;
  readonly seq: string;
}

/** A logical partition: `datasets/<dataset>/source=<source>/`. Stable across compaction. */
export interface PartitionRef {
  readonly dataset: string;
  readonly source: string;
  /** Path relative to the cache root, built from safe encoded segments. */
  readonly path: string;
  /** Watermark key: a safe, collision-free file name for this partition. */
  readonly key: string;
}

/** A partition given by reference or by its relative path. */
export type TableRef = PartitionRef | string;

export interface ReadSinceOptions {
  /** Exclusive lower bound; absent reads from the start, legacy rows included. */
  readonly since?: Continuation | null;
  /** Inclusive upper bound; absent means the partition's high water at the time of the call. */
  readonly until?: Continuation | null;
  /** Columns to return (user columns only); default all. */
  readonly columns?: readonly string[];
}

export interface ReadRowsOptions {
  readonly since?: Continuation | null;
}

/** One row and the continuation to persist once it (and every row before it) is shipped. */
export interface RowWithAfter {
  readonly row: Row;
  readonly after: Continuation;
}

/** An Arrow batch of user columns, rows in seq order, and the continuation after its last row. */
export interface BatchWithAfter {
  readonly batch: RecordBatch;
  readonly rows: number;
  readonly after: Continuation;
}

/** What a read cost: tests and benchmarks assert pruning with these. */
export interface ReadCounters {
  filesOpened: number;
  rowGroupsRead: number;
  bytesRead: number;
  rowsRead: number;
}

/** Facts about a partition that a sink or `status` needs, from manifest statistics. */
export interface PartitionStats {
  readonly rows: number;
  readonly files: number;
  /** Highest seq committed, or null for an empty partition. */
  readonly highWater: string | null;
  /** Highest seq removed by retention, or null if nothing was pruned. */
  readonly prunedThroughSeq: string | null;
  /** Rows ever committed to the partition, pruned ones included. */
  readonly committedRows: number;
}

export interface StorageService {
  /** Every logical partition of a dataset (or of all datasets). */
  listPartitions(dataset?: string): Promise<PartitionRef[]>;
  /** The partition for a dataset and source value (it need not exist yet). */
  partition(dataset: string, source: string): PartitionRef;
  /** The dataset's current schema. */
  schema(dataset: string): DatasetSchema;
  /** All rows (or rows after `opts.since`), internal columns stripped. Unchanged without opts. */
  readRows(table: TableRef, columns?: readonly string[], opts?: ReadRowsOptions): AsyncIterable<Row>;
  /** Rows in seq order in `(since, until]`, each with its continuation. */
  readRowsSince(table: TableRef, opts?: ReadSinceOptions): AsyncIterable<RowWithAfter>;
  /** The same rows as Arrow batches, for throughput. */
  readBatchesSince(table: TableRef, opts?: ReadSinceOptions): AsyncIterable<BatchWithAfter>;
  /** Rows in `(since, until]` counted from statistics, opening at most the files that straddle `since`. */
  countRowsSince(table: TableRef, opts?: ReadSinceOptions): Promise<number>;
  stats(table: TableRef): Promise<PartitionStats>;
  /** Cumulative cost of reads made through this service. */
  readonly counters: Readonly<ReadCounters>;
}

/** Compare two decimal seq strings. */
export function compareSeq(a: string, b: string): number {
  const x = BigInt(a);
  const y = BigInt(b);
  return x < y ? -1 : x > y ? 1 : 0;
}

export function continuation(seq: string | bigint | number): Continuation {
  return { v: 1, seq: String(seq) };
}
