/**
 * A table in an Iceberg REST catalog (Polaris, Nessie, Lakekeeper, Gravitino,
 * Glue's and Unity's endpoints): the catalog keeps the pointer and writes the
 * metadata files; a client loads the table (its `metadata-location`) and
 * commits a change as `requirements` the server checks against the table as
 * it is and `updates` it applies. The writer still builds the whole next
 * version (one commit path for every catalog, table.ts); `restChange` turns
 * base→next into the request. A failed requirement (409) is a lost race,
 * answered as a lost JDBC swap is: re-read, re-base. Plain fetch() against
 * the published OpenAPI spec, not `iceberg-js` (LLP 0081 says why).
 * @ref LLP 0081
 */
import { HypsinkError, isHypsinkError } from 'hypsink/plugin';
import type { PointedBase, TablePointer } from './catalog.js';
import { currentSchema, currentSpec, type TableMetadata } from './table.js';

type Json = Record<string, unknown>;

export interface RestCatalogConfig {
  /** The catalog's base URI (`https://host/api/catalog`): routes are `<uri>/v1/...`. */
  readonly uri: string;
  /** Sent to `/v1/config` as `?warehouse=`: which of the server's catalogs, for a server that holds several. */
  readonly warehouse?: string | undefined;
  /** The tables' namespace, `a.b` for a nested one. */
  readonly namespace: string;
  /** A bearer token (from `${ENV}`); never in a message. */
  readonly token?: string | undefined;
}

/** What a commit sends: the spec's CommitTableRequest. */
export interface RestChange {
  readonly requirements: Json[];
  readonly updates: Json[];
}

const sameJson = (a: unknown, b: unknown) => JSON.stringify(a) === JSON.stringify(b);

/**
 * The commit that makes `next` of `base` (null: a new table), as requirements
 * and updates. A new table asserts that it is not there and is built from
 * nothing (uuid, format, schema, spec, sort order, location, properties). An
 * existing one asserts its uuid and that `main` is still at base's snapshot:
 * the server's compare-and-swap, the same guard as JDBC's `WHERE
 * metadata_location = base`, for every change hypsink makes (each moves
 * `main` or is made from it). A schema or spec change also asserts the
 * current id and the last assigned id, as two concurrent evolutions must not
 * both land. The server keeps what it derives itself: the sequence number,
 * the current snapshot (from `main`), the snapshot and metadata logs.
 * @ref LLP 0081
 */
