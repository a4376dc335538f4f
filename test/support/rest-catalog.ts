/**
 * An Iceberg REST catalog on loopback, written from the published OpenAPI
 * spec (apache/iceberg `open-api/rest-catalog-open-api.yaml`) for the routes
 * a writer uses: `GET /v1/config`, `POST /v1/{prefix}/namespaces`, create
 * (`stage-create` too), load, commit and register a table. It keeps, as a
 * real catalog does, each table's current metadata file; a commit checks the
 * request's `requirements` against the current metadata (409
 * CommitFailedException when one fails), applies its `updates`, writes the
 * result as `<location>/metadata/<NNNNN>-<uuid>.metadata.json` and answers its
 * `metadata-location`. Unknown requirements or updates are a 400, as the spec
 * asks. Errors are the spec's `IcebergErrorResponse`. With a token, every
 * route wants `Authorization: Bearer <token>` (401 otherwise). Commits of one
 * table are serialised, as a catalog's row lock would. No real REST server
 * installs here (no Java, no Python servers, no Docker): LLP 0081.
 *
 * `restAppend` is a second writer committing through it as any REST client
 * does: load the table, write its files (sql-catalog.ts's `writeAppendFiles`),
 * POST `add-snapshot` + `set-snapshot-ref` under `assert-ref-snapshot-id`.
 * @ref LLP 0081
 */
import { randomUUID } from 'node:crypto';
import { promises as fsp } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type Metadata, writeAppendFiles } from './sql-catalog.js';

type Json = Record<string, unknown>;

/** The table metadata fields the server reads and writes (the rest is carried as it is). */
export interface RestMetadata extends Json {
  'format-version': number;
  'table-uuid': string;
  location: string;
  'last-sequence-number': number;
  'last-updated-ms': number;
  'last-column-id': number;
  'current-schema-id': number;
  schemas: { 'schema-id': number; fields: { id: number; name: string }[] }[];
  'default-spec-id': number;
  'partition-specs': { 'spec-id': number; fields: { 'field-id': number }[] }[];
  'last-partition-id': number;
  'default-sort-order-id': number;
  'sort-orders': { 'order-id': number }[];
  properties: Record<string, string>;
  'current-snapshot-id': number;
  refs: Record<string, { 'snapshot-id': number; type: string }>;
  snapshots: { 'snapshot-id': number; 'sequence-number': number; 'timestamp-ms': number; 'manifest-list': string; summary: Record<string, string> }[];
  'snapshot-log': { 'timestamp-ms': number; 'snapshot-id': number }[];
  'metadata-log': { 'timestamp-ms': number; 'metadata-file': string }[];
}

interface Entry {
  file: string;
  metadata: RestMetadata;
}

export interface RestRequest {
  readonly method: string;
  readonly path: string;
  readonly authorization: string | undefined;
  readonly body: unknown;
}

export interface RestCatalog {
  /** `http://127.0.0.1:<port>`: the catalog's `uri`. */
  readonly uri: string;
  /** Every request, in order (the test's window on what the client sent). */
  readonly requests: RestRequest[];
  /** A table's current metadata file and metadata; null when the catalog has no such table. */
  table(namespace: readonly string[], name: string): { file: string; metadata: RestMetadata } | null;
  /** Called with a commit's body before the server takes it up (a test's hook to let another commit through first). */
  beforeCommit: ((body: Json) => Promise<void>) | undefined;
  /** Stop listening (the catalog is down: connections are refused), keeping its tables. */
  down(): Promise<void>;
  /** Listen again on the same port. */
  up(): Promise<void>;
  close(): Promise<void>;
}

export interface RestCatalogOptions {
  /** Bearer token every request must carry; none: no auth. */
  readonly token?: string;
  /** The `prefix` /v1/config hands out (as an override); none: routes without a prefix. */
  readonly prefix?: string;
}

class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly type: string,
    message: string,
  ) {
    super(message);
  }
}

const METADATA_LOG_MAX = 100;
/** The spec's namespace separator in a path: the unit separator, `%1F`. */
const SEPARATOR = '\x1f';

