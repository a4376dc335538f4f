/**
 * A Parquet file's footer (FileMetaData), read: its schema, and each row
 * group's column chunks with where their pages are and the statistics the
 * writer kept. For what parquet-wasm does not hand out: the kernel reads the
 * row ids' pages by it (LLP 0098), the Iceberg writer a data file's column
 * statistics (LLP 0099). Fields this does not name are skipped.
 * Spec: https://github.com/apache/parquet-format/blob/master/src/main/thrift/parquet.thrift
 */
import { ThriftReader, ThriftType as T } from './thrift-compact.js';

/** Parquet's physical types (`Type` in parquet.thrift). */
export const ParquetPhysical = { BOOLEAN: 0, INT32: 1, INT64: 2, INT96: 3, FLOAT: 4, DOUBLE: 5, BYTE_ARRAY: 6, FIXED_LEN_BYTE_ARRAY: 7 } as const;

/** One schema element: the root first, then the columns (flat in every file hypsink writes). */
export interface ParquetSchemaElement {
  readonly name: string;
  /** Physical type; undefined for a group (the root). */
  readonly type: number | undefined;
  /** 0 required, 1 optional, 2 repeated; undefined for the root. */
  readonly repetition: number | undefined;
  readonly children: number;
}

/** A column chunk's statistics as written (values PLAIN-encoded: an int64 as 8 bytes little-endian, a string as its bytes). */
export interface ParquetStatistics {
  readonly nulls: number | undefined;
  /** `min_value`/`max_value` (the sort order of the column's logical type); the deprecated `min`/`max` are not read. */
  readonly min: Uint8Array | undefined;
  readonly max: Uint8Array | undefined;
  /** False when the writer cut the value (a long string): then it is a bound, not a value of the column. */
  readonly minExact: boolean | undefined;
  readonly maxExact: boolean | undefined;
}

export interface ParquetColumnChunk {
  /** `path_in_schema`, joined by dots (a column's name, in a flat file). */
  readonly path: string;
  readonly type: number;
  readonly codec: number;
  readonly encodings: readonly number[];
  /** Values, nulls included. */
  readonly values: number;
  /** The chunk's bytes, page headers included. */
  readonly compressedSize: number;
  readonly uncompressedSize: number;
  readonly dataPageOffset: number;
  readonly dictionaryPageOffset: number | undefined;
  /** Set when the chunk is in another file: never in a file hypsink writes. */
  readonly filePath: string | undefined;
  readonly statistics: ParquetStatistics | undefined;
}

export interface ParquetRowGroup {
  readonly rows: number;
  readonly columns: readonly ParquetColumnChunk[];
}

export interface ParquetFooter {
  readonly schema: readonly ParquetSchemaElement[];
  readonly rows: number;
  readonly rowGroups: readonly ParquetRowGroup[];
}

const MAGIC = 0x31524150; // "PAR1", little-endian

/**
 * The FileMetaData bytes at the end of `tail`, a file's last bytes (its
 * whole footer among them); null when `tail` does not end in a footer or
 * holds only part of it (then read more of the file: `needed` bytes).
 */
export function footerBytes(tail: Uint8Array): { meta: Uint8Array } | { needed: number } | null {
  if (tail.length < 8) return null;
  const dv = new DataView(tail.buffer, tail.byteOffset, tail.byteLength);
  if (dv.getUint32(tail.length - 4, true) !== MAGIC) return null;
  const len = dv.getUint32(tail.length - 8, true);
  if (len + 8 > tail.length) return { needed: len + 8 };
  return { meta: tail.subarray(tail.length - 8 - len, tail.length - 8) };
}

/** FileMetaData, read; throws an Error saying what is wrong when the bytes are not one. */
export function parseParquetFooter(meta: Uint8Array): ParquetFooter {
  const r = new ThriftReader(meta);
  const schema: ParquetSchemaElement[] = [];
  const rowGroups: ParquetRowGroup[] = [];
  let rows = -1;
  for (const f of r.fields()) {
    if (f.id === 2 && f.type === T.LIST) {
      const { n } = r.list();
      for (let i = 0; i < n; i++) schema.push(schemaElement(r));
    } else if (f.id === 3 && f.type === T.I64) rows = r.int();
    else if (f.id === 4 && f.type === T.LIST) {
      const { n } = r.list();
      for (let i = 0; i < n; i++) rowGroups.push(rowGroup(r));
    } else r.skip(f.type);
  }
  if (schema.length === 0 || rows < 0) throw new Error('the footer has no schema or no row count');
  return { schema, rows, rowGroups };
}

