/**
 * A second writer of an Iceberg table in a JDBC catalog, committing as
 * pyiceberg's `SqlCatalog` does (`commit_table`): it reads the table's row of
 * `iceberg_tables`, writes one Parquet data file, a manifest, a manifest list
 * carrying the parent's manifests and a new metadata file named
 * `<NNNNN>-<uuid>.metadata.json`, then swaps the row with
 * `UPDATE iceberg_tables SET metadata_location = new, previous_metadata_location = old
 *  WHERE catalog_name = … AND table_namespace = … AND table_name = … AND metadata_location = old`;
 * a row count of 0 is pyiceberg's CommitFailedException, and the writer
 * starts again from a fresh read. Not hypsink's commit code: only its Avro
 * encoders (the format, not the protocol) are reused.
 * @ref LLP 0077
 */
import { randomUUID } from 'node:crypto';
import { promises as fsp } from 'node:fs';
import { dirname } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Field, Int64, makeData, makeVector, RecordBatch, Schema, Struct, Table, TimestampMicrosecond, tableToIPC, Utf8, vectorFromArray } from 'apache-arrow';
import * as pw from 'parquet-wasm/node';
import pg from 'pg';
import { decodeManifestList, encodeManifest, encodeManifestList, type ManifestEntry, manifestFileOf, type PartitionField } from '../../plugins/format-iceberg/src/avro.js';

export interface SqlCatalogTable {
  /** The catalog database's URL. */
  readonly url: string;
  readonly catalog: string;
  readonly namespace: string;
  readonly table: string;
}

/** The row's metadata_location, or null without a row. */
export async function metadataLocation(t: SqlCatalogTable): Promise<{ current: string; previous: string | null } | null> {
  const c = new pg.Client({ connectionString: t.url });
  await c.connect();
  try {
    // No catalog table yet is no table.
    if ((await c.query("SELECT to_regclass('iceberg_tables') AS t")).rows[0]?.t === null) return null;
    const r = await c.query<{ metadata_location: string; previous_metadata_location: string | null }>(
      'SELECT metadata_location, previous_metadata_location FROM iceberg_tables WHERE catalog_name = $1 AND table_namespace = $2 AND table_name = $3',
      [t.catalog, t.namespace, t.table],
    );
    const row = r.rows[0];
    return row ? { current: row.metadata_location, previous: row.previous_metadata_location } : null;
  } finally {
    await c.end();
  }
}

type Json = Record<string, unknown>;
/** The parts of a table's metadata a foreign writer reads. */
export interface Metadata extends Json {
  location: string;
  'last-sequence-number': number;
  'last-updated-ms': number;
  'current-snapshot-id': number;
  'current-schema-id': number;
  'default-spec-id': number;
  schemas: { 'schema-id': number; fields: { id: number; name: string }[] }[];
  'partition-specs': { 'spec-id': number; fields: { name: string; transform: string; 'source-id': number; 'field-id': number }[] }[];
  snapshots: { 'snapshot-id': number; 'manifest-list': string; summary: Record<string, string> }[];
  'snapshot-log': { 'timestamp-ms': number; 'snapshot-id': number }[];
  'metadata-log': { 'timestamp-ms': number; 'metadata-file': string }[];
  refs: Record<string, unknown>;
}

/** One append prepared against the head it read; `commit` swaps it in, or answers false when the head moved. */
export interface PreparedAppend {
  /** The metadata_location it was made from. */
  readonly base: string;
  /** The new metadata file's location. */
  readonly next: string;
  /** The swap, on its own connection (or on `client`, e.g. inside a test's transaction). */
  commit(client?: pg.ClientBase): Promise<boolean>;
}

const DAY_MS = 86_400_000;

/** An append's snapshot as a foreign writer adds it: the data file, the manifest and the manifest list written, the snapshot not committed. */
export interface ForeignSnapshot extends Json {
  readonly 'snapshot-id': number;
  readonly 'parent-snapshot-id'?: number;
  readonly 'sequence-number': number;
  readonly 'timestamp-ms': number;
  readonly 'manifest-list': string;
  readonly summary: Record<string, string>;
  readonly 'schema-id': number;
}

