/**
 * `hypsink validate --connect` (issue 16): every sink's destination reached
 * without writing anything visible, one line per sink, every sink checked
 * even when one fails, exit 0 only when all pass. Through `bin` in a child
 * process against the real reference receiver over HTTP, s3rver over loopback
 * and real folders on disk.
 * @ref LLP 0036: what each connection check proves
 */
import assert from 'node:assert/strict';
import { promises as fsp } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join, relative } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { CreateMultipartUploadCommand, ListObjectsV2Command, S3Client } from '@aws-sdk/client-s3';
import { type Receiver, startReceiver } from '../../fixtures/receiver/server.js';
import { deadPort } from '../forward/helpers.js';
import { FIXTURE_PLUGINS, type Json, openKernel, runBin, sampleConfig, writeConfig } from '../support/kernel.js';
import { S3RVER_ACCESS_KEY_ID, S3RVER_SECRET_ACCESS_KEY, startS3Server, type TestS3Server } from '../support/s3server.js';
import { tempDir } from '../support/tmp.js';
import { CHILD_USER, childTempDir, lockOut, runCli } from '../support/cli-child.js';

const TOKEN = 'validate-connect-Tk7Qz9Lw2Xp4';
const WRONG = 'validate-wrong-Zr8Mn3Bq6Yt1';
const S3_ENV = { AWS_ACCESS_KEY_ID: S3RVER_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY: S3RVER_SECRET_ACCESS_KEY, AWS_EC2_METADATA_DISABLED: 'true' };

/** A config of the sample dataset and these sinks, in a fresh folder. */
async function configWith(sinks: Record<string, Json>): Promise<{ dir: string; config: string }> {
  const dir = tempDir('hypsink-connect-');
  const cfg = { ...sampleConfig(), sinks };
  return { dir, config: await writeConfig(dir, cfg) };
}

// biome-ignore lint/suspicious/noTemplateCurlyInString: the config's own ${ENV} reference, interpolated by the kernel
const forward = (url: string): Json => ({ plugin: '@hypsink/forward', datasets: ['events'], config: { url, token: '${HYPSINK_TOKEN}', timeoutMs: 3000 } });
const localFs = (dir: string, more: Json = {}): Json => ({ writer: '@hypsink/format-parquet', destination: '@hypsink/local-fs', datasets: ['events'], config: { dir, ...more } });
const s3 = (endpoint: string, bucket: string, more: Json = {}): Json => ({
  writer: '@hypsink/format-parquet',
  destination: '@hypsink/s3',
  datasets: ['events'],
  config: { bucket, prefix: 'hosts/a', endpoint, forcePathStyle: true, retry: { attempts: 1, baseMs: 1, maxMs: 1 }, connectTimeoutMs: 2000, requestTimeoutMs: 3000, ...more },
});

/** `hypsink validate --connect` in a child process, from the config's folder. */
function validate(config: string, env: Record<string, string> = {}, ...more: string[]) {
  return runBin(['validate', '--connect', '--config', config, ...more], { env: { HYPSINK_TOKEN: TOKEN, ...S3_ENV, ...env } });
}

/** The line of one sink. */
function lineOf(out: string, sink: string): string {
  const lines = out.split('\n').filter((l) => l.startsWith(`sink "${sink}": `));
  assert.equal(lines.length, 1, `one line for sink "${sink}" in:\n${out}`);
  return lines[0]!;
}

interface CheckJson {
  sinks: { name: string; ok: boolean; checked?: string; code?: string; error?: string }[];
}

