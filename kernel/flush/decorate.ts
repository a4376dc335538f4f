/**
 * The one write chokepoint: every row that enters a partition passes here and
 * leaves with its internal columns stamped — `_hyp_ingest_seq` (from the
 * allocator, inside the partition's commit section), `_hyp_cache_row_id` (a
 * content hash: identical rows of one partition share it, which is what
 * compaction dedupes on) and `_hyp_cache_batch_id` (the spool segment it came from).
 * @ref LLP 0001: commit order = seq order
 * @ref LLP 0015: row ids over column bytes
 */
import { type Data, Int64, makeData, makeVector, Table, Utf8, type Vector } from 'apache-arrow';
import type { ColumnSpec } from '../../types/schema.js';
import type { PartitionRef } from '../../types/storage.js';
import { BATCH_ID_COLUMN, buildColumn, buildUtf8, ROW_ID_COLUMN, SEQ_COLUMN } from '../store/columns.js';
import { HASH128_CHARS, hash128Into } from './hash128.js';

/** How one column's cells are read as bytes. */
interface CellReader {
  readonly kind: 'bytes' | 'fixed8' | 'bit';
  readonly offset: number;
  readonly nulls: Uint8Array | null;
  readonly values: Uint8Array;
  readonly valueOffsets: Int32Array | null;
}

function cellReader(type: ColumnSpec['type'], data: Data): CellReader {
  const v = data.values as ArrayBufferView;
  const values = new Uint8Array(v.buffer, v.byteOffset, v.byteLength);
  const nulls = data.nullCount > 0 ? data.nullBitmap ?? null : null;
  const kind = type === 'STRING' || type === 'JSON' ? 'bytes' : type === 'BOOLEAN' ? 'bit' : 'fixed8';
  return { kind, offset: data.offset, nulls, values, valueOffsets: kind === 'bytes' ? (data.valueOffsets as Int32Array) : null };
}

/**
 * The row-id column of one batch: per row, a 128-bit hash of the partition key
 * and each column's cell as bytes, read straight from the Arrow buffers: a null
 * is 0x00; a value is 0x01 then its bytes: a string's UTF-8 after its length
 * (u32 LE), an INT64, TIMESTAMP or DOUBLE as its 8 bytes (LE), a BOOLEAN as one
 * byte. Lengths are explicit, so two distinct rows never share content.
 * @ref LLP 0015: row ids over column bytes
 */
function rowIds(partition: PartitionRef, types: readonly ColumnSpec['type'][], columns: readonly Data[], n: number): Data<Utf8> {
  const readers = columns.map((d, ci) => cellReader(types[ci]!, d));
  const prefix = Buffer.from(`${partition.key}\u0000`, 'utf8');
  // One row's content is written here, after the prefix, which stays; sized for the longest row.
  let longest = 0;
  for (const r of readers) {
    let cell = 9;
    const o = r.valueOffsets;
    if (o) for (let i = 0; i < n; i++) cell = Math.max(cell, 5 + o[i + 1]! - o[i]!);
    longest += cell;
  }
  const buf = new Uint8Array(prefix.length + longest + 16);
  const words = new Int32Array(buf.buffer, 0, buf.length >> 2);
  buf.set(prefix, 0);
  const data = new Uint8Array(n * HASH128_CHARS);
  const valueOffsets = new Int32Array(n + 1);
  for (let i = 0; i < n; i++) {
    let pos = prefix.length;
    for (const r of readers) {
      // Arrow slices offsets and fixed-width values, but not bitmaps: those go by `offset` bits.
      const bit = r.offset + i;
      if (r.nulls !== null && (r.nulls[bit >> 3]! & (1 << (bit & 7))) === 0) {
        buf[pos++] = 0;
        continue;
      }
      buf[pos++] = 1;
      const src = r.values;
      if (r.valueOffsets !== null) {
        const start = r.valueOffsets[i]!;
        const len = r.valueOffsets[i + 1]! - start;
        buf[pos] = len & 0xff;
        buf[pos + 1] = (len >>> 8) & 0xff;
        buf[pos + 2] = (len >>> 16) & 0xff;
        buf[pos + 3] = len >>> 24;
        pos += 4;
        // Byte by byte: Buffer#copy costs ≈ 0.2 µs a call, more than a row's strings take this way.
        for (let j = 0; j < len; j++) buf[pos + j] = src[start + j]!;
        pos += len;
      } else if (r.kind === 'fixed8') {
        const start = i * 8;
        for (let j = 0; j < 8; j++) buf[pos + j] = src[start + j]!;
        pos += 8;
      } else {
        buf[pos++] = (src[bit >> 3]! >> (bit & 7)) & 1;
      }
    }
    hash128Into(buf, pos, data, i * HASH128_CHARS, 0, words);
    valueOffsets[i + 1] = (i + 1) * HASH128_CHARS;
  }
  return makeData({ type: new Utf8(), length: n, nullCount: 0, valueOffsets, data });
}