/**
 * Write an append of `ids` as source `source` (rows `id`, `ts` = 2026-01-01 +
 * id seconds, `msg` = `f<id>`: the shape of the tests' `events`) on top of
 * table metadata `m`: one Parquet data file, a manifest, a manifest list
 * carrying the parent's manifests. Returns the snapshot to commit (by any
 * catalog's protocol) and its timestamp.
 */
export async function writeAppendFiles(m: Metadata, source: string, ids: readonly number[]): Promise<{ snapshot: ForeignSnapshot; now: number }> {
  const schema = m.schemas.find((s) => s['schema-id'] === m['current-schema-id'])!;
  const spec = m['partition-specs'].find((s) => s['spec-id'] === m['default-spec-id'])!;
  const idOf = (name: string) => schema.fields.find((f) => f.name === name)!.id;
  const tableDir = fileURLToPath(m.location);
  const day = Math.floor((Date.UTC(2026, 0, 1) + ids[0]! * 1000) / DAY_MS);

  // The data file: one day, one source, field ids as Iceberg readers map them.
  const meta = (name: string) => new Map([['PARQUET:field_id', String(idOf(name))]]);
  const fields = [new Field('source', new Utf8(), false, meta('source')), new Field('id', new Int64(), false, meta('id')), new Field('ts', new TimestampMicrosecond('UTC'), false, meta('ts')), new Field('msg', new Utf8(), true, meta('msg'))];
  const cols = [
    vectorFromArray(
      ids.map(() => source),
      new Utf8(),
    ),
    makeVector(makeData({ type: new Int64(), length: ids.length, nullCount: 0, data: BigInt64Array.from(ids.map(BigInt)) })),
    makeVector(makeData({ type: new TimestampMicrosecond('UTC'), length: ids.length, nullCount: 0, data: BigInt64Array.from(ids.map((i) => BigInt(Date.UTC(2026, 0, 1) + i * 1000) * 1000n)) })),
    vectorFromArray(
      ids.map((i) => `f${i}`),
      new Utf8(),
    ),
  ];
  const batch = new RecordBatch(new Schema(fields), makeData({ type: new Struct(fields), length: ids.length, nullCount: 0, children: cols.map((c) => c.data[0]!) }));
  const parquet = pw.writeParquet(pw.Table.fromIPCStream(tableToIPC(new Table([batch]), 'stream')), new pw.WriterPropertiesBuilder().build());
  const dataPath = `${tableDir}/data/foreign/${randomUUID()}.parquet`;
  await write(dataPath, parquet);

  const partitionFields: PartitionField[] = spec.fields.map((f) => ({ name: f.name, fieldId: f['field-id'], type: f.transform === 'day' ? 'int' : 'string' }));
  const partition = Object.fromEntries(spec.fields.map((f) => [f.name, f.transform === 'day' ? day : source]));
  const entries: ManifestEntry[] = [
    {
      status: 1,
      snapshotId: null,
      sequenceNumber: null,
      fileSequenceNumber: null,
      dataFile: { filePath: pathToFileURL(dataPath).href, partition, recordCount: ids.length, fileSizeInBytes: parquet.length, valueCounts: new Map(), nullValueCounts: new Map(), lowerBounds: new Map(), upperBounds: new Map() },
    },
  ];
  const manifest = encodeManifest({ schemaJson: JSON.stringify(schema), schemaId: schema['schema-id'], specId: spec['spec-id'], partitionFields, partitionSpecJson: JSON.stringify(spec.fields), entries });
  const manifestPath = `${tableDir}/metadata/${randomUUID()}-m0.avro`;
  await write(manifestPath, manifest);

  const snapshotId = Math.floor(Math.random() * 2 ** 52) + 1;
  const seq = m['last-sequence-number'] + 1;
  const parent = m.snapshots.find((s) => s['snapshot-id'] === m['current-snapshot-id']);
  const carried = parent ? decodeManifestList(await fsp.readFile(fileURLToPath(parent['manifest-list']))) : [];
  const mine = manifestFileOf({ manifestPath: pathToFileURL(manifestPath).href, manifestLength: manifest.length, specId: spec['spec-id'], snapshotId, sequenceNumber: seq, partitionFields, entries });
  const list = encodeManifestList({ snapshotId, parentSnapshotId: parent ? parent['snapshot-id'] : null, sequenceNumber: seq, manifests: [...carried, mine] });
  const listPath = `${tableDir}/metadata/snap-${snapshotId}-1-${randomUUID()}.avro`;
  await write(listPath, list);

  const now = Math.max(Date.now(), m['last-updated-ms'] + 1);
  const snapshot: ForeignSnapshot = {
    'snapshot-id': snapshotId,
    ...(parent ? { 'parent-snapshot-id': parent['snapshot-id'] } : {}),
    'sequence-number': seq,
    'timestamp-ms': now,
    'manifest-list': pathToFileURL(listPath).href,
    summary: { operation: 'append', 'added-data-files': '1', 'added-records': String(ids.length) },
    'schema-id': schema['schema-id'],
  };
  return { snapshot, now };
}