describe('forward: the reference receiver over HTTP', () => {
  let r: Receiver;
  const data = tempDir('hypsink-connect-recv-');
  before(async () => {
    r = await startReceiver({ port: 0, dataDir: data, token: TOKEN });
  });
  after(() => r.close());

  test('the right token: ok, the health check passed and the token was accepted; nothing stored', async () => {
    const { config } = await configWith({ central: forward(r.url) });
    const before = r.stats();
    const v = await validate(config);
    assert.equal(v.code, 0, v.stderr + v.stdout);
    const line = lineOf(v.stdout, 'central');
    assert.match(line, /^sink "central": ok — /);
    assert.match(line, /health/);
    assert.match(line, /token accepted/);
    assert.ok(line.includes(r.url), line);
    const now = r.stats();
    assert.deepEqual([now.batchesStored, now.ledgerSize], [before.batchesStored, before.ledgerSize], 'the check stores nothing');
  });

  test('a wrong token: FAILED with HYPSINK_ERR_AUTH naming the sink and the url, exit 1, the token printed nowhere', async () => {
    const { config } = await configWith({ central: forward(r.url) });
    const v = await validate(config, { HYPSINK_TOKEN: WRONG });
    assert.equal(v.code, 1, v.stderr + v.stdout);
    const line = lineOf(v.stdout, 'central');
    assert.match(line, /^sink "central": FAILED — HYPSINK_ERR_AUTH: /);
    assert.ok(line.includes(r.url), line);
    assert.ok(!v.stdout.includes(WRONG) && !v.stderr.includes(WRONG), 'the token never reaches the output');
    assert.ok(!v.stdout.includes(TOKEN) && !v.stderr.includes(TOKEN));
    assert.match(v.stderr, /HYPSINK_ERR_AUTH/);
  });

  test('a receiver that is down: FAILED, retryable class, the message says to check config.url', async () => {
    const url = `http://127.0.0.1:${await deadPort()}`;
    const { config } = await configWith({ central: forward(url) });
    const v = await validate(config);
    assert.equal(v.code, 1, v.stderr + v.stdout);
    const line = lineOf(v.stdout, 'central');
    assert.match(line, /^sink "central": FAILED — HYPSINK_ERR_RETRYABLE: /);
    assert.match(line, /config\.url/);
    assert.ok(line.includes(url), line);
  });

  test('a receiver without /v1/whoami (404): ok, the health check passed, the token could not be checked', async () => {
    const old: Server = createServer((req, res) => {
      const ok = req.url === '/v1/health' && req.method === 'GET';
      res.writeHead(ok ? 200 : 404, { 'content-type': 'application/json' });
      res.end(JSON.stringify(ok ? { ok: true } : { error: 'not found' }));
    });
    await new Promise<void>((done) => old.listen(0, '127.0.0.1', done));
    try {
      const url = `http://127.0.0.1:${(old.address() as AddressInfo).port}`;
      const { config } = await configWith({ central: forward(url) });
      const v = await validate(config);
      assert.equal(v.code, 0, v.stderr + v.stdout);
      const line = lineOf(v.stdout, 'central');
      assert.match(line, /^sink "central": ok — .*health check passed/);
      assert.match(line, /token could not be checked/);
    } finally {
      await new Promise((done) => old.close(done));
    }
  });
});

