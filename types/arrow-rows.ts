/**
 * Rows of an Arrow batch, for a plugin or transform that keeps some of them:
 * a row's validity, a Utf8 column's cells where they lie, the rows at given
 * indexes gathered into a new batch, and the rows of one key (a day, a time
 * bucket) as one batch. Covers every Arrow type a cache column reads as
 * (Int64, Float64, Bool, Utf8, Timestamp).
 * @ref LLP 0046: Arrow buffers for transforms
 * @ref LLP 0108: an Iceberg day's rows gathered into one batch
 */
import { type Data, DataType, makeData, RecordBatch, type Schema, Struct, type Utf8 } from 'apache-arrow';

/** Whether row `i` of `d` holds a value. */
export function isValid(d: Data, i: number): boolean {
  if (d.nullCount === 0 || !d.nullBitmap || d.nullBitmap.length === 0) return true;
  const bit = d.offset + i;
  return (d.nullBitmap[bit >> 3]! & (1 << (bit & 7))) !== 0;
}

/** A Utf8 column's cells where they lie: cell i is `bytes[offsets[i], offsets[i + 1])`. */
export interface Utf8Cells {
  /** Already sliced by Arrow: entry i is row i's start. */
  readonly offsets: Int32Array;
  /** The value bytes, not sliced. */
  readonly bytes: Uint8Array;
  readonly length: number;
}

export function utf8Cells(d: Data): Utf8Cells {
  return { offsets: d.valueOffsets as Int32Array, bytes: (d.values as Uint8Array | undefined) ?? new Uint8Array(0), length: d.length };
}

/** The rows `keep` (ascending indexes) of `d`, as a new Data starting at row 0. */
export function takeRows(d: Data, keep: Int32Array): Data {
  const n = keep.length;
  const type = d.type as DataType;
  let bitmap: Uint8Array | undefined;
  let nullCount = 0;
  if (d.nullCount !== 0) {
    bitmap = new Uint8Array(Math.ceil(n / 8));
    for (let k = 0; k < n; k++) {
      if (isValid(d, keep[k]!)) bitmap[k >> 3]! |= 1 << (k & 7);
      else nullCount++;
    }
    if (nullCount === 0) bitmap = undefined;
  }
  if (DataType.isUtf8(type)) {
    const { offsets, bytes } = utf8Cells(d);
    let total = 0;
    for (let k = 0; k < n; k++) total += offsets[keep[k]! + 1]! - offsets[keep[k]!]!;
    const out = new Uint8Array(total);
    const outOffsets = new Int32Array(n + 1);
    let pos = 0;
    for (let k = 0; k < n; k++) {
      const r = keep[k]!;
      out.set(bytes.subarray(offsets[r]!, offsets[r + 1]!), pos);
      pos += offsets[r + 1]! - offsets[r]!;
      outOffsets[k + 1] = pos;
    }
    return makeData({ type: type as Utf8, length: n, nullCount, nullBitmap: bitmap, valueOffsets: outOffsets, data: out });
  }
  if (DataType.isBool(type)) {
    const values = d.values as Uint8Array;
    const out = new Uint8Array(Math.ceil(n / 8));
    for (let k = 0; k < n; k++) {
      const bit = d.offset + keep[k]!;
      if ((values[bit >> 3]! & (1 << (bit & 7))) !== 0) out[k >> 3]! |= 1 << (k & 7);
    }
    return makeData({ type, length: n, nullCount, nullBitmap: bitmap, data: out } as never);
  }
  if (DataType.isInt(type) || DataType.isFloat(type) || DataType.isTimestamp(type)) {
    // Fixed width: Arrow has sliced the values already (row i at i · stride).
    const values = d.values as BigInt64Array | Float64Array | Int32Array;
    const stride = d.stride;
    const Ctor = values.constructor as { new (n: number): typeof values };
    const out = new Ctor(n * stride);
    for (let k = 0; k < n; k++) for (let s = 0; s < stride; s++) out[k * stride + s] = values[keep[k]! * stride + s]!;
    return makeData({ type, length: n, nullCount, nullBitmap: bitmap, data: out } as never);
  }
  throw new Error(`cannot keep rows of an Arrow ${String(type)} column`);
}

/** A batch of `schema` from its columns' Data, all of `length` rows. */
export function batchOf(schema: Schema, children: readonly Data[], length: number): RecordBatch {
  return new RecordBatch(schema, makeData({ type: new Struct(schema.fields), length, nullCount: 0, children: children as Data[] }));
}

/** The rows `keep` (ascending indexes) of `b`, every column, as one new batch of the same schema. */
export function takeBatch(b: RecordBatch, keep: Int32Array): RecordBatch {
  return batchOf(b.schema, b.data.children.map((c) => takeRows(c, keep)), keep.length);
}

/**
 * The rows of `b` whose key is `want` (`keys[i]` is row i's: its day, its
 * time bucket), as one batch: `b` itself when every row's is, a slice (no
 * copy) when they are one run, else gathered (a copy); null when none is.
 * One batch per batch, however the keys interleave: a writer that split a
 * unit by day yielded a slice per run, and rows out of time order across
 * midnight made runs of a row or two, each a batch to encode. @ref LLP 0108
 */
export function rowsWithKey<K>(b: RecordBatch, keys: ArrayLike<K>, want: K): RecordBatch | null {
  let count = 0;
  let first = -1;
  let last = -1;
  for (let i = 0; i < keys.length; i++) {
    if (keys[i] !== want) continue;
    count++;
    if (first < 0) first = i;
    last = i;
  }
  if (count === 0) return null;
  if (count === keys.length) return b;
  if (last - first + 1 === count) return b.slice(first, last + 1);
  const keep = new Int32Array(count);
  let k = 0;
  for (let i = first; i <= last; i++) if (keys[i] === want) keep[k++] = i;
  return takeBatch(b, keep);
}
