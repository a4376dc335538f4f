/**
 * Refused credentials and privileges are HYPSINK_ERR_AUTH, not retried: a
 * wrong password names the role; a role that may not do what the sink needs
 * names the role and the object PostgreSQL refused (the dataset's table, the
 * sink's watermark table, the schema), with the GRANT that fixes it. A role
 * with the privileges on tables made beforehand needs no CREATE on the
 * schema. Roles are made with the admin connection, in a database of the
 * test's own.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, test } from 'node:test';
import { eventLines, ingestText, type Json } from '../support/kernel.js';
import { testPg } from '../support/pg.js';
import { type PgWorkspace, pgWorkspace } from './helpers.js';

after(async () => (await testPg()).stop());

/** One export of a fresh cache with two rows of `source`; its partition's error and the logs. */
async function exportTwo(w: PgWorkspace, source = 'h') {
  const { k, logs } = await w.open();
  try {
    await ingestText(k, source, eventLines(1, 2));
    const [t] = await k.export('warehouse');
    return { error: t!.partitions[0]!.error, logs };
  } finally {
    await k.close();
  }
}

const retries = (logs: Json[]) => logs.filter((l) => String(l.msg).includes('retrying'));

test('a wrong password: HYPSINK_ERR_AUTH naming the role, tried once', async () => {
  const pg = await testPg();
  const url = new URL(await pg.database('pgauth'));
  url.password = 'not-the-password';
  const w = await pgWorkspace({ url: url.toString() });
  const { error, logs } = await exportTwo(w);
  assert.equal(error?.code, 'HYPSINK_ERR_AUTH', String(error));
  assert.equal(error!.retryable, false);
  assert.match(error!.message, /^sink "warehouse": postgres:\/\/postgres@127\.0\.0\.1:\d+\/pgauth_\w+ refused the login of role "postgres": password authentication failed for user "postgres"; check the user and password in config\.url/);
  assert.deepEqual(retries(logs), [], 'not retried');
});

/** A database whose tables the sink made (as the admin), and a role `name` that may log in and use the schema. */
async function roleOn(): Promise<{ url: string; role: string; grant(sql: string): Promise<void>; admin: PgWorkspace }> {
  const pg = await testPg();
  const adminUrl = await pg.database('pgpriv');
  const admin = await pgWorkspace({ url: adminUrl });
  assert.equal((await exportTwo(admin, 'by-admin')).error, null);
  const role = `r_${randomBytes(4).toString('hex')}`;
  const password = randomBytes(8).toString('hex');
  const db = new URL(adminUrl).pathname.slice(1);
  await pg.query(`CREATE ROLE ${role} LOGIN PASSWORD '${password}'`);
  await pg.query(`GRANT CONNECT ON DATABASE ${db} TO ${role}`);
  await pg.query(`GRANT USAGE ON SCHEMA public TO ${role}`, [], adminUrl);
  const url = new URL(adminUrl);
  url.username = role;
  url.password = password;
  return { url: url.toString(), role, admin, grant: async (sql) => void (await pg.query(sql.replaceAll('$role', role), [], adminUrl)) };
}

const OWN = 'GRANT SELECT, INSERT, UPDATE ON hypsink_watermarks, hypsink_units TO $role; GRANT SELECT, INSERT ON hypsink_rejected TO $role';

