/**
 * The table's metadata and its one commit rule: a new version is
 * `metadata/v<N+1>.metadata.json`, created if absent and never overwritten.
 * The writer that creates it has committed; one that finds it there lost the
 * race, reads the new head and re-bases its change on it. `version-hint.text`
 * names the newest version for readers that need it, but a writer never trusts
 * it alone: it walks forward from it until a version is absent.
 * A table in a catalog has a pointer instead (catalog.ts, rest.ts): its head
 * is the file the catalog names, and a commit goes through the catalog from
 * the version it was made from.
 * @ref LLP 0051 (the commit protocol), LLP 0052 (the recovery rule), LLP 0077 (catalogs), LLP 0081 (REST)
 */
import { createHash, randomUUID } from 'node:crypto';
import type { BlobDestination, Logger } from 'hypsink/plugin';
import { HypsinkError, isHypsinkError, sleep } from 'hypsink/plugin';
import { catalogMetadataName, type TablePointer, versionOfName } from './catalog.js';
import type { IcebergSchema, PartitionSpec } from './schema.js';

export interface Snapshot {
  readonly 'snapshot-id': number;
  readonly 'parent-snapshot-id'?: number;
  readonly 'sequence-number': number;
  readonly 'timestamp-ms': number;
  readonly 'manifest-list': string;
  readonly summary: Readonly<Record<string, string>>;
  readonly 'schema-id': number;
}

export interface TableMetadata {
  readonly 'format-version': 2;
  readonly 'table-uuid': string;
  readonly location: string;
  readonly 'last-sequence-number': number;
  readonly 'last-updated-ms': number;
  readonly 'last-column-id': number;
  readonly 'current-schema-id': number;
  readonly schemas: readonly IcebergSchema[];
  readonly 'default-spec-id': number;
  readonly 'partition-specs': readonly PartitionSpec[];
  readonly 'last-partition-id': number;
  readonly properties: Readonly<Record<string, string>>;
  readonly 'current-snapshot-id': number;
  readonly refs: Readonly<Record<string, { readonly 'snapshot-id': number; readonly type: 'branch' | 'tag' }>>;
  readonly snapshots: readonly Snapshot[];
  readonly 'snapshot-log': readonly { readonly 'timestamp-ms': number; readonly 'snapshot-id': number }[];
  readonly 'metadata-log': readonly { readonly 'timestamp-ms': number; readonly 'metadata-file': string }[];
  readonly 'sort-orders': readonly { readonly 'order-id': number; readonly fields: readonly unknown[] }[];
  readonly 'default-sort-order-id': number;
}

export interface Head {
  readonly version: number;
  readonly metadata: TableMetadata;
  /** The metadata file's location exactly as a catalog names it (a catalog table only). @ref LLP 0077 */
  readonly file?: string;
}

/**
 * Summary keys of hypsink's snapshots: who committed which unit, and the
 * unit's digest (its content: LLP 0054). Values are strings, as the spec's
 * summary map (and pyiceberg) has them.
 * @ref LLP 0052, LLP 0058
 */
export const SUMMARY = { writer: 'hypsink.writer', partition: 'hypsink.partition', since: 'hypsink.since', until: 'hypsink.until', digest: 'hypsink.digest' } as const;

/** The unit a snapshot commits, as its summary names it. */
export interface UnitMark {
  readonly writer: string;
  readonly partition: string;
  readonly since: string;
  readonly until: string;
  /** The unit's digest; null in a snapshot committed before digests were recorded. */
  readonly digest: string | null;
}

/** A writer's tag in its data file names (`<tag>-<since>-<until>-<digest>.parquet`): its identity, hashed. */
export function writerTag(writer: string): string {
  return createHash('sha256').update(writer).digest('hex').slice(0, 16);
}

