/**
 * The one write chokepoint: every row that enters a partition passes here and
 * leaves with its internal columns stamped — `_hyp_ingest_seq` (from the
 * allocator, inside the partition's commit section), `_hyp_cache_row_id` (a
 * content hash: identical rows of one partition share it, which is what
 * compaction dedupes on) and `_hyp_cache_batch_id` (the spool segment it came from).
 * @ref LLP 0001: commit order = seq order
 */
import { type Data, Int64, makeData, makeVector, Table, Utf8, type Vector } from 'apache-arrow';
import type { ColumnSpec } from '../../types/schema.js';
import type { PartitionRef } from '../../types/storage.js';
import { HASH128_CHARS, hash128, hash128Into } from './hash128.js';
import { BATCH_ID_COLUMN, buildColumn, buildUtf8, ROW_ID_COLUMN, SEQ_COLUMN } from './columns.js';

/**
 * The content a row id hashes: its normalized values (from index `from`, `count`
 * of them) joined by U+001F, null as U+0000. A string holding either control
 * character is written as U+0000 + its JSON, which no plain value can equal.
 * (JSON.stringify of the whole row cost twice as much: it re-escapes JSON columns.)
 */
function rowContent(values: readonly unknown[], from: number, count: number): string {
  let out = '';
  for (let i = from; i < from + count; i++) {
    const v = values[i];
    if (v === null || v === undefined) out += '\u0000';
    else if (typeof v === 'string') out += v.includes('\u001f') || v.includes('\u0000') ? `\u0000${JSON.stringify(v)}` : v;
    else out += String(v);
    out += '\u001f';
  }
  return out;
}

export function rowId(partition: PartitionRef, values: readonly unknown[]): string {
  return hash128(`${partition.key}\u0000${rowContent(values, 0, values.length)}`);
}

/** The row-id column of `rows` (values from index `from`), hashed straight into its Arrow buffer. */
function rowIds(partition: PartitionRef, rows: readonly (readonly unknown[])[], from: number, count: number): Data<Utf8> {
  const n = rows.length;
  const data = new Uint8Array(n * HASH128_CHARS);
  const valueOffsets = new Int32Array(n + 1);
  const prefix = `${partition.key}\u0000`;
  for (let i = 0; i < n; i++) {
    hash128Into(prefix + rowContent(rows[i]!, from, count), data, i * HASH128_CHARS);
    valueOffsets[i + 1] = (i + 1) * HASH128_CHARS;
  }
  return makeData({ type: new Utf8(), length: n, nullCount: 0, valueOffsets, data });
}

/**
 * A commit's rows as Arrow columns, before seqs are known: user columns and row
 * ids. The costly part of a commit, and independent of the allocator, so a flush
 * can build it off the commit section (and off the main thread).
 */
export interface PreparedRows {
  readonly rows: number;
  readonly columns: readonly Data[];
  readonly rowIds: Data<Utf8>;
}

/** Prepare `rows`, whose values in schema column order start at index `from` of each row. */
export function prepareRows(
  partition: PartitionRef,
  columns: readonly ColumnSpec[],
  rows: readonly (readonly unknown[])[],
  from = 0,
): PreparedRows {
  return {
    rows: rows.length,
    columns: columns.map((c, ci) => buildColumn(c.type, rows.map((r) => r[from + ci]))),
    rowIds: rowIds(partition, rows, from, columns.length),
  };
}

/** Stamp prepared rows with seqs first..first+n-1 and their batch id: the Arrow table of a commit. */
export function stamp(columns: readonly ColumnSpec[], prepared: PreparedRows, firstSeq: bigint, batchId: string): Table {
  const n = prepared.rows;
  const vectors: Record<string, Vector> = {};
  columns.forEach((c, ci) => {
    vectors[c.name] = makeVector(prepared.columns[ci]!);
  });
  const seqs = new BigInt64Array(n);
  for (let i = 0; i < n; i++) seqs[i] = firstSeq + BigInt(i);
  vectors[SEQ_COLUMN] = makeVector(makeData({ type: new Int64(), length: n, nullCount: 0, data: seqs } as never));
  vectors[ROW_ID_COLUMN] = makeVector(prepared.rowIds);
  vectors[BATCH_ID_COLUMN] = makeVector(buildUtf8(new Array(n).fill(batchId)));
  return new Table(vectors);
}
