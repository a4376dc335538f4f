/**
 * `@hypsink/format-iceberg`: a blob sink's writer that keeps an Apache Iceberg
 * (format v2) table per dataset over the sink's destination (local-fs or S3).
 * One unit is one append snapshot: its data files, one manifest, a manifest
 * list, and a new metadata version created if absent. The snapshot's summary
 * names the writer (this cache and sink), the partition, the unit's
 * `(since, until]` and its digest, which is how a retry finds that the unit
 * committed (and a copy of this cache, that its rows are not the ones there).
 * @ref LLP 0051 (the commit protocol), LLP 0052 (the recovery rule), LLP 0058 (the digest)
 */
import { getRandomValues, randomUUID } from 'node:crypto';
import { z } from 'zod';
import type { BlobDestination, Continuation, Encoder, HeldUnit, PartitionRef, PgConnection, PluginContext, PluginOptionsSpec, ShipResult, SinkBuildContext, Unit, UnitGuard } from 'hypsink/plugin';
import { HypsinkError, notAPgSslMode, PG_SSL_MODES, parseSinkConfig, pgConnection, unitConflict } from 'hypsink/plugin';
import { decodeManifestList, encodeManifest, encodeManifestList, type ManifestEntry, type ManifestFile, manifestFileOf, type PartitionField } from './avro.js';
import { JdbcCatalog, type TablePointer } from './catalog.js';
import { type FilePlan, writeDataFiles } from './datafile.js';
import { compactTable } from './compact.js';
import { expireSnapshots, removeOrphans } from './maintain.js';
import { RestCatalog } from './rest.js';
import { carryOver, type Merged, mergeRule } from './merge.js';
import { summaryOf } from './summary.js';
import { evolve, fieldIds, firstSchema, firstSpec, type PartitionSpec } from './schema.js';
import { currentSchema, currentSnapshot, currentSpec, type Head, markOf, newTable, nextVersion, SUMMARY, type Snapshot, TableStore, type UnitMark, versionKey, writerTag } from './table.js';

const TABLE_NAME = /^[A-Za-z0-9_][A-Za-z0-9_.-]*$/;

/** The catalog's key columns are VARCHAR(255) in JdbcCatalog's and SqlCatalog's schema. */
const catalogName = z.string().min(1).max(255);

/**
 * A JDBC catalog on PostgreSQL (`iceberg_tables`, as Spark's JdbcCatalog and pyiceberg's SqlCatalog keep it): the
 * table's current metadata is the file its row names, and a commit swaps that row. The table's name in the catalog
 * is its name here (`table`, else the dataset's). @ref LLP 0077
 */
