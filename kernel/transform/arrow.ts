/**
 * Arrow buffers for transforms: reading Utf8 cells where they lie, building
 * new columns with makeData from offsets and bytes, keeping some rows. A
 * column a transform does not change is passed on as the same Data
 * (zero-copy); a changed Utf8 column copies its unchanged cells in runs.
 * @ref LLP 0046
 */
import {
  type Data,
  DataType,
  Field,
  makeData,
  RecordBatch,
  Schema,
  Struct,
  Utf8,
} from 'apache-arrow';
import type { ColumnSpec } from '../../types/schema.js';
import { arrowType } from '../store/columns.js';

/** The Arrow schema of a transform's output: one nullable field per column, as `userSchema`. */
export function schemaOf(columns: readonly ColumnSpec[]): Schema {
  return new Schema(columns.map((c) => new Field(c.name, arrowType(c.type), true)));
}

/** A batch of `schema` from its columns' Data, all of `length` rows. */
export function batchOf(schema: Schema, children: readonly Data[], length: number): RecordBatch {
  const data = makeData({ type: new Struct(schema.fields), length, nullCount: 0, children: children as Data[] });
  return new RecordBatch(schema, data);
}

/** Whether row `i` of `d` holds a value. */
export function isValid(d: Data, i: number): boolean {
  if (d.nullCount === 0 || !d.nullBitmap || d.nullBitmap.length === 0) return true;
  const bit = d.offset + i;
  return (d.nullBitmap[bit >> 3]! & (1 << (bit & 7))) !== 0;
}

/** The validity of `d` as a bitmap starting at row 0 (a view when it is byte-aligned), or none without nulls. */
export function validityAt0(d: Data): { bitmap: Uint8Array | undefined; nullCount: number } {
  const nullCount = d.nullCount;
  if (nullCount === 0 || !d.nullBitmap || d.nullBitmap.length === 0) return { bitmap: undefined, nullCount: 0 };
  const bytes = Math.ceil(d.length / 8);
  if ((d.offset & 7) === 0) return { bitmap: d.nullBitmap.subarray(d.offset >> 3, (d.offset >> 3) + bytes), nullCount };
  const out = new Uint8Array(bytes);
  for (let i = 0; i < d.length; i++) if (isValid(d, i)) out[i >> 3]! |= 1 << (i & 7);
  return { bitmap: out, nullCount };
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

/**
 * A Utf8 column: the cells of `input`, but those in `replaced` (row → new
 * UTF-8 bytes). The unchanged cells are copied in runs; nulls stay null.
 * `input` itself when nothing is replaced.
 */
export function replaceCells(input: Data, replaced: ReadonlyMap<number, Uint8Array>): Data {
  if (replaced.size === 0) return input;
  const { offsets, bytes, length } = utf8Cells(input);
  let total = offsets[length]! - offsets[0]!;
  for (const [row, b] of replaced) total += b.length - (offsets[row + 1]! - offsets[row]!);
  const out = new Uint8Array(total);
  const outOffsets = new Int32Array(length + 1);
  const rows = [...replaced.keys()].sort((a, b) => a - b);
  let pos = 0;
  let from = 0; // first row of the run not yet copied
  const copyRun = (to: number) => {
    // rows [from, to) unchanged: one copy, offsets shifted
    if (to <= from) return;
    const start = offsets[from]!;
    out.set(bytes.subarray(start, offsets[to]!), pos);
    const shift = pos - start;
    for (let i = from; i < to; i++) outOffsets[i + 1] = offsets[i + 1]! + shift;
    pos += offsets[to]! - start;
  };
  for (const row of rows) {
    copyRun(row);
    const b = replaced.get(row)!;
    out.set(b, pos);
    pos += b.length;
    outOffsets[row + 1] = pos;
    from = row + 1;
  }
  copyRun(length);
  const { bitmap, nullCount } = validityAt0(input);
  return makeData({ type: new Utf8(), length, nullCount, nullBitmap: bitmap, valueOffsets: outOffsets, data: out });
}

/** A Utf8 column from the UTF-8 bytes of each row (null where `cells[i]` is null). */
export function utf8From(cells: readonly (Uint8Array | null)[]): Data<Utf8> {
  const length = cells.length;
  let total = 0;
  let nulls = 0;
  for (const c of cells) {
    if (c === null) nulls++;
    else total += c.length;
  }
  const out = new Uint8Array(total);
  const offsets = new Int32Array(length + 1);
  const bitmap = nulls > 0 ? new Uint8Array(Math.ceil(length / 8)) : undefined;
  let pos = 0;
  for (let i = 0; i < length; i++) {
    const c = cells[i]!;
    if (c !== null) {
      out.set(c, pos);
      pos += c.length;
      if (bitmap) bitmap[i >> 3]! |= 1 << (i & 7);
    }
    offsets[i + 1] = pos;
  }
  return makeData({ type: new Utf8(), length, nullCount: nulls, nullBitmap: bitmap, valueOffsets: offsets, data: out });
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

/** The batch without the rows `refused` (ascending), or `batch` itself when none is. */
export function withoutRows(batch: RecordBatch, refused: readonly number[]): RecordBatch {
  if (refused.length === 0) return batch;
  const keep = keptRows(batch.numRows, refused);
  const children = batch.data.children.map((c) => takeRows(c, keep));
  return batchOf(batch.schema, children, keep.length);
}

/** The indexes of `[0, rows)` not in `refused` (ascending). */
export function keptRows(rows: number, refused: readonly number[]): Int32Array {
  const keep = new Int32Array(rows - refused.length);
  let k = 0;
  let r = 0;
  for (let i = 0; i < rows; i++) {
    if (r < refused.length && refused[r] === i) {
      r++;
      continue;
    }
    keep[k++] = i;
  }
  return keep;
}
