/**
 * Iceberg format-v2 manifests and manifest lists as Avro object container
 * files (OCF), encoded with avsc (LLP 0050).
 *
 * Every record, field and type name and every field/element id follows the
 * Iceberg table spec ("Manifests", "Manifest Lists", "Avro" appendix): readers
 * such as Spark, Trino and pyiceberg project manifests by field id, so an id
 * off by one is a column that silently reads as null.
 *
 * The OCF framing (header, blocks) is written with avsc types for the
 * container's own records, because avsc's BlockEncoder is a stream whose
 * output only completes on a later tick; the Iceberg writer needs the bytes
 * synchronously, in memory, to know `manifest_length` before the manifest
 * list is written.
 */
import { randomBytes } from 'node:crypto';
import { inflateRawSync } from 'node:zlib';
import avro from 'avsc';

// ---------------------------------------------------------------------------
// Public API

/** One field of the table's partition spec, in spec order. */
export interface PartitionField {
  readonly name: string;
  readonly fieldId: number;
  /** 'string' for identity on a string column; 'int' for the day transform (days since 1970-01-01). */
  readonly type: 'string' | 'int';
}

export interface DataFile {
  /** Absolute location (file:///..., s3://bucket/...). */
  readonly filePath: string;
  /** Partition values by PartitionField.name; null for a null partition value. */
  readonly partition: Readonly<Record<string, string | number | null>>;
  readonly recordCount: number;
  readonly fileSizeInBytes: number;
  /** Field id -> count of values, nulls included. */
  readonly valueCounts: ReadonlyMap<number, number>;
  readonly nullValueCounts: ReadonlyMap<number, number>;
  /** Field id -> count of NaN values, for float and double fields only (absent: none known). */
  readonly nanValueCounts?: ReadonlyMap<number, number>;
  /** Field id -> single-value binary serialization, encoded by the caller. */
  readonly lowerBounds: ReadonlyMap<number, Uint8Array>;
  readonly upperBounds: ReadonlyMap<number, Uint8Array>;
}

/** status: 0 EXISTING, 1 ADDED, 2 DELETED. Null ids/sequence numbers are inherited (ADDED only). */
export interface ManifestEntry {
  readonly status: 0 | 1 | 2;
  readonly snapshotId: number | null;
  readonly sequenceNumber: number | null;
  readonly fileSequenceNumber: number | null;
  readonly dataFile: DataFile;
}

export interface FieldSummary {
  readonly containsNull: boolean;
  readonly containsNan: boolean | null;
  readonly lowerBound: Uint8Array | null;
  readonly upperBound: Uint8Array | null;
}

export interface ManifestFile {
  manifestPath: string;
  manifestLength: number;
  partitionSpecId: number;
  /** 0 data, 1 deletes. */
  content: 0 | 1;
  sequenceNumber: number;
  minSequenceNumber: number;
  addedSnapshotId: number;
  addedFilesCount: number;
  existingFilesCount: number;
  deletedFilesCount: number;
  addedRowsCount: number;
  existingRowsCount: number;
  deletedRowsCount: number;
  partitions: readonly FieldSummary[] | null;
}

/**
 * An Avro OCF manifest (content data), with the spec's key-value metadata:
 * schema (the table schema JSON), schema-id, partition-spec (fields JSON),
 * partition-spec-id, format-version "2", content "data".
 */
export function encodeManifest(opts: {
  schemaJson: string;
  schemaId: number;
  specId: number;
  partitionFields: readonly PartitionField[];
  partitionSpecJson: string;
  entries: readonly ManifestEntry[];
}): Uint8Array {
  checkPartitionFields(opts.partitionFields);
  const schema = manifestEntrySchema(opts.partitionFields);
  const type = forSchema(schema);
  const records = opts.entries.map((e, i) => entryRecord(e, i, opts.partitionFields));
  return encodeContainer(schema, type, records, {
    schema: opts.schemaJson,
    'schema-id': String(opts.schemaId),
    'partition-spec': opts.partitionSpecJson,
    'partition-spec-id': String(opts.specId),
    'format-version': '2',
    content: 'data',
  });
}

/**
 * The manifest list entry of a manifest just written (all entries ADDED,
 * sequence numbers inherited): counts and partition field summaries computed
 * from the entries.
 */
