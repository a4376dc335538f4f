/**
 * Row form ⇄ Arrow columns for the dataset column types. Columns are built
 * straight from typed arrays and offset buffers (makeData): vectorFromArray is
 * several times slower for strings (DESIGN §11).
 */
import {
  Bool,
  type Data,
  Field,
  Float64,
  Int64,
  makeData,
  Schema,
  type DataType,
  TimestampMillisecond,
  Utf8,
} from 'apache-arrow';
import type { ColumnSpec, ColumnType } from '../../types/schema.js';

export const SEQ_COLUMN = '_hyp_ingest_seq';
export const ROW_ID_COLUMN = '_hyp_cache_row_id';
export const BATCH_ID_COLUMN = '_hyp_cache_batch_id';

export function arrowType(type: ColumnType): DataType {
  switch (type) {
    case 'INT64':
      return new Int64();
    case 'DOUBLE':
      return new Float64();
    case 'BOOLEAN':
      return new Bool();
    case 'TIMESTAMP':
      return new TimestampMillisecond();
    case 'STRING':
    case 'JSON':
      return new Utf8();
  }
}

/** The schema of a cache data file: user columns, then the internal ones. */
export function cacheSchema(columns: readonly ColumnSpec[]): Schema {
  return new Schema([
    ...columns.map((c) => new Field(c.name, arrowType(c.type), true)),
    new Field(SEQ_COLUMN, new Int64(), true),
    new Field(ROW_ID_COLUMN, new Utf8(), false),
    new Field(BATCH_ID_COLUMN, new Utf8(), false),
  ]);
}

/** The schema of what readers and exports see: user columns only. */
export function userSchema(columns: readonly ColumnSpec[]): Schema {
  return new Schema(columns.map((c) => new Field(c.name, arrowType(c.type), true)));
}

function validity(values: readonly unknown[]): { bitmap: Uint8Array; nulls: number } {
  const bitmap = new Uint8Array(Math.ceil(values.length / 8));
  let nulls = 0;
  for (let i = 0; i < values.length; i++) {
    if (values[i] === null || values[i] === undefined) nulls++;
    else bitmap[i >> 3]! |= 1 << (i & 7);
  }
  return { bitmap, nulls };
}

const encoder = new TextEncoder();

/** Build one column from normalized row-form values (see normalize.ts). */
export function buildColumn(type: ColumnType, values: readonly unknown[]): Data {
  const length = values.length;
  const { bitmap, nulls } = validity(values);
  const nullBitmap = nulls === 0 ? undefined : bitmap;
  switch (type) {
    case 'INT64':
    case 'TIMESTAMP': {
      const data = new BigInt64Array(length);
      // Safe integers (all of them but INT64 beyond 2^53, kept as decimal strings) go in as
      // two 32-bit halves: BigInt() per value costs several times more.
      const halves = new Int32Array(data.buffer);
      for (let i = 0; i < length; i++) {
        const v = values[i];
        if (typeof v === 'number') {
          halves[2 * i] = v | 0;
          halves[2 * i + 1] = Math.floor(v / 4294967296);
        } else if (v !== null && v !== undefined) data[i] = BigInt(v as string);
      }
      const t = type === 'INT64' ? new Int64() : new TimestampMillisecond();
      return makeData({ type: t, length, nullCount: nulls, nullBitmap, data } as never);
    }
    case 'DOUBLE': {
      const data = new Float64Array(length);
      for (let i = 0; i < length; i++) {
        const v = values[i];
        if (v !== null && v !== undefined) data[i] = v as number;
      }
      return makeData({ type: new Float64(), length, nullCount: nulls, nullBitmap, data });
    }
    case 'BOOLEAN': {
      const data = new Uint8Array(Math.ceil(length / 8));
      for (let i = 0; i < length; i++) if (values[i] === true) data[i >> 3]! |= 1 << (i & 7);
      return makeData({ type: new Bool(), length, nullCount: nulls, nullBitmap, data });
    }
    case 'STRING':
    case 'JSON':
      return buildUtf8(values, nulls, nullBitmap);
  }
}

/**
 * Strings: one UTF-8 buffer and an offsets array. Fast path: join everything and
 * encode once; when the bytes equal the characters the text is ASCII and the
 * offsets are the string lengths. Otherwise encode string by string.
 */
export function buildUtf8(values: readonly unknown[], nulls = 0, nullBitmap?: Uint8Array): Data<Utf8> {
  const length = values.length;
  const valueOffsets = new Int32Array(length + 1);
  const parts: string[] = new Array(length);
  let chars = 0;
  for (let i = 0; i < length; i++) {
    const v = values[i];
    const s = typeof v === 'string' ? v : '';
    parts[i] = s;
    chars += s.length;
    valueOffsets[i + 1] = chars;
  }
  const joined = Buffer.from(parts.join(''), 'utf8');
  if (joined.length === chars) {
    return makeData({ type: new Utf8(), length, nullCount: nulls, nullBitmap, valueOffsets, data: joined });
  }
  let buf = new Uint8Array(joined.length);
  let pos = 0;
  for (let i = 0; i < length; i++) {
    const s = parts[i]!;
    if (buf.length - pos < s.length * 3) {
      const grown = new Uint8Array((buf.length + s.length * 3) * 2);
      grown.set(buf.subarray(0, pos));
      buf = grown;
    }
    pos += encoder.encodeInto(s, buf.subarray(pos)).written;
    valueOffsets[i + 1] = pos;
  }
  return makeData({ type: new Utf8(), length, nullCount: nulls, nullBitmap, valueOffsets, data: buf.subarray(0, pos) });
}

/** Arrow value → row form (INT64 as number when safe, else decimal string; TIMESTAMP as ISO-8601). */
export function toRowValue(type: ColumnType, v: unknown): unknown {
  if (v === null || v === undefined) return null;
  switch (type) {
    case 'INT64': {
      const b = v as bigint;
      return b >= BigInt(Number.MIN_SAFE_INTEGER) && b <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(b) : b.toString();
    }
    case 'TIMESTAMP':
      return new Date(Number(v)).toISOString();
    case 'JSON':
      return JSON.parse(v as string);
    default:
      return v;
  }
}
