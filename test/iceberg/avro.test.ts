/**
 * Iceberg manifests and manifest lists (plugins/format-iceberg/src/avro.ts):
 * round trip through our decoder, and the same bytes read by a reader we did
 * not write (icebird's avroMetadata/avroRead) for values, the writer schema's
 * field ids and names, and the OCF key-value metadata the spec requires.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { avroMetadata, avroRead } from 'icebird';
import {
  type DataFile,
  decodeManifest,
  decodeManifestList,
  encodeManifest,
  encodeManifestList,
  type ManifestEntry,
  manifestFileOf,
  type PartitionField,
} from '../../plugins/format-iceberg/src/avro.js';
import { checkAvroFiles } from '../support/iceberg.js';

const SOURCE: PartitionField = { name: 'source', fieldId: 1000, type: 'string' };
const DAY: PartitionField = { name: 'ts_day', fieldId: 1001, type: 'int' };
const TWO = [SOURCE, DAY];
const SCHEMA_JSON = JSON.stringify({
  type: 'struct',
  'schema-id': 0,
  fields: [
    { id: 1, name: 'id', required: true, type: 'long' },
    { id: 2, name: 'source', required: false, type: 'string' },
    { id: 3, name: 'ts', required: false, type: 'timestamptz' },
  ],
});
const SPEC_JSON = JSON.stringify([
  { name: 'source', transform: 'identity', 'source-id': 2, 'field-id': 1000 },
  { name: 'ts_day', transform: 'day', 'source-id': 3, 'field-id': 1001 },
]);
const utf8 = (s: string) => new TextEncoder().encode(s);
const le32 = (n: number) => {
  const b = new Uint8Array(4);
  new DataView(b.buffer).setInt32(0, n, true);
  return b;
};
const le64 = (n: bigint) => {
  const b = new Uint8Array(8);
  new DataView(b.buffer).setBigInt64(0, n, true);
  return b;
};

function file(path: string, partition: DataFile['partition'], rows: number): DataFile {
  return {
    filePath: path,
    partition,
    recordCount: rows,
    fileSizeInBytes: 1000 + rows,
    valueCounts: new Map([
      [1, rows],
      [2, rows],
    ]),
    nullValueCounts: new Map([
      [1, 0],
      [2, 1],
    ]),
    nanValueCounts: new Map(),
    lowerBounds: new Map([
      [1, le64(1n)],
      [2, utf8('a')],
    ]),
    upperBounds: new Map([
      [1, le64(BigInt(rows))],
      [2, utf8('zz')],
    ]),
  };
}

const added = (dataFile: DataFile): ManifestEntry => ({ status: 1, snapshotId: null, sequenceNumber: null, fileSequenceNumber: null, dataFile });

const ENTRIES: ManifestEntry[] = [
  added(file('s3://bucket/t/data/source=web/ts_day=2026-01-01/a.parquet', { source: 'web', ts_day: 20454 }, 10)),
  added(file('s3://bucket/t/data/source=app/ts_day=2026-01-03/b.parquet', { source: 'app', ts_day: 20456 }, 5)),
  added(file('s3://bucket/t/data/source=null/ts_day=null/c.parquet', { source: null, ts_day: null }, 2)),
];

/** icebird reads through a hyparquet DataReader over the bytes. */
function icebird(bytes: Uint8Array) {
  const reader = { view: new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength), offset: 0 };
  const { metadata, syncMarker } = avroMetadata(reader);
  return { metadata, rows: avroRead({ reader, metadata, syncMarker }) };
}

type SchemaNode = { name?: string; type?: unknown; fields?: SchemaField[]; items?: unknown; logicalType?: string; 'element-id'?: number };
type SchemaField = { name: string; type: unknown; 'field-id'?: number; default?: unknown };

/** The non-null branch of an optional field's type. */
function inner(t: unknown): SchemaNode {
  if (Array.isArray(t)) {
    assert.equal(t[0], 'null', 'optional fields are unions with null first');
    return (typeof t[1] === 'string' ? { type: t[1] } : t[1]) as SchemaNode;
  }
  return (typeof t === 'string' ? { type: t } : t) as SchemaNode;
}
function field(rec: SchemaNode, name: string): SchemaField {
  const f = rec.fields?.find((x) => x.name === name);
  assert.ok(f, `field ${name} in ${rec.name}`);
  return f;
}
const ids = (rec: SchemaNode) => Object.fromEntries((rec.fields ?? []).map((f) => [f.name, f['field-id']]));