export function manifestFileOf(opts: {
  manifestPath: string;
  manifestLength: number;
  specId: number;
  snapshotId: number;
  sequenceNumber: number;
  partitionFields: readonly PartitionField[];
  entries: readonly ManifestEntry[];
}): ManifestFile {
  checkPartitionFields(opts.partitionFields);
  const files = [0, 0, 0];
  const rows = [0, 0, 0];
  let minSeq: number | null = null;
  for (const e of opts.entries) {
    files[e.status] = (files[e.status] ?? 0) + 1;
    rows[e.status] = (rows[e.status] ?? 0) + e.dataFile.recordCount;
    // Live files only (DELETED entries are informational); a null data
    // sequence number on an ADDED entry is the manifest's own, inherited.
    if (e.status !== 2) {
      const seq = e.sequenceNumber ?? opts.sequenceNumber;
      minSeq = minSeq === null ? seq : Math.min(minSeq, seq);
    }
  }
  const partitions = opts.partitionFields.map((f) => summarize(f, opts.entries));
  return {
    manifestPath: opts.manifestPath,
    manifestLength: opts.manifestLength,
    partitionSpecId: opts.specId,
    content: 0,
    sequenceNumber: opts.sequenceNumber,
    minSequenceNumber: minSeq ?? opts.sequenceNumber,
    addedSnapshotId: opts.snapshotId,
    addedFilesCount: files[1] ?? 0,
    existingFilesCount: files[0] ?? 0,
    deletedFilesCount: files[2] ?? 0,
    addedRowsCount: rows[1] ?? 0,
    existingRowsCount: rows[0] ?? 0,
    deletedRowsCount: rows[2] ?? 0,
    partitions,
  };
}

/** An Avro OCF manifest list with metadata snapshot-id, parent-snapshot-id ("null" when none), sequence-number, format-version "2". */
export function encodeManifestList(opts: {
  snapshotId: number;
  parentSnapshotId: number | null;
  sequenceNumber: number;
  manifests: readonly ManifestFile[];
}): Uint8Array {
  const records = opts.manifests.map(manifestFileRecord);
  return encodeContainer(MANIFEST_FILE_SCHEMA, manifestFileType(), records, {
    'snapshot-id': String(opts.snapshotId),
    'parent-snapshot-id': opts.parentSnapshotId === null ? 'null' : String(opts.parentSnapshotId),
    'sequence-number': String(opts.sequenceNumber),
    'format-version': '2',
  });
}

export function decodeManifestList(bytes: Uint8Array): ManifestFile[] {
  const { records } = decodeContainer(bytes, 'manifest list');
  return records.map((r) => fromManifestFileRecord(r as ManifestFileRecord));
}

export function decodeManifest(bytes: Uint8Array): { metadata: Record<string, string>; entries: ManifestEntry[] } {
  const { metadata, records, writerSchema } = decodeContainer(bytes, 'manifest');
  const names = partitionNamesOf(writerSchema);
  return { metadata, entries: records.map((r) => fromEntryRecord(r as EntryRecord, names)) };
}

// ---------------------------------------------------------------------------
// Schemas (Iceberg spec field ids; optional = ["null", T] with default null)

type AvroJson = string | AvroJson[] | { [k: string]: unknown };
interface AvroField {
  name: string;
  type: AvroJson;
  'field-id': number;
  default?: null;
}

function required(name: string, id: number, type: AvroJson): AvroField {
  return { name, type, 'field-id': id };
}

// Null first so that the default null is valid for the union (Avro requires
// the default to match the first branch).
function optional(name: string, id: number, type: AvroJson): AvroField {
  return { name, type: ['null', type], default: null, 'field-id': id };
}

/** An Iceberg map<int, V> as the spec's Avro array of k/v records with logicalType map. */
function intMap(keyId: number, valueId: number, value: 'long' | 'bytes'): AvroJson {
  return {
    type: 'array',
    logicalType: 'map',
    items: {
      type: 'record',
      name: `k${keyId}_v${valueId}`,
      fields: [required('key', keyId, 'int'), required('value', valueId, value)],
    },
  };
}

function list(elementId: number, items: AvroJson): AvroJson {
  return { type: 'array', items, 'element-id': elementId };
}