const utf8 = new TextDecoder();

function schemaElement(r: ThriftReader): ParquetSchemaElement {
  let name = '';
  let type: number | undefined;
  let repetition: number | undefined;
  let children = 0;
  for (const f of r.fields()) {
    if (f.id === 1 && f.type === T.I32) type = r.int();
    else if (f.id === 3 && f.type === T.I32) repetition = r.int();
    else if (f.id === 4 && f.type === T.BINARY) name = utf8.decode(r.binary());
    else if (f.id === 5 && f.type === T.I32) children = r.int();
    else r.skip(f.type);
  }
  return { name, type, repetition, children };
}

function rowGroup(r: ThriftReader): ParquetRowGroup {
  const columns: ParquetColumnChunk[] = [];
  let rows = -1;
  for (const f of r.fields()) {
    if (f.id === 1 && f.type === T.LIST) {
      const { n } = r.list();
      for (let i = 0; i < n; i++) columns.push(columnChunk(r));
    } else if (f.id === 3 && f.type === T.I64) rows = r.int();
    else r.skip(f.type);
  }
  if (rows < 0) throw new Error('a row group has no row count');
  return { rows, columns };
}

function columnChunk(r: ThriftReader): ParquetColumnChunk {
  let filePath: string | undefined;
  let meta: Omit<ParquetColumnChunk, 'filePath'> | undefined;
  for (const f of r.fields()) {
    if (f.id === 1 && f.type === T.BINARY) filePath = utf8.decode(r.binary());
    else if (f.id === 3 && f.type === T.STRUCT) meta = columnMeta(r);
    else r.skip(f.type);
  }
  if (!meta) throw new Error('a column chunk has no metadata');
  return { ...meta, filePath };
}

function columnMeta(r: ThriftReader): Omit<ParquetColumnChunk, 'filePath'> {
  const m = {
    path: '',
    type: -1,
    codec: -1,
    encodings: [] as number[],
    values: -1,
    compressedSize: -1,
    uncompressedSize: -1,
    dataPageOffset: -1,
    dictionaryPageOffset: undefined as number | undefined,
    statistics: undefined as ParquetStatistics | undefined,
  };
  for (const f of r.fields()) {
    if (f.id === 1 && f.type === T.I32) m.type = r.int();
    else if (f.id === 2 && f.type === T.LIST) {
      const { n } = r.list();
      for (let i = 0; i < n; i++) m.encodings.push(r.int());
    } else if (f.id === 3 && f.type === T.LIST) {
      const { n } = r.list();
      const parts: string[] = [];
      for (let i = 0; i < n; i++) parts.push(utf8.decode(r.binary()));
      m.path = parts.join('.');
    } else if (f.id === 4 && f.type === T.I32) m.codec = r.int();
    else if (f.id === 5 && f.type === T.I64) m.values = r.int();
    else if (f.id === 6 && f.type === T.I64) m.uncompressedSize = r.int();
    else if (f.id === 7 && f.type === T.I64) m.compressedSize = r.int();
    else if (f.id === 9 && f.type === T.I64) m.dataPageOffset = r.int();
    else if (f.id === 11 && f.type === T.I64) m.dictionaryPageOffset = r.int();
    else if (f.id === 12 && f.type === T.STRUCT) m.statistics = statistics(r);
    else r.skip(f.type);
  }
  if (m.values < 0 || m.compressedSize < 0 || m.dataPageOffset < 0) throw new Error(`column chunk ${m.path || '?'} lacks its values, size or offset`);
  return m;
}

function statistics(r: ThriftReader): ParquetStatistics {
  const s: { -readonly [K in keyof ParquetStatistics]: ParquetStatistics[K] } = { nulls: undefined, min: undefined, max: undefined, minExact: undefined, maxExact: undefined };
  for (const f of r.fields()) {
    if (f.id === 3 && f.type === T.I64) s.nulls = r.int();
    else if (f.id === 5 && f.type === T.BINARY) s.max = r.binary();
    else if (f.id === 6 && f.type === T.BINARY) s.min = r.binary();
    // A bool field carries its value in its header's type.
    else if (f.id === 7 && (f.type === T.TRUE || f.type === T.FALSE)) s.maxExact = f.type === T.TRUE;
    else if (f.id === 8 && (f.type === T.TRUE || f.type === T.FALSE)) s.minExact = f.type === T.TRUE;
    else r.skip(f.type);
  }
  return s;
}
