/**
 * libpq's sslmode, fail closed. A fake PostgreSQL on loopback (a net.Server
 * here) records the first message of every connection the sink opens: an
 * SSLRequest (8 bytes, code 80877103) or a StartupMessage (protocol 3.0). It
 * answers an SSLRequest with 'N' (no TLS here), or with 'S' and a hang-up (a
 * failed handshake), and a StartupMessage with a FATAL 28000, so no login
 * ever succeeds and the sequence of first messages is the whole story.
 *
 * - A malformed TLS setting (an sslmode libpq does not know, in any case or
 *   with a space; node-postgres's ssl=true or no-verify; any other URL
 *   parameter; a repeated sslmode) is HYPSINK_ERR_CONFIG naming the value and
 *   the accepted ones, raised when the sink is built: the fake sees no
 *   connection, through `validate --connect` and through an export.
 * - Each of libpq's six modes opens what libpq opens: disable a StartupMessage;
 *   require, verify-ca, verify-full an SSLRequest and nothing else when the
 *   server refuses TLS; prefer an SSLRequest, then plain; allow plain, then
 *   an SSLRequest when the server refused the plain login. @ref LLP 0064
 */
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { cli, eventLines, ingestText, type Json, openKernel, writeConfig } from '../support/kernel.js';
import { tempDir } from '../support/tmp.js';
import { pgConfig } from './helpers.js';

const SSL_REQUEST = 80877103;
const PROTOCOL_3 = 196608;

type First = 'SSLRequest' | 'StartupMessage' | 'other';

/** A FATAL ErrorResponse, as PostgreSQL sends when pg_hba.conf refuses a login. */
function fatal(code: string, message: string): Buffer {
  const fields = Buffer.concat([
    ...[
      ['S', 'FATAL'],
      ['V', 'FATAL'],
      ['C', code],
      ['M', message],
    ].map(([k, v]) => Buffer.from(`${k}${v}\0`, 'utf8')),
    Buffer.from([0]),
  ]);
  const head = Buffer.alloc(5);
  head.write('E', 0);
  head.writeInt32BE(4 + fields.length, 1);
  return Buffer.concat([head, fields]);
}

/** The fake server: every connection's messages, in order (an SSLRequest answered 'N' may be followed by a StartupMessage on it). */
class FakePg {
  readonly connections: First[][] = [];
  /** How an SSLRequest is answered: 'N', or 'S' and then the socket closed mid-handshake. */
  answer: 'N' | 'S-hangup' = 'N';
  private server: Server | null = null;
  private readonly sockets = new Set<Socket>();
  port = 0;

  async start(): Promise<void> {
    this.server = createServer((s) => this.serve(s));
    await new Promise<void>((ok, fail) => this.server!.once('error', fail).listen(0, '127.0.0.1', ok));
    this.port = (this.server.address() as { port: number }).port;
  }

  reset(answer: FakePg['answer'] = 'N'): void {
    this.connections.length = 0;
    this.answer = answer;
  }

  private serve(s: Socket): void {
    this.sockets.add(s);
    s.on('close', () => this.sockets.delete(s));
    s.on('error', () => undefined);
    const seen: First[] = [];
    this.connections.push(seen);
    let buf = Buffer.alloc(0);
    s.on('data', (d) => {
      buf = Buffer.concat([buf, d]);
      while (buf.length >= 8) {
        const len = buf.readInt32BE(0);
        if (buf.length < len) return;
        const code = buf.readInt32BE(4);
        buf = buf.subarray(len);
        if (code === SSL_REQUEST) {
          seen.push('SSLRequest');
          if (this.answer === 'N') s.write('N');
          else s.end('S');
        } else if (code === PROTOCOL_3) {
          seen.push('StartupMessage');
          s.end(fatal('28000', 'no pg_hba.conf entry for host "127.0.0.1", user "postgres", database "db", no encryption'));
        } else {
          seen.push('other');
          s.destroy();
        }
      }
    });
  }

  async stop(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise((ok) => this.server?.close(ok));
  }
}

const fake = new FakePg();
before(() => fake.start());
after(() => fake.stop());

const ACCEPTED = /disable, allow, prefer, require, verify-ca, verify-full/;