export function markOf(s: Snapshot): UnitMark | null {
  const m = s.summary;
  const writer = m[SUMMARY.writer];
  const partition = m[SUMMARY.partition];
  const since = m[SUMMARY.since];
  const until = m[SUMMARY.until];
  return writer !== undefined && partition !== undefined && since !== undefined && until !== undefined ? { writer, partition, since, until, digest: m[SUMMARY.digest] ?? null } : null;
}

/** How many earlier metadata files a version lists (Iceberg's default for `write.metadata.previous-versions-max`). */
const METADATA_LOG_MAX = 100;

export const versionKey = (tableKey: string, v: number) => `${tableKey}/metadata/v${v}.metadata.json`;
export const hintKey = (tableKey: string) => `${tableKey}/metadata/version-hint.text`;

export function currentSchema(m: TableMetadata): IcebergSchema {
  const s = m.schemas.find((x) => x['schema-id'] === m['current-schema-id']);
  if (!s) throw new HypsinkError('HYPSINK_ERR_DESTINATION', `iceberg table ${m.location}: its current schema ${m['current-schema-id']} is not among its schemas; the metadata is damaged`);
  return s;
}

export function currentSpec(m: TableMetadata): PartitionSpec {
  const s = m['partition-specs'].find((x) => x['spec-id'] === m['default-spec-id']);
  if (!s) throw new HypsinkError('HYPSINK_ERR_DESTINATION', `iceberg table ${m.location}: its default partition spec ${m['default-spec-id']} is not among its specs; the metadata is damaged`);
  return s;
}

export function currentSnapshot(m: TableMetadata): Snapshot | undefined {
  return m['current-snapshot-id'] < 0 ? undefined : m.snapshots.find((s) => s['snapshot-id'] === m['current-snapshot-id']);
}

/** A new table's first version: no snapshot yet. */
export function newTable(location: string, schema: IcebergSchema, spec: PartitionSpec, now: number): TableMetadata {
  return {
    'format-version': 2,
    'table-uuid': randomUUID(),
    location,
    'last-sequence-number': 0,
    'last-updated-ms': now,
    'last-column-id': Math.max(...schema.fields.map((f) => f.id)),
    'current-schema-id': schema['schema-id'],
    schemas: [schema],
    'default-spec-id': spec['spec-id'],
    'partition-specs': [spec],
    'last-partition-id': Math.max(999, ...spec.fields.map((f) => f['field-id'])),
    properties: { 'write.format.default': 'parquet', 'created-by': 'hypsink' },
    'current-snapshot-id': -1,
    refs: {},
    snapshots: [],
    'snapshot-log': [],
    'metadata-log': [],
    'sort-orders': [{ 'order-id': 0, fields: [] }],
    'default-sort-order-id': 0,
  };
}

/** The next version of `head`: its metadata changed by `change`, the previous file in the metadata log. */
export function nextVersion(tableKey: string, head: Head, locate: (key: string) => string, now: number, change: Partial<TableMetadata>): TableMetadata {
  const prev = head.metadata;
  // A catalog's file by the catalog's own spelling: a catalog commit swaps from the last entry. @ref LLP 0077
  const log = [...prev['metadata-log'], { 'timestamp-ms': prev['last-updated-ms'], 'metadata-file': head.file ?? locate(versionKey(tableKey, head.version)) }];
  return { ...prev, ...change, 'last-updated-ms': Math.max(now, prev['last-updated-ms'] + 1), 'metadata-log': log.slice(-METADATA_LOG_MAX) };
}

/**
 * The reads and the commit of one table, over a blob destination that can
 * create if absent, get, and replace (the version hint).
 */
export class TableStore {
  constructor(
    readonly tableKey: string,
    private readonly destination: BlobDestination,
    private readonly sink: string,
    private readonly log: Logger,
    /** The catalog that points at the table's current metadata; none for a path-based table. @ref LLP 0077 */
    readonly pointer?: TablePointer,
  ) {}