test('manifest with two partition fields and a null partition: round trip, and icebird reads the values', () => {
  const bytes = encodeManifest({ schemaJson: SCHEMA_JSON, schemaId: 0, specId: 0, partitionFields: TWO, partitionSpecJson: SPEC_JSON, entries: ENTRIES });

  const back = decodeManifest(bytes);
  assert.deepEqual(back.entries, ENTRIES);
  assert.equal(back.metadata.schema, SCHEMA_JSON);
  assert.equal(back.metadata['schema-id'], '0');
  assert.equal(back.metadata['partition-spec'], SPEC_JSON);
  assert.equal(back.metadata['partition-spec-id'], '0');
  assert.equal(back.metadata['format-version'], '2');
  assert.equal(back.metadata.content, 'data');

  const { metadata, rows } = icebird(bytes);
  assert.deepEqual(metadata.schema, JSON.parse(SCHEMA_JSON));
  assert.equal(metadata['schema-id'], '0');
  assert.equal(metadata['partition-spec'], SPEC_JSON);
  assert.equal(metadata['partition-spec-id'], '0');
  assert.equal(metadata['format-version'], '2');
  assert.equal(metadata.content, 'data');
  assert.equal(metadata['avro.codec'], 'null');

  assert.equal(rows.length, 3);
  const [a, , c] = rows;
  assert.equal(a?.status, 1);
  assert.equal(a?.snapshot_id, undefined, 'null snapshot id: inherited from the manifest list');
  assert.equal(a?.sequence_number, undefined);
  assert.equal(a?.file_sequence_number, undefined);
  assert.equal(a?.data_file.content, 0);
  assert.equal(a?.data_file.file_path, ENTRIES[0]?.dataFile.filePath);
  assert.equal(a?.data_file.file_format, 'PARQUET');
  assert.deepEqual({ ...a?.data_file.partition }, { source: 'web', ts_day: 20454 });
  assert.equal(a?.data_file.record_count, 10n);
  assert.equal(a?.data_file.file_size_in_bytes, 1010n);
  assert.deepEqual(a?.data_file.value_counts, [
    { key: 1, value: 10n },
    { key: 2, value: 10n },
  ]);
  assert.deepEqual(a?.data_file.null_value_counts, [
    { key: 1, value: 0n },
    { key: 2, value: 1n },
  ]);
  assert.deepEqual(
    a?.data_file.lower_bounds.map((kv: { key: number; value: Uint8Array }) => [kv.key, [...kv.value]]),
    [
      [1, [...le64(1n)]],
      [2, [...utf8('a')]],
    ],
  );
  assert.deepEqual(
    a?.data_file.upper_bounds.map((kv: { key: number; value: Uint8Array }) => [kv.key, [...kv.value]]),
    [
      [1, [...le64(10n)]],
      [2, [...utf8('zz')]],
    ],
  );
  // Maps, never null (issue 31: pyiceberg's inspect.entries() reads both as maps).
  assert.deepEqual(a?.data_file.column_sizes, []);
  assert.deepEqual(a?.data_file.nan_value_counts, []);
  assert.equal(a?.data_file.sort_order_id, undefined);
  // Null partition values are the union's null branch, not a sentinel.
  assert.deepEqual({ ...c?.data_file.partition }, { source: undefined, ts_day: undefined });
});

