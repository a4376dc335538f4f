/**
 * `hypsink validate --connect` for the Postgres sink (kernel/sinks/connect.ts
 * calls shipper.check(): log in, read-only statements, disconnect): it passes
 * against the server saying what it checked, fails with the export's code
 * for what the export would meet (a wrong password, a role that may not
 * write the table, a table that is missing while the sink may not create it,
 * nothing listening), and writes nothing: no table, no row. Through bin.
 * @ref LLP 0036
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, test } from 'node:test';
import { type Json, runBin, writeConfig } from '../support/kernel.js';
import { freePort, testPg } from '../support/pg.js';
import { tempDir } from '../support/tmp.js';
import { pgConfig } from './helpers.js';

after(async () => (await testPg()).stop());

/** validate --connect of a config with the Postgres sink at `url`; its exit code, its sink line, and the JSON form. */
async function validate(url: string, sink: Json = {}) {
  const dir = tempDir('hypsink-pg-validate-');
  const config = await writeConfig(dir, pgConfig(url, { sink }));
  const text = await runBin(['validate', '--connect', '--config', config]);
  const json = await runBin(['validate', '--connect', '--json', '--config', config]);
  const line = text.stdout.split('\n').filter((l) => l.startsWith('sink "warehouse": '));
  assert.equal(line.length, 1, text.stdout + text.stderr);
  const parsed = JSON.parse(json.stdout) as { sinks: { name: string; ok: boolean; code?: string; checked?: string; error?: string }[] };
  assert.equal(json.code, text.code);
  return { code: text.code, line: line[0]!, result: parsed.sinks[0]!, stderr: text.stderr };
}

/** Every table in the database of `url` but those in the system schemas. */
const tables = async (url: string) =>
  (await (await testPg()).query("SELECT table_schema || '.' || table_name AS t FROM information_schema.tables WHERE table_schema NOT IN ('pg_catalog', 'information_schema')", [], url)).rows.map((r) => r.t);

test('the server up and the login good: ok, naming the role, the server and the schema; nothing written', async () => {
  const url = await (await testPg()).database('pgvalid');
  const v = await validate(url);
  assert.equal(v.code, 0, v.line + v.stderr);
  assert.match(v.line, /^sink "warehouse": ok — postgres:\/\/postgres@127\.0\.0\.1:\d+\/pgvalid_\w+: login accepted as postgres \(PostgreSQL \d+[.\d]*\); not encrypted \(sslmode disable, the default\): certificate and host name not verified; schema public: CREATE allowed$/);
  assert.equal(v.result.ok, true);
  assert.deepEqual(await tables(url), [], 'no table made');
});

test('a server without TLS: prefer and allow log in plain and say so, require fails naming where the mode was read (LLP 0064)', async () => {
  const url = await (await testPg()).database('pgvalidssl');
  let v = await validate(`${url}?sslmode=prefer`);
  assert.equal(v.code, 0, v.line + v.stderr);
  assert.match(v.line, /\); not encrypted \(sslmode prefer; TLS failed first: The server does not support SSL connections\): certificate and host name not verified; schema public/);
  v = await validate(`${url}?sslmode=allow`);
  assert.equal(v.code, 0, v.line + v.stderr);
  assert.match(v.line, /\); not encrypted \(sslmode allow\): certificate and host name not verified; schema public/);
  v = await validate(`${url}?sslmode=require`);
  assert.equal(v.code, 1, v.line);
  assert.equal(v.result.code, 'HYPSINK_ERR_DESTINATION');
  assert.match(v.line, /TLS: the server does not support SSL connections; sslmode in config\.url is "require": turn ssl on at the server/);
  assert.deepEqual(await tables(url), [], 'no table made');
});