  /** The files a catalog named, by version, for messages. */
  private readonly named = new Map<number, string>();

  /** Where version `v` of the table's metadata is, for messages (no secrets). */
  describe(v: number): string {
    const named = this.named.get(v);
    return named !== undefined && this.pointer ? `${this.pointer.shown}: ${named}` : this.destination.describe(versionKey(this.tableKey, v));
  }

  private async json(key: string, signal: AbortSignal): Promise<TableMetadata | null> {
    const bytes = await this.destination.get!(key, { signal });
    if (bytes === null) return null;
    try {
      return JSON.parse(new TextDecoder().decode(bytes)) as TableMetadata;
    } catch (e) {
      throw new HypsinkError('HYPSINK_ERR_DESTINATION', `sink "${this.sink}": ${this.destination.describe(key)} is not table metadata (${(e as Error).message}); the table is damaged: restore that file`);
    }
  }

  /**
   * The newest version: from the hint (or, without one, the highest version
   * listed), walked forward while the next version exists. Null for no table.
   */
  async head(signal: AbortSignal): Promise<Head | null> {
    return this.pointer ? this.pointed(this.pointer, signal) : this.walked(signal);
  }

  private async walked(signal: AbortSignal): Promise<Head | null> {
    let v = await this.hinted(signal);
    let metadata = v > 0 ? await this.json(versionKey(this.tableKey, v), signal) : null;
    if (v > 0 && metadata === null) {
      // A hint naming a version not there (a restore, a hand edit): trust the listing instead.
      v = await this.listed(signal);
      metadata = v > 0 ? await this.json(versionKey(this.tableKey, v), signal) : null;
    }
    for (;;) {
      const next = await this.json(versionKey(this.tableKey, v + 1), signal);
      if (next === null) break;
      v += 1;
      metadata = next;
    }
    if (metadata === null) return null;
    this.checkMetadata(metadata, v);
    return { version: v, metadata };
  }

  /**
   * The catalog's head: the file its row names, checked as a path is (LLP
   * 0063). No row while a path-based table is there is refused: creating one
   * would start a second history beside it.
   * @ref LLP 0077
   */
  private async pointed(pointer: TablePointer, signal: AbortSignal): Promise<Head | null> {
    const file = await pointer.current(signal);
    if (file === null) {
      const path = await this.walked(signal);
      if (path === null) return null;
      throw new HypsinkError(
        'HYPSINK_ERR_CONFIG',
        `sink "${this.sink}": ${pointer.shown} is not there, but the table is, path-based, at ${this.describe(path.version)}; a commit through the catalog would start a second history beside it. Register it first: hypsink iceberg register --sink ${this.sink}`,
      );
    }
    const v = versionOfName(file);
    this.named.set(v, file);
    const metadata = await this.json(this.keyOf(file, pointer.shown), signal);
    if (metadata === null) throw new HypsinkError('HYPSINK_ERR_DESTINATION', `sink "${this.sink}": ${pointer.shown} names ${file}, which is not there; the table is damaged: restore that file`);
    this.checkMetadata(metadata, v);
    this.lastPointed = { file, metadata };
    return { version: v, metadata, file };
  }

  /**
   * The path-based head's version and metadata, to register the table in a
   * catalog; null without a table.
   */
  async pathHead(signal: AbortSignal): Promise<Head | null> {
    return this.walked(signal);
  }

  private async hinted(signal: AbortSignal): Promise<number> {
    return (await this.hintedVersion(signal)) ?? this.listed(signal);
  }

  private async listed(signal: AbortSignal): Promise<number> {
    let max = 0;
    const prefix = `${this.tableKey}/metadata/v`;
    for await (const b of this.destination.list!(prefix, { signal })) {
      const m = /^v([1-9]\d*)\.metadata\.json$/.exec(b.key.slice(prefix.length - 1));
      if (m) max = Math.max(max, Number(m[1]));
    }
    return max;
  }