function manifestEntrySchema(partitionFields: readonly PartitionField[]): AvroJson {
  const partition = {
    type: 'record',
    name: 'r102',
    // Partition values are optional whatever the source column: a null source
    // value (or a null timestamp under the day transform) is a null partition.
    fields: partitionFields.map((f) => optional(f.name, f.fieldId, f.type)),
  };
  const dataFile = {
    type: 'record',
    name: 'r2',
    fields: [
      required('content', 134, 'int'),
      required('file_path', 100, 'string'),
      required('file_format', 101, 'string'),
      required('partition', 102, partition),
      required('record_count', 103, 'long'),
      required('file_size_in_bytes', 104, 'long'),
      optional('column_sizes', 108, intMap(117, 118, 'long')),
      optional('value_counts', 109, intMap(119, 120, 'long')),
      optional('null_value_counts', 110, intMap(121, 122, 'long')),
      optional('nan_value_counts', 137, intMap(138, 139, 'long')),
      optional('lower_bounds', 125, intMap(126, 127, 'bytes')),
      optional('upper_bounds', 128, intMap(129, 130, 'bytes')),
      optional('key_metadata', 131, 'bytes'),
      optional('split_offsets', 132, list(133, 'long')),
      optional('equality_ids', 135, list(136, 'int')),
      optional('sort_order_id', 140, 'int'),
    ],
  };
  return {
    type: 'record',
    name: 'manifest_entry',
    fields: [
      required('status', 0, 'int'),
      optional('snapshot_id', 1, 'long'),
      optional('sequence_number', 3, 'long'),
      optional('file_sequence_number', 4, 'long'),
      required('data_file', 2, dataFile),
    ],
  };
}

const FIELD_SUMMARY_SCHEMA: AvroJson = {
  type: 'record',
  name: 'r508',
  fields: [
    required('contains_null', 509, 'boolean'),
    optional('contains_nan', 518, 'boolean'),
    optional('lower_bound', 510, 'bytes'),
    optional('upper_bound', 511, 'bytes'),
  ],
};

const MANIFEST_FILE_SCHEMA: AvroJson = {
  type: 'record',
  name: 'manifest_file',
  fields: [
    required('manifest_path', 500, 'string'),
    required('manifest_length', 501, 'long'),
    required('partition_spec_id', 502, 'int'),
    required('content', 517, 'int'),
    required('sequence_number', 515, 'long'),
    required('min_sequence_number', 516, 'long'),
    required('added_snapshot_id', 503, 'long'),
    required('added_files_count', 504, 'int'),
    required('existing_files_count', 505, 'int'),
    required('deleted_files_count', 506, 'int'),
    required('added_rows_count', 512, 'long'),
    required('existing_rows_count', 513, 'long'),
    required('deleted_rows_count', 514, 'long'),
    optional('partitions', 507, list(508, FIELD_SUMMARY_SCHEMA)),
    optional('key_metadata', 519, 'bytes'),
  ],
};

// avsc's own long refuses the last two safe integers (its varint arithmetic
// doubles the value); ids and sequence numbers may be any safe integer, so
// longs go through BigInt here. A long beyond 2^53 (a Java writer's random
// snapshot id) is refused on read rather than rounded.
const exactLong = avro.types.LongType.__with({
  fromBuffer: (b: Buffer): number => {
    const n = b.readBigInt64LE(0);
    if (n > BigInt(Number.MAX_SAFE_INTEGER) || n < BigInt(Number.MIN_SAFE_INTEGER)) {
      throw new Error(`iceberg avro: the long ${n} is beyond 2^53 and cannot be read as a JS number without loss`);
    }
    return Number(n);
  },
  toBuffer: (n: number): Buffer => {
    const b = Buffer.alloc(8);
    b.writeBigInt64LE(BigInt(n));
    return b;
  },
  fromJSON: (n: number): number => n,
  toJSON: (n: number): number => n,
  isValid: (n: unknown): boolean => Number.isSafeInteger(n),
  compare: (a: number, b: number): number => a - b,
});

/** Types built, by their schema's JSON text: a table's few schemas are built once, not at every manifest read or write. */
const typeCache = new Map<string, avro.Type>();
const TYPE_CACHE_MAX = 64;