export function restChange(base: TableMetadata | null, next: TableMetadata): RestChange {
  const requirements: Json[] = [];
  const updates: Json[] = [];
  if (base === null) {
    requirements.push({ type: 'assert-create' });
    updates.push({ action: 'assign-uuid', uuid: next['table-uuid'] }, { action: 'upgrade-format-version', 'format-version': next['format-version'] });
  } else {
    requirements.push({ type: 'assert-table-uuid', uuid: base['table-uuid'] }, { type: 'assert-ref-snapshot-id', ref: 'main', 'snapshot-id': base.refs.main?.['snapshot-id'] ?? null });
  }
  const schemas = new Set(base?.schemas.map((s) => s['schema-id']));
  const addedSchemas = next.schemas.filter((s) => !schemas.has(s['schema-id']));
  for (const schema of addedSchemas) updates.push({ action: 'add-schema', schema });
  if (next['current-schema-id'] !== base?.['current-schema-id']) updates.push({ action: 'set-current-schema', 'schema-id': next['current-schema-id'] });
  if (base && (addedSchemas.length > 0 || next['current-schema-id'] !== base['current-schema-id'])) {
    requirements.push({ type: 'assert-current-schema-id', 'current-schema-id': base['current-schema-id'] }, { type: 'assert-last-assigned-field-id', 'last-assigned-field-id': base['last-column-id'] });
  }
  const specs = new Set(base?.['partition-specs'].map((s) => s['spec-id']));
  const addedSpecs = next['partition-specs'].filter((s) => !specs.has(s['spec-id']));
  for (const spec of addedSpecs) updates.push({ action: 'add-spec', spec });
  if (next['default-spec-id'] !== base?.['default-spec-id']) updates.push({ action: 'set-default-spec', 'spec-id': next['default-spec-id'] });
  if (base && (addedSpecs.length > 0 || next['default-spec-id'] !== base['default-spec-id'])) {
    requirements.push({ type: 'assert-default-spec-id', 'default-spec-id': base['default-spec-id'] }, { type: 'assert-last-assigned-partition-id', 'last-assigned-partition-id': base['last-partition-id'] });
  }
  const orders = new Set(base?.['sort-orders'].map((o) => o['order-id']));
  for (const order of next['sort-orders'].filter((o) => !orders.has(o['order-id']))) updates.push({ action: 'add-sort-order', 'sort-order': order });
  if (next['default-sort-order-id'] !== base?.['default-sort-order-id']) updates.push({ action: 'set-default-sort-order', 'sort-order-id': next['default-sort-order-id'] });
  if (next.location !== base?.location) updates.push({ action: 'set-location', location: next.location });
  const props = base?.properties ?? {};
  const set = Object.fromEntries(Object.entries(next.properties).filter(([k, v]) => props[k] !== v));
  if (Object.keys(set).length > 0) updates.push({ action: 'set-properties', updates: set });
  const removals = Object.keys(props).filter((k) => !(k in next.properties));
  if (removals.length > 0) updates.push({ action: 'remove-properties', removals });
  // Snapshots first, then the refs that name them, then what goes.
  const had = new Set(base?.snapshots.map((s) => s['snapshot-id']));
  for (const snapshot of next.snapshots.filter((s) => !had.has(s['snapshot-id']))) updates.push({ action: 'add-snapshot', snapshot });
  const refs = base?.refs ?? {};
  for (const [name, ref] of Object.entries(next.refs)) {
    if (!sameJson(refs[name], ref)) updates.push({ action: 'set-snapshot-ref', 'ref-name': name, ...ref });
  }
  for (const name of Object.keys(refs).filter((n) => !(n in next.refs))) updates.push({ action: 'remove-snapshot-ref', 'ref-name': name });
  const kept = new Set(next.snapshots.map((s) => s['snapshot-id']));
  const removed = [...had].filter((id) => !kept.has(id));
  if (removed.length > 0) updates.push({ action: 'remove-snapshots', 'snapshot-ids': removed });
  return { requirements, updates };
}

interface Answer {
  readonly status: number;
  readonly json: Json;
}

/** The spec's error model (`{ error: { message, type, code } }`), shortened for a message. */
function said(a: Answer): string {
  const e = a.json.error as { message?: unknown; type?: unknown } | undefined;
  const type = typeof e?.type === 'string' ? e.type : 'no error type';
  const message = typeof e?.message === 'string' ? e.message.slice(0, 300) : '';
  return `${a.status} ${type}${message ? `: ${message}` : ''}`;
}

const errorType = (a: Answer) => (a.json.error as { type?: unknown } | undefined)?.type;

/**
 * One REST catalog, as a sink's writer talks to it: its `/v1/config` (the
 * route prefix) asked once and kept, a bearer token on every request, a
 * timeout per request. `table(name)` is a table's pointer.
 */
export class RestCatalog {
  /** The catalog for messages: its URI without user info, query or token. */
  readonly shown: string;
  private readonly base: string;
  private readonly namespace: readonly string[];
  private prefix: Promise<string> | undefined;

  constructor(
    private readonly cfg: RestCatalogConfig,
    private readonly sink: string,
    private readonly timeoutMs = 30_000,
  ) {
    const u = new URL(cfg.uri);
    this.base = `${u.origin}${u.pathname.replace(/\/+$/, '')}`;
    this.shown = `rest catalog ${this.base}`;
    this.namespace = cfg.namespace.split('.');
  }

  table(name: string): TablePointer {
    return new RestTable(this, name, `${this.shown} table ${this.namespace.join('.')}.${name}`);
  }

  /** The namespace as a path parameter: its parts joined by the unit separator, `%1F`. */
  namespacePath(): string {
    return this.namespace.map(encodeURIComponent).join('%1F');
  }