  /** Create version `v` if absent: true when this call made it, false when another writer did first. */
  async commit(v: number, metadata: TableMetadata, signal: AbortSignal): Promise<boolean> {
    if (this.pointer) return this.swap(this.pointer, v, metadata, signal);
    return this.create(versionKey(this.tableKey, v), metadata, signal);
  }

  /**
   * A catalog commit from the version it was made from, the last of its
   * metadata log (`nextVersion` puts the head's file there), or a new table
   * when it has none. A JDBC catalog has the version written in a file of a
   * fresh name (never a lost create: a writer that died before its swap
   * leaves an orphan, not a blocked name) and swaps its row to it; a REST
   * catalog is sent the change and writes the file itself.
   * @ref LLP 0077, LLP 0081
   */
  private async swap(pointer: TablePointer, v: number, metadata: TableMetadata, signal: AbortSignal): Promise<boolean> {
    const file = metadata['metadata-log'].at(-1)?.['metadata-file'] ?? null;
    const base = file === null ? null : { file, metadata: await this.baseOf(pointer, file, signal) };
    return pointer.commit(base, metadata, async () => {
      const key = `${this.tableKey}/metadata/${catalogMetadataName(v, randomUUID())}`;
      await this.create(key, metadata, signal);
      return this.destination.locate!(key);
    }, signal);
  }

  /** The last head read through the catalog: the base of the commit made from it (a REST commit sends the change from it). */
  private lastPointed: { readonly file: string; readonly metadata: TableMetadata } | undefined;

  /** The metadata of `file`, a version a commit is made from: the head just read, else read again. @ref LLP 0081 */
  private async baseOf(pointer: TablePointer, file: string, signal: AbortSignal): Promise<TableMetadata> {
    if (this.lastPointed?.file === file) return this.lastPointed.metadata;
    const m = await this.json(this.keyOf(file, pointer.shown), signal);
    if (m === null) throw new HypsinkError('HYPSINK_ERR_DESTINATION', `sink "${this.sink}": ${pointer.shown}: ${file}, the version this commit was made from, is not there; the table is damaged: restore that file`);
    return m;
  }

  private async create(key: string, metadata: TableMetadata, signal: AbortSignal): Promise<boolean> {
    const bytes = new TextEncoder().encode(`${JSON.stringify(metadata, null, 1)}\n`);
    const put = await this.destination.putIfAbsent(
      key,
      (async function* () {
        yield bytes;
      })(),
      { contentType: 'application/json', signal, exclusive: true },
    );
    return put.created;
  }

  /**
   * Point the hint at `v` and end on the newest version: after writing, look
   * for `v+1`. A writer that committed `v+1` after our commit may have written
   * its hint before ours landed (S3 has no compare-and-swap for a replace), so
   * ours would stand behind it; then the newest is written again. The last
   * hint written is thus never behind a version whose writer finished its
   * hint. `v` is the version just committed, or the head just read, so it is
   * written without a look first: the look after covers a newer one (it cost
   * each commit a read). Returns the version the hint was last pointed at.
   * @ref LLP 0073, LLP 0110
   */
  async hint(v: number, signal: AbortSignal): Promise<number> {
    // A catalog table has no hint: the catalog is its pointer, and other writers through it never move a hint. @ref LLP 0077
    if (this.pointer) return v;
    for (;;) {
      await this.destination.replace!(hintKey(this.tableKey), new TextEncoder().encode(`${v}\n`), { contentType: 'text/plain', signal });
      if (!(await this.exists(v + 1, signal))) return v;
      v += 1;
      while (await this.exists(v + 1, signal)) v += 1;
    }
  }

  private async exists(v: number, signal: AbortSignal): Promise<boolean> {
    return (await this.destination.get!(versionKey(this.tableKey, v), { signal })) !== null;
  }