function forSchema(schema: AvroJson, text = JSON.stringify(schema)): avro.Type {
  // Building a type costs ~3 ms (avsc compiles its readers and writers): once per unit it was a fixed
  // per-commit cost (issue 30). A built type holds no state of a read or write. @ref LLP 0083
  let type = typeCache.get(text);
  if (!type) {
    // A fresh registry each time: avsc adds the named types it defines to it.
    type = avro.Type.forSchema(schema as avro.Schema, { wrapUnions: false, registry: { long: exactLong } });
    if (typeCache.size >= TYPE_CACHE_MAX) typeCache.delete(typeCache.keys().next().value!);
    typeCache.set(text, type);
  }
  return type;
}

let manifestFileTypeCache: avro.Type | undefined;
function manifestFileType(): avro.Type {
  manifestFileTypeCache ??= forSchema(MANIFEST_FILE_SCHEMA);
  return manifestFileTypeCache;
}

// ---------------------------------------------------------------------------
// Records (the shapes avsc writes and reads for the schemas above)

interface KV<V> {
  key: number;
  value: V;
}
interface DataFileRecord {
  content: number;
  file_path: string;
  file_format: string;
  partition: Record<string, string | number | null>;
  record_count: number;
  file_size_in_bytes: number;
  column_sizes: KV<number>[] | null;
  value_counts: KV<number>[] | null;
  null_value_counts: KV<number>[] | null;
  nan_value_counts: KV<number>[] | null;
  lower_bounds: KV<Buffer>[] | null;
  upper_bounds: KV<Buffer>[] | null;
  key_metadata: Buffer | null;
  split_offsets: number[] | null;
  equality_ids: number[] | null;
  sort_order_id: number | null;
}
interface EntryRecord {
  status: number;
  snapshot_id: number | null;
  sequence_number: number | null;
  file_sequence_number: number | null;
  data_file: DataFileRecord;
}
interface FieldSummaryRecord {
  contains_null: boolean;
  contains_nan: boolean | null;
  lower_bound: Buffer | null;
  upper_bound: Buffer | null;
}
interface ManifestFileRecord {
  manifest_path: string;
  manifest_length: number;
  partition_spec_id: number;
  content: number;
  sequence_number: number;
  min_sequence_number: number;
  added_snapshot_id: number;
  added_files_count: number;
  existing_files_count: number;
  deleted_files_count: number;
  added_rows_count: number;
  existing_rows_count: number;
  deleted_rows_count: number;
  partitions: FieldSummaryRecord[] | null;
  key_metadata: Buffer | null;
}

const INT_MIN = -(2 ** 31);
const INT_MAX = 2 ** 31 - 1;

function checkPartitionFields(fields: readonly PartitionField[]): void {
  const names = new Set<string>();
  for (const f of fields) {
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(f.name)) {
      throw new Error(`iceberg partition field name "${f.name}" is not a valid Avro name; use letters, digits and _ (not first)`);
    }
    if (names.has(f.name)) throw new Error(`iceberg partition field "${f.name}" is listed twice; give each partition field its own name`);
    names.add(f.name);
    if (f.type !== 'string' && f.type !== 'int') throw new Error(`iceberg partition field "${f.name}" has type ${String(f.type)}; use 'string' or 'int'`);
  }
}

