/**
 * The Iceberg read harness itself (test/support/iceberg.ts): the loopback file
 * server, fetch routing, the avsc + spec check of manifests, and the atomic
 * If-None-Match front on s3rver. A tiny v2 table is built here by hand (avsc
 * for the Avro files, parquet-wasm for the data file) so icebird has something
 * real to read; the writer under test is not involved.
 */
import assert from 'node:assert/strict';
import { mkdir, symlink, writeFile } from 'node:fs/promises';
import { request } from 'node:http';
import path from 'node:path';
import { describe, test } from 'node:test';
import { pathToFileURL } from 'node:url';
import {
  CompleteMultipartUploadCommand,
  CreateMultipartUploadCommand,
  GetObjectCommand,
  PutObjectCommand,
  S3Client,
  UploadPartCommand,
} from '@aws-sdk/client-s3';
import { tableFromArrays, tableToIPC } from 'apache-arrow';
import avro from 'avsc';
import * as pw from 'parquet-wasm/node';
import {
  avroFilesOf,
  avroFilesOfS3,
  checkAvroFiles,
  fileRoute,
  readIcebergAt,
  readIcebergTable,
  s3Route,
  serveDir,
  startConditionalS3,
  withRoutedFetch,
} from '../support/iceberg.js';
import { S3RVER_ACCESS_KEY_ID, S3RVER_SECRET_ACCESS_KEY } from '../support/s3server.js';
import { tempDir } from '../support/tmp.js';

// ---------------------------------------------------------------- helpers

function s3Client(endpoint: string): S3Client {
  return new S3Client({
    region: 'us-east-1',
    endpoint,
    forcePathStyle: true,
    maxAttempts: 1,
    credentials: { accessKeyId: S3RVER_ACCESS_KEY_ID, secretAccessKey: S3RVER_SECRET_ACCESS_KEY },
  });
}

/** A raw request (fetch would normalize `..` away before it is sent). */
function rawGet(url: string, rawPath: string): Promise<number> {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const r = request({ host: u.hostname, port: u.port, path: rawPath, method: 'GET' }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? 0));
    });
    r.on('error', reject);
    r.end();
  });
}

type Json = Record<string, unknown>;
const clone = <T>(v: T): T => JSON.parse(JSON.stringify(v)) as T;

async function avroBytes(schema: Json, records: unknown[], meta: Record<string, string>): Promise<Uint8Array> {
  const metadata: Record<string, Buffer> = {};
  for (const [k, v] of Object.entries(meta)) metadata[k] = Buffer.from(v);
  // avsc takes `metadata` (containers.js BlockEncoder) though its typings omit it.
  const encOpts = { metadata } as Partial<avro.EncoderOptions>;
  const enc = new avro.streams.BlockEncoder(schema as avro.Schema, encOpts);
  const chunks: Buffer[] = [];
  enc.on('data', (c: Buffer) => chunks.push(c));
  const done = new Promise<void>((resolve, reject) => {
    enc.on('end', () => resolve());
    enc.on('error', reject);
  });
  for (const r of records) enc.write(r);
  enc.end();
  await done;
  return Buffer.concat(chunks);
}

const nullable = (t: unknown) => ['null', t];
const kvArray = (name: string, keyId: number, valueId: number, value: string) => ({
  type: 'array',
  logicalType: 'map',
  items: {
    type: 'record',
    name,
    fields: [
      { name: 'key', type: 'int', 'field-id': keyId },
      { name: 'value', type: value, 'field-id': valueId },
    ],
  },
});

