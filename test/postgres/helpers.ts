/**
 * Helpers for the Postgres sink's tests: a workspace with a real config naming
 * `@hypsink/postgres` against a fresh database of the test's PostgreSQL
 * (test/support/pg.ts), the kernel opened from it, and the rows read back
 * with plain SQL through the driver, not through the sink.
 */
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Json, openKernel, type OpenKernel, writeConfig } from '../support/kernel.js';
import { testPg } from '../support/pg.js';
import { EVENTS } from '../support/datasets.js';

export { EVENTS };

export interface PgWorkspace {
  readonly dir: string;
  readonly url: string;
  readonly config: string;
  open(): Promise<OpenKernel>;
  /** Rows of a table, ordered by (source, id). */
  rows(table?: string, where?: string): Promise<Json[]>;
  query(sql: string, values?: unknown[]): Promise<Json[]>;
}

export interface PgConfigOptions {
  readonly sink?: Json;
  readonly unit?: Json;
  readonly datasets?: Json;
  readonly url?: string;
  readonly dir?: string;
}

export function pgConfig(url: string, o: PgConfigOptions = {}): Json {
  return {
    cache: { root: 'cache' },
    state: { dir: 'state' },
    datasets: o.datasets ?? { events: EVENTS },
    sinks: {
      warehouse: {
        plugin: '@hypsink/postgres',
        datasets: Object.keys(o.datasets ?? { events: EVENTS }),
        ...(o.unit ? { unit: o.unit } : {}),
        config: { url, ...o.sink },
      },
    },
  };
}

export async function pgWorkspace(o: PgConfigOptions = {}): Promise<PgWorkspace> {
  const pg = await testPg();
  const url = o.url ?? (await pg.database('pgsink'));
  const dir = o.dir ?? (await mkdtemp(join(tmpdir(), 'hypsink-pg-')));
  const config = await writeConfig(dir, pgConfig(url, o));
  const query = async (sql: string, values?: unknown[]) => (await pg.query(sql, values, url)).rows as Json[];
  return {
    dir,
    url,
    config,
    open: () => openKernel(config),
    query,
    rows: (table = 'events', where = 'TRUE') => query(`SELECT * FROM "${table}" WHERE ${where} ORDER BY source, id`),
  };
}