  /**
   * `route` (after `/v1/{prefix}`) answered. A catalog that does not answer,
   * or answers 5xx, fails the unit retryable (a commit whose answer was lost
   * may have landed: the retry finds its own snapshot, LLP 0052); 401, 403 and
   * 419 are the token's fault. Other statuses are the caller's to read.
   */
  async request(method: string, route: string, body: unknown, signal: AbortSignal, what: string, shown: string): Promise<Answer> {
    const prefix = await this.routePrefix(signal, shown);
    return this.send(method, `/v1${prefix}${route}`, body, signal, what, shown);
  }

  /** Create the namespace (a 409, already there, is as good). */
  async createNamespace(signal: AbortSignal, shown: string): Promise<void> {
    const a = await this.request('POST', '/namespaces', { namespace: this.namespace }, signal, 'create the namespace', shown);
    if (a.status !== 200 && a.status !== 409) throw this.unexpected(a, shown, 'create the namespace', `create namespace ${this.namespace.join('.')} in the catalog, then run again`);
  }

  unexpected(a: Answer, shown: string, what: string, fix: string): HypsinkError {
    return new HypsinkError('HYPSINK_ERR_DESTINATION', `sink "${this.sink}": ${shown}: ${what}: the catalog answered ${this.masked(said(a))}; ${fix}`);
  }

  /** The `prefix` of the catalog's routes, from `/v1/config` (an override, else a default); asked again after a failure. */
  private routePrefix(signal: AbortSignal, shown: string): Promise<string> {
    if (this.prefix === undefined) {
      const query = this.cfg.warehouse !== undefined ? `?warehouse=${encodeURIComponent(this.cfg.warehouse)}` : '';
      this.prefix = this.send('GET', `/v1/config${query}`, undefined, signal, 'read its configuration', shown).then((a) => {
        if (a.status !== 200) throw this.unexpected(a, shown, 'GET /v1/config', 'check writerConfig.catalog.uri and warehouse');
        const pick = (m: unknown) => (typeof (m as Json | undefined)?.prefix === 'string' ? ((m as Json).prefix as string) : undefined);
        const p = pick(a.json.overrides) ?? pick(a.json.defaults) ?? '';
        // The prefix is a path of the server's own, sent as it gave it (as Iceberg's clients do).
        return p === '' ? '' : `/${p.replace(/^\/+|\/+$/g, '')}`;
      });
      this.prefix.catch(() => {
        this.prefix = undefined;
      });
    }
    return this.prefix;
  }

  private async send(method: string, path: string, body: unknown, signal: AbortSignal, what: string, shown: string): Promise<Answer> {
    const timeout = AbortSignal.timeout(this.timeoutMs);
    let status: number;
    let text: string;
    try {
      const r = await fetch(`${this.base}${path}`, {
        method,
        headers: { accept: 'application/json', ...(body !== undefined ? { 'content-type': 'application/json' } : {}), ...(this.cfg.token !== undefined ? { authorization: `Bearer ${this.cfg.token}` } : {}) },
        ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
        signal: AbortSignal.any([signal, timeout]),
        redirect: 'error',
      });
      status = r.status;
      text = await r.text();
    } catch (e) {
      if (isHypsinkError(e)) throw e;
      if (signal.aborted) throw new HypsinkError('HYPSINK_ERR_ABORTED', `sink "${this.sink}": ${shown}: ${what} aborted by shutdown`);
      const cause = (e as { cause?: { code?: string; message?: string } }).cause;
      const why = timeout.aborted ? `no answer in ${this.timeoutMs} ms` : (cause?.code ?? cause?.message ?? (e as Error).message);
      throw new HypsinkError('HYPSINK_ERR_RETRYABLE', `sink "${this.sink}": ${shown}: ${what} failed (${this.masked(why)}); the unit is retried later, and finds its own commit if this one landed`, { retryable: true, cause: e });
    }
    let json: Json = {};
    try {
      const parsed: unknown = text === '' ? {} : JSON.parse(text);
      if (parsed !== null && typeof parsed === 'object') json = parsed as Json;
    } catch {
      // A proxy's page, not the catalog's JSON: the status speaks alone.
    }
    const a = { status, json };
    if (status === 401 || status === 403 || status === 419) {
      throw new HypsinkError('HYPSINK_ERR_AUTH', `sink "${this.sink}": ${shown} refused the request to ${what} (${this.masked(said(a))}); fix writerConfig.catalog.token (a bearer token, given as "\${ENV}") or the token's grants in the catalog`);
    }
    if (status >= 500) {
      throw new HypsinkError('HYPSINK_ERR_RETRYABLE', `sink "${this.sink}": ${shown}: ${what}: the catalog answered ${this.masked(said(a))}; the unit is retried later, and finds its own commit if this one landed`, { retryable: true });
    }
    return a;
  }

