/**
 * hypsink as a user gets it: `npm pack` (prepack builds dist/), installed from
 * the tarball into an empty project with no network, with the example plugin
 * packed and installed the same way. The plugin is type-checked by `tsc`
 * against the installed `hypsink/plugin` types, named by its package name in
 * the config, and exported through from `node_modules/.bin/hypsink` with every
 * built-in sink beside it (the CLI bundle's plugins), read back; its own
 * conformance test runs against the installed `hypsink/testing`. A second
 * plugin, loaded from a folder with its own copy of hypsink, keeps its error
 * codes, its `retryAfterMs`, and stops the sink on HYPSINK_ERR_AUTH.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, promises as fsp, readFileSync, realpathSync } from 'node:fs';
import { join } from 'node:path';
import { before, test } from 'node:test';
import { tableFromIPC } from 'apache-arrow';
import * as pw from 'parquet-wasm';
import { startReceiver } from '../../fixtures/receiver/server.js';
import { readStored } from '../../fixtures/receiver/store.js';
import { createLogger } from '../../kernel/log.js';
import { conformance } from '../../testing/index.js';
import { FIXTURE_PLUGINS, REPO, SAMPLE_CONFIG_TEXT } from '../support/kernel.js';
import { startS3Server, useS3rverCredentials } from '../support/s3server.js';
import { tempDir } from '../support/tmp.js';

interface Run {
  readonly code: number | null;
  readonly out: string;
  readonly err: string;
}

/** A command in `cwd`, without this suite's TypeScript conditions: what a user's shell runs. */
function run(cmd: string, args: readonly string[], cwd: string, input?: string): Promise<Run> {
  const env: NodeJS.ProcessEnv = { ...process.env, NODE_OPTIONS: '', npm_config_audit: 'false', npm_config_fund: 'false', npm_config_update_notifier: 'false' };
  delete env.NODE_TEST_CONTEXT;
  for (const k of Object.keys(env)) if (k.startsWith('npm_') && !k.startsWith('npm_config_')) delete env[k];
  return new Promise((done, failed) => {
    const child = spawn(cmd, [...args], { cwd, env, stdio: ['pipe', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (b: Buffer) => {
      out += b.toString();
    });
    child.stderr.on('data', (b: Buffer) => {
      err += b.toString();
    });
    child.on('error', failed);
    child.on('close', (code) => done({ code, out, err }));
    child.stdin.end(input ?? '');
  });
}

async function ok(cmd: string, args: readonly string[], cwd: string, input?: string): Promise<Run> {
  const r = await run(cmd, args, cwd, input);
  assert.equal(r.code, 0, `${cmd} ${args.join(' ')} (in ${cwd}) exited ${r.code}:\n${r.out}\n${r.err}`);
  return r;
}

/** The tarball's name, from `npm pack`'s last line of output. */
async function pack(dir: string, dest: string): Promise<string> {
  const r = await ok('npm', ['pack', '--pack-destination', dest], dir);
  return join(dest, r.out.trim().split('\n').at(-1)!);
}

/**
 * The host project's lockfile: hypsink from its tarball, and its dependencies
 * exactly as hypsink's own lockfile pins them, so `npm ci --offline` installs
 * from the npm cache the repository's install filled, with no registry.
 */
function hostLock(tarball: string): { pkg: object; lock: object } {
  const lock = JSON.parse(readFileSync(join(REPO, 'package-lock.json'), 'utf8')) as { packages: Record<string, Record<string, unknown>> };
  const self = JSON.parse(readFileSync(join(REPO, 'package.json'), 'utf8')) as Record<string, Record<string, string>> & { version: string };
  const file = `file:${tarball}`;
  const devDependencies = { typescript: self.devDependencies!.typescript!, '@types/node': self.devDependencies!['@types/node']! };
  const packages: Record<string, unknown> = { '': { name: 'host', version: '1.0.0', dependencies: { hypsink: file }, devDependencies } };
  const alsoDev = new Set(['node_modules/typescript', 'node_modules/@types/node', 'node_modules/undici-types']);
  for (const [k, v] of Object.entries(lock.packages)) {
    if (k === '' || (v.dev && !alsoDev.has(k))) continue;
    const { dev: _dev, devOptional: _devOptional, ...entry } = v;
    packages[k] = entry;
  }
  packages['node_modules/hypsink'] = { version: self.version, resolved: file, dependencies: self.dependencies, bin: self.bin, engines: self.engines };
  return {
    pkg: { name: 'host', version: '1.0.0', private: true, type: 'module', dependencies: { hypsink: file }, devDependencies },
    lock: { name: 'host', version: '1.0.0', lockfileVersion: 3, requires: true, packages },
  };
}

// At file level: made once, removed when the file's tests end (not inside before(), see tmp.ts).
const work = tempDir('hypsink-pack-');
let host: string;
let hypsinkTgz: string;
const packageJsonBefore = readFileSync(join(REPO, 'package.json'), 'utf8');
const bin = () => join(host, 'node_modules/.bin/hypsink');
const tsc = () => join(host, 'node_modules/typescript/bin/tsc');

before(async () => {
  hypsinkTgz = await pack(REPO, work);
  host = join(work, 'host');
  await fsp.mkdir(host);
  const { pkg, lock } = hostLock(hypsinkTgz);
  await fsp.writeFile(join(host, 'package.json'), JSON.stringify(pkg, null, 1));
  await fsp.writeFile(join(host, 'package-lock.json'), JSON.stringify(lock, null, 1));
  await ok('npm', ['ci', '--offline'], host);
  // The example plugin, as its author has it: its sources, built against the installed hypsink.
  const plugin = join(host, 'audit-sink');
  for (const f of ['package.json', 'plugin.json', 'tsconfig.json', 'src', 'test']) await fsp.cp(join(REPO, 'docs/examples/audit-sink', f), join(plugin, f), { recursive: true });
  const pluginTgz = await pack(plugin, work); // its prepack runs tsc
  await ok('npm', ['install', '--offline', '--install-links=false', pluginTgz], host);
}, { timeout: 300_000 });

test('the tarball ships only what a user needs: compiled code, types, the CLI and two docs', async () => {
  const files = (await ok('tar', ['tzf', hypsinkTgz], host)).out.trim().split('\n').map((f) => f.replace(/^package\//, ''));
  const outside = files.filter((f) => !/^(package\.json|README\.md|bin\/hypsink\.js|docs\/(PLUGIN_AUTHORING|ERRORS)\.md|dist\/.+\.(js|d\.ts|map|json))$/.test(f));
  assert.deepEqual(outside, [], 'nothing else (no test/, bench/, sources or local data)');
  for (const f of ['dist/cli/main.js', 'dist/kernel/api.js', 'dist/kernel/api.d.ts', 'dist/types/index.d.ts', 'dist/testing/index.js', 'dist/plugins/s3/plugin.json']) {
    assert.ok(files.includes(f), `ships ${f}`);
  }
});

// Issue 28: the packed package.json kept the checkout's scripts, among them a `prepare` whose
// file is not shipped; packing left the checkout's package.json as it was.
test('the packed package.json has none of the checkout’s scripts; the checkout’s package.json is untouched by packing', async () => {
  const packed = JSON.parse((await ok('tar', ['xzOf', hypsinkTgz, 'package/package.json'], host)).out) as { scripts?: Record<string, string>; bin?: unknown };
  assert.equal(packed.scripts, undefined, `no scripts: ${JSON.stringify(packed.scripts)}`);
  assert.deepEqual(packed.bin, { hypsink: 'bin/hypsink.js' });
  assert.equal(readFileSync(join(REPO, 'package.json'), 'utf8'), packageJsonBefore, 'package.json restored after the pack');
  assert.ok(!existsSync(join(REPO, '.package.json.packing')), 'no copy left behind');
});

// Issue 28: a TypeScript-only plugin failed as HYPSINK_ERR_UNEXPECTED ("report it").
test('a TypeScript plugin is refused by the installed CLI as a plugin error that says to compile it', async () => {
  for (const [name, manifest, file] of [
    ['ts-main', { main: 'index.ts' }, 'index.ts'],
    ['ts-root', {}, 'index.ts'],
    ['ts-src', {}, 'src/index.ts'],
  ] as const) {
    const dir = join(host, name);
    await fsp.mkdir(join(dir, 'src'), { recursive: true });
    await fsp.writeFile(join(dir, 'plugin.json'), JSON.stringify({ name, version: '1.0.0', provides: ['sink'], ...manifest }));
    await fsp.writeFile(join(dir, file), `export default function activate(ctx: { registerSink(f: object): void }): void {\n  ctx.registerSink({ name: '${name}', create: () => ({}) });\n}\n`);
    const cfg = JSON.parse(SAMPLE_CONFIG_TEXT) as Record<string, unknown>;
    cfg.plugins = [`./${name}`];
    cfg.cache = { root: `.hypsink/${name}-cache` };
    cfg.state = { dir: `.hypsink/${name}-state` };
    cfg.sinks = { t: { plugin: name, datasets: ['events'] } };
    await fsp.writeFile(join(host, `${name}.config.json`), JSON.stringify(cfg));
    const r = await run(bin(), ['validate', '--config', `${name}.config.json`], host);
    assert.equal(r.code, 2, `${name}: ${r.out}${r.err}`);
    assert.match(r.err, new RegExp(`HYPSINK_ERR_PLUGIN: plugin ${name}: .*${file.replace('.', '\\.')}.* TypeScript`), name);
    assert.match(r.err, /→ Compile the plugin to JavaScript first/, name);
    assert.doesNotMatch(r.err, /HYPSINK_ERR_UNEXPECTED/, name);
  }
});

test('the plugin type-checks against the installed hypsink/plugin types, which catch a wrong type', async () => {
  const plugin = join(host, 'audit-sink');
  await ok(process.execPath, [tsc(), '-p', plugin, '--noEmit'], host);
  const src = await fsp.readFile(join(plugin, 'src/index.ts'), 'utf8');
  const broken = join(host, 'audit-sink-broken');
  await fsp.cp(plugin, broken, { recursive: true });
  // A unit's rows count is a number in the contract.
  await fsp.writeFile(join(broken, 'src/index.ts'), src.replace('return { rows: lines.length,', "return { rows: 'many',"));
  const r = await run(process.execPath, [tsc(), '-p', broken, '--noEmit'], host);
  assert.notEqual(r.code, 0, 'tsc failed on the wrong type');
  assert.match(r.out, /src\/index\.ts\(\d+,\d+\): error TS2322: Type 'string' is not assignable to type 'number'/);
});

test('hypsink export from node_modules/.bin ships through the plugin named by its package and every built-in sink; nothing on stderr but logs', async (t) => {
  const receiver = await startReceiver({ port: 0, dataDir: join(host, 'receiver'), insecureNoAuth: true, log: createLogger('silent') });
  const s3 = await startS3Server({ buckets: ['lake'] });
  t.after(async () => {
    await receiver.close();
    await s3.stop();
  });
  useS3rverCredentials();
  const config = JSON.parse(SAMPLE_CONFIG_TEXT) as { sinks: Record<string, unknown> };
  config.sinks = {
    audit: { plugin: 'hypsink-audit-sink', datasets: ['events'], config: { dir: 'audit' } },
    archive: { writer: '@hypsink/format-parquet', destination: '@hypsink/local-fs', datasets: ['events'], config: { dir: 'exports' } },
    copy: { writer: '@hypsink/format-jsonl', destination: '@hypsink/local-fs', datasets: ['events'], config: { dir: 'copies' } },
    lake: { writer: '@hypsink/format-parquet', destination: '@hypsink/s3', datasets: ['events'], config: { bucket: 'lake', region: 'us-east-1', endpoint: s3.endpoint, forcePathStyle: true } },
    central: { plugin: '@hypsink/forward', datasets: ['events'], config: { url: receiver.url } },
  };
  await fsp.writeFile(join(host, 'hypsink.config.json'), JSON.stringify(config));
  const rows = Array.from({ length: 5 }, (_, i) => JSON.stringify({ id: i + 1, ts: '2026-01-01T00:00:00Z', msg: `m${i + 1}` })).join('\n');
  const ingest = await ok(bin(), ['ingest', 'events', '--source', 'web', '--batch-id', 'b1'], host, `${rows}\n`);
  assert.match(ingest.out, /ingested 5 row\(s\) into events\/source=web \(batch b1\)/);
  assert.equal(ingest.err, '', 'ingest writes nothing to stderr');
  const first = await ok(bin(), ['export', '--json'], host);
  const shipped = Object.fromEntries(JSON.parse(first.out).sinks.map((s: { name: string; rows: number }) => [s.name, s.rows]));
  assert.deepEqual(shipped, { audit: 5, archive: 5, copy: 5, lake: 5, central: 5 });
  const ids = [1, 2, 3, 4, 5];
  const audit = (await fsp.readFile(join(host, 'audit/events/source=web.jsonl'), 'utf8')).trim().split('\n');
  assert.deepEqual(audit.map((l) => (JSON.parse(l) as { id: number }).id), ids);
  const parquet = await fsp.readFile(join(host, 'exports/events/source=web/events.0-5.parquet'));
  assert.deepEqual(tableFromIPC(pw.readParquet(parquet).intoIPCStream()).toArray().map((r) => Number(r.id)), ids, 'the Parquet file read back');
  const jsonl = (await fsp.readFile(join(host, 'copies/events/source=web/events.0-5.jsonl'), 'utf8')).trim().split('\n');
  assert.deepEqual(jsonl.map((l) => (JSON.parse(l) as { id: number }).id), ids);
  assert.ok(await s3.objectExists('lake', 'events/source=web/events.0-5.parquet'), 'the S3 object');
  assert.deepEqual((await readStored(join(host, 'receiver'))).rows.events!.web!.map((r) => Number(r.id)), ids, 'the receiver stored each row once');
  const again = await ok(bin(), ['export', '--json'], host);
  assert.deepEqual(JSON.parse(again.out).sinks.map((s: { rows: number }) => s.rows), [0, 0, 0, 0, 0], 'nothing new, nothing shipped');
  for (const r of [first, again]) {
    const other = r.err.split('\n').filter((l) => l && !l.startsWith('{"level":'));
    assert.deepEqual(other, [], 'only the kernel’s JSON log lines, no warning of a dependency');
  }
  const status = await ok(bin(), ['status', '--json'], host);
  assert.equal(status.err, '');
  assert.deepEqual(JSON.parse(status.out).sinks.map((s: { partitions: { exportedRows: number }[] }) => s.partitions[0]!.exportedRows), [5, 5, 5, 5, 5]);
});

test("the plugin's own conformance test passes against the installed hypsink/testing", async () => {
  const r = await ok(process.execPath, ['--test', 'audit-sink/test/'], host);
  // Every case of the kit this repo holds ran and passed (a kit that lost cases in packing would pass fewer).
  const cases = conformance({ plugins: [], sink: () => ({}), read: async () => [] }).length;
  assert.ok(cases > 0);
  assert.match(r.out, new RegExp(`^# pass ${cases}$`, 'm'));
  assert.match(r.out, /^# fail 0$/m);
});

test('a plugin loaded from a folder with its own copy of hypsink keeps its error codes, retryAfterMs and AUTH', async () => {
  const dir = join(host, 'code-sink');
  await fsp.mkdir(join(dir, 'node_modules'), { recursive: true });
  await ok('tar', ['xzf', hypsinkTgz, '-C', join(dir, 'node_modules')], host);
  await fsp.rename(join(dir, 'node_modules/package'), join(dir, 'node_modules/hypsink'));
  for (const f of ['plugin.json', 'index.js']) await fsp.copyFile(join(FIXTURE_PLUGINS, 'code-sink', f), join(dir, f));
  await fsp.writeFile(join(dir, 'package.json'), JSON.stringify({ name: 'hypsink-code-sink', version: '1.0.0', type: 'module' }));
  const own = realpathSync(join(dir, 'node_modules/hypsink/package.json'));
  assert.notEqual(own, realpathSync(join(host, 'node_modules/hypsink/package.json')), 'the plugin has a copy of its own');
  const exportWith = async (config: object) => {
    const cfg = JSON.parse(SAMPLE_CONFIG_TEXT) as Record<string, unknown>;
    cfg.plugins = ['./code-sink'];
    cfg.cache = { root: '.hypsink/code-cache' };
    cfg.state = { dir: '.hypsink/code-state' };
    cfg.sinks = { d: { plugin: 'code-sink', datasets: ['events'], config } };
    await fsp.writeFile(join(host, 'code.config.json'), JSON.stringify(cfg));
    return run(bin(), ['export', '--json', '--config', 'code.config.json'], host);
  };
  await exportWith({ code: 'HYPSINK_ERR_DESTINATION' });
  await ok(bin(), ['ingest', 'events', '--source', 'web', '--config', 'code.config.json'], host, '{"id":1,"ts":"2026-01-01T00:00:00Z"}\n');
  const dest = await exportWith({ code: 'HYPSINK_ERR_DESTINATION' });
  assert.equal(dest.code, 1);
  const error = JSON.parse(dest.out).sinks[0].partitions[0].error as string;
  assert.equal(error, 'HYPSINK_ERR_DESTINATION: sink "d": refused for the test', 'its code, the sink named once');
  const logs = (r: Run) => r.err.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as Record<string, unknown>);
  const retry = await exportWith({ code: 'HYPSINK_ERR_RETRYABLE', retryAfterMs: 90_000 });
  assert.ok(logs(retry).some((l) => l.code === 'HYPSINK_ERR_RETRYABLE' && Number(l.retryInMs) >= 90_000), `retried no sooner than it asked:\n${retry.err}`);
  const auth = await exportWith({ code: 'HYPSINK_ERR_AUTH' });
  assert.ok(logs(auth).some((l) => l.code === 'HYPSINK_ERR_AUTH' && String(l.msg).endsWith('sink stopped until restart')), `AUTH stops the sink:\n${auth.err}`);
});
