/**
 * A table's pointer: where its current metadata file is, and the one way to
 * move it. A path-based table has none (its pointer is the highest
 * `v<N>.metadata.json`, created if absent: table.ts). A table in a JDBC
 * catalog is the row `(catalog_name, table_namespace, table_name)` of the
 * `iceberg_tables` table, the schema Iceberg's `JdbcCatalog` (Spark, Trino)
 * and pyiceberg's `SqlCatalog` share; a commit is a compare-and-swap of its
 * `metadata_location`, the very statement those catalogs run, so hypsink and
 * they append to one history.
 * @ref LLP 0077
 */
import type { PgConnection } from 'hypsink/plugin';
import { HypsinkError, isHypsinkError, openPgClient } from 'hypsink/plugin';
import type { TableMetadata } from './table.js';

/** The version a commit is made from: the file the catalog named, and what it holds. */
export interface PointedBase {
  readonly file: string;
  readonly metadata: TableMetadata;
}

/**
 * What TableStore needs of a catalog: read the pointer, and commit a version
 * only from the one it was made from. A catalog whose clients write the
 * metadata file (JDBC) calls `write`; one that writes it itself (REST) sends
 * the change from `base` to `next` instead.
 * @ref LLP 0077, LLP 0081
 */
export interface TablePointer {
  /** The table in the catalog, for messages (no password, no token): `jdbc catalog "c" (postgres://u@h:5432/db) table ns.t`. */
  readonly shown: string;
  /** The current metadata file's location, exactly as the catalog holds it; null when the catalog has no such table. */
  current(signal: AbortSignal): Promise<string | null>;
  /**
   * Make `next` current if `base` still is (null: create the table, if it is
   * not there). True when this call committed it; false when another commit
   * came first (the caller re-reads and re-bases, as after a lost
   * create-if-absent). `write` writes `next` under a fresh name and answers
   * its location.
   */
  commit(base: PointedBase | null, next: TableMetadata, write: () => Promise<string>, signal: AbortSignal): Promise<boolean>;
  /** Add the table at metadata file `file` (`hypsink iceberg register`); false when the catalog has it already. */
  register(file: string, signal: AbortSignal): Promise<boolean>;
}

/** The catalog's name, the table's namespace (`a.b` for a nested one) and name: the row's key. */
export interface CatalogName {
  readonly catalog: string;
  readonly namespace: string;
  readonly table: string;
}

/** The catalog's table as JdbcCatalog and SqlCatalog create it (their column sizes, their key). */
const CREATE = `CREATE TABLE IF NOT EXISTS iceberg_tables (
  catalog_name VARCHAR(255) NOT NULL,
  table_namespace VARCHAR(255) NOT NULL,
  table_name VARCHAR(255) NOT NULL,
  metadata_location VARCHAR(1000),
  previous_metadata_location VARCHAR(1000),
  PRIMARY KEY (catalog_name, table_namespace, table_name)
)`;

const SELECT = 'SELECT metadata_location FROM iceberg_tables WHERE catalog_name = $1 AND table_namespace = $2 AND table_name = $3';
/** SqlCatalog's commit_table and JdbcCatalog's updateTable: the row moves only if it still names the base. */
const SWAP =
  'UPDATE iceberg_tables SET metadata_location = $4, previous_metadata_location = $5 WHERE catalog_name = $1 AND table_namespace = $2 AND table_name = $3 AND metadata_location = $5';
/** SqlCatalog's create_table and register_table: a new row, or nothing when one is there. */
const INSERT =
  'INSERT INTO iceberg_tables (catalog_name, table_namespace, table_name, metadata_location, previous_metadata_location) VALUES ($1, $2, $3, $4, NULL) ON CONFLICT DO NOTHING';

/** PostgreSQL's "no such table" (the catalog's table not created yet). */
const UNDEFINED_TABLE = '42P01';

/**
 * A JDBC catalog on PostgreSQL. One connection per call: a commit reads and
 * swaps once each, and an encoder has no close for a pool to end with.
 */
export class JdbcCatalog implements TablePointer {
  readonly shown: string;

  constructor(
    private readonly conn: PgConnection,
    private readonly name: CatalogName,
    private readonly sink: string,
    private readonly timeoutMs = 10_000,
  ) {
    this.shown = `jdbc catalog "${name.catalog}" (${conn.shown}) table ${name.namespace}.${name.table}`;
  }