/** A v2 manifest_entry writer schema, unpartitioned, with the metrics maps. */
function manifestSchema(): Json {
  return {
    type: 'record',
    name: 'manifest_entry',
    fields: [
      { name: 'status', type: 'int', 'field-id': 0 },
      { name: 'snapshot_id', type: nullable('long'), default: null, 'field-id': 1 },
      { name: 'sequence_number', type: nullable('long'), default: null, 'field-id': 3 },
      { name: 'file_sequence_number', type: nullable('long'), default: null, 'field-id': 4 },
      {
        name: 'data_file',
        'field-id': 2,
        type: {
          type: 'record',
          name: 'r2',
          fields: [
            { name: 'content', type: 'int', 'field-id': 134 },
            { name: 'file_path', type: 'string', 'field-id': 100 },
            { name: 'file_format', type: 'string', 'field-id': 101 },
            { name: 'partition', type: { type: 'record', name: 'r102', fields: [] }, 'field-id': 102 },
            { name: 'record_count', type: 'long', 'field-id': 103 },
            { name: 'file_size_in_bytes', type: 'long', 'field-id': 104 },
            { name: 'value_counts', type: nullable(kvArray('k119_v120', 119, 120, 'long')), default: null, 'field-id': 109 },
            { name: 'null_value_counts', type: nullable(kvArray('k121_v122', 121, 122, 'long')), default: null, 'field-id': 110 },
            { name: 'lower_bounds', type: nullable(kvArray('k126_v127', 126, 127, 'bytes')), default: null, 'field-id': 125 },
            { name: 'upper_bounds', type: nullable(kvArray('k129_v130', 129, 130, 'bytes')), default: null, 'field-id': 128 },
          ],
        },
      },
    ],
  };
}

function manifestListSchema(): Json {
  const f = (name: string, type: unknown, id: number) => ({ name, type, 'field-id': id });
  return {
    type: 'record',
    name: 'manifest_file',
    fields: [
      f('manifest_path', 'string', 500),
      f('manifest_length', 'long', 501),
      f('partition_spec_id', 'int', 502),
      f('content', 'int', 517),
      f('sequence_number', 'long', 515),
      f('min_sequence_number', 'long', 516),
      f('added_snapshot_id', 'long', 503),
      f('added_files_count', 'int', 504),
      f('existing_files_count', 'int', 505),
      f('deleted_files_count', 'int', 506),
      f('added_rows_count', 'long', 512),
      f('existing_rows_count', 'long', 513),
      f('deleted_rows_count', 'long', 514),
      {
        ...f(
          'partitions',
          nullable({
            type: 'array',
            'element-id': 508,
            items: {
              type: 'record',
              name: 'r508',
              fields: [
                f('contains_null', 'boolean', 509),
                { ...f('contains_nan', nullable('boolean'), 518), default: null },
                { ...f('lower_bound', nullable('bytes'), 510), default: null },
                { ...f('upper_bound', nullable('bytes'), 511), default: null },
              ],
            },
          }),
          507,
        ),
        default: null,
      },
    ],
  };
}

const TABLE_SCHEMA = {
  type: 'struct',
  'schema-id': 0,
  fields: [
    { id: 1, name: 'id', required: true, type: 'long' },
    { id: 2, name: 'msg', required: false, type: 'string' },
  ],
};

function manifestMeta(): Record<string, string> {
  return {
    schema: JSON.stringify(TABLE_SCHEMA),
    'schema-id': '0',
    'partition-spec': '[]',
    'partition-spec-id': '0',
    'format-version': '2',
    content: 'data',
  };
}

const SNAPSHOT_ID = 4242;

/**
 * A two-version table at `location` (file:///... or s3://...), written through
 * `put(relativePath, bytes)`: v1 has no snapshot, v2 appends 3 rows.
 */
