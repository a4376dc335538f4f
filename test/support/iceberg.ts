/**
 * Test-side proof of Iceberg tables with readers we did not write:
 *
 * - readIcebergTable: the whole table through icebird (metadata JSON, manifest
 *   list, manifests, Parquet data files), with global fetch routed to loopback
 *   (serveDir for file: tables, s3rver for s3: tables).
 * - checkAvroFiles: every manifest / manifest list decoded by avsc with the
 *   writer schema embedded in the file, then checked field by field (name,
 *   field-id, nullability, type) against the Iceberg v2 spec tables
 *   (https://iceberg.apache.org/spec/#manifests, #manifest-lists).
 * - startConditionalS3: s3rver behind the fault proxy's atomic If-None-Match
 *   rule, for many writers committing to one table.
 *
 * Longs decoded by checkAvroFiles are bigints (snapshot ids are random 64-bit
 * values; numbers would lose them). Rows from readIcebergTable are as hyparquet
 * decodes them (INT64 columns are bigints).
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { createReadStream } from 'node:fs';
import { readFile, readdir, realpath, stat } from 'node:fs/promises';
import { type IncomingMessage, type ServerResponse, createServer } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { GetObjectCommand, ListObjectsV2Command, type S3Client } from '@aws-sdk/client-s3';
import avro from 'avsc';
import { icebergMetadata, icebergRead } from 'icebird';
import { decodeManifest, decodeManifestList, encodeManifest, encodeManifestList, type ManifestFile } from '../../plugins/format-iceberg/src/avro.js';
import { type FaultProxy, type FaultRule, anyOf, enforceIfNoneMatch, startFaultProxy } from './fault-proxy.js';
import { type TestS3Server, startS3Server } from './s3server.js';

// ---------------------------------------------------------------- serveDir

export interface ServedRequest {
  readonly method: string;
  /** Decoded path under root, e.g. `/t/metadata/v1.metadata.json`. */
  readonly path: string;
  readonly range: string | undefined;
  readonly status: number;
}

export interface DirServer {
  /** `http://127.0.0.1:<port>` (no trailing slash). */
  readonly url: string;
  /** Every request answered, in order (lets a test see that Range reads happened). */
  readonly requests: ServedRequest[];
  close(): Promise<void>;
}

/** `bytes=a-b`, `bytes=a-`, `bytes=-n` against `size`; undefined = serve whole; null = unsatisfiable. */
function parseRange(header: string | undefined, size: number): { start: number; end: number } | undefined | null {
  if (header === undefined) return undefined;
  const m = /^bytes=(\d*)-(\d*)$/.exec(header.trim());
  // Multiple or malformed ranges: RFC 9110 lets a server ignore Range and send the whole file.
  if (!m || (m[1] === '' && m[2] === '')) return undefined;
  let start: number;
  let end: number;
  if (m[1] === '') {
    const n = Number(m[2]);
    if (n === 0) return null;
    start = Math.max(0, size - n);
    end = size - 1;
  } else {
    start = Number(m[1]);
    end = m[2] === '' ? size - 1 : Math.min(Number(m[2]), size - 1);
    if (m[2] !== '' && Number(m[2]) < start) return undefined;
  }
  if (start >= size) return null;
  return { start, end };
}

/**
 * Serve the files under `root` over loopback HTTP, by path: GET (with or
 * without a single Range), HEAD; 404 for anything missing, a directory, or
 * outside root (also through symlinks).
 */