function entryRecord(e: ManifestEntry, index: number, fields: readonly PartitionField[]): EntryRecord {
  const where = `manifest entry ${index} (${e.dataFile.filePath})`;
  if (e.status !== 0 && e.status !== 1 && e.status !== 2) throw new Error(`${where}: status ${String(e.status)}; use 0 (existing), 1 (added) or 2 (deleted)`);
  // The spec: sequence numbers are inherited only for ADDED entries.
  if (e.status !== 1 && (e.sequenceNumber === null || e.fileSequenceNumber === null)) {
    throw new Error(`${where}: an EXISTING or DELETED entry must carry its data and file sequence numbers; pass the values it was committed with`);
  }
  const d = e.dataFile;
  const partition: Record<string, string | number | null> = {};
  for (const f of fields) {
    const v = d.partition[f.name];
    if (v === undefined) throw new Error(`${where}: no value for partition field "${f.name}"; pass null for a null partition value`);
    if (v !== null && f.type === 'string' && typeof v !== 'string') throw new Error(`${where}: partition field "${f.name}" is a string, got ${typeof v}`);
    if (v !== null && f.type === 'int' && !(Number.isInteger(v) && (v as number) >= INT_MIN && (v as number) <= INT_MAX)) {
      throw new Error(`${where}: partition field "${f.name}" is an int (days since 1970-01-01 for a day transform), got ${String(v)}`);
    }
    partition[f.name] = v;
  }
  for (const k of Object.keys(d.partition)) {
    if (!fields.some((f) => f.name === k)) throw new Error(`${where}: partition value "${k}" is not a field of the partition spec (${fields.map((f) => f.name).join(', ') || 'unpartitioned'})`);
  }
  return {
    status: e.status,
    snapshot_id: e.snapshotId,
    sequence_number: e.sequenceNumber,
    file_sequence_number: e.fileSequenceNumber,
    data_file: {
      content: 0,
      file_path: d.filePath,
      file_format: 'PARQUET',
      partition,
      record_count: d.recordCount,
      file_size_in_bytes: d.fileSizeInBytes,
      // Maps, never null: pyiceberg's inspect.entries() reads both as maps (issue 31). Column sizes are
      // not measured (the Parquet writer streams): an empty map says nothing of any column.
      column_sizes: [],
      value_counts: kvs(d.valueCounts, (v) => v),
      null_value_counts: kvs(d.nullValueCounts, (v) => v),
      nan_value_counts: kvs(d.nanValueCounts ?? new Map(), (v) => v),
      lower_bounds: kvs(d.lowerBounds, toBuffer),
      upper_bounds: kvs(d.upperBounds, toBuffer),
      key_metadata: null,
      split_offsets: null,
      equality_ids: null,
      sort_order_id: null,
    },
  };
}

function kvs<V, W>(m: ReadonlyMap<number, V>, f: (v: V) => W): KV<W>[] {
  return [...m].sort((a, b) => a[0] - b[0]).map(([key, value]) => ({ key, value: f(value) }));
}

function fromKvs<V, W>(a: KV<V>[] | null, f: (v: V) => W): Map<number, W> {
  return new Map((a ?? []).map((kv) => [kv.key, f(kv.value)]));
}

function fromEntryRecord(r: EntryRecord, partitionNames: readonly string[]): ManifestEntry {
  const d = r.data_file;
  const partition: Record<string, string | number | null> = {};
  for (const n of partitionNames) partition[n] = d.partition[n] ?? null;
  return {
    status: r.status as 0 | 1 | 2,
    snapshotId: r.snapshot_id,
    sequenceNumber: r.sequence_number,
    fileSequenceNumber: r.file_sequence_number,
    dataFile: {
      filePath: d.file_path,
      partition,
      recordCount: d.record_count,
      fileSizeInBytes: d.file_size_in_bytes,
      valueCounts: fromKvs(d.value_counts, (v) => v),
      nullValueCounts: fromKvs(d.null_value_counts, (v) => v),
      nanValueCounts: fromKvs(d.nan_value_counts, (v) => v),
      lowerBounds: fromKvs(d.lower_bounds, toBytes),
      upperBounds: fromKvs(d.upper_bounds, toBytes),
    },
  };
}

function partitionNamesOf(writerSchema: unknown): string[] {
  const fields = (writerSchema as { fields?: { name: string; type: { fields?: { name: string; type: { fields?: { name: string }[] } }[] } }[] }).fields;
  const dataFile = fields?.find((f) => f.name === 'data_file');
  const partition = dataFile?.type.fields?.find((f) => f.name === 'partition');
  return (partition?.type.fields ?? []).map((f) => f.name);
}

function manifestFileRecord(m: ManifestFile): ManifestFileRecord {
  return {
    manifest_path: m.manifestPath,
    manifest_length: m.manifestLength,
    partition_spec_id: m.partitionSpecId,
    content: m.content,
    sequence_number: m.sequenceNumber,
    min_sequence_number: m.minSequenceNumber,
    added_snapshot_id: m.addedSnapshotId,
    added_files_count: m.addedFilesCount,
    existing_files_count: m.existingFilesCount,
    deleted_files_count: m.deletedFilesCount,
    added_rows_count: m.addedRowsCount,
    existing_rows_count: m.existingRowsCount,
    deleted_rows_count: m.deletedRowsCount,
    partitions:
      m.partitions === null
        ? null
        : m.partitions.map((s) => ({
            contains_null: s.containsNull,
            contains_nan: s.containsNan,
            lower_bound: s.lowerBound === null ? null : toBuffer(s.lowerBound),
            upper_bound: s.upperBound === null ? null : toBuffer(s.upperBound),
          })),
    key_metadata: null,
  };
}