async function buildTable(location: string, put: (rel: string, bytes: Uint8Array) => Promise<void>): Promise<void> {
  const data = pw.writeParquet(
    pw.Table.fromIPCStream(tableToIPC(tableFromArrays({ id: BigInt64Array.from([1n, 2n, 3n]), msg: ['a', 'b', 'c'] }), 'stream')),
  );
  await put('data/00000-a.parquet', data);
  const manifest = await avroBytes(
    manifestSchema(),
    [
      {
        status: 1,
        snapshot_id: SNAPSHOT_ID,
        sequence_number: null,
        file_sequence_number: null,
        data_file: {
          content: 0,
          file_path: `${location}/data/00000-a.parquet`,
          file_format: 'PARQUET',
          partition: {},
          record_count: 3,
          file_size_in_bytes: data.length,
          value_counts: [
            { key: 1, value: 3 },
            { key: 2, value: 3 },
          ],
          null_value_counts: null,
          lower_bounds: null,
          upper_bounds: null,
        },
      },
    ],
    manifestMeta(),
  );
  await put('metadata/m0.avro', manifest);
  const list = await avroBytes(
    manifestListSchema(),
    [
      {
        manifest_path: `${location}/metadata/m0.avro`,
        manifest_length: manifest.length,
        partition_spec_id: 0,
        content: 0,
        sequence_number: 1,
        min_sequence_number: 1,
        added_snapshot_id: SNAPSHOT_ID,
        added_files_count: 1,
        existing_files_count: 0,
        deleted_files_count: 0,
        added_rows_count: 3,
        existing_rows_count: 0,
        deleted_rows_count: 0,
        partitions: [],
      },
    ],
    { 'format-version': '2', 'snapshot-id': String(SNAPSHOT_ID), 'sequence-number': '1' },
  );
  await put(`metadata/snap-${SNAPSHOT_ID}.avro`, list);
  const base = {
    'format-version': 2,
    'table-uuid': '9c12d441-03fe-4693-9a96-a0705ddf69c1',
    location,
    'last-updated-ms': 1700000000000,
    'last-column-id': 2,
    schemas: [TABLE_SCHEMA],
    'current-schema-id': 0,
    'partition-specs': [{ 'spec-id': 0, fields: [] }],
    'default-spec-id': 0,
    'last-partition-id': 999,
    'sort-orders': [{ 'order-id': 0, fields: [] }],
    'default-sort-order-id': 0,
    properties: {},
    'metadata-log': [],
  };
  const v1 = { ...base, 'last-sequence-number': 0, 'current-snapshot-id': -1, snapshots: [], 'snapshot-log': [] };
  const snapshot = {
    'snapshot-id': SNAPSHOT_ID,
    'sequence-number': 1,
    'timestamp-ms': 1700000000001,
    'manifest-list': `${location}/metadata/snap-${SNAPSHOT_ID}.avro`,
    summary: { operation: 'append' },
    'schema-id': 0,
  };
  const v2 = {
    ...base,
    'last-sequence-number': 1,
    'current-snapshot-id': SNAPSHOT_ID,
    snapshots: [snapshot],
    'snapshot-log': [{ 'snapshot-id': SNAPSHOT_ID, 'timestamp-ms': 1700000000001 }],
  };
  await put('metadata/v1.metadata.json', Buffer.from(JSON.stringify(v1)));
  await put('metadata/v2.metadata.json', Buffer.from(JSON.stringify(v2)));
  await put('metadata/version-hint.text', Buffer.from('2'));
}

async function localTable(): Promise<{ root: string; tableUrl: string }> {
  const root = tempDir('hypsink-ice-');
  const tableUrl = pathToFileURL(path.join(root, 't')).href;
  await buildTable(tableUrl, async (rel, bytes) => {
    const p = path.join(root, 't', rel);
    await mkdir(path.dirname(p), { recursive: true });
    await writeFile(p, bytes);
  });
  return { root, tableUrl };
}

const EXPECTED_ROWS = [
  { id: 1n, msg: 'a' },
  { id: 2n, msg: 'b' },
  { id: 3n, msg: 'c' },
];

// ---------------------------------------------------------------- serveDir