  async current(signal: AbortSignal): Promise<string | null> {
    return this.run(signal, 'read the table', async (c) => {
      try {
        const r = await c.query<{ metadata_location: string | null }>(SELECT, this.key());
        const row = r.rows[0];
        if (row === undefined) return null;
        if (row.metadata_location === null || row.metadata_location === '') {
          throw new HypsinkError('HYPSINK_ERR_DESTINATION', `sink "${this.sink}": ${this.shown} has no metadata_location; the catalog entry is damaged: drop it, then run \`hypsink iceberg register --sink ${this.sink}\``);
        }
        return row.metadata_location;
      } catch (e) {
        if ((e as { code?: string }).code === UNDEFINED_TABLE) return null;
        throw e;
      }
    });
  }

  async commit(base: PointedBase | null, _next: TableMetadata, write: () => Promise<string>, signal: AbortSignal): Promise<boolean> {
    return this.swap(base?.file ?? null, await write(), signal);
  }

  register(file: string, signal: AbortSignal): Promise<boolean> {
    return this.swap(null, file, signal);
  }

  /** The row moved from `base` to `next` (added, when `base` is null): SqlCatalog's and JdbcCatalog's statements. */
  private async swap(base: string | null, next: string, signal: AbortSignal): Promise<boolean> {
    return this.run(signal, 'commit', async (c) => {
      if (base === null) {
        await c.query(CREATE);
        return (await c.query(INSERT, [...this.key(), next])).rowCount === 1;
      }
      return (await c.query(SWAP, [...this.key(), next, base])).rowCount === 1;
    });
  }

  private key(): [string, string, string] {
    return [this.name.catalog, this.name.namespace, this.name.table];
  }

  /**
   * One statement's connection. A fault is retryable unless the server refused
   * the login or the statement's rights: a swap whose answer was lost may have
   * landed, and the unit's retry finds its own snapshot there (LLP 0052).
   */
  private async run<T>(signal: AbortSignal, what: string, fn: (c: import('pg').Client) => Promise<T>): Promise<T> {
    const c = this.conn;
    let client: import('pg').Client | undefined;
    const stop = () => void client?.end().catch(() => undefined);
    try {
      ({ client } = await openPgClient(
        c,
        { host: c.host, port: c.port, database: c.database, user: c.user, ...(c.password !== undefined ? { password: c.password } : {}), connectionTimeoutMillis: this.timeoutMs, application_name: 'hypsink', statement_timeout: this.timeoutMs },
        signal,
      ));
      signal.addEventListener('abort', stop, { once: true });
      return await fn(client);
    } catch (e) {
      if (isHypsinkError(e)) throw e;
      if (signal.aborted) throw new HypsinkError('HYPSINK_ERR_ABORTED', `sink "${this.sink}": ${this.shown}: ${what} aborted by shutdown`);
      const code = (e as { code?: string }).code ?? '';
      const why = (e as Error)?.message ?? String(e);
      if (code.startsWith('28')) {
        throw new HypsinkError('HYPSINK_ERR_AUTH', `sink "${this.sink}": ${this.shown} refused the login (${why}); fix the user or password in writerConfig.catalog.url`);
      }
      if (code === '42501') {
        throw new HypsinkError('HYPSINK_ERR_DESTINATION', `sink "${this.sink}": ${this.shown}: ${what}: ${why}; grant the catalog's user SELECT, INSERT and UPDATE on iceberg_tables (and CREATE on its schema for a new catalog)`);
      }
      throw new HypsinkError('HYPSINK_ERR_RETRYABLE', `sink "${this.sink}": ${this.shown}: ${what} failed (${why}); the unit is retried later, and finds its own commit if this one landed`, { retryable: true, cause: e });
    } finally {
      signal.removeEventListener('abort', stop);
      await client?.end().catch(() => undefined);
    }
  }
}

/** The version a metadata file's name carries: `v<N>.metadata.json` (path tables) or `<N>-<uuid>.metadata.json` (catalogs); 0 when none. */
export function versionOfName(location: string): number {
  const m = /(?:^|\/)(?:v(\d+)|(\d+)-[^/]*)\.metadata\.json$/.exec(location);
  const n = Number(m?.[1] ?? m?.[2] ?? 0);
  return Number.isSafeInteger(n) ? n : 0;
}

/** A catalog table's new metadata file: the name JdbcCatalog and SqlCatalog give (`00042-<uuid>`), fresh at every attempt. */
export function catalogMetadataName(v: number, uuid: string): string {
  return `${String(v).padStart(5, '0')}-${uuid}.metadata.json`;
}