function fromManifestFileRecord(r: ManifestFileRecord): ManifestFile {
  return {
    manifestPath: r.manifest_path,
    manifestLength: r.manifest_length,
    partitionSpecId: r.partition_spec_id,
    content: r.content as 0 | 1,
    sequenceNumber: r.sequence_number,
    minSequenceNumber: r.min_sequence_number,
    addedSnapshotId: r.added_snapshot_id,
    addedFilesCount: r.added_files_count,
    existingFilesCount: r.existing_files_count,
    deletedFilesCount: r.deleted_files_count,
    addedRowsCount: r.added_rows_count,
    existingRowsCount: r.existing_rows_count,
    deletedRowsCount: r.deleted_rows_count,
    partitions:
      r.partitions === null
        ? null
        : r.partitions.map((s) => ({
            containsNull: s.contains_null,
            containsNan: s.contains_nan,
            lowerBound: s.lower_bound === null ? null : toBytes(s.lower_bound),
            upperBound: s.upper_bound === null ? null : toBytes(s.upper_bound),
          })),
  };
}

// ---------------------------------------------------------------------------
// Partition field summaries

const utf8 = new TextEncoder();

/** Single-value serialization (spec Appendix D): string as UTF-8, int as 4-byte little-endian. */
function serializeSingle(type: PartitionField['type'], v: string | number): Uint8Array {
  if (type === 'string') return utf8.encode(v as string);
  const out = new Uint8Array(4);
  new DataView(out.buffer).setInt32(0, v as number, true);
  return out;
}

// UTF-8 byte order is code point order, the order Iceberg compares strings in
// (UTF-16 code unit order, JS's `<`, differs above the BMP).
function compareBytes(a: Uint8Array, b: Uint8Array): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const d = (a[i] as number) - (b[i] as number);
    if (d !== 0) return d;
  }
  return a.length - b.length;
}

function summarize(f: PartitionField, entries: readonly ManifestEntry[]): FieldSummary {
  let containsNull = false;
  let lo: string | number | null = null;
  let hi: string | number | null = null;
  let loBytes: Uint8Array | null = null;
  let hiBytes: Uint8Array | null = null;
  for (const e of entries) {
    const v = e.dataFile.partition[f.name];
    if (v === null || v === undefined) {
      containsNull = true;
      continue;
    }
    if (f.type === 'string') {
      const b = serializeSingle('string', v);
      if (loBytes === null || compareBytes(b, loBytes) < 0) loBytes = b;
      if (hiBytes === null || compareBytes(b, hiBytes) > 0) hiBytes = b;
    } else {
      if (lo === null || (v as number) < (lo as number)) lo = v;
      if (hi === null || (v as number) > (hi as number)) hi = v;
    }
  }
  if (f.type === 'int') {
    loBytes = lo === null ? null : serializeSingle('int', lo);
    hiBytes = hi === null ? null : serializeSingle('int', hi);
  }
  // Neither strings nor ints can be NaN: false, as opposed to null (unknown).
  return { containsNull, containsNan: false, lowerBound: loBytes, upperBound: hiBytes };
}

// ---------------------------------------------------------------------------
// Object container framing (Avro spec "Object Container Files"), with avsc
// types for the header and block records.

const OCF_MAGIC = Buffer.from([0x4f, 0x62, 0x6a, 0x01]); // "Obj" 1
const headerType = avro.Type.forSchema({
  type: 'record',
  name: 'ocf_header',
  fields: [
    { name: 'magic', type: { type: 'fixed', name: 'ocf_magic', size: 4 } },
    { name: 'meta', type: { type: 'map', values: 'bytes' } },
    { name: 'sync', type: { type: 'fixed', name: 'ocf_sync', size: 16 } },
  ],
} as avro.Schema);
const blockType = avro.Type.forSchema({
  type: 'record',
  name: 'ocf_block',
  fields: [
    { name: 'count', type: 'long' },
    { name: 'data', type: 'bytes' },
    { name: 'sync', type: { type: 'fixed', name: 'ocf_sync', size: 16 } },
  ],
} as avro.Schema);