export async function serveDir(root: string): Promise<DirServer> {
  const realRoot = await realpath(root);
  const requests: ServedRequest[] = [];
  const sockets = new Set<Socket>();

  const answer = (req: IncomingMessage, res: ServerResponse, status: number, p: string, body?: string) => {
    requests.push({ method: req.method ?? 'GET', path: p, range: req.headers.range, status });
    const b = Buffer.from(body ?? '');
    res.writeHead(status, { 'content-type': 'text/plain', 'content-length': String(b.length) });
    res.end(req.method === 'HEAD' ? undefined : b);
  };

  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    let rel: string;
    try {
      rel = decodeURIComponent(new URL(req.url ?? '/', 'http://serve.invalid').pathname);
    } catch {
      return answer(req, res, 400, req.url ?? '', 'bad path encoding');
    }
    if (req.method !== 'GET' && req.method !== 'HEAD') return answer(req, res, 405, rel, 'GET or HEAD only');
    const notFound = () => answer(req, res, 404, rel, `not found: ${rel}`);
    if (rel.includes('\0')) return notFound();
    const candidate = path.resolve(realRoot, `.${rel}`);
    let file: string;
    try {
      file = await realpath(candidate);
    } catch {
      return notFound();
    }
    const inside = path.relative(realRoot, file);
    if (inside === '' || inside.startsWith('..') || path.isAbsolute(inside)) return notFound();
    const st = await stat(file).catch(() => undefined);
    if (!st?.isFile()) return notFound();
    const size = st.size;
    const range = parseRange(req.headers.range, size);
    if (range === null) {
      requests.push({ method: req.method, path: rel, range: req.headers.range, status: 416 });
      res.writeHead(416, { 'content-range': `bytes */${size}`, 'content-length': '0' });
      res.end();
      return;
    }
    const status = range ? 206 : 200;
    const headers: Record<string, string> = {
      'accept-ranges': 'bytes',
      'content-type': 'application/octet-stream',
      'content-length': String(range ? range.end - range.start + 1 : size),
    };
    if (range) headers['content-range'] = `bytes ${range.start}-${range.end}/${size}`;
    requests.push({ method: req.method, path: rel, range: req.headers.range, status });
    res.writeHead(status, headers);
    if (req.method === 'HEAD' || size === 0) {
      res.end();
      return;
    }
    const stream = createReadStream(file, range ? { start: range.start, end: range.end } : {});
    stream.on('error', () => res.destroy());
    stream.pipe(res);
  };

  const server = createServer((req, res) => {
    handle(req, res).catch(() => {
      if (!res.headersSent) answer(req, res, 500, req.url ?? '', 'serveDir failed');
      else res.destroy();
    });
  });
  server.on('connection', (s: Socket) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

// ---------------------------------------------------------------- routes

/** Maps a URL the reader asks for to the loopback URL that serves it; throws for a URL it does not own. */
export type Route = (url: string) => string;

/**
 * `file:///<rootDir>/a/b` → `<serveUrl>/a/b`, for serveDir(rootDir). Anything
 * else throws: a table that names a plain path (no scheme) or a file outside
 * the root is a writer bug the test should see.
 */
export function fileRoute(rootDir: string, serveUrl: string): Route {
  const root = path.resolve(rootDir);
  const base = serveUrl.replace(/\/+$/, '');
  return (url) => {
    if (url.startsWith(`${base}/`)) return url;
    if (!url.startsWith('file:')) {
      throw new Error(`fileRoute: ${url} is not a file: URL under ${root}; Iceberg locations must be full URIs with a scheme`);
    }
    const abs = fileURLToPath(url);
    const rel = path.relative(root, abs);
    if (rel.startsWith('..') || path.isAbsolute(rel)) throw new Error(`fileRoute: ${url} is outside ${root}`);
    return `${base}/${rel.split(path.sep).map(encodeURIComponent).join('/')}`;
  };
}

/**
 * icebird turns `s3://bucket/key` into `https://bucket.s3.amazonaws.com/key`;
 * this sends that to path-style s3rver: `<s3rverUrl>/bucket/key` (query kept).
 */
export function s3Route(s3rverUrl: string): Route {
  const base = s3rverUrl.replace(/\/+$/, '');
  return (url) => {
    if (url.startsWith(`${base}/`)) return url;
    const u = new URL(url);
    const suffix = '.s3.amazonaws.com';
    if (u.protocol !== 'https:' || !u.hostname.endsWith(suffix) || u.hostname === suffix.slice(1)) {
      throw new Error(`s3Route: ${url} is not a virtual-hosted S3 URL (https://<bucket>.s3.amazonaws.com/<key>)`);
    }
    const bucket = u.hostname.slice(0, -suffix.length);
    return `${base}/${bucket}${u.pathname}${u.search}`;
  };
}

/** The first route that accepts the URL. */
export function anyRoute(...routes: Route[]): Route {
  return (url) => {
    const errors: string[] = [];
    for (const r of routes) {
      try {
        return r(url);
      } catch (e) {
        errors.push((e as Error).message);
      }
    }
    throw new Error(`no route for ${url}: ${errors.join('; ')}`);
  };
}

// One routed fetch at a time: a second wrapper would capture the first as "original".
let routing: Promise<void> = Promise.resolve();

/** The route of the read whose async context a fetch is made in. */
const routeOf = new AsyncLocalStorage<Route>();

/**
 * Run `fn` with globalThis.fetch sending every URL `fn` fetches through
 * `route`; fetch is restored afterwards, also when `fn` throws. Calls are
 * serialized. A fetch made meanwhile outside `fn` (another simulation seed in
 * this process) is not routed: seed 341 of a CI run met seed 343's route.
 */
export async function withRoutedFetch<T>(route: Route, fn: () => Promise<T>): Promise<T> {
  const prev = routing;
  let done!: () => void;
  routing = new Promise<void>((resolve) => {
    done = resolve;
  });
  await prev;
  const original = globalThis.fetch;
  globalThis.fetch = ((input: string | URL | Request, init?: RequestInit) => {
    const route = routeOf.getStore();
    if (route === undefined) return original(input, init);
    try {
      if (input instanceof Request) return original(new Request(route(input.url), input), init);
      return original(route(input instanceof URL ? input.href : input), init);
    } catch (e) {
      return Promise.reject(e);
    }
  }) as typeof fetch;
  try {
    return await routeOf.run(route, fn);
  } finally {
    globalThis.fetch = original;
    done();
  }
}

// ---------------------------------------------------------------- icebird

/** The parts of table metadata tests look at; the rest is there too. */
export interface IcebergTableMetadata {
  readonly 'format-version': number;
  readonly 'table-uuid': string;
  readonly location: string;
  readonly 'current-snapshot-id'?: number | bigint | null;
  readonly snapshots?: readonly Record<string, unknown>[];
  readonly [key: string]: unknown;
}

export interface IcebergReadResult {
  rows: Record<string, unknown>[];
  metadata: IcebergTableMetadata;
}

export interface ReadIcebergOptions {
  /** `file:///abs/<table>` or `s3://<bucket>/<prefix>/<table>` */
  tableUrl: string;
  route: Route;
  /** e.g. `v1.metadata.json` (or a writer's own name) for an older version; default: version-hint.text. */
  metadataFileName?: string;
}

function hasSnapshot(m: IcebergTableMetadata): boolean {
  const id = m['current-snapshot-id'];
  return id !== undefined && id !== null && Number(id) !== -1;
}

/**
 * Read a whole table with icebird. A table without a current snapshot has no
 * rows ([]), as has a snapshot whose manifests list no live data file (icebird
 * throws for both).
 */
export async function readIcebergTable(opts: ReadIcebergOptions): Promise<IcebergReadResult> {
  const tableUrl = opts.tableUrl.replace(/\/+$/, '');
  return withRoutedFetch(opts.route, async () => {
    const metadata = (await icebergMetadata({
      tableUrl,
      ...(opts.metadataFileName !== undefined ? { metadataFileName: opts.metadataFileName } : {}),
    })) as unknown as IcebergTableMetadata;
    if (!hasSnapshot(metadata)) return { rows: [], metadata };
    try {
      // icebird's types say TableMetadata; ours is the same JSON.
      const rows = await icebergRead({ tableUrl, metadata: metadata as unknown as Parameters<typeof icebergRead>[0]['metadata'] });
      return { rows, metadata };
    } catch (e) {
      if ((e as Error).message === 'No data manifest files found for current snapshot') return { rows: [], metadata };
      throw e;
    }
  });
}

/** readIcebergTable at one metadata file (an older version). */
export function readIcebergAt(opts: ReadIcebergOptions & { metadataFileName: string }): Promise<IcebergReadResult> {
  return readIcebergTable(opts);
}

// ---------------------------------------------------------------- Avro: decode with avsc

export interface AvroFile {
  /** For error messages: a path or key. */
  readonly name: string;
  readonly bytes: Uint8Array;
}

// Longs as bigints (avsc's documented LongType.__with recipe shape, written here for BigInt).
const BigLong = avro.types.LongType.__with({
  fromBuffer: (buf: Buffer) => buf.readBigInt64LE(),
  toBuffer: (n: bigint) => {
    const buf = Buffer.alloc(8);
    buf.writeBigInt64LE(n);
    return buf;
  },
  fromJSON: (v: unknown) => BigInt(v as string | number),
  toJSON: (n: bigint) => Number(n),
  isValid: (n: unknown) => typeof n === 'bigint',
  compare: (a: bigint, b: bigint) => (a === b ? 0 : a < b ? -1 : 1),
});

interface Decoded {
  meta: Record<string, string>;
  /** The writer schema exactly as embedded (with Iceberg's field-id attributes). */
  schema: AvroRecordSchema;
  records: Record<string, unknown>[];
}

function decodeAvro(file: AvroFile): Promise<Decoded> {
  return new Promise((resolve, reject) => {
    const records: Record<string, unknown>[] = [];
    let meta: Record<string, string> | undefined;
    const decoder = new avro.streams.BlockDecoder({
      parseHook: (schema) => avro.Type.forSchema(schema, { registry: { long: BigLong } }),
    });
    decoder.on('metadata', (_type: unknown, _codec: string, header: { meta: Record<string, Buffer> }) => {
      meta = {};
      for (const [k, v] of Object.entries(header.meta)) meta[k] = v.toString('utf8');
    });
    decoder.on('data', (r: Record<string, unknown>) => records.push(r));
    decoder.on('error', (e: Error) => reject(new Error(`${file.name}: not a readable Avro file (${e.message})`)));
    decoder.on('end', () => {
      if (!meta) return reject(new Error(`${file.name}: no Avro header`));
      let schema: unknown;
      try {
        schema = JSON.parse(meta['avro.schema'] ?? '');
      } catch {
        return reject(new Error(`${file.name}: avro.schema metadata is not JSON`));
      }
      if (!isRecordSchema(schema)) return reject(new Error(`${file.name}: the writer schema is not a record`));
      resolve({ meta, schema, records });
    });
    decoder.end(Buffer.from(file.bytes.buffer, file.bytes.byteOffset, file.bytes.byteLength));
  });
}

// ---------------------------------------------------------------- Avro: the v2 spec tables

type AvroSchema = string | AvroSchema[] | { type: string | AvroSchema; [k: string]: unknown };
interface AvroField {
  name: string;
  type: AvroSchema;
  'field-id'?: unknown;
  [k: string]: unknown;
}
interface AvroRecordSchema {
  type: 'record';
  name: string;
  namespace?: string;
  fields: AvroField[];
}

function isRecordSchema(s: unknown): s is AvroRecordSchema {
  return typeof s === 'object' && s !== null && (s as { type?: unknown }).type === 'record' && Array.isArray((s as { fields?: unknown }).fields);
}

type SpecType =
  | { kind: 'int' | 'long' | 'string' | 'boolean' | 'binary' }
  | { kind: 'struct'; fields?: SpecField[] }
  | { kind: 'map'; keyId: number; valueId: number; key: SpecType; value: SpecType }
  | { kind: 'list'; elementId: number; element: SpecType };
interface SpecField {
  id: number;
  name: string;
  required: boolean;
  type: SpecType;
}

const INT: SpecType = { kind: 'int' };
const LONG: SpecType = { kind: 'long' };
const STRING: SpecType = { kind: 'string' };
const BOOLEAN: SpecType = { kind: 'boolean' };
const BINARY: SpecType = { kind: 'binary' };
const req = (id: number, name: string, type: SpecType): SpecField => ({ id, name, required: true, type });
const opt = (id: number, name: string, type: SpecType): SpecField => ({ id, name, required: false, type });
const map = (keyId: number, valueId: number, value: SpecType): SpecType => ({ kind: 'map', keyId, valueId, key: INT, value });
const list = (elementId: number, element: SpecType): SpecType => ({ kind: 'list', elementId, element });

/** Spec § Manifests, v2 `data_file`. */
const DATA_FILE: SpecField[] = [
  req(134, 'content', INT),
  req(100, 'file_path', STRING),
  req(101, 'file_format', STRING),
  // Partition tuple fields are checked against the file's partition-spec.
  req(102, 'partition', { kind: 'struct' }),
  req(103, 'record_count', LONG),
  req(104, 'file_size_in_bytes', LONG),
  opt(108, 'column_sizes', map(117, 118, LONG)),
  opt(109, 'value_counts', map(119, 120, LONG)),
  opt(110, 'null_value_counts', map(121, 122, LONG)),
  opt(137, 'nan_value_counts', map(138, 139, LONG)),
  opt(125, 'lower_bounds', map(126, 127, BINARY)),
  opt(128, 'upper_bounds', map(129, 130, BINARY)),
  opt(131, 'key_metadata', BINARY),
  opt(132, 'split_offsets', list(133, LONG)),
  opt(135, 'equality_ids', list(136, INT)),
  opt(140, 'sort_order_id', INT),
  opt(143, 'referenced_data_file', STRING),
];

/** Spec § Manifests, v2 `manifest_entry`. */
const MANIFEST_ENTRY: SpecField[] = [
  req(0, 'status', INT),
  opt(1, 'snapshot_id', LONG),
  opt(3, 'sequence_number', LONG),
  opt(4, 'file_sequence_number', LONG),
  req(2, 'data_file', { kind: 'struct', fields: DATA_FILE }),
];

/** Spec § Manifest Lists, v2 `field_summary`. */
const FIELD_SUMMARY: SpecField[] = [
  req(509, 'contains_null', BOOLEAN),
  opt(518, 'contains_nan', BOOLEAN),
  opt(510, 'lower_bound', BINARY),
  opt(511, 'upper_bound', BINARY),
];

/** Spec § Manifest Lists, v2 `manifest_file`. */
const MANIFEST_FILE: SpecField[] = [
  req(500, 'manifest_path', STRING),
  req(501, 'manifest_length', LONG),
  req(502, 'partition_spec_id', INT),
  req(517, 'content', INT),
  req(515, 'sequence_number', LONG),
  req(516, 'min_sequence_number', LONG),
  req(503, 'added_snapshot_id', LONG),
  req(504, 'added_files_count', INT),
  req(505, 'existing_files_count', INT),
  req(506, 'deleted_files_count', INT),
  req(512, 'added_rows_count', LONG),
  req(513, 'existing_rows_count', LONG),
  req(514, 'deleted_rows_count', LONG),
  opt(507, 'partitions', list(508, { kind: 'struct', fields: FIELD_SUMMARY })),
  opt(519, 'key_metadata', BINARY),
];

/** Named types of a schema, by full and short name (Avro lets later uses refer to earlier definitions). */
function collectNames(s: AvroSchema, out: Map<string, AvroSchema>, ns?: string): void {
  if (Array.isArray(s)) {
    for (const b of s) collectNames(b, out, ns);
    return;
  }
  if (typeof s !== 'object' || s === null) return;
  const name = typeof s.name === 'string' ? s.name : undefined;
  const namespace = typeof s.namespace === 'string' ? s.namespace : ns;
  if (name && (s.type === 'record' || s.type === 'enum' || s.type === 'fixed')) {
    out.set(name, s);
    if (namespace && !name.includes('.')) out.set(`${namespace}.${name}`, s);
  }
  if (typeof s.type === 'object') collectNames(s.type, out, namespace);
  if (Array.isArray(s.fields)) for (const f of s.fields as AvroField[]) collectNames(f.type, out, namespace);
  if (s.items !== undefined) collectNames(s.items as AvroSchema, out, namespace);
  if (s.values !== undefined) collectNames(s.values as AvroSchema, out, namespace);
}

class SchemaChecker {
  private readonly names = new Map<string, AvroSchema>();
  constructor(
    private readonly file: string,
    root: AvroRecordSchema,
  ) {
    collectNames(root as unknown as AvroSchema, this.names);
  }

  fail(where: string, what: string): never {
    throw new Error(`${this.file}: ${where}: ${what} (Iceberg v2 spec, https://iceberg.apache.org/spec/#manifests)`);
  }

  resolve(s: AvroSchema): AvroSchema {
    if (typeof s === 'string') return this.names.get(s) ?? s;
    if (!Array.isArray(s) && typeof s.type === 'string' && Object.keys(s).length === 1) return this.resolve(s.type);
    return s;
  }

  /** Strip a ["null", T] union; say whether it was nullable. */
  unwrap(where: string, s: AvroSchema): { nullable: boolean; type: AvroSchema } {
    const r = this.resolve(s);
    if (!Array.isArray(r)) return { nullable: false, type: r };
    const nonNull = r.filter((b) => b !== 'null');
    if (nonNull.length !== 1) this.fail(where, `union ${JSON.stringify(r)} must be [null, T]`);
    return { nullable: nonNull.length < r.length, type: this.resolve(nonNull[0] as AvroSchema) };
  }

  primitive(s: AvroSchema): string | undefined {
    if (typeof s === 'string') return s;
    if (!Array.isArray(s) && typeof s.type === 'string') return s.type;
    return undefined;
  }

  record(where: string, s: AvroSchema, fields: SpecField[] | undefined): AvroRecordSchema {
    if (!isRecordSchema(s)) this.fail(where, `is ${JSON.stringify(s)}, expected a record`);
    if (fields) this.fields(where, s, fields);
    return s;
  }

  fields(where: string, rec: AvroRecordSchema, spec: SpecField[]): void {
    for (const f of spec) {
      const at = `${where}.${f.name}`;
      const got = rec.fields.find((x) => x.name === f.name);
      if (!got) {
        if (f.required) this.fail(at, `required field ${f.id} ${f.name} is missing`);
        continue;
      }
      if (got['field-id'] !== f.id) {
        this.fail(at, `field-id is ${JSON.stringify(got['field-id'])}, the spec says ${f.id}`);
      }
      const { nullable, type } = this.unwrap(at, got.type);
      if (f.required && nullable) this.fail(at, `required field ${f.id} is nullable`);
      this.type(at, type, f.type);
    }
    // Any other field must still carry an id: Iceberg reads Avro by field id.
    for (const x of rec.fields) {
      if (!Number.isInteger(x['field-id'])) this.fail(`${where}.${x.name}`, 'field has no integer field-id');
    }
  }

  type(at: string, s: AvroSchema, t: SpecType): void {
    switch (t.kind) {
      case 'int':
      case 'long':
      case 'string':
      case 'boolean': {
        const p = this.primitive(s);
        if (p !== t.kind) this.fail(at, `type is ${JSON.stringify(s)}, the spec says ${t.kind}`);
        return;
      }
      case 'binary': {
        const p = this.primitive(s);
        if (p !== 'bytes' && p !== 'fixed') this.fail(at, `type is ${JSON.stringify(s)}, the spec says binary (bytes)`);
        return;
      }
      case 'struct':
        this.record(at, s, t.fields);
        return;
      case 'list': {
        if (Array.isArray(s) || typeof s !== 'object' || s.type !== 'array') this.fail(at, `type is ${JSON.stringify(s)}, expected an array`);
        if (s['element-id'] !== t.elementId) {
          this.fail(at, `element-id is ${JSON.stringify(s['element-id'])}, the spec says ${t.elementId}`);
        }
        const { type } = this.unwrap(`${at}.element`, s.items as AvroSchema);
        this.type(`${at}.element`, type, t.element);
        return;
      }
      case 'map': {
        // Int keys: Avro maps have string keys, so the spec's array-of-{key,value} form.
        if (Array.isArray(s) || typeof s !== 'object' || s.type !== 'array') {
          this.fail(at, `type is ${JSON.stringify(s)}, expected an array of key/value records (map with int keys)`);
        }
        if (s.logicalType !== 'map') this.fail(at, `array lacks "logicalType": "map"`);
        const { type: items } = this.unwrap(`${at}.items`, s.items as AvroSchema);
        const kv = this.record(`${at}.items`, items, undefined);
        this.fields(`${at}.items`, kv, [req(t.keyId, 'key', t.key), { id: t.valueId, name: 'value', required: false, type: t.value }]);
        return;
      }
    }
  }
}

// ---------------------------------------------------------------- Avro: records

export interface ManifestEntryRecord {
  status: number;
  snapshot_id: bigint | null;
  sequence_number: bigint | null;
  file_sequence_number: bigint | null;
  data_file: {
    content: number;
    file_path: string;
    file_format: string;
    partition: Record<string, unknown>;
    record_count: bigint;
    file_size_in_bytes: bigint;
    [k: string]: unknown;
  };
}

export interface ManifestFileRecord {
  manifest_path: string;
  manifest_length: bigint;
  partition_spec_id: number;
  content: number;
  sequence_number: bigint;
  min_sequence_number: bigint;
  added_snapshot_id: bigint;
  added_files_count: number;
  existing_files_count: number;
  deleted_files_count: number;
  added_rows_count: bigint;
  existing_rows_count: bigint;
  deleted_rows_count: bigint;
  partitions?: { contains_null: boolean; contains_nan?: boolean | null; lower_bound?: Buffer | null; upper_bound?: Buffer | null }[] | null;
  [k: string]: unknown;
}

export interface CheckedManifest {
  name: string;
  /** Avro file metadata (schema, partition-spec, ... as strings). */
  meta: Record<string, string>;
  content: 'data' | 'deletes';
  partitionSpecId: number;
  entries: ManifestEntryRecord[];
}

export interface CheckedManifestList {
  name: string;
  meta: Record<string, string>;
  manifests: ManifestFileRecord[];
}

export interface CheckAvroOptions {
  /** Also require data_file value_counts, null_value_counts, lower_bounds, upper_bounds (optional in the spec). */
  requireMetrics?: boolean;
}

function kindOf(name: string, schema: AvroRecordSchema): 'manifest' | 'list' {
  const ids = new Set(schema.fields.map((f) => f['field-id']));
  if (ids.has(2) && schema.fields.some((f) => f.name === 'data_file')) return 'manifest';
  if (ids.has(500) && schema.fields.some((f) => f.name === 'manifest_path')) return 'list';
  throw new Error(
    `${name}: neither a manifest (manifest_entry with 2 data_file) nor a manifest list (manifest_file with 500 manifest_path); top-level fields: ${schema.fields.map((f) => `${String(f['field-id'])} ${f.name}`).join(', ')}`,
  );
}

function checkManifest(file: AvroFile, d: Decoded, opts: CheckAvroOptions): CheckedManifest {
  function fail(what: string): never {
    throw new Error(`${file.name}: ${what} (Iceberg v2 spec, https://iceberg.apache.org/spec/#manifest-metadata)`);
  }
  for (const k of ['schema', 'schema-id', 'partition-spec', 'partition-spec-id', 'format-version', 'content']) {
    if (d.meta[k] === undefined) fail(`manifest metadata key "${k}" is missing`);
  }
  if (d.meta['format-version'] !== '2') fail(`format-version is ${JSON.stringify(d.meta['format-version'])}, expected "2"`);
  const content = d.meta.content;
  if (content !== 'data' && content !== 'deletes') fail(`content is ${JSON.stringify(content)}, expected "data" or "deletes"`);
  let tableSchema: unknown;
  let partitionFields: unknown;
  try {
    tableSchema = JSON.parse(d.meta.schema ?? '');
    partitionFields = JSON.parse(d.meta['partition-spec'] ?? '');
  } catch {
    fail('schema or partition-spec metadata is not JSON');
  }
  if (typeof tableSchema !== 'object' || tableSchema === null || !Array.isArray((tableSchema as { fields?: unknown }).fields)) {
    fail('schema metadata is not an Iceberg schema (no fields array)');
  }
  // v2 writes only the fields array; accept a whole spec object too.
  const pfs = Array.isArray(partitionFields) ? partitionFields : (partitionFields as { fields?: unknown } | undefined)?.fields;
  if (!Array.isArray(pfs)) fail('partition-spec metadata is not a partition field array');
  const specId = Number(d.meta['partition-spec-id']);
  if (!Number.isInteger(specId)) fail(`partition-spec-id ${JSON.stringify(d.meta['partition-spec-id'])} is not an integer`);

  const checker = new SchemaChecker(file.name, d.schema);
  checker.fields('manifest_entry', d.schema, MANIFEST_ENTRY);
  const dataFile = checker.record('manifest_entry.data_file', checker.unwrap('manifest_entry.data_file', d.schema.fields.find((f) => f.name === 'data_file')!.type).type, undefined);
  if (opts.requireMetrics) {
    for (const [id, name] of [
      [109, 'value_counts'],
      [110, 'null_value_counts'],
      [125, 'lower_bounds'],
      [128, 'upper_bounds'],
    ] as const) {
      if (!dataFile.fields.some((f) => f.name === name)) checker.fail(`manifest_entry.data_file.${name}`, `field ${id} ${name} is missing (requireMetrics)`);
    }
  }
  // The partition tuple's field ids are the partition spec's field ids, in order.
  const partition = checker.record(
    'manifest_entry.data_file.partition',
    checker.unwrap('partition', dataFile.fields.find((f) => f.name === 'partition')!.type).type,
    undefined,
  );
  const want = (pfs as { 'field-id'?: unknown; name?: unknown }[]).map((p) => p['field-id']);
  const got = partition.fields.map((f) => f['field-id']);
  if (JSON.stringify(want) !== JSON.stringify(got)) {
    checker.fail('manifest_entry.data_file.partition', `field-ids ${JSON.stringify(got)} differ from partition-spec field-ids ${JSON.stringify(want)}`);
  }

  const entries = d.records as unknown as ManifestEntryRecord[];
  entries.forEach((e, i) => {
    const at = `entry ${i} (${e.data_file.file_path})`;
    if (![0, 1, 2].includes(e.status)) fail(`${at}: status ${e.status} is not 0, 1 or 2`);
    const c = e.data_file.content;
    if (content === 'data' ? c !== 0 : c !== 1 && c !== 2) fail(`${at}: data_file.content ${c} in a "${content}" manifest`);
    if (e.status !== 1 && (e.sequence_number === null || e.file_sequence_number === null)) {
      fail(`${at}: status ${e.status} entries must carry sequence_number and file_sequence_number (only ADDED inherits)`);
    }
  });
  return { name: file.name, meta: d.meta, content, partitionSpecId: specId, entries };
}

function checkList(file: AvroFile, d: Decoded): CheckedManifestList {
  if (d.meta['format-version'] !== '2') {
    throw new Error(`${file.name}: manifest list format-version is ${JSON.stringify(d.meta['format-version'])}, expected "2"`);
  }
  const checker = new SchemaChecker(file.name, d.schema);
  checker.fields('manifest_file', d.schema, MANIFEST_FILE);
  const manifests = d.records as unknown as ManifestFileRecord[];
  manifests.forEach((m, i) => {
    if (m.content !== 0 && m.content !== 1) {
      throw new Error(`${file.name}: manifest ${i} (${m.manifest_path}): content ${m.content} is not 0 (data) or 1 (deletes)`);
    }
  });
  return { name: file.name, meta: d.meta, manifests };
}

/**
 * Decode every file with avsc (writer schema from the file) and check it
 * against the v2 manifest / manifest-list tables. Throws naming the file and
 * the field on the first mismatch. Longs come back as bigints.
 */
export async function checkAvroFiles(
  files: readonly AvroFile[],
  opts: CheckAvroOptions = {},
): Promise<{ manifests: CheckedManifest[]; lists: CheckedManifestList[] }> {
  const manifests: CheckedManifest[] = [];
  const lists: CheckedManifestList[] = [];
  for (const f of files) {
    const d = await decodeAvro(f);
    if (kindOf(f.name, d.schema) === 'manifest') manifests.push(checkManifest(f, d, opts));
    else lists.push(checkList(f, d));
  }
  return { manifests, lists };
}

/** `*.avro` directly under `<tableDir>/metadata/` (a path or file: URL), sorted by name. */
export async function avroFilesOf(tableDir: string): Promise<AvroFile[]> {
  const dir = path.join(tableDir.startsWith('file:') ? fileURLToPath(tableDir) : tableDir, 'metadata');
  const names = (await readdir(dir)).filter((n) => n.endsWith('.avro')).sort();
  return Promise.all(names.map(async (n) => ({ name: path.join(dir, n), bytes: await readFile(path.join(dir, n)) })));
}

/** `*.avro` under `<prefix>/metadata/` in an S3 bucket (read straight from the store, e.g. s3rver), sorted by key. */
export async function avroFilesOfS3(client: S3Client, bucket: string, prefix: string): Promise<AvroFile[]> {
  const base = `${prefix.replace(/^\/+|\/+$/g, '')}/metadata/`;
  const keys: string[] = [];
  let token: string | undefined;
  do {
    const page = await client.send(new ListObjectsV2Command({ Bucket: bucket, Prefix: base, ContinuationToken: token }));
    for (const o of page.Contents ?? []) if (o.Key?.endsWith('.avro')) keys.push(o.Key);
    token = page.IsTruncated ? page.NextContinuationToken : undefined;
  } while (token);
  keys.sort();
  return Promise.all(
    keys.map(async (Key) => {
      const r = await client.send(new GetObjectCommand({ Bucket: bucket, Key }));
      if (!r.Body) throw new Error(`s3://${bucket}/${Key}: empty GetObject answer`);
      return { name: `s3://${bucket}/${Key}`, bytes: await r.Body.transformToByteArray() };
    }),
  );
}

// ---------------------------------------------------------------- s3rver with If-None-Match

export interface ConditionalS3 {
  readonly s3: TestS3Server;
  readonly proxy: FaultProxy;
  /** The proxy's endpoint: give writers this (path-style). Read back from `s3.endpoint` directly. */
  readonly endpoint: string;
  stop(): Promise<void>;
}

/**
 * S3 never shows an object before its PUT has completed; s3rver does (it
 * streams into the object's file, which a GET finds at once, empty or cut).
 * This front holds a GET or HEAD of a key while a write of that key is under
 * way, so readers see the object whole, as S3 would show it.
 */
export function wholeObjectReads(): FaultRule {
  const writing = new Map<string, Set<Promise<void>>>();
  return async (r) => {
    if (!r.key) return undefined;
    const id = `${r.bucket}/${r.key}`;
    if (r.method === 'PUT' || (r.method === 'POST' && r.query.has('uploadId'))) {
      let done!: () => void;
      const p = new Promise<void>((res) => {
        done = res;
      });
      const set = writing.get(id) ?? new Set();
      set.add(p);
      writing.set(id, set);
      r.onSettled(() => {
        set.delete(p);
        if (set.size === 0 && writing.get(id) === set) writing.delete(id);
        done();
      });
      return undefined;
    }
    if (r.method === 'GET' || r.method === 'HEAD') {
      const set = writing.get(id);
      if (set) await Promise.all([...set]);
    }
    return undefined;
  };
}

/**
 * s3rver behind a fault proxy that holds reads of a key being written (wholeObjectReads) and enforces `If-None-Match: *` on PutObject and
 * CompleteMultipartUpload atomically per key (enforceIfNoneMatch), as AWS S3
 * does: of N concurrent creates of one key, one 200 and N-1 412. Add faults with
 * `proxy.setRule(anyOf(yourRule, ifNoneMatch))` using the returned `ifNoneMatch`.
 */
export async function startConditionalS3(opts: { buckets?: readonly string[] } = {}): Promise<ConditionalS3 & { ifNoneMatch: FaultRule }> {
  const s3 = await startS3Server({ buckets: opts.buckets ?? ['lake'] });
  const ifNoneMatch = anyOf(wholeObjectReads(), enforceIfNoneMatch((b, k) => s3.objectExists(b, k)));
  const proxy = await startFaultProxy({ target: s3.endpoint, rule: ifNoneMatch });
  return {
    s3,
    proxy,
    endpoint: proxy.endpoint,
    ifNoneMatch,
    async stop() {
      await proxy.stop();
      await s3.stop();
    },
  };
}

// ---------------------------------------------------------------- a hostile table

/**
 * A manifest re-encoded with every data file's path passed through `path`:
 * what someone who may write inside the table's folder can do to it. Read and
 * written with the plugin's own Avro code (the bytes are not under test here).
 */
export function rewriteManifest(bytes: Uint8Array, path: (filePath: string) => string): Uint8Array {
  const { metadata, entries } = decodeManifest(bytes);
  const spec = JSON.parse(metadata['partition-spec'] ?? '[]') as { name: string; 'field-id': number; transform: string }[];
  return encodeManifest({
    schemaJson: metadata.schema ?? '{}',
    schemaId: Number(metadata['schema-id']),
    specId: Number(metadata['partition-spec-id']),
    partitionFields: spec.map((f) => ({ name: f.name, fieldId: f['field-id'], type: f.transform === 'day' ? 'int' : 'string' })),
    partitionSpecJson: metadata['partition-spec'] ?? '[]',
    entries: entries.map((e) => ({ ...e, dataFile: { ...e.dataFile, filePath: path(e.dataFile.filePath) } })),
  });
}

/** A manifest list re-encoded with its manifests changed by `change` (added to, paths rewritten). */
export function rewriteManifestList(bytes: Uint8Array, change: (manifests: ManifestFile[]) => ManifestFile[]): Uint8Array {
  const manifests = change(decodeManifestList(bytes));
  const first = manifests[0];
  return encodeManifestList({ snapshotId: first?.addedSnapshotId ?? 1, parentSnapshotId: null, sequenceNumber: first?.sequenceNumber ?? 1, manifests });
}
