/**
 * The types a unit's rows take in a columnar file engines read (a Parquet
 * blob, an Iceberg data file): what DuckDB, Spark, Trino and pyarrow type a
 * column as is decided here, once, for every encoder that writes Arrow.
 *
 * - TIMESTAMP → microseconds since the epoch, UTC-adjusted (Arrow
 *   `Timestamp(µs, "UTC")`, Parquet `TIMESTAMP(MICROS, isAdjustedToUTC=true)`):
 *   an instant, which engines read as TIMESTAMP WITH TIME ZONE. The cache
 *   keeps milliseconds; the values are multiplied, never rounded.
 * - A column the unit declares NOT NULL is a non-nullable field (Parquet
 *   REQUIRED). The kernel's blob sink hands an encoder a unit whose NOT NULL
 *   columns hold no null (a null there puts the unit again with the column
 *   nullable), so a file never promises what its rows break.
 * - JSON → UTF-8 text with the canonical Arrow extension `arrow.json`, when
 *   asked (`json: true`): a Parquet writer that knows the extension writes the
 *   JSON logical type; format-parquet sets it in the footer itself.
 * - Everything else as the cache has it: INT64 as int64, DOUBLE, BOOLEAN,
 *   STRING as UTF-8.
 * @ref LLP 0069
 */
import { type Data, Field, makeData, RecordBatch, Schema, Struct, TimestampMicrosecond } from 'apache-arrow';
import { HypsinkError } from './errors.js';
import type { ColumnSpec } from './schema.js';

/** The Arrow extension name of a JSON text column (Arrow's canonical `arrow.json`). */
export const ARROW_JSON_EXTENSION = 'arrow.json';

export interface EngineFieldOptions {
  /** Mark JSON columns with the `arrow.json` extension. */
  readonly json?: boolean;
  /** Whether each column is written nullable; default: as the column declares it. */
  readonly nullable?: (c: ColumnSpec, i: number) => boolean;
  /** More metadata for each column's field (an Iceberg field id). */
  readonly metadata?: (c: ColumnSpec, i: number) => ReadonlyMap<string, string> | undefined;
}

/** A column's field metadata in engine form: the caller's, and `arrow.json` on JSON columns when asked. */
function metadataOf(c: ColumnSpec, i: number, opts: EngineFieldOptions): Map<string, string> | null {
  const meta = new Map(opts.metadata?.(c, i) ?? []);
  if (opts.json && c.type === 'JSON') meta.set('ARROW:extension:name', ARROW_JSON_EXTENSION).set('ARROW:extension:metadata', '');
  return meta.size > 0 ? meta : null;
}

/** A validity bitmap starting at row 0 (the input's may start at a bit offset); none without nulls. */
function bitmapAt0(d: Data): Uint8Array | undefined {
  if (d.nullCount === 0 || !d.nullBitmap || d.nullBitmap.length === 0) return undefined;
  if (d.offset % 8 === 0) return d.nullBitmap.subarray(d.offset >> 3, (d.offset >> 3) + Math.ceil(d.length / 8));
  const out = new Uint8Array(Math.ceil(d.length / 8));
  for (let i = 0; i < d.length; i++) {
    const bit = d.offset + i;
    if ((d.nullBitmap[bit >> 3]! >> (bit & 7)) & 1) out[i >> 3]! |= 1 << (i & 7);
  }
  return out;
}

/** A TIMESTAMP column (epoch ms, as the cache keeps it) as UTC microseconds. */
export function timestampMicrosUtc(d: Data): Data {
  const n = d.length;
  const ms = d.values as BigInt64Array;
  const us = new BigInt64Array(n);
  for (let i = 0; i < n; i++) us[i] = ms[i]! * 1000n;
  const bitmap = bitmapAt0(d);
  return makeData({ type: new TimestampMicrosecond('UTC'), length: n, nullCount: d.nullCount, data: us, ...(bitmap ? { nullBitmap: bitmap } : {}) });
}

/**
 * A batch of the unit's rows in engine form: `columns` in their order (found
 * by name: a batch's column order is not assumed), each typed as above, plus
 * `leading` columns first (Iceberg's constant `source`).
 */
export function engineBatch(b: RecordBatch, columns: readonly ColumnSpec[], opts: EngineFieldOptions & { leading?: readonly { field: Field; data: Data }[] } = {}): RecordBatch {
  const fields: Field[] = (opts.leading ?? []).map((x) => x.field);
  const children: Data[] = (opts.leading ?? []).map((x) => x.data);
  columns.forEach((c, j) => {
    const i = b.schema.fields.findIndex((f) => f.name === c.name);
    if (i < 0) throw new HypsinkError('HYPSINK_ERR_INVARIANT', `a batch of the unit has no column "${c.name}" (it has ${b.schema.fields.map((f) => f.name).join(', ')})`);
    const d = b.data.children[i]!;
    const out = c.type === 'TIMESTAMP' ? timestampMicrosUtc(d) : d;
    fields.push(new Field(c.name, out.type, opts.nullable ? opts.nullable(c, j) : c.nullable, metadataOf(c, j, opts)));
    children.push(out);
  });
  const schema = new Schema(fields);
  return new RecordBatch(schema, makeData({ type: new Struct(schema.fields), length: b.numRows, nullCount: 0, children }));
}

/** How a column's values are laid out in a Parquet file engines read (see `columnEncodings`). */
export interface ColumnEncoding {
  readonly column: string;
  /** Try a dictionary first (the writer falls back to `encoding` when it grows too large). */
  readonly dictionary: boolean;
  /** The encoding without a dictionary; `PLAIN` is every writer's default. */
  readonly encoding: 'PLAIN' | 'DELTA_BINARY_PACKED';
}

/**
 * The encoding of each column in a Parquet blob or Iceberg data file. Numbers
 * are rarely repeated: a dictionary of them is built, found too large and
 * dropped, at a cost in time and in bytes (its first pages stay dictionary
 * encoded). INT64 and TIMESTAMP go delta-encoded (ids and times mostly rise:
 * small deltas, which zstd shrinks further), DOUBLE plain; strings, JSON and
 * booleans keep the writer's dictionary. Every reader the tests use (DuckDB,
 * icebird, parquet-wasm) and every engine reads both. @ref LLP 0075
 */
export function columnEncodings(columns: readonly ColumnSpec[]): ColumnEncoding[] {
  return columns.map((c) => {
    if (c.type === 'INT64' || c.type === 'TIMESTAMP') return { column: c.name, dictionary: false, encoding: 'DELTA_BINARY_PACKED' };
    if (c.type === 'DOUBLE') return { column: c.name, dictionary: false, encoding: 'PLAIN' };
    return { column: c.name, dictionary: true, encoding: 'PLAIN' };
  });
}