function encodeContainer(schema: AvroJson, type: avro.Type, records: readonly unknown[], metadata: Record<string, string>): Uint8Array {
  const meta: Record<string, Buffer> = {};
  for (const [k, v] of Object.entries(metadata)) meta[k] = Buffer.from(v, 'utf8');
  // The schema as written here, not avsc's export of it: the field-id,
  // element-id and logicalType attributes are the point of it.
  meta['avro.schema'] = Buffer.from(JSON.stringify(schema), 'utf8');
  meta['avro.codec'] = Buffer.from('null', 'utf8');
  const sync = randomBytes(16);
  const parts: Buffer[] = [headerType.toBuffer({ magic: OCF_MAGIC, meta, sync })];
  if (records.length > 0) {
    // One block: a manifest is small (one entry per data file of a commit).
    const data = Buffer.concat(
      records.map((r, i) => {
        try {
          return type.toBuffer(r);
        } catch (err) {
          throw new Error(`iceberg avro: record ${i} does not fit ${String((schema as { name?: string }).name)}: ${(err as Error).message}; check its numbers are integers and its strings strings`);
        }
      }),
    );
    parts.push(blockType.toBuffer({ count: records.length, data, sync }));
  }
  const out = Buffer.concat(parts);
  return new Uint8Array(out.buffer, out.byteOffset, out.byteLength);
}

function decodeContainer(bytes: Uint8Array, what: string): { metadata: Record<string, string>; records: unknown[]; writerSchema: unknown } {
  const buf = toBuffer(bytes);
  if (buf.length < 4 || !buf.subarray(0, 4).equals(OCF_MAGIC)) throw new Error(`iceberg ${what}: not an Avro object container file (no "Obj\\x01" magic); is this the right file?`);
  const head = headerType.decode(buf, 0);
  if (head.offset < 0) throw new Error(`iceberg ${what}: the Avro header is cut short (${buf.length} bytes); the file is truncated`);
  const header = head.value as { meta: Record<string, Buffer>; sync: Buffer };
  const metadata: Record<string, string> = {};
  for (const [k, v] of Object.entries(header.meta)) metadata[k] = v.toString('utf8');
  const schemaText = metadata['avro.schema'];
  if (schemaText === undefined) throw new Error(`iceberg ${what}: the Avro header has no avro.schema; the file was not written as an Avro container`);
  const writerSchema: unknown = JSON.parse(schemaText);
  const type = forSchema(writerSchema as AvroJson, schemaText);
  const codec = metadata['avro.codec'] ?? 'null';
  if (codec !== 'null' && codec !== 'deflate') throw new Error(`iceberg ${what}: Avro codec ${codec} is not supported here; only null and deflate`);
  const records: unknown[] = [];
  let pos = head.offset;
  while (pos < buf.length) {
    const block = blockType.decode(buf, pos);
    if (block.offset < 0) throw new Error(`iceberg ${what}: an Avro block at byte ${pos} is cut short; the file is truncated`);
    const b = block.value as { count: number; data: Buffer; sync: Buffer };
    if (!b.sync.equals(header.sync)) throw new Error(`iceberg ${what}: the Avro block at byte ${pos} has the wrong sync marker; the file is damaged`);
    const data = codec === 'deflate' ? inflateRawSync(b.data) : b.data;
    let at = 0;
    for (let i = 0; i < b.count; i++) {
      const r = type.decode(data, at);
      if (r.offset < 0) throw new Error(`iceberg ${what}: the Avro block at byte ${pos} holds fewer records than its count; the file is damaged`);
      records.push(r.value);
      at = r.offset;
    }
    pos = block.offset;
  }
  return { metadata, records, writerSchema };
}

function toBuffer(u: Uint8Array): Buffer {
  return Buffer.from(u.buffer, u.byteOffset, u.byteLength);
}

/** A plain Uint8Array copy, not a view into the decoded file. */
function toBytes(b: Buffer): Uint8Array {
  return new Uint8Array(b);
}