export async function startRestCatalog(opts: RestCatalogOptions = {}): Promise<RestCatalog> {
  const namespaces = new Set<string>();
  const tables = new Map<string, Entry>();
  const locks = new Map<string, Promise<unknown>>();
  const requests: RestRequest[] = [];

  /** One commit of a table at a time: check, write and swap are one step, as a catalog's lock makes them. */
  function locked<T>(key: string, fn: () => Promise<T>): Promise<T> {
    const run = (locks.get(key) ?? Promise.resolve()).then(fn, fn);
    locks.set(
      key,
      run.catch(() => undefined),
    );
    return run;
  }

  async function write(metadata: RestMetadata, version: number): Promise<string> {
    const dir = join(fileURLToPath(metadata.location), 'metadata');
    await fsp.mkdir(dir, { recursive: true });
    const path = join(dir, `${String(version).padStart(5, '0')}-${randomUUID()}.metadata.json`);
    await fsp.writeFile(path, JSON.stringify(metadata), { flag: 'wx' });
    return `${metadata.location.replace(/\/+$/, '')}/metadata/${path.slice(dir.length + 1)}`;
  }

  const versionOf = (file: string) => Number(/(\d+)-[^/]*\.metadata\.json$/.exec(file)?.[1] ?? /v(\d+)\.metadata\.json$/.exec(file)?.[1] ?? -1);

  function loadResult(e: Entry): Json {
    return { 'metadata-location': e.file, metadata: e.metadata, config: {} };
  }

  function checkRequirement(cur: RestMetadata | null, r: Json): void {
    const fail = (why: string) => {
      throw new HttpError(409, 'CommitFailedException', `Requirement failed: ${why}`);
    };
    switch (r.type) {
      case 'assert-create':
        if (cur !== null) fail('table already exists');
        return;
      case 'assert-table-uuid':
        if (cur === null || cur['table-uuid'] !== r.uuid) fail(`UUID does not match: expected ${String(cur?.['table-uuid'])} != ${String(r.uuid)}`);
        return;
      case 'assert-ref-snapshot-id': {
        const ref = cur?.refs[String(r.ref)];
        if (r['snapshot-id'] === null || r['snapshot-id'] === undefined) {
          if (ref !== undefined) fail(`branch or tag ${String(r.ref)} was created concurrently`);
        } else if (ref === undefined || ref['snapshot-id'] !== r['snapshot-id']) {
          fail(`branch ${String(r.ref)} has changed: expected id ${String(r['snapshot-id'])} != ${String(ref?.['snapshot-id'])}`);
        }
        return;
      }
      case 'assert-current-schema-id':
        if (cur?.['current-schema-id'] !== r['current-schema-id']) fail('current schema changed');
        return;
      case 'assert-last-assigned-field-id':
        if (cur?.['last-column-id'] !== r['last-assigned-field-id']) fail('last assigned field id changed');
        return;
      case 'assert-default-spec-id':
        if (cur?.['default-spec-id'] !== r['default-spec-id']) fail('default partition spec changed');
        return;
      case 'assert-last-assigned-partition-id':
        if (cur?.['last-partition-id'] !== r['last-assigned-partition-id']) fail('last assigned partition id changed');
        return;
      case 'assert-default-sort-order-id':
        if (cur?.['default-sort-order-id'] !== r['default-sort-order-id']) fail('default sort order changed');
        return;
      default:
        throw new HttpError(400, 'BadRequestException', `unknown requirement ${JSON.stringify(r.type)}`);
    }
  }

  /** The metadata `updates` make of `base` (a copy; `base` is left as it is). */
  function applyUpdates(base: RestMetadata, updates: Json[]): RestMetadata {
    const m: RestMetadata = structuredClone(base);
    const bad = (why: string) => {
      throw new HttpError(400, 'BadRequestException', why);
    };
    let lastSchema: number | undefined;
    let lastSpec: number | undefined;
    let lastOrder: number | undefined;
    for (const u of updates) {
      switch (u.action) {
        case 'assign-uuid':
          if (base['table-uuid'] !== '' && base['table-uuid'] !== u.uuid) bad('cannot reassign a table UUID');
          m['table-uuid'] = String(u.uuid);
          break;
        case 'upgrade-format-version':
          if (Number(u['format-version']) < m['format-version']) bad('cannot downgrade the format version');
          m['format-version'] = Number(u['format-version']);
          break;
        case 'add-schema': {
          const s = u.schema as RestMetadata['schemas'][number];
          if (m.schemas.some((x) => x['schema-id'] === s['schema-id'])) bad(`schema ${s['schema-id']} exists`);
          m.schemas.push(s);
          m['last-column-id'] = Math.max(m['last-column-id'], ...s.fields.map((f) => f.id), Number(u['last-column-id'] ?? 0));
          lastSchema = s['schema-id'];
          break;
        }
        case 'set-current-schema': {
          const id = u['schema-id'] === -1 ? lastSchema : Number(u['schema-id']);
          if (id === undefined || !m.schemas.some((x) => x['schema-id'] === id)) bad(`no schema ${String(u['schema-id'])}`);
          m['current-schema-id'] = id!;
          break;
        }
        case 'add-spec': {
          const s = u.spec as RestMetadata['partition-specs'][number];
          m['partition-specs'].push(s);
          m['last-partition-id'] = Math.max(m['last-partition-id'], ...s.fields.map((f) => f['field-id']));
          lastSpec = s['spec-id'];
          break;
        }
        case 'set-default-spec': {
          const id = u['spec-id'] === -1 ? lastSpec : Number(u['spec-id']);
          if (id === undefined || !m['partition-specs'].some((x) => x['spec-id'] === id)) bad(`no partition spec ${String(u['spec-id'])}`);
          m['default-spec-id'] = id!;
          break;
        }
        case 'add-sort-order': {
          const o = u['sort-order'] as RestMetadata['sort-orders'][number];
          m['sort-orders'].push(o);
          lastOrder = o['order-id'];
          break;
        }
        case 'set-default-sort-order': {
          const id = u['sort-order-id'] === -1 ? lastOrder : Number(u['sort-order-id']);
          if (id === undefined || !m['sort-orders'].some((x) => x['order-id'] === id)) bad(`no sort order ${String(u['sort-order-id'])}`);
          m['default-sort-order-id'] = id!;
          break;
        }
        case 'add-snapshot': {
          const s = u.snapshot as RestMetadata['snapshots'][number];
          if (m.snapshots.some((x) => x['snapshot-id'] === s['snapshot-id'])) bad(`snapshot ${s['snapshot-id']} exists`);
          if (m['format-version'] >= 2 && s['sequence-number'] <= m['last-sequence-number']) bad(`snapshot sequence number ${s['sequence-number']} is not above the table's ${m['last-sequence-number']}`);
          m.snapshots.push(s);
          m['last-sequence-number'] = Math.max(m['last-sequence-number'], s['sequence-number']);
          break;
        }
        case 'set-snapshot-ref': {
          const id = Number(u['snapshot-id']);
          const s = m.snapshots.find((x) => x['snapshot-id'] === id);
          if (!s) bad(`set-snapshot-ref: no snapshot ${id}`);
          const name = String(u['ref-name']);
          m.refs[name] = { 'snapshot-id': id, type: String(u.type) };
          if (name === 'main') {
            m['current-snapshot-id'] = id;
            m['snapshot-log'].push({ 'timestamp-ms': s!['timestamp-ms'], 'snapshot-id': id });
          }
          break;
        }
        case 'remove-snapshot-ref': {
          const name = String(u['ref-name']);
          delete m.refs[name];
          if (name === 'main') m['current-snapshot-id'] = -1;
          break;
        }
        case 'remove-snapshots': {
          const ids = new Set((u['snapshot-ids'] as number[]).map(Number));
          m.snapshots = m.snapshots.filter((s) => !ids.has(s['snapshot-id']));
          m['snapshot-log'] = m['snapshot-log'].filter((e) => !ids.has(e['snapshot-id']));
          for (const [name, ref] of Object.entries(m.refs)) if (ids.has(ref['snapshot-id'])) delete m.refs[name];
          if (ids.has(m['current-snapshot-id'])) m['current-snapshot-id'] = -1;
          break;
        }
        case 'set-location':
          m.location = String(u.location);
          break;
        case 'set-properties':
          m.properties = { ...m.properties, ...(u.updates as Record<string, string>) };
          break;
        case 'remove-properties':
          for (const k of u.removals as string[]) delete m.properties[k];
          break;
        default:
          bad(`unknown update ${JSON.stringify(u.action)}`);
      }
    }
    return m;
  }

  /** The metadata before any update of a create transaction. */
  function empty(): RestMetadata {
    return {
      'format-version': 2,
      'table-uuid': '',
      location: '',
      'last-sequence-number': 0,
      'last-updated-ms': 0,
      'last-column-id': 0,
      'current-schema-id': -1,
      schemas: [],
      'default-spec-id': -1,
      'partition-specs': [],
      'last-partition-id': 999,
      'default-sort-order-id': -1,
      'sort-orders': [],
      properties: {},
      'current-snapshot-id': -1,
      refs: {},
      snapshots: [],
      'snapshot-log': [],
      'metadata-log': [],
    };
  }

  async function commit(ns: string, name: string, body: Json): Promise<Json> {
    if (!Array.isArray(body.requirements) || !Array.isArray(body.updates)) throw new HttpError(400, 'BadRequestException', 'a commit needs requirements and updates');
    await self.beforeCommit?.(body);
    const key = `${ns}${SEPARATOR}${SEPARATOR}${name}`;
    return locked(key, async () => {
      const cur = tables.get(key) ?? null;
      const requirements = body.requirements as Json[];
      const create = requirements.some((r) => r.type === 'assert-create');
      if (cur === null && !create) throw new HttpError(404, 'NoSuchTableException', `Table does not exist: ${ns.split(SEPARATOR).join('.')}.${name}`);
      if (create && !namespaces.has(ns)) throw new HttpError(404, 'NoSuchNamespaceException', `Namespace does not exist: ${ns.split(SEPARATOR).join('.')}`);
      for (const r of requirements) checkRequirement(cur?.metadata ?? null, r);
      const next = applyUpdates(cur?.metadata ?? empty(), body.updates as Json[]);
      if (next.location === '') throw new HttpError(400, 'BadRequestException', 'a new table needs set-location');
      const prev = cur?.metadata;
      next['last-updated-ms'] = Math.max(Date.now(), (prev?.['last-updated-ms'] ?? 0) + 1);
      if (cur !== null) next['metadata-log'] = [...next['metadata-log'], { 'timestamp-ms': cur.metadata['last-updated-ms'], 'metadata-file': cur.file }].slice(-METADATA_LOG_MAX);
      const file = await write(next, cur === null ? 0 : versionOf(cur.file) + 1);
      const entry = { file, metadata: next };
      tables.set(key, entry);
      return { 'metadata-location': file, metadata: next };
    });
  }

  async function createTable(ns: string, body: Json): Promise<Json> {
    if (!namespaces.has(ns)) throw new HttpError(404, 'NoSuchNamespaceException', `Namespace does not exist: ${ns.split(SEPARATOR).join('.')}`);
    const name = String(body.name);
    const key = `${ns}${SEPARATOR}${SEPARATOR}${name}`;
    if (tables.has(key)) throw new HttpError(409, 'AlreadyExistsException', `Table already exists: ${name}`);
    const schema = body.schema as RestMetadata['schemas'][number];
    const spec = (body['partition-spec'] as RestMetadata['partition-specs'][number] | undefined) ?? { 'spec-id': 0, fields: [] };
    const m = applyUpdates(empty(), [
      { action: 'assign-uuid', uuid: randomUUID() },
      { action: 'add-schema', schema: { ...schema, 'schema-id': schema['schema-id'] ?? 0 } },
      { action: 'set-current-schema', 'schema-id': -1 },
      { action: 'add-spec', spec: { ...spec, 'spec-id': spec['spec-id'] ?? 0 } },
      { action: 'set-default-spec', 'spec-id': -1 },
      { action: 'add-sort-order', 'sort-order': body['write-order'] ?? { 'order-id': 0, fields: [] } },
      { action: 'set-default-sort-order', 'sort-order-id': -1 },
      { action: 'set-location', location: String(body.location) },
      { action: 'set-properties', updates: (body.properties as Record<string, string>) ?? {} },
    ]);
    m['last-updated-ms'] = Date.now();
    if (body['stage-create'] === true) return { metadata: m, config: {} };
    return locked(key, async () => {
      const entry = { file: await write(m, 0), metadata: m };
      tables.set(key, entry);
      return loadResult(entry);
    });
  }

  async function register(ns: string, body: Json): Promise<Json> {
    if (!namespaces.has(ns)) throw new HttpError(404, 'NoSuchNamespaceException', `Namespace does not exist: ${ns.split(SEPARATOR).join('.')}`);
    const name = String(body.name);
    const file = String(body['metadata-location']);
    const key = `${ns}${SEPARATOR}${SEPARATOR}${name}`;
    return locked(key, async () => {
      if (tables.has(key) && body.overwrite !== true) throw new HttpError(409, 'AlreadyExistsException', `Table already exists: ${name}`);
      const metadata = JSON.parse(await fsp.readFile(fileURLToPath(file), 'utf8')) as RestMetadata;
      const entry = { file, metadata };
      tables.set(key, entry);
      return loadResult(entry);
    });
  }

  async function route(method: string, parts: string[], body: unknown): Promise<[number, Json | null]> {
    if (method === 'GET' && parts.join('/') === 'v1/config') {
      return [200, { defaults: {}, overrides: opts.prefix !== undefined ? { prefix: opts.prefix } : {} }];
    }
    if (parts[0] !== 'v1') throw new HttpError(404, 'NotFoundException', 'no such route');
    let rest = parts.slice(1);
    if (opts.prefix !== undefined) {
      if (rest[0] !== opts.prefix) throw new HttpError(404, 'NotFoundException', `no such route (this catalog's prefix is ${opts.prefix})`);
      rest = rest.slice(1);
    }
    const b = (body ?? {}) as Json;
    if (rest[0] !== 'namespaces') throw new HttpError(404, 'NotFoundException', 'no such route');
    if (rest.length === 1 && method === 'POST') {
      const ns = (b.namespace as string[]).join(SEPARATOR);
      if (namespaces.has(ns)) throw new HttpError(409, 'AlreadyExistsException', `Namespace already exists: ${ns.split(SEPARATOR).join('.')}`);
      namespaces.add(ns);
      return [200, { namespace: b.namespace, properties: (b.properties as Json) ?? {} }];
    }
    const ns = rest[1]!;
    if (rest.length === 3 && rest[2] === 'register' && method === 'POST') return [200, await register(ns, b)];
    if (rest.length === 3 && rest[2] === 'tables' && method === 'POST') return [200, await createTable(ns, b)];
    if (rest.length === 4 && rest[2] === 'tables') {
      const key = `${ns}${SEPARATOR}${SEPARATOR}${rest[3]}`;
      if (method === 'GET') {
        const e = tables.get(key);
        if (!e) throw new HttpError(404, namespaces.has(ns) ? 'NoSuchTableException' : 'NoSuchNamespaceException', `Table does not exist: ${ns.split(SEPARATOR).join('.')}.${rest[3]}`);
        return [200, loadResult(e)];
      }
      if (method === 'POST') return [200, await commit(ns, rest[3]!, b)];
    }
    throw new HttpError(404, 'NotFoundException', 'no such route');
  }

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const text = Buffer.concat(chunks).toString('utf8');
    const url = new URL(req.url ?? '/', 'http://catalog');
    let body: unknown;
    let status: number;
    let answer: Json | null;
    try {
      body = text === '' ? undefined : JSON.parse(text);
      requests.push({ method: req.method ?? '', path: url.pathname, authorization: req.headers.authorization, body });
      if (opts.token !== undefined && req.headers.authorization !== `Bearer ${opts.token}`) throw new HttpError(401, 'NotAuthorizedException', 'Not authorized: a valid bearer token is required');
      // Path parameters decoded once: a namespace's parts stay joined by the unit separator.
      const parts = url.pathname.split('/').filter((p) => p !== '').map(decodeURIComponent);
      [status, answer] = await route(req.method ?? 'GET', parts, body);
    } catch (e) {
      const h = e instanceof HttpError ? e : new HttpError(e instanceof SyntaxError ? 400 : 500, e instanceof SyntaxError ? 'BadRequestException' : 'InternalServerError', (e as Error).message);
      status = h.status;
      answer = { error: { message: h.message, type: h.type, code: h.status } };
    }
    res.writeHead(status, { 'content-type': 'application/json' });
    res.end(answer === null ? undefined : JSON.stringify(answer));
  }

  let server: Server = createServer((req, res) => void handle(req, res));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  const closeServer = () =>
    new Promise<void>((resolve) => {
      server.close(() => resolve());
      server.closeAllConnections();
    });
  const self: RestCatalog = {
    beforeCommit: undefined,
    uri: `http://127.0.0.1:${port}`,
    requests,
    table(namespace, name) {
      const e = tables.get(`${namespace.join(SEPARATOR)}${SEPARATOR}${SEPARATOR}${name}`);
      return e ? { file: e.file, metadata: e.metadata } : null;
    },
    down: closeServer,
    async up() {
      server = createServer((req, res) => void handle(req, res));
      await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
    },
    close: closeServer,
  };
  return self;
}