describe('serveDir', () => {
  test('GET whole and ranged, HEAD, 404 for missing, directories and anything outside root', async (t) => {
    const dir = tempDir('hypsink-serve-');
    const root = path.join(dir, 'root');
    await mkdir(path.join(root, 'sub'), { recursive: true });
    await writeFile(path.join(root, 'sub', 'f.bin'), Buffer.from('0123456789'));
    await writeFile(path.join(dir, 'secret.txt'), 'outside');
    await symlink(path.join(dir, 'secret.txt'), path.join(root, 'link.txt'));
    const srv = await serveDir(root);
    t.after(() => srv.close());

    const whole = await fetch(`${srv.url}/sub/f.bin`);
    assert.equal(whole.status, 200);
    assert.equal(await whole.text(), '0123456789');

    const part = await fetch(`${srv.url}/sub/f.bin`, { headers: { Range: 'bytes=2-5' } });
    assert.equal(part.status, 206);
    assert.equal(part.headers.get('content-range'), 'bytes 2-5/10');
    assert.equal(part.headers.get('content-length'), '4');
    assert.equal(await part.text(), '2345');

    const open = await fetch(`${srv.url}/sub/f.bin`, { headers: { Range: 'bytes=7-' } });
    assert.equal(open.status, 206);
    assert.equal(open.headers.get('content-range'), 'bytes 7-9/10');
    assert.equal(await open.text(), '789');

    const suffix = await fetch(`${srv.url}/sub/f.bin`, { headers: { Range: 'bytes=-3' } });
    assert.equal(suffix.status, 206);
    assert.equal(await suffix.text(), '789');

    const past = await fetch(`${srv.url}/sub/f.bin`, { headers: { Range: 'bytes=10-20' } });
    assert.equal(past.status, 416);
    assert.equal(past.headers.get('content-range'), 'bytes */10');

    const head = await fetch(`${srv.url}/sub/f.bin`, { method: 'HEAD' });
    assert.equal(head.status, 200);
    assert.equal(head.headers.get('content-length'), '10');

    assert.equal((await fetch(`${srv.url}/sub/missing.bin`)).status, 404);
    assert.equal((await fetch(`${srv.url}/sub`)).status, 404);
    assert.equal((await fetch(`${srv.url}/link.txt`)).status, 404);
    assert.equal(await rawGet(srv.url, '/../secret.txt'), 404);
    assert.equal(await rawGet(srv.url, '/%2e%2e/secret.txt'), 404);
    assert.equal(await rawGet(srv.url, '/sub/..%2f..%2fsecret.txt'), 404);
    assert.ok(srv.requests.some((r) => r.path === '/sub/f.bin' && r.status === 206));
  });
});

// ---------------------------------------------------------------- routing + icebird