  /**
   * A metadata file orphan cleanup keeps, whatever its age. Of a path-based
   * table every version (LLP 0052: a writer with a stale head could create a
   * removed number again). Of a catalog table the head's file and those its
   * metadata log names: another is a swap that was lost or never made, which
   * no writer creates twice (fresh names), so an orphan (LLP 0073).
   * @ref LLP 0077
   */
  keepsVersion(key: string, head: Head): boolean {
    const name = key.slice(`${this.tableKey}/metadata/`.length);
    if (!key.startsWith(`${this.tableKey}/metadata/`) || name.includes('/')) return false;
    if (!this.pointer) return /^v\d+\.metadata\.json$/.test(name);
    if (!name.endsWith('.metadata.json')) return false;
    let kept = this.keptFiles.get(head);
    if (kept === undefined) {
      const files = [head.file, ...head.metadata['metadata-log'].map((e) => e['metadata-file'])].filter((f) => f !== undefined);
      kept = new Set(files.map((f) => this.keyOf(f, this.describe(head.version))));
      this.keptFiles.set(head, kept);
    }
    return kept.has(key);
  }

  /** Per head, the keys of the metadata files it keeps: asked once per listed file. */
  private readonly keptFiles = new WeakMap<Head, Set<string>>();

  /** The version the hint names, as a reader that trusts it alone would open it; null without a usable hint. */
  async hintedVersion(signal: AbortSignal): Promise<number | null> {
    if (this.pointer) return null;
    const bytes = await this.destination.get!(hintKey(this.tableKey), { signal });
    const n = bytes === null ? Number.NaN : Number.parseInt(new TextDecoder().decode(bytes).trim(), 10);
    return Number.isSafeInteger(n) && n > 0 ? n : null;
  }

  /** Version `v` of the metadata, checked against the table (LLP 0063); null when it is not there. */
  async version(v: number, signal: AbortSignal): Promise<TableMetadata | null> {
    const m = await this.json(versionKey(this.tableKey, v), signal);
    if (m !== null) this.checkMetadata(m, v);
    return m;
  }

  /** Where this table is, as its metadata should name it: the destination's location of its key. */
  get location(): string {
    this.own ??= this.destination.locate!(this.tableKey);
    return this.own;
  }

  private own: string | undefined;

  /**
   * The destination key of `location`, which `namedBy` (a metadata file, a
   * manifest list, a manifest) names; refused unless it lies under this
   * table's own location. Every location hypsink takes from a table goes
   * through here before it is read or removed.
   * @ref LLP 0063
   */
  keyOf(location: string, namedBy: string): string {
    const own = this.location;
    // Every head read checks each snapshot's manifest list again (and a store is made per unit): parsing them
    // all each time made a commit's cost grow with the table's history. @ref LLP 0083
    const memo = `${own}\n${this.tableKey}\n${location}`;
    const known = checkedKeys.get(memo);
    if (known !== undefined) return known;
    const key = locationKey(own, this.tableKey, location);
    if (typeof key !== 'string') throw this.outside(namedBy, location, `lies outside the table ${own} (${key.reason})`);
    if (checkedKeys.size >= KEYS_KEPT) checkedKeys.clear();
    checkedKeys.set(memo, key);
    return key;
  }

  private outside(namedBy: string, location: string, what: string): HypsinkError {
    return new HypsinkError(
      'HYPSINK_ERR_DESTINATION',
      `sink "${this.sink}": ${namedBy} names ${JSON.stringify(location)}, which ${what}; hypsink reads, writes and removes only files under a table's own location, and nothing was read or removed there. That file was changed by someone else: restore it from a backup, or rewrite or remove the entry naming that location, then run again`,
    );
  }