test('config.table: a table not made yet, and one that is there, are each said so; nothing written', async () => {
  const pg = await testPg();
  const url = await pg.database('pgvalidt');
  let v = await validate(url, { table: 'events' });
  assert.equal(v.code, 0, v.line);
  assert.match(v.line, /; table public\.events: not there yet \(created on the first export\)$/);
  await pg.query('CREATE TABLE events (source text NOT NULL, id bigint NOT NULL, ts timestamptz NOT NULL, msg text)', [], url);
  v = await validate(url, { table: 'events' });
  assert.equal(v.code, 0, v.line);
  assert.match(v.line, /; table public\.events: INSERT and SELECT allowed$/);
  assert.deepEqual(await tables(url), ['public.events']);
  assert.equal((await pg.query('SELECT count(*)::int AS n FROM events', [], url)).rows[0]!.n, 0);
});

test('a wrong password: HYPSINK_ERR_AUTH naming the role, exit 1', async () => {
  const u = new URL(await (await testPg()).database('pgvalidpw'));
  u.password = 'wrong';
  const v = await validate(u.toString());
  assert.equal(v.code, 1);
  assert.equal(v.result.code, 'HYPSINK_ERR_AUTH');
  assert.match(v.line, /refused the login of role "postgres": password authentication failed for user "postgres"/);
});

test('a role that may not INSERT into config.table: HYPSINK_ERR_AUTH naming the role and the table', async () => {
  const pg = await testPg();
  const url = await pg.database('pgvalidpriv');
  await pg.query('CREATE TABLE events (source text NOT NULL, id bigint NOT NULL, ts timestamptz NOT NULL, msg text)', [], url);
  const role = `v_${randomBytes(4).toString('hex')}`;
  await pg.query(`CREATE ROLE ${role} LOGIN PASSWORD 'pw'`);
  await pg.query(`GRANT SELECT ON events TO ${role}`, [], url);
  await pg.query(`GRANT CREATE ON SCHEMA public TO ${role}`, [], url);
  const u = new URL(url);
  u.username = role;
  u.password = 'pw';
  const v = await validate(u.toString(), { table: 'events' });
  assert.equal(v.code, 1);
  assert.equal(v.result.code, 'HYPSINK_ERR_AUTH');
  assert.ok(v.line.includes(`role "${role}" may not INSERT into or SELECT from public.events`), v.line);
});

test('createTable: false and config.table missing: HYPSINK_ERR_DESTINATION, as the export would be', async () => {
  const url = await (await testPg()).database('pgvalidnot');
  const v = await validate(url, { table: 'events', createTable: false });
  assert.equal(v.code, 1, v.line);
  assert.equal(v.result.code, 'HYPSINK_ERR_DESTINATION');
  assert.match(v.line, /table public\.events does not exist and config\.createTable is false/);
  assert.deepEqual(await tables(url), []);
});

test("a role without CREATE on the schema and the sink's tables not made: HYPSINK_ERR_AUTH naming the schema, as the export would be", async () => {
  const pg = await testPg();
  const url = await pg.database('pgvalidnocreate');
  const role = `v_${randomBytes(4).toString('hex')}`;
  await pg.query(`CREATE ROLE ${role} LOGIN PASSWORD 'pw'`);
  await pg.query(`GRANT USAGE ON SCHEMA public TO ${role}`, [], url);
  const u = new URL(url);
  u.username = role;
  u.password = 'pw';
  const v = await validate(u.toString());
  assert.equal(v.code, 1, v.line);
  assert.equal(v.result.code, 'HYPSINK_ERR_AUTH');
  assert.ok(v.line.includes(`role "${role}" may not create tables in schema public`), v.line);
  assert.ok(v.line.includes('public.hypsink_watermarks'), v.line);
});

test('nothing listening: HYPSINK_ERR_RETRYABLE', async () => {
  const v = await validate(`postgres://postgres:pw@127.0.0.1:${await freePort()}/db`);
  assert.equal(v.code, 1);
  assert.equal(v.result.code, 'HYPSINK_ERR_RETRYABLE');
  assert.match(v.line, /ECONNREFUSED/);
});
