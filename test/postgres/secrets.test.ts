/**
 * The password in config.url never leaves the process: not in a log line
 * (at debug, stacks and all), not in export / status / validate / validate
 * --connect output (text and JSON), not in an error, not in a file the sink
 * keeps (its watermarks hold the last error). The URL is given through
 * "${HYPSINK_PG_URL}" and also literally in the config; the password holds
 * characters a URL encodes, so its encoded form is looked for too. Paths: a
 * good login, a wrong password (that one must not appear either), and nothing
 * listening at the port. Through bin, in child processes.
 */
import assert from 'node:assert/strict';
import { promises as fsp } from 'node:fs';
import { after, test } from 'node:test';
import { eventLines, type Json, runBin, walkFiles, writeConfig } from '../support/kernel.js';
import { freePort, testPg } from '../support/pg.js';
import { tempDir } from '../support/tmp.js';
import { pgConfig } from './helpers.js';

after(async () => (await testPg()).stop());

const PASSWORD = 'Sekr3t!0045@h:p/w%Q#z';
const WRONG = 'Wr0ngPw!0045@x%y';
/** What no output may hold: each password, decoded and as a URL writes it, and a fragment of it. */
const SECRETS = [PASSWORD, encodeURIComponent(PASSWORD), 'Sekr3t', WRONG, encodeURIComponent(WRONG), 'Wr0ngPw'];

function leaks(where: string, text: string): string[] {
  return SECRETS.filter((s) => text.includes(s)).map((s) => `${where} holds ${JSON.stringify(s)}`);
}

/** A role with PASSWORD on a fresh database; the URL with `password` (encoded) at `port`. */
async function roleUrl(): Promise<(password: string, port?: number) => string> {
  const pg = await testPg();
  const base = new URL(await pg.database('pgsecret'));
  const role = `secret_${process.pid}_${Math.random().toString(16).slice(2, 8)}`;
  await pg.query(`CREATE ROLE ${role} LOGIN PASSWORD '${PASSWORD}'`);
  await pg.query(`GRANT CREATE, USAGE ON SCHEMA public TO ${role}`, [], base.toString());
  return (password, port) => {
    const u = new URL(base.toString());
    u.username = role;
    u.password = encodeURIComponent(password);
    if (port !== undefined) u.port = String(port);
    return u.toString();
  };
}

for (const given of ['env', 'literal'] as const) {
  test(`a password given ${given === 'env' ? 'through the HYPSINK_PG_URL variable' : 'literally in config.url'} appears in no output, log, error or state file`, async () => {
    const url = await roleUrl();
    const dead = await freePort();
    const found: string[] = [];
    for (const [path, u] of [
      ['good', url(PASSWORD)],
      ['wrong password', url(WRONG)],
      ['nothing listening', url(PASSWORD, dead)],
    ] as const) {
      const dir = tempDir('hypsink-pg-secret-');
      // biome-ignore lint/suspicious/noTemplateCurlyInString: the config's own ${ENV} reference, interpolated by the kernel
      const cfg = pgConfig(given === 'env' ? '${HYPSINK_PG_URL}' : u, { sink: { retry: { attempts: 2, baseMs: 1, maxMs: 1 }, connectTimeoutMs: 3000 } }) as Json;
      const config = await writeConfig(dir, cfg);
      const env = { HYPSINK_LOG_LEVEL: 'debug', ...(given === 'env' ? { HYPSINK_PG_URL: u } : {}) };
      const run = (...args: string[]) => runBin([...args, '--config', config], { env });
      const ingest = await runBin(['ingest', 'events', '--source', 'h', '--config', config], { env, input: eventLines(1, 3) });
      assert.equal(ingest.code, 0, ingest.stderr);
      const outputs: [string, Awaited<ReturnType<typeof run>>][] = [
        ['export', await run('export')],
        ['export --json', await run('export', '--json')],
        ['status', await run('status')],
        ['status --json', await run('status', '--json')],
        ['validate', await run('validate')],
        ['validate --connect', await run('validate', '--connect')],
        ['validate --connect --json', await run('validate', '--connect', '--json')],
      ];
      const code = (name: string) => outputs.find(([n]) => n === name)![1].code;
      // The paths were taken: the good one exports and connects, the others fail where they should.
      if (path === 'good') assert.deepEqual([code('export'), code('validate --connect')], [0, 0], outputs[0]![1].stderr);
      else assert.ok(code('export') !== 0 && code('validate --connect') !== 0, `${path}: export and validate --connect fail`);
      const expected = path === 'wrong password' ? /HYPSINK_ERR_AUTH/ : path === 'nothing listening' ? /ECONNREFUSED/ : /login accepted/;
      assert.match(outputs.map(([, r]) => r.stdout + r.stderr).join('\n'), expected, path);
      for (const [name, r] of outputs) found.push(...leaks(`${path}: ${name} stdout`, r.stdout), ...leaks(`${path}: ${name} stderr`, r.stderr));
      for (const f of await walkFiles(dir)) {
        if (f.endsWith('.parquet') || f.endsWith('hypsink.config.json')) continue;
        found.push(...leaks(`${path}: ${f.slice(dir.length + 1)}`, await fsp.readFile(f, 'latin1')));
      }
    }
    assert.deepEqual(found, []);
  });
}