/** One batch of a commit's rows: its user columns and their row ids. */
export interface PreparedBatch {
  readonly rows: number;
  readonly columns: readonly Data[];
  readonly rowIds: Data<Utf8>;
}

/**
 * A commit's rows as Arrow columns, before seqs are known: user columns and row
 * ids, in batches. The costly part of a commit, and independent of the
 * allocator, so a flush can build it off the commit section (and off the main
 * thread).
 */
export interface PreparedRows {
  readonly rows: number;
  readonly batches: readonly PreparedBatch[];
}

/** Prepare batches of user columns (in schema column order, each batch's columns of one length). */
export function prepareBatches(partition: PartitionRef, columns: readonly ColumnSpec[], batches: readonly (readonly Data[])[]): PreparedRows {
  const types = columns.map((c) => c.type);
  let rows = 0;
  const out = batches.map((cols) => {
    const n = cols[0]?.length ?? 0;
    rows += n;
    return { rows: n, columns: cols, rowIds: rowIds(partition, types, cols, n) };
  });
  return { rows, batches: out };
}

/** Prepare `rows`, whose values in schema column order start at index `from` of each row. */
export function prepareRows(
  partition: PartitionRef,
  columns: readonly ColumnSpec[],
  rows: readonly (readonly unknown[])[],
  from = 0,
): PreparedRows {
  return prepareBatches(partition, columns, [columns.map((c, ci) => buildColumn(c.type, rows.map((r) => r[from + ci])))]);
}

/** The row id of one row of normalized values (normalize.ts forms) in `columns` order. */
export function rowId(partition: PartitionRef, columns: readonly ColumnSpec[], values: readonly unknown[]): string {
  const ids = prepareRows(partition, columns, [values]).batches[0]!.rowIds;
  return Buffer.from(ids.values.subarray(0, HASH128_CHARS)).toString('latin1');
}

/** Stamp prepared rows with seqs first..first+n-1 and their batch id: the Arrow table of a commit. */
export function stamp(columns: readonly ColumnSpec[], prepared: PreparedRows, firstSeq: bigint, batchId: string): Table {
  const n = prepared.rows;
  const vectors: Record<string, Vector> = {};
  columns.forEach((c, ci) => {
    vectors[c.name] = makeVector(prepared.batches.map((b) => b.columns[ci]!));
  });
  const seqs = new BigInt64Array(n);
  for (let i = 0; i < n; i++) seqs[i] = firstSeq + BigInt(i);
  vectors[SEQ_COLUMN] = makeVector(makeData({ type: new Int64(), length: n, nullCount: 0, data: seqs } as never));
  vectors[ROW_ID_COLUMN] = makeVector(prepared.batches.map((b) => b.rowIds));
  vectors[BATCH_ID_COLUMN] = makeVector(buildUtf8(new Array(n).fill(batchId)));
  return new Table(vectors);
}