test('manifest writer schema: spec names, field ids, null-first optional unions, map element records', () => {
  const bytes = encodeManifest({ schemaJson: SCHEMA_JSON, schemaId: 3, specId: 2, partitionFields: TWO, partitionSpecJson: SPEC_JSON, entries: ENTRIES });
  const { metadata } = icebird(bytes);
  assert.equal(metadata['schema-id'], '3');
  assert.equal(metadata['partition-spec-id'], '2');
  const entry = metadata['avro.schema'] as SchemaNode;
  assert.equal(entry.name, 'manifest_entry');
  assert.deepEqual(ids(entry), { status: 0, snapshot_id: 1, sequence_number: 3, file_sequence_number: 4, data_file: 2 });
  for (const n of ['snapshot_id', 'sequence_number', 'file_sequence_number']) {
    assert.deepEqual(field(entry, n).type, ['null', 'long']);
    assert.equal(field(entry, n).default, null);
  }
  const dataFile = inner(field(entry, 'data_file').type);
  assert.equal(dataFile.name, 'r2');
  assert.deepEqual(ids(dataFile), {
    content: 134,
    file_path: 100,
    file_format: 101,
    partition: 102,
    record_count: 103,
    file_size_in_bytes: 104,
    column_sizes: 108,
    value_counts: 109,
    null_value_counts: 110,
    nan_value_counts: 137,
    lower_bounds: 125,
    upper_bounds: 128,
    key_metadata: 131,
    split_offsets: 132,
    equality_ids: 135,
    sort_order_id: 140,
  });
  const partition = inner(field(dataFile, 'partition').type);
  assert.equal(partition.name, 'r102');
  assert.deepEqual(ids(partition), { source: 1000, ts_day: 1001 });
  assert.deepEqual(field(partition, 'source').type, ['null', 'string']);
  assert.deepEqual(field(partition, 'ts_day').type, ['null', 'int']);

  const maps: Record<string, [number, number, string]> = {
    column_sizes: [117, 118, 'long'],
    value_counts: [119, 120, 'long'],
    null_value_counts: [121, 122, 'long'],
    nan_value_counts: [138, 139, 'long'],
    lower_bounds: [126, 127, 'bytes'],
    upper_bounds: [129, 130, 'bytes'],
  };
  for (const [name, [k, v, valueType]] of Object.entries(maps)) {
    const f = field(dataFile, name);
    assert.equal(f.default, null, name);
    const arr = inner(f.type);
    assert.equal(arr.type, 'array', name);
    assert.equal(arr.logicalType, 'map', name);
    const kv = arr.items as SchemaNode;
    assert.equal(kv.name, `k${k}_v${v}`);
    assert.deepEqual(kv.fields, [
      { name: 'key', type: 'int', 'field-id': k },
      { name: 'value', type: valueType, 'field-id': v },
    ]);
  }
  assert.equal(inner(field(dataFile, 'split_offsets').type)['element-id'], 133);
  assert.equal(inner(field(dataFile, 'equality_ids').type)['element-id'], 136);
});

test('manifest list: summaries from the entries, icebird reads values, field ids 500-519 and the metadata', () => {
  const manifestBytes = encodeManifest({ schemaJson: SCHEMA_JSON, schemaId: 0, specId: 0, partitionFields: TWO, partitionSpecJson: SPEC_JSON, entries: ENTRIES });
  const snapshotId = 2 ** 53 - 1; // the largest id a JS number carries exactly
  const mf = manifestFileOf({
    manifestPath: 's3://bucket/t/metadata/m0.avro',
    manifestLength: manifestBytes.length,
    specId: 0,
    snapshotId,
    sequenceNumber: 7,
    partitionFields: TWO,
    entries: ENTRIES,
  });
  assert.deepEqual(mf, {
    manifestPath: 's3://bucket/t/metadata/m0.avro',
    manifestLength: manifestBytes.length,
    partitionSpecId: 0,
    content: 0,
    sequenceNumber: 7,
    minSequenceNumber: 7,
    addedSnapshotId: snapshotId,
    addedFilesCount: 3,
    existingFilesCount: 0,
    deletedFilesCount: 0,
    addedRowsCount: 17,
    existingRowsCount: 0,
    deletedRowsCount: 0,
    partitions: [
      { containsNull: true, containsNan: false, lowerBound: utf8('app'), upperBound: utf8('web') },
      { containsNull: true, containsNan: false, lowerBound: le32(20454), upperBound: le32(20456) },
    ],
  });

  const bytes = encodeManifestList({ snapshotId, parentSnapshotId: null, sequenceNumber: 7, manifests: [mf] });
  assert.deepEqual(decodeManifestList(bytes), [mf]);

  const { metadata, rows } = icebird(bytes);
  assert.equal(metadata['snapshot-id'], String(snapshotId));
  assert.equal(metadata['parent-snapshot-id'], 'null');
  assert.equal(metadata['sequence-number'], '7');
  assert.equal(metadata['format-version'], '2');
  assert.equal(rows.length, 1);
  const r = rows[0];
  assert.equal(r?.manifest_path, 's3://bucket/t/metadata/m0.avro');
  assert.equal(r?.manifest_length, BigInt(manifestBytes.length));
  assert.equal(r?.partition_spec_id, 0);
  assert.equal(r?.content, 0);
  assert.equal(r?.sequence_number, 7n);
  assert.equal(r?.min_sequence_number, 7n);
  assert.equal(r?.added_snapshot_id, BigInt(snapshotId));
  assert.equal(r?.added_files_count, 3);
  assert.equal(r?.existing_files_count, 0);
  assert.equal(r?.deleted_files_count, 0);
  assert.equal(r?.added_rows_count, 17n);
  assert.equal(r?.existing_rows_count, 0n);
  assert.equal(r?.deleted_rows_count, 0n);
  assert.equal(r?.key_metadata, undefined);
  assert.deepEqual(
    r?.partitions.map((s: { contains_null: boolean; contains_nan: boolean; lower_bound: Uint8Array; upper_bound: Uint8Array }) => [
      s.contains_null,
      s.contains_nan,
      [...s.lower_bound],
      [...s.upper_bound],
    ]),
    [
      [true, false, [...utf8('app')], [...utf8('web')]],
      [true, false, [...le32(20454)], [...le32(20456)]],
    ],
  );

  const list = metadata['avro.schema'] as SchemaNode;
  assert.equal(list.name, 'manifest_file');
  assert.deepEqual(ids(list), {
    manifest_path: 500,
    manifest_length: 501,
    partition_spec_id: 502,
    content: 517,
    sequence_number: 515,
    min_sequence_number: 516,
    added_snapshot_id: 503,
    added_files_count: 504,
    existing_files_count: 505,
    deleted_files_count: 506,
    added_rows_count: 512,
    existing_rows_count: 513,
    deleted_rows_count: 514,
    partitions: 507,
    key_metadata: 519,
  });
  const partitions = inner(field(list, 'partitions').type);
  assert.equal(partitions['element-id'], 508);
  const summary = partitions.items as SchemaNode;
  assert.equal(summary.name, 'r508');
  assert.deepEqual(ids(summary), { contains_null: 509, contains_nan: 518, lower_bound: 510, upper_bound: 511 });
  assert.deepEqual(field(summary, 'lower_bound').type, ['null', 'bytes']);
});