describe('s3: s3rver over loopback', () => {
  let store: TestS3Server;
  before(async () => {
    store = await startS3Server({ buckets: ['lake'] });
  });
  after(() => store.stop());

  test('an existing bucket: ok; afterwards the bucket holds no object and no pending multipart upload', async () => {
    const { config } = await configWith({ offsite: s3(store.endpoint, 'lake') });
    const client = new S3Client({ region: 'us-east-1', endpoint: store.endpoint, forcePathStyle: true, credentials: { accessKeyId: S3RVER_ACCESS_KEY_ID, secretAccessKey: S3RVER_SECRET_ACCESS_KEY } });
    // A probe upload an earlier check left when it was cut between its create and its abort.
    await client.send(new CreateMultipartUploadCommand({ Bucket: 'lake', Key: 'hosts/a/.hypsink-connection-check-000000000000' }));
    assert.equal((await store.pendingUploads('lake')).length, 1);
    const v = await validate(config);
    assert.equal(v.code, 0, v.stderr + v.stdout);
    const line = lineOf(v.stdout, 'offsite');
    assert.match(line, /^sink "offsite": ok — /);
    assert.match(line, /"lake"/);
    assert.match(line, /hosts\/a\//);
    try {
      const listed = await client.send(new ListObjectsV2Command({ Bucket: 'lake' }));
      assert.deepEqual(listed.Contents ?? [], [], 'no object in the bucket');
    } finally {
      client.destroy();
    }
    assert.deepEqual(await store.pendingUploads('lake'), [], 'no multipart upload left pending, the earlier one aborted too');
  });

  test('a missing bucket: FAILED naming the bucket, exit 1', async () => {
    const { config } = await configWith({ offsite: s3(store.endpoint, 'no-such-lake') });
    const v = await validate(config);
    assert.equal(v.code, 1, v.stderr + v.stdout);
    const line = lineOf(v.stdout, 'offsite');
    assert.match(line, /^sink "offsite": FAILED — HYPSINK_ERR_DESTINATION: .*bucket "no-such-lake" does not exist/);
    assert.ok(line.includes(store.endpoint), line);
  });

  test('credentials the store does not know: FAILED with HYPSINK_ERR_AUTH naming the bucket', async () => {
    const { config } = await configWith({ offsite: s3(store.endpoint, 'lake') });
    const v = await validate(config, { AWS_ACCESS_KEY_ID: 'NOT-AN-ACCOUNT' });
    assert.equal(v.code, 1, v.stderr + v.stdout);
    const line = lineOf(v.stdout, 'offsite');
    assert.match(line, /^sink "offsite": FAILED — HYPSINK_ERR_AUTH: .*"lake"/);
  });

  test('an endpoint nobody answers at: FAILED, retryable class, naming the endpoint and config.endpoint', async () => {
    const endpoint = `http://127.0.0.1:${await deadPort()}`;
    const { config } = await configWith({ offsite: s3(endpoint, 'lake') });
    const v = await validate(config);
    assert.equal(v.code, 1, v.stderr + v.stdout);
    const line = lineOf(v.stdout, 'offsite');
    assert.match(line, /^sink "offsite": FAILED — HYPSINK_ERR_RETRYABLE: /);
    assert.ok(line.includes(endpoint), line);
    assert.match(line, /config\.endpoint/);
  });
});

describe('local-fs: real folders', () => {
  test('an existing writable folder: ok, and nothing is created in it', async () => {
    const { dir, config } = await configWith({ archive: localFs('exports') });
    await fsp.mkdir(join(dir, 'exports'));
    const v = await validate(config);
    assert.equal(v.code, 0, v.stderr + v.stdout);
    assert.match(lineOf(v.stdout, 'archive'), /^sink "archive": ok — .*exports.*writable/);
    assert.deepEqual(await fsp.readdir(join(dir, 'exports')), [], 'nothing written at the root');
  });

  test('a folder not made yet under a writable one: ok, it can be created, and it is not created', async () => {
    const { dir, config } = await configWith({ archive: localFs('out/exports') });
    const v = await validate(config);
    assert.equal(v.code, 0, v.stderr + v.stdout);
    assert.match(lineOf(v.stdout, 'archive'), /^sink "archive": ok — .*does not exist yet/);
    await assert.rejects(fsp.lstat(join(dir, 'out')), { code: 'ENOENT' }, 'the check creates no folder');
  });

  test('a path under a regular file: FAILED naming the file, exit 1', async () => {
    const { dir, config } = await configWith({ archive: localFs('notes.txt/exports') });
    await fsp.writeFile(join(dir, 'notes.txt'), 'mine\n');
    const v = await validate(config);
    assert.equal(v.code, 1, v.stderr + v.stdout);
    const line = lineOf(v.stdout, 'archive');
    assert.match(line, /^sink "archive": FAILED — HYPSINK_ERR_DESTINATION: /);
    assert.ok(line.includes(join(dir, 'notes.txt')), line);
    assert.match(line, /regular file/);
    assert.equal(await fsp.readFile(join(dir, 'notes.txt'), 'utf8'), 'mine\n');
  });

  test('a folder its user may not write: FAILED with HYPSINK_ERR_ACCESS naming the folder and the user, as an export would', async () => {
    const dir = childTempDir();
    const config = await writeConfig(dir, { ...sampleConfig(), sinks: { archive: localFs('exports') } });
    await fsp.mkdir(join(dir, 'exports'));
    await lockOut(join(dir, 'exports'));
    const v = await runCli(['validate', '--connect', '--config', config], { cwd: dir });
    assert.equal(v.code, 1, v.stderr + v.stdout);
    const line = lineOf(v.stdout, 'archive');
    assert.match(line, /^sink "archive": FAILED — HYPSINK_ERR_ACCESS: /);
    assert.ok(line.includes(join(dir, 'exports')), line);
    assert.ok(line.includes(`user "${CHILD_USER.name}" (uid ${CHILD_USER.uid})`), line);
    assert.deepEqual(await fsp.readdir(join(dir, 'exports')), [], 'nothing written');
  });

  test('a root that is a symbolic link: FAILED unless followRootLinks', async () => {
    const { dir, config } = await configWith({ archive: localFs('link'), linked: localFs('link2', { followRootLinks: true }) });
    await fsp.mkdir(join(dir, 'real'));
    await fsp.mkdir(join(dir, 'real2'));
    await fsp.symlink(join(dir, 'real'), join(dir, 'link'));
    await fsp.symlink(join(dir, 'real2'), join(dir, 'link2'));
    const v = await validate(config);
    assert.equal(v.code, 1, v.stderr + v.stdout);
    assert.match(lineOf(v.stdout, 'archive'), /^sink "archive": FAILED — HYPSINK_ERR_DESTINATION: .*symbolic link.*followRootLinks/);
    assert.match(lineOf(v.stdout, 'linked'), /^sink "linked": ok — /);
    assert.deepEqual([await fsp.readdir(join(dir, 'real')), await fsp.readdir(join(dir, 'real2'))], [[], []]);
  });
});

describe('several sinks in one config', () => {
  let r: Receiver;
  let store: TestS3Server;
  const data = tempDir('hypsink-connect-recv-');
  before(async () => {
    r = await startReceiver({ port: 0, dataDir: data, token: TOKEN });
    store = await startS3Server({ buckets: ['lake'] });
  });
  after(async () => {
    await r.close();
    await store.stop();
  });

  test('one line per sink in config order, a failure hides no other line, exit = the first failure', async () => {
    const { dir, config } = await configWith({
      archive: localFs('exports'),
      broken: localFs('file/exports'),
      central: forward(r.url),
      offsite: s3(store.endpoint, 'gone'),
      lake: s3(store.endpoint, 'lake'),
    });
    await fsp.writeFile(join(dir, 'file'), '');
    const v = await validate(config, { HYPSINK_TOKEN: WRONG });
    const lines = v.stdout.split('\n').filter((l) => l.startsWith('sink "'));
    assert.deepEqual(
      lines.map((l) => /^sink "([^"]+)": (ok|FAILED)/.exec(l)?.slice(1)),
      [
        ['archive', 'ok'],
        ['broken', 'FAILED'],
        ['central', 'FAILED'],
        ['offsite', 'FAILED'],
        ['lake', 'ok'],
      ],
      v.stdout,
    );
    // The first failure is broken's HYPSINK_ERR_DESTINATION (exit 1); the summary names every failed sink.
    assert.equal(v.code, 1);
    assert.match(v.stderr, /HYPSINK_ERR_DESTINATION: 3 of 5 sink\(s\) failed the connection check: broken, central, offsite/);
  });

  test('--json: the per-sink results for machines', async () => {
    const { config } = await configWith({ archive: localFs('exports'), central: forward(r.url) });
    const v = await validate(config, { HYPSINK_TOKEN: WRONG }, '--json');
    assert.equal(v.code, 1, v.stderr);
    const j = JSON.parse(v.stdout) as CheckJson;
    assert.deepEqual(
      j.sinks.map((s) => [s.name, s.ok, s.code ?? null]),
      [
        ['archive', true, null],
        ['central', false, 'HYPSINK_ERR_AUTH'],
      ],
    );
    assert.equal(typeof j.sinks[0]!.checked, 'string');
    assert.match(j.sinks[1]!.error!, /sink "central"/);
    assert.ok(!v.stdout.includes(WRONG));
  });

  test('a plugin without a connection check: ok, built, not a failure', async () => {
    const dir = tempDir('hypsink-connect-');
    // A plugin path is relative to the config's folder.
    const cfg = { ...sampleConfig(), plugins: [relative(dir, join(FIXTURE_PLUGINS, 'file-sink'))], sinks: { mine: { plugin: 'test-file-sink', datasets: ['events'], config: { out: 'received' } } } };
    const config = await writeConfig(dir, cfg);
    const v = await validate(config);
    assert.equal(v.code, 0, v.stderr + v.stdout);
    assert.equal(lineOf(v.stdout, 'mine'), 'sink "mine": ok — built (its plugin has no connection check)');
  });

  test('validate without --connect reaches no destination', async () => {
    const url = `http://127.0.0.1:${await deadPort()}`;
    const { config } = await configWith({ central: forward(url) });
    const v = await runBin(['validate', '--config', config], { env: { HYPSINK_TOKEN: TOKEN } });
    assert.equal(v.code, 0, v.stderr);
    assert.match(v.stdout, /config OK: 1 sink\(s\) \(central\)/);
  });
});

test('every check is bounded: a receiver that accepts and never answers fails at the bound, naming it', async () => {
  const silent = createServer(() => {});
  await new Promise<void>((done) => silent.listen(0, '127.0.0.1', done));
  try {
    const url = `http://127.0.0.1:${(silent.address() as AddressInfo).port}`;
    // The sink's own timeout is longer than the kernel's bound: the bound ends the check.
    const sink = forward(url);
    (sink.config as Json).timeoutMs = 600_000;
    const { config } = await configWith({ central: sink });
    process.env.HYPSINK_TOKEN = TOKEN;
    const { k } = await openKernel(config);
    try {
      const [c] = await k.checkConnections({ timeoutMs: 300 });
      assert.ok(c && !c.ok, 'the check failed');
      assert.equal(c.error.code, 'HYPSINK_ERR_RETRYABLE');
      assert.match(c.error.message, /sink "central": .*did not finish within 300 ms/);
    } finally {
      await k.close();
      silent.closeAllConnections();
    }
  } finally {
    await new Promise((done) => silent.close(done));
  }
});