/**
 * Prepare an append of `ids` as source `source` (rows `id`, `ts` = 2026-01-01 +
 * id seconds, `msg` = `f<id>`: the shape of the tests' `events`), against the
 * table's current version, committed by SqlCatalog's swap of its row.
 */
export async function prepareAppend(t: SqlCatalogTable, source: string, ids: readonly number[]): Promise<PreparedAppend> {
  const loc = await metadataLocation(t);
  if (loc === null) throw new Error(`no table ${t.namespace}.${t.table} in catalog ${t.catalog}`);
  const base = loc.current;
  const m = JSON.parse(await fsp.readFile(fileURLToPath(base), 'utf8')) as Metadata;
  const { snapshot, now } = await writeAppendFiles(m, source, ids);
  const snapshotId = snapshot['snapshot-id'];
  const seq = snapshot['sequence-number'];
  const version = Number(/(\d+)-[^/]*\.metadata\.json$/.exec(base)?.[1] ?? /v(\d+)\.metadata\.json$/.exec(base)?.[1] ?? -1) + 1;
  const next = {
    ...m,
    'last-sequence-number': seq,
    'last-updated-ms': now,
    'current-snapshot-id': snapshotId,
    refs: { ...m.refs, main: { 'snapshot-id': snapshotId, type: 'branch' } },
    snapshots: [...m.snapshots, snapshot],
    'snapshot-log': [...m['snapshot-log'], { 'timestamp-ms': now, 'snapshot-id': snapshotId }],
    'metadata-log': [...m['metadata-log'], { 'timestamp-ms': m['last-updated-ms'], 'metadata-file': base }],
  };
  const nextPath = `${fileURLToPath(m.location)}/metadata/${String(version).padStart(5, '0')}-${randomUUID()}.metadata.json`;
  await write(nextPath, new TextEncoder().encode(JSON.stringify(next)));
  const nextLocation = pathToFileURL(nextPath).href;
  return {
    base,
    next: nextLocation,
    async commit(client?: pg.ClientBase) {
      const swap = async (c: pg.ClientBase) =>
        (
          await c.query(
            'UPDATE iceberg_tables SET metadata_location = $4, previous_metadata_location = $5 WHERE catalog_name = $1 AND table_namespace = $2 AND table_name = $3 AND metadata_location = $5',
            [t.catalog, t.namespace, t.table, nextLocation, base],
          )
        ).rowCount === 1;
      if (client) return swap(client);
      const c = new pg.Client({ connectionString: t.url });
      await c.connect();
      try {
        return await swap(c);
      } finally {
        await c.end();
      }
    },
  };
}

/** pyiceberg's `table.append` as an application runs it: on CommitFailedException, read again and retry. Returns the lost swaps. */
export async function append(t: SqlCatalogTable, source: string, ids: readonly number[]): Promise<number> {
  for (let lost = 0; lost < 50; lost++) {
    if (await (await prepareAppend(t, source, ids)).commit()) return lost;
  }
  throw new Error('50 commits in a row lost');
}

async function write(path: string, bytes: Uint8Array): Promise<void> {
  await fsp.mkdir(dirname(path), { recursive: true });
  await fsp.writeFile(path, bytes, { flag: 'wx' });
}