  /**
   * Every location a metadata version names that hypsink may follow: the
   * table's own, each snapshot's manifest list and each metadata-log entry.
   * A version naming one elsewhere is refused whole, before anything it names
   * is read (and before a new version copies it on). @ref LLP 0063
   */
  checkMetadata(m: TableMetadata, v: number): void {
    const namedBy = this.describe(v);
    const own = parseLocation(this.location);
    const said = typeof m.location === 'string' ? parseLocation(m.location) : { reason: 'not a string' };
    if ('reason' in own || 'reason' in said || !sameLocation(own, said)) {
      throw this.outside(namedBy, String(m.location), `is not the table's location ${this.location}; a table is read only where it was created (moved, or edited?)`);
    }
    for (const s of m.snapshots ?? []) this.keyOf(s['manifest-list'], `${namedBy} (snapshot ${s['snapshot-id']})`);
    for (const e of m['metadata-log'] ?? []) this.keyOf(e['metadata-file'], `${namedBy} (metadata-log)`);
  }

  /** Read an Avro file of the table by its location, which `namedBy` names. */
  async avro(location: string, namedBy: string, signal: AbortSignal): Promise<Uint8Array> {
    const key = this.keyOf(location, namedBy);
    const bytes = await this.destination.get!(key, { signal }).catch((e: unknown) => {
      throw namedIn(e, namedBy);
    });
    if (bytes === null) throw new MissingFile(`sink "${this.sink}": ${location}, which ${namedBy} names, is not there; the table is damaged: restore it`);
    return bytes;
  }

  /**
   * Whether `e`, thrown by reads of files that `version` names, is a lost race
   * rather than damage: a file of that version not there while the table has
   * moved past it. A newer version's expiry removes files only older versions
   * name, so the reader re-bases on the head as after a lost commit; a file
   * the head still names stays damage, found again there. @ref LLP 0078
   */
  async movedPast(e: unknown, version: number, signal: AbortSignal): Promise<boolean> {
    if (!(e instanceof MissingFile)) return false;
    const head = await this.head(signal);
    return head !== null && head.version > version;
  }

  /** Wait before the next attempt after a lost race: bounded, jittered so racing writers spread out. */
  async backoff(attempt: number, signal: AbortSignal): Promise<void> {
    const ms = Math.min(2000, 10 * 2 ** Math.min(attempt, 8)) * (0.5 + Math.random());
    this.log.debug({ sink: this.sink, attempt, ms: Math.round(ms) }, 'iceberg: another writer committed first; re-basing');
    // Its listener leaves the unit's signal when the wait ends: a unit may lose many races. @ref LLP 0069
    await sleep(ms, signal, () => new HypsinkError('HYPSINK_ERR_ABORTED', `sink "${this.sink}": table commit aborted by shutdown`));
  }
}

/** A file a version of the table names is not there: damage, unless the table moved past that version (`movedPast`). */
export class MissingFile extends HypsinkError {
  constructor(message: string) {
    super('HYPSINK_ERR_DESTINATION', message);
  }
}

/**
 * The destination's own refusal of a key a table's file named (a link on the
 * way, LLP 0028), saying which file named it; other errors as they are.
 */
export function namedIn(e: unknown, namedBy: string): unknown {
  return isHypsinkError(e) ? new HypsinkError(e.code, `${e.message} (named by ${namedBy})`, { cause: e, retryable: e.retryable }) : e;
}

/**
 * Locations already taken to a key, by the table's own location, its key and
 * the location: `locationKey` is a function of these alone, so a kept answer
 * is the rule's answer. A refused location is never kept. Bounded: far more
 * than a table's snapshots between expiries.
 */
const checkedKeys = new Map<string, string>();
const KEYS_KEPT = 20_000;

/** A location taken apart: its scheme, its authority (a bucket, a host) and its path's names, normalised. */
interface Location {
  readonly scheme: string;
  readonly authority: string;
  readonly names: readonly string[];
}

/** Names of one store: `s3a:` and `s3n:` are Hadoop's names for `s3:`. */
const SCHEMES: Readonly<Record<string, string>> = { s3a: 's3', s3n: 's3' };