const jdbcCatalogSchema = z
  .object({
    type: z.literal('jdbc'),
    /** `postgres://user:password@host:port/database`, usually "${HYPSINK_CATALOG_URL}"; sslmode as the Postgres sink reads it. */
    url: z.string().refine((u) => /^postgres(ql)?:\/\//.test(u), 'must be a postgres:// URL'),
    ssl: z
      .object({
        mode: z.enum(PG_SSL_MODES, { error: (iss) => (typeof iss.input === 'string' ? `sslmode ${notAPgSslMode(iss.input)}` : `must be one of libpq's sslmodes: ${PG_SSL_MODES.join(', ')}`) }).optional(),
        ca: z.string().min(1).optional(),
      })
      .strict()
      .optional(),
    /** The catalog's name (`catalog_name`): pyiceberg's `load_catalog` name, Spark's `spark.sql.catalog.<name>`. */
    name: catalogName,
    /** The tables' namespace (`table_namespace`), `a.b` for a nested one. */
    namespace: catalogName,
  })
  .strict();

/**
 * An Iceberg REST catalog: the table is loaded from it and every commit is sent to it as requirements and updates;
 * it writes the metadata files. @ref LLP 0081
 */
const restCatalogSchema = z
  .object({
    type: z.literal('rest'),
    /** The catalog's base URI (routes are `<uri>/v1/...`). */
    uri: z.string().refine((u) => {
      if (!/^https?:\/\/[^/]/.test(u) || !URL.canParse(u)) return false;
      const p = new URL(u);
      return p.username === '' && p.password === '' && p.search === '' && p.hash === '';
    }, 'must be an http:// or https:// URL without user info, query or fragment (the token goes in catalog.token)'),
    /** Sent to /v1/config: which catalog of a server that holds several. */
    warehouse: z.string().min(1).optional(),
    /** The tables' namespace, `a.b` for a nested one. */
    namespace: z.string().min(1).refine((n) => n.split('.').every((p) => p !== ''), 'must be names joined by dots (a.b)'),
    /** The table's name in the catalog, for a sink of one table; default: its name here (`table`, else the dataset's). */
    table: z.string().regex(TABLE_NAME).optional(),
    /** A bearer token, given as "${HYPSINK_CATALOG_TOKEN}" (masked in every log line); none for a catalog without auth. */
    token: z.string().min(1).optional(),
  })
  .strict();

const catalogSchema = z.discriminatedUnion('type', [jdbcCatalogSchema, restCatalogSchema]);

const configSchema = z
  .object({
    /** The table: one name for the sink's one dataset, or a name per dataset. Default: the dataset's name. */
    table: z.union([z.string().regex(TABLE_NAME), z.record(z.string(), z.string().regex(TABLE_NAME))]).optional(),
    /** A new table is partitioned by `day(<timestampColumn>)` as well as by source (an existing table keeps its spec). */
    dayPartition: z.boolean().default(true),
    compression: z.enum(['zstd', 'snappy', 'gzip', 'uncompressed']).default('zstd'),
    rowGroupRows: z.number().int().positive().default(65_536),
    /** Commits lost to other writers in a row before the unit is retried later (by the kernel's backoff). */
    commitAttempts: z.number().int().positive().default(40),
    /** `hypsink maintain`: snapshots older than this are expired (Iceberg's history.expire.max-snapshot-age-ms). */
    maxSnapshotAgeMs: z.number().int().positive().default(5 * 86_400_000),
    /** `hypsink maintain`: the newest this many snapshots are always kept (history.expire.min-snapshots-to-keep). */
    minSnapshotsToKeep: z.number().int().positive().default(1),
    /**
     * `hypsink maintain`: files under the table no version reaches are removed once older than this (Iceberg's
     * remove_orphan_files `older_than`, 3 days too): far above the longest commit, so no commit on its way loses one. @ref LLP 0073
     */
    orphanMinAgeMs: z.number().int().positive().default(3 * 86_400_000),
    /**
     * Merge the parent's small manifests on commit (Iceberg's commit.manifest-merge.enabled), once this many
     * have gathered (commit.manifest.min-count-to-merge), into manifests of about this size
     * (commit.manifest.target-size-bytes). The table's own properties of those names win. @ref LLP 0072
     */
    manifestMerge: z.boolean().default(true),
    manifestMinCountToMerge: z.number().int().min(2).default(100),
    manifestTargetBytes: z.number().int().positive().default(8 * 1024 * 1024),
    /**
     * `hypsink maintain --tables`: in each partition, data files below `compactTargetBytes` (the table's
     * write.target-file-size-bytes wins) are rewritten into files of about that size once there are
     * `compactMinFiles` of them (Iceberg's rewrite_data_files min-input-files), as one `replace` snapshot. @ref LLP 0078
     */
    compact: z.boolean().default(true),
    compactTargetBytes: z.number().int().positive().default(128 * 1024 * 1024),
    compactMinFiles: z.number().int().min(2).default(5),
    /** Commit through a catalog (JDBC or REST); without one the table is path-based (its highest `v<N>.metadata.json`). @ref LLP 0077, LLP 0081 */
    catalog: catalogSchema.optional(),
  })
  .strict();
export type IcebergConfig = z.infer<typeof configSchema>;

/** The sink's `writerConfig`, declared so the host checks it before `create`. @ref LLP 0032 */
export const ICEBERG_OPTIONS: PluginOptionsSpec = {
  keys: [...Object.keys(configSchema.shape), ...[...new Set([...Object.keys(jdbcCatalogSchema.shape), ...Object.keys(restCatalogSchema.shape)])].map((k) => `catalog.${k}`), 'catalog.ssl.mode', 'catalog.ssl.ca'],
  validate: configSchema['~standard'].validate,
};

/** A snapshot id: random, positive, below 2^53 so JSON numbers hold it exactly. */
function snapshotId(): number {
  const [hi, lo] = getRandomValues(new Uint32Array(2));
  return (hi! & 0x1fffff) * 2 ** 32 + lo! || 1;
}

function partitionFields(spec: PartitionSpec): PartitionField[] {
  return spec.fields.map((f) => ({ name: f.name, fieldId: f['field-id'], type: f.transform === 'day' ? 'int' : 'string' }));
}

class IcebergWriter {
  /** A JDBC catalog's connection, checked when the sink is built (its URL and sslmode), opened per statement. */
  private readonly catalog: PgConnection | null;
  /** A REST catalog: its configuration (the route prefix) asked once per writer. @ref LLP 0081 */
  private readonly rest: RestCatalog | null;
  /** The table `catalog.table` names, once one was opened. */
  private namedTable: string | undefined;

  constructor(
    private readonly cfg: IcebergConfig,
    private readonly build: SinkBuildContext,
  ) {
    const c = cfg.catalog;
    this.catalog = c?.type === 'jdbc' ? pgConnection(c, build.sink, build.baseDir, 'writerConfig.catalog') : null;
    this.rest = c?.type === 'rest' ? new RestCatalog(c, build.sink) : null;
  }

  /** The table's store: through the catalog when one is configured. @ref LLP 0077, LLP 0081 */
  store(table: string, destination: BlobDestination): TableStore {
    const c = this.cfg.catalog;
    let pointer: TablePointer | undefined;
    if (c?.type === 'jdbc' && this.catalog) pointer = new JdbcCatalog(this.catalog, { catalog: c.name, namespace: c.namespace, table }, this.build.sink);
    if (c?.type === 'rest' && this.rest) {
      // One catalog name for one table: two of the sink's tables under it would share one history.
      if (c.table !== undefined) this.namedTable ??= table;
      if (c.table !== undefined && this.namedTable !== table) {
        throw new HypsinkError('HYPSINK_ERR_CONFIG', `sink "${this.build.sink}": writerConfig.catalog.table names one table ("${c.table}"), and the sink writes two (${this.namedTable}, ${table}); drop catalog.table to name each by its own name`);
      }
      pointer = this.rest.table(c.table ?? table);
    }
    return new TableStore(table, destination, this.build.sink, this.build.log, pointer);
  }

  /** This cache and sink: persisted with the cache (its id), so two hosts never share one. */
  get writer(): string {
    return `${this.build.cacheId}/${this.build.sink}`;
  }

  private get tag(): string {
    return writerTag(this.writer);
  }

  tableOf(dataset: string): string {
    const t = this.cfg.table;
    if (t === undefined) {
      if (!TABLE_NAME.test(dataset)) {
        throw new HypsinkError('HYPSINK_ERR_CONFIG', `sink "${this.build.sink}": dataset "${dataset}" is not a usable table name; set writerConfig.table`);
      }
      return dataset;
    }
    if (typeof t === 'string') return t;
    const name = t[dataset];
    if (name === undefined) throw new HypsinkError('HYPSINK_ERR_CONFIG', `sink "${this.build.sink}": writerConfig.table names no table for dataset "${dataset}"; add "${dataset}": "<table>"`);
    return name;
  }

  unitId(p: PartitionRef, since: Continuation | null, until: Continuation): string {
    return `${this.tableOf(p.dataset)}@${this.tag}/${p.key}/${since?.seq ?? '0'}-${until.seq}`;
  }

  private mark(unit: Unit): UnitMark {
    return { writer: this.writer, partition: unit.partition.key, since: unit.since?.seq ?? '0', until: unit.until.seq, digest: unit.digest };
  }

  /**
   * This unit's snapshot in the head, if it committed: one of this writer and
   * partition with the unit's range and the unit's digest (a snapshot from
   * before digests were recorded has none, and is taken by its label). The
   * same range with another digest, or a range overlapping the unit's without
   * being it, holds other rows of this cache id and these seqs: a copy of this
   * cache (a cloned host, a restored backup, a copied folder running beside
   * it) committed them. Refused, nothing of the unit written, never counted
   * as committed.
   * @ref LLP 0052 (the recovery rule), LLP 0054 (a unit's digest), LLP 0058
   */
  private own(head: Head, want: UnitMark, unit: Unit, store: TableStore): Snapshot | undefined {
    let found: Snapshot | undefined;
    for (const s of head.metadata.snapshots) {
      const m = markOf(s);
      if (m === null || m.writer !== want.writer || m.partition !== want.partition) continue;
      const same = m.since === want.since && m.until === want.until;
      if (same && (m.digest === null || m.digest === want.digest)) {
        found = s;
        continue;
      }
      const overlaps = BigInt(m.since) < BigInt(want.until) && BigInt(want.since) < BigInt(m.until);
      if (same || overlaps) {
        const since = (seq: string) => (seq === '0' ? null : seq);
        throw unitConflict({
          sink: unit.sink,
          partition: unit.partition,
          since: since(want.since),
          until: want.until,
          digest: unit.digest,
          held: { since: since(m.since), until: m.until, digest: m.digest },
          where: `${store.describe(head.version)} (snapshot ${s['snapshot-id']})`,
        });
      }
    }
    return found;
  }

  private need(d: BlobDestination): asserts d is BlobDestination & Required<Pick<BlobDestination, 'get' | 'replace' | 'list' | 'locate'>> {
    if (!d.get || !d.replace || !d.list || !d.locate) {
      throw new HypsinkError('HYPSINK_ERR_CONFIG', `sink "${this.build.sink}": its destination cannot hold an Iceberg table (it needs get, replace, list and locate); use @hypsink/local-fs or @hypsink/s3`);
    }
  }

  /** The day column of the table's spec, checked against what the unit's rows hold. */
  private dayColumnOf(head: Head, unit: Unit): string | undefined {
    const spec = currentSpec(head.metadata);
    const day = spec.fields.find((f) => f.transform === 'day');
    if (!day) return undefined;
    const f = currentSchema(head.metadata).fields.find((x) => x.id === day['source-id']);
    const c = unit.schema.columns.find((x) => x.name === f?.name);
    if (!f || c?.type !== 'TIMESTAMP') {
      throw new HypsinkError(
        'HYPSINK_ERR_CONFIG',
        `sink "${unit.sink}": the table is partitioned by day(${f?.name ?? `field ${day['source-id']}`}), and the rows handed to the writer ${c ? `have it as ${c.type}` : 'lack that column'} (a transform dropped or rewrote it?); keep the column as a TIMESTAMP, or export to a new table`,
      );
    }
    return f.name;
  }

  /** The head once the table exists and its schema takes the unit's columns (created or evolved here if need be). */
  private async settle(store: TableStore, unit: Unit, want: UnitMark, locate: (k: string) => string): Promise<Head> {
    const table = this.tableOf(unit.partition.dataset);
    /** The first version this writer just made: the head without reading it back. */
    let made: Head | null = null;
    for (let attempt = 0; ; attempt++) {
      const head = made ?? (await store.head(unit.signal));
      made = null;
      if (head === null) {
        const schema = firstSchema(unit.schema.columns);
        const ts = unit.schema.timestampColumn;
        const day = this.cfg.dayPartition && ts !== undefined && unit.schema.columns.some((c) => c.name === ts && c.type === 'TIMESTAMP') ? ts : undefined;
        const first = newTable(locate(store.tableKey), schema, firstSpec(schema, day), Date.now());
        // Lost to another writer's first version: read it. Won: a path table's head is what was written;
        // a catalog names its file itself, so its head is read again. @ref LLP 0110
        if ((await store.commit(1, first, unit.signal)) && !store.pointer) made = { version: 1, metadata: first };
        continue;
      }
      if (this.own(head, want, unit, store)) return head;
      const evolved = evolve(table, currentSchema(head.metadata), head.metadata['last-column-id'], unit.schema.columns);
      if (evolved === null) return head;
      const next = nextVersion(store.tableKey, head, locate, Date.now(), {
        schemas: [...head.metadata.schemas, evolved.schema],
        'current-schema-id': evolved.schema['schema-id'],
        'last-column-id': evolved.lastColumnId,
      });
      if (await store.commit(head.version + 1, next, unit.signal)) {
        this.build.log.info({ sink: unit.sink, table, schema: evolved.schema['schema-id'] }, 'iceberg: the table\'s schema takes the rows\' columns (added, or made optional)');
        continue;
      }
      if (attempt + 1 >= this.cfg.commitAttempts) throw this.lostRaces(unit, attempt + 1);
      await store.backoff(attempt, unit.signal);
    }
  }

  private lostRaces(unit: Unit, n: number): HypsinkError {
    return new HypsinkError('HYPSINK_ERR_RETRYABLE', `sink "${unit.sink}": unit ${unit.id}: ${n} commits in a row lost to other writers of the table; it is retried later (raise writerConfig.commitAttempts if this persists)`, {
      retryable: true,
    });
  }

  private async duplicate(store: TableStore, head: Head, unit: Unit): Promise<ShipResult> {
    // The commit of an earlier attempt: point the hint at the head in case that attempt died before.
    await store.hint(head.version, unit.signal);
    return { rows: unit.plannedRows, bytes: 0, duplicate: true };
  }

  async ship(unit: Unit, destination: BlobDestination, reads: UnitGuard): Promise<ShipResult> {
    this.need(destination);
    const locate = (k: string) => destination.locate(k);
    const table = this.tableOf(unit.partition.dataset);
    const store = this.store(table, destination);
    const want = this.mark(unit);
    let head = await this.settle(store, unit, want, locate);
    if (this.own(head, want, unit, store)) return this.duplicate(store, head, unit);
    this.noteRegression(head, want, unit);

    // The data files, with the field ids of the schema the table now has (ids never change once committed).
    const schema = currentSchema(head.metadata);
    const spec = currentSpec(head.metadata);
    const columns = unit.schema.columns;
    const plan: FilePlan = {
      tableKey: table,
      schema,
      columns,
      ids: fieldIds(schema, columns),
      dayColumn: this.dayColumnOf(head, unit),
      partitionNames: spec.fields.map((f) => f.name),
      // The digest in the name: a copy of this cache shipping other rows under this label writes other files, never takes these as its own. @ref LLP 0058
      fileStem: `${this.tag}-${want.since}-${want.until}-${unit.digest}`,
      compression: this.cfg.compression,
      rowGroupRows: this.cfg.rowGroupRows,
    };
    const fault = (p: string) => this.build.fault?.(p);
    const files = await writeDataFiles(unit, destination, reads, plan, locate, () => fault('iceberg.afterDataFile'));
    fault('iceberg.afterDataFile');

    // One manifest of the unit's files, named afresh each attempt: it does not depend on the head.
    const fields = partitionFields(spec);
    const entries: ManifestEntry[] = files.map((f) => ({ status: 1, snapshotId: null, sequenceNumber: null, fileSequenceNumber: null, dataFile: f.file }));
    const manifest = encodeManifest({
      schemaJson: JSON.stringify(schema),
      schemaId: schema['schema-id'],
      specId: spec['spec-id'],
      partitionFields: fields,
      partitionSpecJson: JSON.stringify(spec.fields),
      entries,
    });
    const manifestKey = `${table}/metadata/${randomUUID()}-m0.avro`;
    // Stored while the first attempt's list is made and stored: no version names either before the
    // commit, which waits for both (each put is durable when it answers). @ref LLP 0110
    const manifestPut = destination.putIfAbsent(manifestKey, once(manifest), { contentType: 'application/avro', signal: unit.signal, exclusive: true });
    manifestPut.catch(() => undefined); // awaited before the first list is stored; a failure then is this unit's
    let manifestStored = false;

    const bytes = files.reduce((n, f) => n + f.file.fileSizeInBytes, 0);
    const rows = files.reduce((n, f) => n + f.file.recordCount, 0);
    const commitStarted = performance.now();
    try {
      for (let attempt = 0; ; attempt++) {
        if (attempt > 0) {
          const h = await store.head(unit.signal);
          if (h === null) throw new HypsinkError('HYPSINK_ERR_DESTINATION', `sink "${unit.sink}": table ${destination.describe(table)} vanished while unit ${unit.id} was committed to it; export again`, { retryable: true });
          head = h;
          if (this.own(head, want, unit, store)) return this.duplicate(store, head, unit);
          this.sameShape(head, plan, spec, unit);
        }
        const m = head.metadata;
        const id = snapshotId();
        const seq = m['last-sequence-number'] + 1;
        const parent = currentSnapshot(m);
        let carried: Pick<Merged, 'manifests' | 'read'>;
        try {
          const base = parent ? await this.manifestsOf(store, head, parent, unit.signal) : [];
          // The parent's small manifests merged once enough have gathered: what a commit reads and writes stays bounded. @ref LLP 0072
          carried = parent
            ? await carryOver({ store, destination, rule: mergeRule(m, this.cfg), base, listLocation: parent['manifest-list'], schema: currentSchema(m), spec, fields, snapshotId: id, sequenceNumber: seq, signal: unit.signal })
            : { manifests: [], read: 0 };
        } catch (e) {
          // A maintainer expired the parent's files after a newer commit: lost to that commit, re-based. @ref LLP 0078
          if (!(await store.movedPast(e, head.version, unit.signal))) throw e;
          if (attempt + 1 >= this.cfg.commitAttempts) throw this.lostRaces(unit, attempt + 1);
          await store.backoff(attempt, unit.signal);
          continue;
        }
        const mine = manifestFileOf({ manifestPath: locate(manifestKey), manifestLength: manifest.length, specId: spec['spec-id'], snapshotId: id, sequenceNumber: seq, partitionFields: fields, entries });
        const list = encodeManifestList({ snapshotId: id, parentSnapshotId: parent ? parent['snapshot-id'] : null, sequenceNumber: seq, manifests: [...carried.manifests, mine] });
        const listKey = `${table}/metadata/snap-${id}-${attempt + 1}-${randomUUID()}.avro`;
        const listPut = destination.putIfAbsent(listKey, once(list), { contentType: 'application/avro', signal: unit.signal, exclusive: true });
        if (!manifestStored) {
          // Both answered before either failure is thrown: nothing is left writing.
          const [stored] = await Promise.allSettled([manifestPut, listPut]);
          if (stored.status === 'rejected') throw stored.reason;
          manifestStored = true;
          fault('iceberg.afterManifest');
        }
        await listPut;
        fault('iceberg.afterManifestList');
        const now = Date.now();
        const snapshot: Snapshot = {
          'snapshot-id': id,
          ...(parent ? { 'parent-snapshot-id': parent['snapshot-id'] } : {}),
          'sequence-number': seq,
          'timestamp-ms': now,
          'manifest-list': locate(listKey),
          summary: { operation: 'append', ...summaryOf(parent, { addedFiles: files.length, addedRows: rows, addedBytes: bytes, partitions: files.length }), [SUMMARY.writer]: want.writer, [SUMMARY.partition]: want.partition, [SUMMARY.since]: want.since, [SUMMARY.until]: want.until, [SUMMARY.digest]: unit.digest },
          'schema-id': schema['schema-id'],
        };
        const next = nextVersion(table, head, locate, now, {
          'last-sequence-number': seq,
          'current-snapshot-id': id,
          refs: { ...m.refs, main: { 'snapshot-id': id, type: 'branch' } },
          snapshots: [...m.snapshots, snapshot],
          'snapshot-log': [...m['snapshot-log'], { 'timestamp-ms': now, 'snapshot-id': id }],
        });
        if (await store.commit(head.version + 1, next, unit.signal)) {
          fault('iceberg.afterCommit');
          await store.hint(head.version + 1, unit.signal);
          fault('iceberg.afterVersionHint');
          // How long the commit took and how many races it lost: what tells a table with too many writers.
          this.build.log.debug({ sink: unit.sink, table, version: head.version + 1, attempts: attempt + 1, manifestsMerged: carried.read, commitMs: Math.round((performance.now() - commitStarted) * 10) / 10 }, 'iceberg: committed');
          return { rows: unit.plannedRows, bytes, duplicate: false };
        }
        if (attempt + 1 >= this.cfg.commitAttempts) throw this.lostRaces(unit, attempt + 1);
        await store.backoff(attempt, unit.signal);
      }
    } finally {
      // Never left writing after the unit returns or fails.
      if (!manifestStored) await manifestPut.catch(() => undefined);
    }
  }

  /**
   * The parent's manifests, carried into the new snapshot's list: each must be
   * the table's own (LLP 0063), or a planted path would be copied on into
   * every later snapshot and read by every engine.
   */
  private async manifestsOf(store: TableStore, head: Head, parent: Snapshot, signal: AbortSignal): Promise<ManifestFile[]> {
    const list = parent['manifest-list'];
    const manifests = decodeManifestList(await store.avro(list, `${store.describe(head.version)} (snapshot ${parent['snapshot-id']})`, signal));
    for (const f of manifests) store.keyOf(f.manifestPath, `manifest list ${list}`);
    return manifests;
  }

  /**
   * The head should hold this writer's unit before this one (expiry keeps the
   * newest of every writer and partition). When it does not, the table went
   * back (a rollback, an older head replayed) or another tool expired it: the
   * watermark is this cache's, so nothing is committed again and nothing
   * skipped, but the rows of the units gone from the table are said.
   * @ref LLP 0052
   */
  private noteRegression(head: Head, want: UnitMark, unit: Unit): void {
    const prior = unit.prior?.seq;
    if (prior === undefined) return;
    const held = head.metadata.snapshots.some((s) => {
      const m = markOf(s);
      return m !== null && m.writer === want.writer && m.partition === want.partition && m.until === prior;
    });
    if (!held) {
      this.build.log.warn(
        { sink: unit.sink, partition: want.partition, until: prior, table: head.metadata.location },
        `iceberg: the table no longer holds this writer's unit ending at seq ${prior} (rolled back, or expired by another tool); its rows stay out of the table, this unit is appended after the table's current state`,
      );
    }
  }

  /** A head another writer made since the data files were written must still take them as they are. */
  private sameShape(head: Head, plan: FilePlan, spec: PartitionSpec, unit: Unit): void {
    const now = currentSpec(head.metadata);
    const schema = currentSchema(head.metadata);
    const ids = plan.columns.map((c) => schema.fields.find((f) => f.name === c.name)?.id);
    if (now['spec-id'] !== spec['spec-id'] || ids.some((id, j) => id !== plan.ids[j])) {
      throw new HypsinkError(
        'HYPSINK_ERR_DESTINATION',
        `sink "${unit.sink}": the table's partition spec or field ids changed while unit ${unit.id} was committed (another tool altered the table); hypsink only appends: restore the table's spec and columns, then export again`,
      );
    }
  }

  async *inventory(p: PartitionRef, destination: BlobDestination, opts: { signal: AbortSignal }): AsyncIterable<HeldUnit> {
    this.need(destination);
    const table = this.tableOf(p.dataset);
    const head = await this.store(table, destination).head(opts.signal);
    if (head === null) return;
    for (const s of head.metadata.snapshots) {
      const m = markOf(s);
      if (m === null || m.writer !== this.writer || m.partition !== p.key) continue;
      yield {
        id: this.unitId(p, { v: 1, seq: m.since }, { v: 1, seq: m.until }),
        since: m.since === '0' ? null : m.since,
        until: m.until,
        rows: Number(s.summary['added-records']),
        digest: m.digest,
        where: `${destination.describe(table)} snapshot ${s['snapshot-id']}`,
      };
    }
  }

  async maintain(destination: BlobDestination, opts: { signal: AbortSignal; now: number; datasets: readonly string[] }): Promise<string> {
    this.need(destination);
    if (!destination.remove) throw new HypsinkError('HYPSINK_ERR_CONFIG', `sink "${this.build.sink}": its destination cannot remove blobs, so snapshot expiry cannot run there`);
    const done: string[] = [];
    for (const table of new Set(opts.datasets.map((d) => this.tableOf(d)))) {
      const store = this.store(table, destination);
      // Compaction first: the files it replaces then expire with the snapshots that still read them. @ref LLP 0078
      const compacted = this.cfg.compact
        ? await compactTable({
            store,
            destination,
            cfg: this.cfg,
            signal: opts.signal,
            fault: (p) => this.build.fault?.(p),
            snapshotId,
            partitionFields,
          })
        : `table ${table}: compaction off`;
      const expired = await expireSnapshots(store, destination, this.cfg, opts);
      done.push(`${compacted}; ${expired}; ${await removeOrphans(store, destination, this.cfg, opts)}`);
    }
    return done.join('; ');
  }

  /**
   * Add each path-based table of `datasets` to the catalog, at its head (the
   * highest `v<N>.metadata.json`), with SqlCatalog's `register_table` row; a
   * table the catalog has is left as it is, and one not made yet is added by
   * its first export. Every other writer of the table must be configured with
   * the catalog before: one still committing by path starts a second history.
   * @ref LLP 0077
   */
  async register(destination: BlobDestination, opts: { signal: AbortSignal; datasets: readonly string[] }): Promise<string> {
    this.need(destination);
    const done: string[] = [];
    for (const table of new Set(opts.datasets.map((d) => this.tableOf(d)))) {
      const store = this.store(table, destination);
      const pointer = store.pointer;
      if (!pointer) throw new HypsinkError('HYPSINK_ERR_CONFIG', `sink "${this.build.sink}": writerConfig.catalog is not set, so there is no catalog to register table ${table} in; add it (README, "Iceberg catalogs"), then run again`);
      const held = await pointer.current(opts.signal);
      if (held !== null) {
        done.push(`table ${table}: already in ${pointer.shown} at ${held}`);
        continue;
      }
      const head = await store.pathHead(opts.signal);
      if (head === null) {
        done.push(`table ${table}: not made yet; its first export creates it in ${pointer.shown}`);
        continue;
      }
      const file = destination.locate(versionKey(table, head.version));
      const added = await pointer.register(file, opts.signal);
      done.push(added ? `table ${table}: registered in ${pointer.shown} at ${file}` : `table ${table}: already in ${pointer.shown} (added meanwhile)`);
    }
    return done.join('; ');
  }
}

function once(bytes: Uint8Array): AsyncIterable<Uint8Array> {
  return (async function* () {
    yield bytes;
  })();
}

export default function activate(ctx: PluginContext): void {
  ctx.registerEncoder({
    name: ctx.manifest.name,
    options: ICEBERG_OPTIONS,
    create(config, build): Encoder {
      const cfg = parseSinkConfig(configSchema, config, build.sink, 'writerConfig');
      const writer = new IcebergWriter(cfg, build);
      return {
        extension: 'parquet',
        contentType: 'application/vnd.apache.parquet',
        encode(unit) {
          throw new HypsinkError('HYPSINK_ERR_INVARIANT', `sink "${unit.sink}": the Iceberg writer ships whole units (Encoder.table), it does not encode loose blobs`);
        },
        table: {
          unitId: (p, since, until) => writer.unitId(p, since, until),
          ship: (unit, destination, reads) => writer.ship(unit, destination, reads),
          inventory: (p, destination, opts) => writer.inventory(p, destination, opts),
          maintain: (destination, opts) => writer.maintain(destination, opts),
          register: (destination, opts) => writer.register(destination, opts),
        },
      };
    },
  });
}