/** A config of one Postgres sink at the fake, with this URL tail (`?sslmode=…`) and sink options. */
async function configAt(tail: string, sink: Json = {}): Promise<string> {
  const dir = tempDir('hypsink-pg-sslmode-');
  writeFileSync(join(dir, 'ca.pem'), '-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n');
  return writeConfig(dir, pgConfig(`postgres://postgres:pw@127.0.0.1:${fake.port}/db${tail}`, { sink: { retry: { attempts: 1, baseMs: 1, maxMs: 1 }, ...sink } }));
}

/** `validate --connect` in this process: its exit code and output. */
async function validateConnect(config: string) {
  const r = await cli('validate', '--connect', '--config', config);
  return { code: r.code, text: r.out + r.err };
}

/** One export of one partition: the error it ended with (thrown at build, or the partition's). */
async function exportOnce(config: string): Promise<{ code?: string; message: string } | null> {
  const { k } = await openKernel(config);
  try {
    await ingestText(k, 'h', eventLines(1, 2));
    const [t] = await k.export('warehouse');
    return t!.partitions[0]!.error;
  } catch (e) {
    return e as Error & { code?: string };
  } finally {
    await k.close();
  }
}

describe('a malformed TLS setting is a config error before any connection', () => {
  const cases: [string, string, Json, RegExp][] = [
    ['sslmode=verify_full', '?sslmode=verify_full', {}, /config\.url: sslmode "verify_full" is not one of libpq's: disable, allow, prefer, require, verify-ca, verify-full/],
    ['sslmode=REQUIRE', '?sslmode=REQUIRE', {}, /sslmode "REQUIRE" is not one of libpq's/],
    ['sslmode=Require', '?sslmode=Require', {}, /sslmode "Require" is not one of libpq's/],
    ['sslmode=require%20 (a trailing space)', '?sslmode=require%20', {}, /sslmode "require " is not one of libpq's/],
    ['sslmode=%20require (a leading space)', '?sslmode=%20require', {}, /sslmode " require" is not one of libpq's/],
    ['sslmode= (empty)', '?sslmode=', {}, /sslmode "" is not one of libpq's/],
    ['sslmode=no-verify (node-postgres only)', '?sslmode=no-verify', {}, /sslmode "no-verify" is not one of libpq's: .*; node-postgres's "no-verify" is libpq's "require"/],
    ['ssl=true (node-postgres only)', '?ssl=true', {}, /config\.url: parameter "ssl" is not read by the Postgres sink.*use sslmode=require/],
    ['ssl=1', '?ssl=1', {}, /parameter "ssl" is not read/],
    ['SSLMODE=require (libpq names are case-sensitive)', '?SSLMODE=require', {}, /parameter "SSLMODE" is not read/],
    ['sslmode twice, the last one weaker', '?sslmode=require&sslmode=disable', {}, /config\.url: sslmode is given 2 times \("require", "disable"\)/],
    ['sslmode twice, the last one stronger', '?sslmode=disable&sslmode=verify-full', {}, /sslmode is given 2 times/],
    ['sslrootcert in the URL', '?sslmode=verify-full&sslrootcert=/etc/ca.pem', {}, /parameter "sslrootcert" is not read.*config\.ssl\.ca/],
    ['sslcert and sslkey (client certificates)', '?sslmode=require&sslcert=c.pem&sslkey=k.pem', {}, /parameter "sslcert" is not read/],
    ['requiressl', '?requiressl=1', {}, /parameter "requiressl" is not read/],
    ['uselibpqcompat', '?uselibpqcompat=true&sslmode=require', {}, /parameter "uselibpqcompat" is not read/],
    ['a fragment after the query', '?sslmode=require#x', {}, /config\.url has a "#"/],
    ['sslmode in a fragment', '#?sslmode=require', {}, /config\.url has a "#"/],
    ['config ssl.mode REQUIRE', '', { ssl: { mode: 'REQUIRE' } }, /ssl\.mode.*"REQUIRE".*disable, allow, prefer, require, verify-ca, verify-full/],
    ['config ssl.mode verify_full', '', { ssl: { mode: 'verify_full' } }, /ssl\.mode.*"verify_full"/],
    ['config ssl.mode no-verify', '', { ssl: { mode: 'no-verify' } }, /ssl\.mode.*"no-verify"/],
    ['config ssl.mode "require "', '', { ssl: { mode: 'require ' } }, /ssl\.mode.*"require "/],
    ['a good config ssl.mode does not excuse a bad URL sslmode', '?sslmode=verify_full', { ssl: { mode: 'verify-full' } }, /sslmode "verify_full" is not one of libpq's/],
    ['ssl.ca with prefer (a check a downgrade skips)', '', { ssl: { mode: 'prefer', ca: 'ca.pem' } }, /config\.ssl\.ca is set but ssl mode "prefer"/],
    ['ssl.ca with allow', '?sslmode=allow', { ssl: { ca: 'ca.pem' } }, /config\.ssl\.ca is set but ssl mode "allow"/],
  ];
  for (const [what, tail, sink, message] of cases) {
    test(`${what}: validate --connect exits 2, an export is refused; no connection`, async () => {
      fake.reset();
      const config = await configAt(tail, sink);
      const v = await validateConnect(config);
      assert.equal(v.code, 2, v.text);
      assert.match(v.text, /HYPSINK_ERR_CONFIG/, v.text);
      assert.match(v.text, message);
      if (/sslmode "|ssl\.mode/.test(message.source)) assert.match(v.text, ACCEPTED);
      assert.doesNotMatch(v.text, /:pw@|\bpw\b/, 'the password is never shown');
      const e = await exportOnce(config);
      assert.equal(e?.code, 'HYPSINK_ERR_CONFIG', String(e?.message));
      assert.match(e!.message, message);
      assert.deepEqual(fake.connections, [], 'the fake saw no connection');
    });
  }
});

describe("each sslmode opens what libpq opens", () => {
  // What the fake sees, connection by connection, when it refuses TLS ('N') and every login.
  const cases: [string, FakePg['answer'], First[][], RegExp][] = [
    ['disable', 'N', [['StartupMessage']], /HYPSINK_ERR_AUTH/],
    ['require', 'N', [['SSLRequest']], /HYPSINK_ERR_DESTINATION.*the server does not support SSL connections/],
    ['verify-ca', 'N', [['SSLRequest']], /HYPSINK_ERR_DESTINATION.*the server does not support SSL connections/],
    ['verify-full', 'N', [['SSLRequest']], /HYPSINK_ERR_DESTINATION.*the server does not support SSL connections/],
    ['require', 'S-hangup', [['SSLRequest']], /HYPSINK_ERR_/],
    ['prefer', 'N', [['SSLRequest'], ['StartupMessage']], /HYPSINK_ERR_AUTH.*sslmode prefer: TLS was tried first: The server does not support SSL connections/],
    ['prefer', 'S-hangup', [['SSLRequest'], ['StartupMessage']], /HYPSINK_ERR_AUTH.*sslmode prefer: TLS was tried first/],
    ['allow', 'N', [['StartupMessage'], ['SSLRequest']], /HYPSINK_ERR_DESTINATION.*the server does not support SSL connections.*sslmode allow: a plain connection was tried first: no pg_hba\.conf entry/],
  ];
  for (const [mode, answer, expected, error] of cases) {
    for (const where of ['url', 'config'] as const) {
      test(`${mode} (${where === 'url' ? '?sslmode=' : 'config.ssl.mode'}), the server answering ${answer}: ${expected.map((c) => c.join('+')).join(', then ')}`, async () => {
        const config = await configAt(where === 'url' ? `?sslmode=${mode}` : '', where === 'config' ? { ssl: { mode } } : {});
        fake.reset(answer);
        const v = await validateConnect(config);
        assert.equal(v.code, 1, v.text);
        assert.match(v.text.replace(/\n/g, ' '), error);
        assert.deepEqual(fake.connections, expected, 'validate --connect');
        fake.reset(answer);
        const e = await exportOnce(config);
        assert.ok(e, 'the export failed');
        assert.match(`${e.code}: ${e.message}`, error);
        assert.deepEqual(fake.connections, expected, 'export');
      });
    }
  }
});