test("a role with the sink's privileges on tables made beforehand, and no CREATE on the schema: it exports", async () => {
  const r = await roleOn();
  await r.grant(`${OWN}; GRANT INSERT ON events TO $role`);
  const w = await pgWorkspace({ url: r.url });
  const { error } = await exportTwo(w);
  assert.equal(error, null, String(error));
  assert.equal((await r.admin.query("SELECT count(*)::int AS n FROM events WHERE source = 'h'"))[0]!.n, 2);
});
for (const [what, grants, object, grant] of [
  ['no INSERT on the table', `${OWN}; GRANT SELECT ON events TO $role`, 'public.events', 'GRANT INSERT ON public.events TO "$role"'],
  ['no UPDATE on the watermark table', 'GRANT SELECT, INSERT ON hypsink_watermarks, hypsink_rejected, events TO $role; GRANT SELECT, INSERT, UPDATE ON hypsink_units TO $role', 'public.hypsink_watermarks', 'GRANT SELECT, INSERT, UPDATE ON public.hypsink_watermarks TO "$role"'],
] as const) {
  test(`a role with ${what}: HYPSINK_ERR_AUTH naming the role and ${object}, nothing written`, async () => {
    const r = await roleOn();
    await r.grant(grants);
    const w = await pgWorkspace({ url: r.url });
    const { error, logs } = await exportTwo(w);
    assert.equal(error?.code, 'HYPSINK_ERR_AUTH', String(error));
    assert.ok(error!.message.startsWith(`sink "warehouse": role "${r.role}" lacks a privilege on ${object} at postgres://${r.role}@`), error!.message);
    assert.ok(error!.message.includes(grant.replace('$role', r.role)), error!.message);
    assert.deepEqual(retries(logs), []);
    assert.equal((await r.admin.query("SELECT count(*)::int AS n FROM events WHERE source = 'h'"))[0]!.n, 0);
  });
}

test('a role without CREATE on the schema, the tables not made yet: HYPSINK_ERR_AUTH naming the schema', async () => {
  const pg = await testPg();
  const adminUrl = await pg.database('pgnocreate');
  const role = `r_${randomBytes(4).toString('hex')}`;
  await pg.query(`CREATE ROLE ${role} LOGIN PASSWORD 'pw'`);
  await pg.query(`GRANT USAGE ON SCHEMA public TO ${role}`, [], adminUrl);
  const url = new URL(adminUrl);
  url.username = role;
  url.password = 'pw';
  const { error } = await exportTwo(await pgWorkspace({ url: url.toString() }));
  assert.equal(error?.code, 'HYPSINK_ERR_AUTH', String(error));
  assert.ok(error!.message.startsWith(`sink "warehouse": role "${role}" lacks a privilege on schema public at `), error!.message);
  assert.ok(error!.message.includes(`GRANT USAGE, CREATE ON SCHEMA public TO "${role}"`), error!.message);
});

test('a deployment from before unit records, its role without CREATE: the first export after the upgrade is HYPSINK_ERR_AUTH naming the schema, nothing written; with the units table made by an admin and granted, it exports', async () => {
  const r = await roleOn();
  // The sink's tables as an older version made them: no units table.
  await r.admin.query('DROP TABLE hypsink_units');
  await r.grant('GRANT SELECT, INSERT, UPDATE ON hypsink_watermarks TO $role; GRANT SELECT, INSERT ON hypsink_rejected TO $role; GRANT INSERT ON events TO $role');
  const w = await pgWorkspace({ url: r.url });
  const { error } = await exportTwo(w);
  assert.equal(error?.code, 'HYPSINK_ERR_AUTH', String(error));
  assert.ok(error!.message.startsWith(`sink "warehouse": role "${r.role}" lacks a privilege on schema public at `), error!.message);
  assert.ok(error!.message.includes(`GRANT USAGE, CREATE ON SCHEMA public TO "${r.role}"`), error!.message);
  assert.equal((await r.admin.query("SELECT count(*)::int AS n FROM events WHERE source = 'h'"))[0]!.n, 0, 'nothing written');

  // An admin's export makes the table; granted, the role's next export goes on.
  assert.equal((await exportTwo(r.admin, 'by-admin-again')).error, null);
  await r.grant('GRANT SELECT, INSERT, UPDATE ON hypsink_units TO $role');
  const { k } = await w.open();
  try {
    const [t] = await k.export('warehouse');
    assert.equal(t!.partitions[0]!.error, null, String(t!.partitions[0]!.error));
  } finally {
    await k.close();
  }
  assert.equal((await r.admin.query("SELECT count(*)::int AS n FROM events WHERE source = 'h'"))[0]!.n, 2);
  assert.equal((await r.admin.query("SELECT count(*)::int AS n FROM hypsink_units WHERE source = 'h'"))[0]!.n, 1);
});