/** A namespace as a path parameter: its parts joined by the unit separator, url-encoded (`a%1Fb`). */
export function namespacePath(namespace: readonly string[]): string {
  return namespace.map(encodeURIComponent).join('%1F');
}

export interface RestTableRef {
  readonly uri: string;
  readonly prefix?: string;
  readonly token?: string;
  readonly namespace: readonly string[];
  readonly table: string;
}

async function call(t: RestTableRef, method: string, path: string, body?: unknown): Promise<{ status: number; json: Json }> {
  const url = `${t.uri}/v1${t.prefix !== undefined ? `/${encodeURIComponent(t.prefix)}` : ''}${path}`;
  const r = await fetch(url, {
    method,
    headers: { 'content-type': 'application/json', ...(t.token !== undefined ? { authorization: `Bearer ${t.token}` } : {}) },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  return { status: r.status, json: (await r.json()) as Json };
}

/** One append prepared against the table as it was loaded; `commit` answers false on a 409 (a requirement failed). */
export interface PreparedRestAppend {
  readonly base: string;
  commit(): Promise<boolean>;
}

/** A foreign REST client's append of `ids` as `source`, prepared on the table's current metadata. */
export async function prepareRestAppend(t: RestTableRef, source: string, ids: readonly number[]): Promise<PreparedRestAppend> {
  const loaded = await call(t, 'GET', `/namespaces/${namespacePath(t.namespace)}/tables/${encodeURIComponent(t.table)}`);
  if (loaded.status !== 200) throw new Error(`load table: ${loaded.status} ${JSON.stringify(loaded.json)}`);
  const m = loaded.json.metadata as Metadata & RestMetadata;
  const { snapshot } = await writeAppendFiles(m, source, ids);
  const main = m.refs.main?.['snapshot-id'] ?? null;
  return {
    base: String(loaded.json['metadata-location']),
    async commit() {
      const r = await call(t, 'POST', `/namespaces/${namespacePath(t.namespace)}/tables/${encodeURIComponent(t.table)}`, {
        requirements: [
          { type: 'assert-table-uuid', uuid: m['table-uuid'] },
          { type: 'assert-ref-snapshot-id', ref: 'main', 'snapshot-id': main },
        ],
        updates: [
          { action: 'add-snapshot', snapshot },
          { action: 'set-snapshot-ref', 'ref-name': 'main', type: 'branch', 'snapshot-id': snapshot['snapshot-id'] },
        ],
      });
      if (r.status === 409) return false;
      if (r.status !== 200) throw new Error(`commit: ${r.status} ${JSON.stringify(r.json)}`);
      return true;
    },
  };
}

/** A REST client's append as an application runs it: on a 409, load again and retry. Returns the commits lost. */
export async function restAppend(t: RestTableRef, source: string, ids: readonly number[]): Promise<number> {
  for (let lost = 0; lost < 50; lost++) {
    if (await (await prepareRestAppend(t, source, ids)).commit()) return lost;
  }
  throw new Error('50 commits in a row lost');
}