describe('routed fetch and icebird', () => {
  test('fetch is routed inside and restored after, also when the body throws', async (t) => {
    const root = tempDir('hypsink-route-');
    await writeFile(path.join(root, 'a.txt'), 'hello');
    const srv = await serveDir(root);
    t.after(() => srv.close());
    const route = fileRoute(root, srv.url);
    const original = globalThis.fetch;

    const text = await withRoutedFetch(route, async () => {
      assert.notEqual(globalThis.fetch, original);
      return (await fetch(pathToFileURL(path.join(root, 'a.txt')).href)).text();
    });
    assert.equal(text, 'hello');
    assert.equal(globalThis.fetch, original);

    await assert.rejects(
      withRoutedFetch(route, async () => {
        throw new Error('boom');
      }),
      /boom/,
    );
    assert.equal(globalThis.fetch, original);

    // A URL the route does not own fails the fetch, not the test process.
    await assert.rejects(
      withRoutedFetch(route, () => fetch('file:///etc/passwd')),
      /outside/,
    );
    await assert.rejects(
      withRoutedFetch(route, () => fetch('https://example.com/x')),
      /not a file: URL/,
    );
    assert.equal(globalThis.fetch, original);

    // A fetch of someone else's made while a routed read is under way (another simulation seed in
    // this process: seed 341 of a fresh-clone CI met seed 343's route) is not routed.
    let release!: () => void;
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    let entered!: () => void;
    const inside = new Promise<void>((resolve) => {
      entered = resolve;
    });
    // Another table's route, which owns no URL of this server.
    const routed = withRoutedFetch(fileRoute(tempDir('hypsink-route-other-'), 'http://127.0.0.1:9'), async () => {
      entered();
      await held;
    });
    await inside;
    try {
      assert.equal(await (await fetch(`${srv.url}/a.txt`)).text(), 'hello', 'a fetch outside the routed read reaches its own URL');
    } finally {
      release();
      await routed;
    }

    // icebird failing midway (no such table) restores fetch too.
    await assert.rejects(readIcebergTable({ tableUrl: pathToFileURL(path.join(root, 'nope')).href, route }), /version/);
    assert.equal(globalThis.fetch, original);
  });

  test('icebird reads a local table: current version has the rows, v1 (no snapshot) has none', async (t) => {
    const { root, tableUrl } = await localTable();
    const srv = await serveDir(root);
    t.after(() => srv.close());
    const route = fileRoute(root, srv.url);

    const now = await readIcebergTable({ tableUrl, route });
    assert.deepEqual(now.rows, EXPECTED_ROWS);
    assert.equal(now.metadata['current-snapshot-id'], SNAPSHOT_ID);
    // The Parquet file was read with Range requests, as a remote reader does.
    assert.ok(srv.requests.some((r) => r.path === '/t/data/00000-a.parquet' && r.status === 206));

    const old = await readIcebergAt({ tableUrl, route, metadataFileName: 'v1.metadata.json' });
    assert.deepEqual(old.rows, []);
    assert.equal(old.metadata['current-snapshot-id'], -1);
  });

  test('icebird reads the same table from s3rver through s3Route', async (t) => {
    const { s3, stop } = await startConditionalS3({ buckets: ['lake'] });
    t.after(stop);
    const client = s3Client(s3.endpoint);
    const tableUrl = 's3://lake/wh/t';
    await buildTable(tableUrl, async (rel, bytes) => {
      await client.send(new PutObjectCommand({ Bucket: 'lake', Key: `wh/t/${rel}`, Body: bytes }));
    });
    const { rows } = await readIcebergTable({ tableUrl, route: s3Route(s3.endpoint) });
    assert.deepEqual(rows, EXPECTED_ROWS);

    const files = await avroFilesOfS3(client, 'lake', 'wh/t');
    assert.deepEqual(
      files.map((f) => f.name),
      ['s3://lake/wh/t/metadata/m0.avro', `s3://lake/wh/t/metadata/snap-${SNAPSHOT_ID}.avro`],
    );
    const { manifests, lists } = await checkAvroFiles(files);
    assert.equal(manifests.length, 1);
    assert.equal(lists.length, 1);
  });
});

// ---------------------------------------------------------------- checkAvroFiles