test('a partition field that is null in every entry: contains_null, no bounds; a parent snapshot id', () => {
  const entries = [added(file('file:///t/data/x.parquet', { source: null }, 4)), added(file('file:///t/data/y.parquet', { source: null }, 6))];
  const bytes = encodeManifest({ schemaJson: SCHEMA_JSON, schemaId: 0, specId: 1, partitionFields: [SOURCE], partitionSpecJson: '[]', entries });
  assert.deepEqual(decodeManifest(bytes).entries, entries);
  const rows = icebird(bytes).rows;
  assert.deepEqual(
    rows.map((r) => ({ ...r.data_file.partition })),
    [{ source: undefined }, { source: undefined }],
  );

  const mf = manifestFileOf({ manifestPath: 'file:///t/metadata/m1.avro', manifestLength: bytes.length, specId: 1, snapshotId: 42, sequenceNumber: 2, partitionFields: [SOURCE], entries });
  assert.deepEqual(mf.partitions, [{ containsNull: true, containsNan: false, lowerBound: null, upperBound: null }]);
  const list = encodeManifestList({ snapshotId: 43, parentSnapshotId: 42, sequenceNumber: 2, manifests: [mf] });
  assert.deepEqual(decodeManifestList(list), [mf]);
  const read = icebird(list);
  assert.equal(read.metadata['parent-snapshot-id'], '42');
  assert.equal(read.metadata['snapshot-id'], '43');
  assert.equal(read.rows[0]?.partitions[0].contains_null, true);
  assert.equal(read.rows[0]?.partitions[0].lower_bound, undefined);
  assert.equal(read.rows[0]?.partitions[0].upper_bound, undefined);
});

test('string bounds in code point order (UTF-8 bytes), not UTF-16 order', () => {
  // U+1F600 sorts before U+FFFD in UTF-16 code units but after it by code point.
  const entries = [added(file('file:///a', { source: '\u{1F600}' }, 1)), added(file('file:///b', { source: '\uFFFD' }, 1))];
  const mf = manifestFileOf({ manifestPath: 'file:///m', manifestLength: 1, specId: 0, snapshotId: 1, sequenceNumber: 1, partitionFields: [SOURCE], entries });
  assert.deepEqual(mf.partitions?.[0]?.lowerBound, utf8('\uFFFD'));
  assert.deepEqual(mf.partitions?.[0]?.upperBound, utf8('\u{1F600}'));
});