  /** A server's text with the token taken out, should it echo it. */
  private masked(text: string): string {
    const t = this.cfg.token;
    return t !== undefined && t !== '' ? text.split(t).join('***') : text;
  }
}

/** One table of a REST catalog: load, commit, register. */
class RestTable implements TablePointer {
  constructor(
    private readonly catalog: RestCatalog,
    private readonly name: string,
    readonly shown: string,
  ) {}

  private get route(): string {
    return `/namespaces/${this.catalog.namespacePath()}/tables/${encodeURIComponent(this.name)}`;
  }

  async current(signal: AbortSignal): Promise<string | null> {
    const a = await this.catalog.request('GET', this.route, undefined, signal, 'load the table', this.shown);
    if (a.status === 404) return null;
    const loc = a.json['metadata-location'];
    if (a.status !== 200 || typeof loc !== 'string' || loc === '') {
      throw this.catalog.unexpected(a, this.shown, 'load the table', "a LoadTableResult with a metadata-location was expected: check writerConfig.catalog.uri (the catalog's base, without /v1)");
    }
    return loc;
  }

  async commit(base: PointedBase | null, next: TableMetadata, _write: () => Promise<string>, signal: AbortSignal): Promise<boolean> {
    const change = restChange(base?.metadata ?? null, next);
    if (base === null) {
      // A create transaction: staged (the server checks the name and location), then committed under assert-create.
      const staged = await this.withNamespace(signal, () =>
        this.catalog.request(
          'POST',
          `/namespaces/${this.catalog.namespacePath()}/tables`,
          { name: this.name, location: next.location, schema: currentSchema(next), 'partition-spec': currentSpec(next), 'stage-create': true, properties: next.properties },
          signal,
          'stage the new table',
          this.shown,
        ),
      );
      if (staged.status === 409) return false;
      if (staged.status !== 200) throw this.catalog.unexpected(staged, this.shown, 'stage the new table', 'check that the catalog takes tables at this location');
    }
    const a = await this.catalog.request('POST', this.route, change, signal, 'commit', this.shown);
    if (a.status === 200) return true;
    // CommitFailedException: a requirement failed, another commit came first (or, creating, the table is there now).
    if (a.status === 409) return false;
    if (a.status === 404) {
      throw this.catalog.unexpected(a, this.shown, 'commit', `the table was dropped from the catalog while hypsink wrote to it; register it again (hypsink iceberg register --sink <name>) or export to a new table`);
    }
    throw this.catalog.unexpected(a, this.shown, 'commit', 'the catalog refused the change itself; the unit is not committed (report this with the catalog\'s name and version)');
  }

  async register(file: string, signal: AbortSignal): Promise<boolean> {
    const a = await this.withNamespace(signal, () =>
      this.catalog.request('POST', `/namespaces/${this.catalog.namespacePath()}/register`, { name: this.name, 'metadata-location': file }, signal, 'register the table', this.shown),
    );
    if (a.status === 200) return true;
    if (a.status === 409) return false;
    throw this.catalog.unexpected(a, this.shown, 'register the table', 'check that the catalog takes tables at this location');
  }

  /** `call`, and once more after creating the namespace when the catalog says it has none. */
  private async withNamespace(signal: AbortSignal, call: () => Promise<Answer>): Promise<Answer> {
    const a = await call();
    if (a.status !== 404 || errorType(a) !== 'NoSuchNamespaceException') return a;
    await this.catalog.createNamespace(signal, this.shown);
    return call();
  }
}
