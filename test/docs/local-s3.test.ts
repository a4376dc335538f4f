/**
 * Issue 28, a newcomer's friction: the README never said how to start a local
 * S3 to try the S3 sink. It shows it now (under `@hypsink/s3`); this runs it
 * as shown: s3rver (a dev dependency, `npx s3rver` in the checkout) with the
 * README's arguments (on a free port), the credentials it says, its sink's
 * config, an export, and the object where the README says it lands.
 * @ref LLP 0070
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { cli, REPO, sampleConfig, writeConfig } from '../support/kernel.js';
import { tempDir } from '../support/tmp.js';

/** The README's local S3 example: the command, the credentials, the sink. */
function shown(): { command: string[]; env: Record<string, string>; sink: Record<string, unknown>; objects: string } {
  const readme = readFileSync(join(REPO, 'README.md'), 'utf8');
  const sh = /<!-- local s3 -->\n```sh\n([\s\S]*?)```/.exec(readme);
  const json = /<!-- local s3 sink -->\n```json\n([\s\S]*?)```/.exec(readme);
  assert.ok(sh && json, 'the README shows how to start a local S3 and the sink for it, after its markers');
  const lines = sh[1]!.split('\n').filter((l) => l && !l.startsWith('#'));
  const start = lines.find((l) => l.startsWith('npx s3rver '));
  const exported = lines.find((l) => l.startsWith('export AWS_'));
  assert.ok(start && exported, sh[1]);
  const env = Object.fromEntries(exported.slice('export '.length).split(/\s+/).map((kv) => kv.split('=') as [string, string]));
  const objects = /objects land under `([^`]+)`/.exec(readme)?.[1];
  assert.ok(objects, 'it says where the objects land');
  return { command: start.replace(/\s*&$/, '').split(/\s+/).slice(1), env, sink: JSON.parse(`{${json[1]}}`) as Record<string, unknown>, objects };
}

function walk(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? walk(join(dir, e.name)) : [join(dir, e.name)]));
}

test('the README’s local S3 runs as shown: s3rver started, the sink exports to it', { timeout: 60_000 }, async (t) => {
  const dir = tempDir();
  process.chdir(dir);
  const { command, env, sink, objects } = shown();
  // As shown, on a free port (others may run beside this test): -p 0, and the port it says.
  const args = command.map((a, i) => (command[i - 1] === '-p' ? '0' : a));
  assert.ok(args.includes('-p'), `a port is given: ${command.join(' ')}`);
  const server = spawn(join(REPO, 'node_modules/.bin', args[0]!), args.slice(1), { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] });
  t.after(() => server.kill());
  const port = await new Promise<string>((resolve, reject) => {
    let out = '';
    server.stdout.on('data', (b: Buffer) => {
      out += b.toString();
      const m = /listening on \S+:(\d+)/.exec(out);
      if (m) resolve(m[1]!);
    });
    server.on('exit', (code) => reject(new Error(`s3rver exited ${code}: ${out}`)));
  });
  for (const [k, v] of Object.entries(env)) process.env[k] = v;
  process.env.AWS_EC2_METADATA_DISABLED = 'true';
  const c = sampleConfig();
  const [name, lake] = Object.entries(sink)[0] as [string, { config: { endpoint: string } }];
  lake.config.endpoint = lake.config.endpoint.replace(/:\d+$/, `:${port}`);
  c.sinks = { [name]: lake };
  const config = await writeConfig(dir, c);
  await writeFile(join(dir, 'rows.ndjson'), '{"id":1,"ts":"2026-01-01T00:00:00Z","msg":"hi"}\n');
  const ingest = await cli('ingest', 'events', '--source', 'web', '--file', 'rows.ndjson', '--config', config);
  assert.equal(ingest.code, 0, ingest.err);
  const r = await cli('export', '--config', config);
  assert.equal(r.code, 0, r.err);
  const files = walk(join(dir, objects)).filter((f) => f.endsWith('.parquet._S3rver_object'));
  assert.equal(files.length, 1, `one object under ${objects}: ${files.join(', ')}`);
});