test('explicit ids and sequence numbers; EXISTING and DELETED counted apart from ADDED; min sequence over live files', () => {
  const entries: ManifestEntry[] = [
    { status: 1, snapshotId: 9, sequenceNumber: null, fileSequenceNumber: null, dataFile: file('file:///n', { source: 'a' }, 3) },
    { status: 0, snapshotId: 5, sequenceNumber: 4, fileSequenceNumber: 4, dataFile: file('file:///e', { source: 'b' }, 20) },
    { status: 2, snapshotId: 9, sequenceNumber: 1, fileSequenceNumber: 2, dataFile: file('file:///d', { source: 'c' }, 7) },
  ];
  const bytes = encodeManifest({ schemaJson: SCHEMA_JSON, schemaId: 0, specId: 0, partitionFields: [SOURCE], partitionSpecJson: '[]', entries });
  assert.deepEqual(decodeManifest(bytes).entries, entries);
  const rows = icebird(bytes).rows;
  assert.deepEqual(
    rows.map((r) => [r.status, r.snapshot_id, r.sequence_number, r.file_sequence_number]),
    [
      [1, 9n, undefined, undefined],
      [0, 5n, 4n, 4n],
      [2, 9n, 1n, 2n],
    ],
  );
  const mf = manifestFileOf({ manifestPath: 'file:///m', manifestLength: bytes.length, specId: 0, snapshotId: 9, sequenceNumber: 6, partitionFields: [SOURCE], entries });
  assert.equal(mf.minSequenceNumber, 4, 'the DELETED entry (1) is not live; the ADDED one inherits 6');
  assert.deepEqual(
    [mf.addedFilesCount, mf.existingFilesCount, mf.deletedFilesCount, mf.addedRowsCount, mf.existingRowsCount, mf.deletedRowsCount],
    [1, 1, 1, 3, 20, 7],
  );
});

test('an empty manifest and an unpartitioned spec read back as no entries', () => {
  const bytes = encodeManifest({ schemaJson: SCHEMA_JSON, schemaId: 0, specId: 0, partitionFields: [], partitionSpecJson: '[]', entries: [] });
  assert.deepEqual(decodeManifest(bytes).entries, []);
  assert.deepEqual(icebird(bytes).rows, []);
  const mf = manifestFileOf({ manifestPath: 'file:///m', manifestLength: bytes.length, specId: 0, snapshotId: 1, sequenceNumber: 1, partitionFields: [], entries: [] });
  assert.deepEqual(mf.partitions, []);
  assert.equal(mf.addedFilesCount, 0);
});

test('entries that do not fit the spec are refused with what to do', () => {
  const base = { schemaJson: SCHEMA_JSON, schemaId: 0, specId: 0, partitionSpecJson: SPEC_JSON, partitionFields: TWO };
  assert.throws(() => encodeManifest({ ...base, entries: [added(file('file:///a', { source: 'web' }, 1))] }), /no value for partition field "ts_day"; pass null/);
  assert.throws(() => encodeManifest({ ...base, entries: [added(file('file:///a', { source: 'web', ts_day: 'x' }, 1))] }), /"ts_day" is an int/);
  assert.throws(() => encodeManifest({ ...base, entries: [added(file('file:///a', { source: 'web', ts_day: 1, hour: 2 }, 1))] }), /"hour" is not a field/);
  const existing: ManifestEntry = { status: 0, snapshotId: 1, sequenceNumber: null, fileSequenceNumber: null, dataFile: file('file:///a', { source: 'web', ts_day: 1 }, 1) };
  assert.throws(() => encodeManifest({ ...base, entries: [existing] }), /must carry its data and file sequence numbers/);
  assert.throws(() => decodeManifest(new Uint8Array([1, 2, 3, 4, 5])), /not an Avro object container file/);
  const good = encodeManifest({ ...base, entries: ENTRIES });
  assert.throws(() => decodeManifest(good.subarray(0, good.length - 20)), /truncated/);
});

test('column_sizes and nan_value_counts decode with avsc as maps, never null: empty, or the NaN counts given (issue 31)', async () => {
  const nans = { ...file('s3://bucket/t/data/source=web/ts_day=2026-01-01/d.parquet', { source: 'web', ts_day: 20454 }, 8), nanValueCounts: new Map([[4, 3]]) };
  const { nanValueCounts: _, ...bare } = file('s3://bucket/t/data/source=app/ts_day=2026-01-01/e.parquet', { source: 'app', ts_day: 20454 }, 4);
  const bytes = encodeManifest({ schemaJson: SCHEMA_JSON, schemaId: 0, specId: 0, partitionFields: TWO, partitionSpecJson: SPEC_JSON, entries: [added(nans), added(bare)] });
  const { manifests } = await checkAvroFiles([{ name: 'm.avro', bytes }], { requireMetrics: true });
  const [a, b] = manifests[0]!.entries.map((e) => e.data_file as unknown as Record<string, { key: number; value: bigint }[] | null>);
  assert.deepEqual(a!.column_sizes, []);
  assert.deepEqual(
    a!.nan_value_counts?.map((x) => [x.key, x.value]),
    [[4, 3n]],
  );
  assert.deepEqual(b!.column_sizes, []);
  assert.deepEqual(b!.nan_value_counts, []);
  assert.deepEqual(decodeManifest(bytes).entries[0]!.dataFile.nanValueCounts, new Map([[4, 3]]));
});
