/**
 * Arrow buffers for transforms: reading Utf8 cells where they lie, building
 * new columns with makeData from offsets and bytes, keeping some rows. A
 * column a transform does not change is passed on as the same Data
 * (zero-copy); a changed Utf8 column copies its unchanged cells in runs.
 * Reading cells and keeping rows are the SDK's (types/arrow-rows.ts), which
 * plugins share.
 * @ref LLP 0046
 */
import { type Data, Field, makeData, type RecordBatch, Schema, Utf8 } from 'apache-arrow';
import { isValid, takeBatch, utf8Cells } from '../../types/arrow-rows.js';
import type { ColumnSpec } from '../../types/schema.js';
import { arrowType } from '../store/columns.js';

/** The Arrow schema of a transform's output: one nullable field per column, as `userSchema`. */
export function schemaOf(columns: readonly ColumnSpec[]): Schema {
  return new Schema(columns.map((c) => new Field(c.name, arrowType(c.type), true)));
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

/** The batch without the rows `refused` (ascending), or `batch` itself when none is. */
export function withoutRows(batch: RecordBatch, refused: readonly number[]): RecordBatch {
  if (refused.length === 0) return batch;
  return takeBatch(batch, keptRows(batch.numRows, refused));
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