describe('checkAvroFiles', () => {
  test('a spec-shaped manifest and manifest list pass and decode (longs as bigints)', async () => {
    const { tableUrl } = await localTable();
    const files = await avroFilesOf(tableUrl);
    assert.equal(files.length, 2);
    const { manifests, lists } = await checkAvroFiles(files, { requireMetrics: true });
    assert.equal(manifests.length, 1);
    assert.equal(lists.length, 1);
    const entry = manifests[0]!.entries[0]!;
    assert.equal(manifests[0]!.content, 'data');
    assert.equal(entry.status, 1);
    assert.equal(entry.snapshot_id, BigInt(SNAPSHOT_ID));
    assert.equal(entry.sequence_number, null);
    assert.equal(entry.data_file.record_count, 3n);
    assert.equal(entry.data_file.file_path, `${tableUrl}/data/00000-a.parquet`);
    assert.equal(lists[0]!.manifests[0]!.added_snapshot_id, BigInt(SNAPSHOT_ID));
    assert.equal(lists[0]!.manifests[0]!.manifest_path, `${tableUrl}/metadata/m0.avro`);
  });

  const entry = {
    status: 1,
    snapshot_id: 1,
    sequence_number: null,
    file_sequence_number: null,
    data_file: {
      content: 0,
      file_path: 'file:///x/data/a.parquet',
      file_format: 'PARQUET',
      partition: {},
      record_count: 1,
      file_size_in_bytes: 10,
      value_counts: null,
      null_value_counts: null,
      lower_bounds: null,
      upper_bounds: null,
    },
  };
  type Field = { name: string; 'field-id'?: number; type: unknown };
  const dataFileFields = (s: Json) => ((s.fields as Field[])[4]!.type as { fields: Field[] }).fields;

  test('a manifest whose data_file.file_path has no field-id is refused, naming file and field', async () => {
    const bad = manifestSchema();
    delete dataFileFields(bad).find((f) => f.name === 'file_path')!['field-id'];
    const bytes = await avroBytes(bad, [entry], manifestMeta());
    await assert.rejects(checkAvroFiles([{ name: 'bad-m.avro', bytes }]), (e: Error) => {
      assert.match(e.message, /^bad-m\.avro: /);
      assert.match(e.message, /data_file\.file_path/);
      assert.match(e.message, /field-id is undefined, the spec says 100/);
      return true;
    });
  });

  test('a wrong field-id, a missing required field, a nullable required field, missing metadata are refused', async () => {
    const wrongId = manifestSchema();
    dataFileFields(wrongId).find((f) => f.name === 'record_count')!['field-id'] = 105;
    await assert.rejects(checkAvroFiles([{ name: 'a.avro', bytes: await avroBytes(wrongId, [entry], manifestMeta()) }]), /a\.avro: .*record_count: field-id is 105, the spec says 103/);

    const missing = manifestSchema();
    const fields = dataFileFields(missing);
    fields.splice(fields.findIndex((f) => f.name === 'file_size_in_bytes'), 1);
    const { file_size_in_bytes: _, ...df } = entry.data_file;
    await assert.rejects(
      checkAvroFiles([{ name: 'b.avro', bytes: await avroBytes(missing, [{ ...entry, data_file: df }], manifestMeta()) }]),
      /b\.avro: .*required field 104 file_size_in_bytes is missing/,
    );

    const nullableStatus = manifestSchema();
    (nullableStatus.fields as Field[])[0]!.type = ['null', 'int'];
    await assert.rejects(checkAvroFiles([{ name: 'c.avro', bytes: await avroBytes(nullableStatus, [entry], manifestMeta()) }]), /c\.avro: manifest_entry\.status: required field 0 is nullable/);

    const { content: _c, ...noContent } = manifestMeta();
    await assert.rejects(checkAvroFiles([{ name: 'd.avro', bytes: await avroBytes(manifestSchema(), [entry], noContent) }]), /d\.avro: manifest metadata key "content" is missing/);

    const v1 = { ...manifestMeta(), 'format-version': '1' };
    await assert.rejects(checkAvroFiles([{ name: 'e.avro', bytes: await avroBytes(manifestSchema(), [entry], v1) }]), /e\.avro: format-version is "1"/);

    const wrongMapKey = manifestSchema();
    const vc = dataFileFields(wrongMapKey).find((f) => f.name === 'value_counts')!;
    ((vc.type as unknown[])[1] as { items: { fields: Field[] } }).items.fields[0]!['field-id'] = 117;
    await assert.rejects(checkAvroFiles([{ name: 'f.avro', bytes: await avroBytes(wrongMapKey, [entry], manifestMeta()) }]), /f\.avro: .*value_counts\.items\.key: field-id is 117, the spec says 119/);
  });

  test('a manifest list missing 516 min_sequence_number is refused; a file of neither kind is refused', async () => {
    const list = clone(manifestListSchema());
    (list.fields as Field[]).splice((list.fields as Field[]).findIndex((f) => f.name === 'min_sequence_number'), 1);
    const rec = {
      manifest_path: 'file:///x/m.avro',
      manifest_length: 1,
      partition_spec_id: 0,
      content: 0,
      sequence_number: 1,
      added_snapshot_id: 1,
      added_files_count: 1,
      existing_files_count: 0,
      deleted_files_count: 0,
      added_rows_count: 1,
      existing_rows_count: 0,
      deleted_rows_count: 0,
      partitions: null,
    };
    await assert.rejects(
      checkAvroFiles([{ name: 'snap-1.avro', bytes: await avroBytes(list, [rec], { 'format-version': '2' }) }]),
      /snap-1\.avro: manifest_file\.min_sequence_number: required field 516 min_sequence_number is missing/,
    );
    const other = await avroBytes({ type: 'record', name: 'x', fields: [{ name: 'a', type: 'int' }] }, [{ a: 1 }], {});
    await assert.rejects(checkAvroFiles([{ name: 'x.avro', bytes: other }]), /x\.avro: neither a manifest/);
  });
});

