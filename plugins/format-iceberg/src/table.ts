/**
 * The table's metadata and its one commit rule: a new version is
 * `metadata/v<N+1>.metadata.json`, created if absent and never overwritten.
 * The writer that creates it has committed; one that finds it there lost the
 * race, reads the new head and re-bases its change on it. `version-hint.text`
 * names the newest version for readers that need it, but a writer never trusts
 * it alone: it walks forward from it until a version is absent.
 * @ref LLP 0051 (the commit protocol), LLP 0052 (the recovery rule)
 */
import { randomUUID } from 'node:crypto';
import type { BlobDestination, Logger } from 'hypsink/plugin';
import { HypsinkError } from 'hypsink/plugin';
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
  const log = [...prev['metadata-log'], { 'timestamp-ms': prev['last-updated-ms'], 'metadata-file': locate(versionKey(tableKey, head.version)) }];
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
  ) {}

  /** Where version `v` of the table's metadata is, for messages (no secrets). */
  describe(v: number): string {
    return this.destination.describe(versionKey(this.tableKey, v));
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
    return metadata === null ? null : { version: v, metadata };
  }

  private async hinted(signal: AbortSignal): Promise<number> {
    const bytes = await this.destination.get!(hintKey(this.tableKey), { signal });
    const n = bytes === null ? Number.NaN : Number.parseInt(new TextDecoder().decode(bytes).trim(), 10);
    return Number.isSafeInteger(n) && n > 0 ? n : this.listed(signal);
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
    const bytes = new TextEncoder().encode(`${JSON.stringify(metadata, null, 1)}\n`);
    const put = await this.destination.putIfAbsent(
      versionKey(this.tableKey, v),
      (async function* () {
        yield bytes;
      })(),
      { contentType: 'application/json', signal, exclusive: true },
    );
    return put.created;
  }

  /**
   * Point the hint at `v`, unless a newer version is already there (a writer
   * after us points it further). A stale hint is only slower to read: readers
   * that walk forward, as this one does, still find the head.
   */
  async hint(v: number, signal: AbortSignal): Promise<void> {
    if ((await this.destination.get!(versionKey(this.tableKey, v + 1), { signal })) !== null) return;
    await this.destination.replace!(hintKey(this.tableKey), new TextEncoder().encode(`${v}\n`), { contentType: 'text/plain', signal });
  }

  /** Read an Avro file of the table by its location. */
  async avro(metadata: TableMetadata, location: string, signal: AbortSignal): Promise<Uint8Array> {
    const key = this.keyOf(metadata, location);
    const bytes = await this.destination.get!(key, { signal });
    if (bytes === null) throw new HypsinkError('HYPSINK_ERR_DESTINATION', `sink "${this.sink}": ${location}, which the table's metadata names, is not there; the table is damaged: restore it`);
    return bytes;
  }

  /** The destination key of a location inside the table (`<location>/…`). */
  keyOf(metadata: TableMetadata, location: string): string {
    const root = metadata.location.replace(/\/+$/, '');
    if (!location.startsWith(`${root}/`)) {
      throw new HypsinkError('HYPSINK_ERR_DESTINATION', `sink "${this.sink}": ${location} lies outside the table's location ${root}; hypsink reads only files under the table's own folder`);
    }
    return `${this.tableKey}${location.slice(root.length)}`;
  }

  /** Wait before the next attempt after a lost race: bounded, jittered so racing writers spread out. */
  async backoff(attempt: number, signal: AbortSignal): Promise<void> {
    const ms = Math.min(2000, 10 * 2 ** Math.min(attempt, 8)) * (0.5 + Math.random());
    this.log.debug({ sink: this.sink, attempt, ms: Math.round(ms) }, 'iceberg: another writer committed first; re-basing');
    await new Promise<void>((res, rej) => {
      const t = setTimeout(res, ms);
      signal.addEventListener(
        'abort',
        () => {
          clearTimeout(t);
          rej(new HypsinkError('HYPSINK_ERR_ABORTED', `sink "${this.sink}": table commit aborted by shutdown`));
        },
        { once: true },
      );
    });
  }
}