/**
 * `location` as a scheme, an authority and the names of its path, normalised
 * the way the store would read it: repeated slashes and `.` dropped, `..`
 * taken back (never above the top), and for `file:` percent-encoding decoded
 * first (`%2e%2e` is `..`; an encoded `/`, `\` or NUL is refused, never a
 * name). S3 keys are taken as they are: S3 decodes nothing. A path without a
 * scheme is a `file:` path when absolute, refused when relative.
 * @ref LLP 0063
 */
export function parseLocation(location: string): Location | { reason: string } {
  const m = /^([A-Za-z][A-Za-z0-9+.-]*):(.*)$/s.exec(location);
  let scheme: string;
  let rest: string;
  if (m) {
    scheme = m[1]!.toLowerCase();
    rest = m[2]!;
  } else if (location.startsWith('/')) {
    scheme = 'file';
    rest = location;
  } else {
    return { reason: 'not an absolute location' };
  }
  scheme = SCHEMES[scheme] ?? scheme;
  let authority = '';
  if (rest.startsWith('//')) {
    const slash = rest.indexOf('/', 2);
    authority = slash < 0 ? rest.slice(2) : rest.slice(2, slash);
    rest = slash < 0 ? '' : rest.slice(slash);
  }
  if (scheme === 'file') {
    authority = authority.toLowerCase();
    if (authority === 'localhost') authority = '';
    // A query or a fragment is not part of a file's path; hypsink's own locations encode both characters.
    if (/[?#]/.test(rest)) return { reason: 'a file: location with a query or a fragment' };
  }
  const names: string[] = [];
  for (const raw of rest.split('/')) {
    let name = raw;
    if (scheme === 'file') {
      try {
        name = decodeURIComponent(raw);
      } catch {
        return { reason: `${JSON.stringify(raw)} is not valid percent-encoding` };
      }
      if (/[/\\\0]/.test(name)) return { reason: `${JSON.stringify(raw)} encodes a slash, a backslash or a NUL` };
    }
    if (name === '' || name === '.') continue;
    if (name === '..') {
      if (names.length === 0) return { reason: '`..` above the top' };
      names.pop();
      continue;
    }
    names.push(name);
  }
  return { scheme, authority, names };
}

function sameLocation(a: Location, b: Location): boolean {
  return a.scheme === b.scheme && a.authority === b.authority && a.names.length === b.names.length && a.names.every((n, i) => n === b.names[i]);
}

/**
 * The one rule (LLP 0063): the destination key of a location a table's
 * metadata names, or why it is refused. `own` is the table's location as the
 * destination gives it (`locate(tableKey)`), never the `location` a metadata
 * file says: that file may have been rewritten. A location is the table's
 * when, both normalised, it has the table's scheme and authority (bucket,
 * host) and its path lies strictly under the table's; the key is the table's
 * key and the names below it, so it can never name a key of another table or
 * outside the destination's root or prefix.
 */
export function locationKey(own: string, tableKey: string, location: string): string | { reason: string } {
  if (typeof location !== 'string') return { reason: 'not a string' };
  const table = parseLocation(own);
  if ('reason' in table) return { reason: `the table's own location ${own}: ${table.reason}` };
  const loc = parseLocation(location);
  if ('reason' in loc) return loc;
  if (loc.scheme !== table.scheme) return { reason: `${loc.scheme}: is not the table's ${table.scheme}:` };
  if (loc.authority !== table.authority) return { reason: table.scheme === 's3' ? `bucket ${loc.authority || '(none)'} is not the table's ${table.authority}` : `host ${loc.authority} is not this machine` };
  const under = loc.names.length > table.names.length && table.names.every((n, i) => n === loc.names[i]);
  if (!under) return { reason: `/${loc.names.join('/')} is not under /${table.names.join('/')}` };
  return [tableKey, ...loc.names.slice(table.names.length)].join('/');
}