// ---------------------------------------------------------------- If-None-Match front

describe('startConditionalS3 (atomic If-None-Match)', () => {
  test('8 concurrent create-if-absent PUTs of one key: exactly one 200, seven 412, the winner’s bytes stored', async (t) => {
    const { s3, endpoint, stop } = await startConditionalS3({ buckets: ['lake'] });
    t.after(stop);
    const client = s3Client(endpoint);
    const bodies = Array.from({ length: 8 }, (_, i) => `writer-${i}-`.repeat(2000));
    const results = await Promise.allSettled(
      bodies.map((Body) => client.send(new PutObjectCommand({ Bucket: 'lake', Key: 't/metadata/v2.metadata.json', Body, IfNoneMatch: '*' }))),
    );
    const won = results.flatMap((r, i) => (r.status === 'fulfilled' ? [i] : []));
    const lost = results.filter((r) => r.status === 'rejected');
    assert.equal(won.length, 1, `exactly one writer wins, got ${won.length}`);
    assert.equal(lost.length, 7);
    for (const r of lost) {
      assert.equal((r.reason as { $metadata?: { httpStatusCode?: number } }).$metadata?.httpStatusCode, 412);
    }
    const got = await s3Client(s3.endpoint).send(new GetObjectCommand({ Bucket: 'lake', Key: 't/metadata/v2.metadata.json' }));
    assert.equal(await got.Body!.transformToString(), bodies[won[0]!]);
    // Another key is not held up or refused by the first.
    await client.send(new PutObjectCommand({ Bucket: 'lake', Key: 't/metadata/v3.metadata.json', Body: 'x', IfNoneMatch: '*' }));
  });

  test('4 concurrent conditional CompleteMultipartUploads of one key: exactly one succeeds', async (t) => {
    const { endpoint, stop } = await startConditionalS3({ buckets: ['lake'] });
    t.after(stop);
    const client = s3Client(endpoint);
    const Key = 't/data/big.parquet';
    const uploads = await Promise.all(
      Array.from({ length: 4 }, async (_, i) => {
        const { UploadId } = await client.send(new CreateMultipartUploadCommand({ Bucket: 'lake', Key }));
        const { ETag } = await client.send(new UploadPartCommand({ Bucket: 'lake', Key, UploadId, PartNumber: 1, Body: `part-${i}` }));
        return { UploadId, ETag };
      }),
    );
    const results = await Promise.allSettled(
      uploads.map(({ UploadId, ETag }) =>
        client.send(
          new CompleteMultipartUploadCommand({
            Bucket: 'lake',
            Key,
            UploadId,
            IfNoneMatch: '*',
            MultipartUpload: { Parts: [{ PartNumber: 1, ETag }] },
          }),
        ),
      ),
    );
    assert.equal(results.filter((r) => r.status === 'fulfilled').length, 1);
    for (const r of results) {
      if (r.status === 'rejected') assert.equal((r.reason as { $metadata?: { httpStatusCode?: number } }).$metadata?.httpStatusCode, 412);
    }
  });
});
