/**
 * A sink's transforms in real exports, for every built-in sink kind: local-fs
 * Parquet files on disk, the forward sink into the reference receiver over
 * HTTP, and the Postgres sink into a real PostgreSQL. Each destination is read
 * back with a reader that is not the kernel's (parquet-wasm, the receiver's
 * store, SQL), and the HMAC is checked against node:crypto.
 * @ref LLP 0046 (the engine), LLP 0049 (the wiring)
 */
import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import { promises as fsp, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { GetObjectCommand, ListObjectsV2Command, S3Client } from '@aws-sdk/client-s3';
import { after, before, test } from 'node:test';
import { readStored, type Receiver, startReceiver } from '../../fixtures/receiver/server.js';
import { FIXTURE_PLUGINS, ingestText, type Json, openKernel, readExports, walkFiles, writeConfig } from '../support/kernel.js';
import { testPg } from '../support/pg.js';
import { startS3Server, useS3rverCredentials } from '../support/s3server.js';
import { tempDir } from '../support/tmp.js';

const KEY_VAR = 'HYPSINK_TEST_TRANSFORM_KEY';
const KEY = 'a-hash-key-of-32-bytes-for-tests';
process.env[KEY_VAR] = KEY;
const TOKEN = 'transform-test-token-Zq8Lm3';

const DATASET = {
  columns: [
    { name: 'id', type: 'INT64', nullable: false },
    { name: 'ts', type: 'TIMESTAMP', nullable: false },
    { name: 'msg', type: 'STRING', nullable: true },
    { name: 'user', type: 'STRING', nullable: true },
    { name: 'debug', type: 'STRING', nullable: true },
  ],
  timestampColumn: 'ts',
};

/** The issue's chain. */
const CHAIN = [
  { drop: ['debug'] },
  { rename: { msg: 'message' } },
  { redact: { columns: ['message'], patterns: ['email', 'bearer'], regex: ['sk-[A-Za-z0-9]{20,}'], mask: '[redacted]' } },
  { hash: { columns: ['user'], key: '${' + KEY_VAR + '}' } },
];

const EMAIL = 'ada.lovelace@example.org';
const BEARER = 'Bearer eyJhbGciOiJIUzI1NiJ9.c2VjcmV0.abc';
const SK = 'sk-AbCdEfGhIjKlMnOpQrStUv12';

function lines(from: number, n: number): string {
  let s = '';
  for (let id = from; id < from + n; id++) {
    const msg = id % 3 === 0 ? `mail ${EMAIL} now` : id % 3 === 1 ? `auth: ${BEARER}` : `key ${SK} and nothing else`;
    s += `${JSON.stringify({ id, ts: 1_700_000_000_000 + id * 1000, msg, user: `user-${id % 4}`, debug: `debug-${id}` })}\n`;
  }
  return s;
}

const hmac = (v: string) => createHmac('sha256', KEY).update(v, 'utf8').digest('hex');

/** What every destination must hold for ids from..from+n-1 of `lines`. */
function expected(from: number, n: number): { id: number; message: string; user: string }[] {
  const out = [];
  for (let id = from; id < from + n; id++) {
    const message = id % 3 === 0 ? 'mail [redacted] now' : id % 3 === 1 ? 'auth: Bearer [redacted]' : 'key [redacted] and nothing else';
    out.push({ id, message, user: hmac(`user-${id % 4}`) });
  }
  return out;
}

async function workspace(sinks: Record<string, Json>, extra: Json = {}): Promise<{ dir: string; config: string; write(s: Record<string, Json>): Promise<void> }> {
  const dir = tempDir();
  await fsp.mkdir(dir, { recursive: true });
  const cfg = (s: Record<string, Json>) => ({ cache: { root: 'cache' }, state: { dir: 'state' }, datasets: { events: DATASET }, sinks: s, ...extra });
  const config = await writeConfig(dir, cfg(sinks));
  return { dir, config, write: async (s) => void (await writeConfig(dir, cfg(s))) };
}

let receiver: Receiver;
const recvDir = mkdtempSync(join(tmpdir(), 'hypsink-xform-recv-'));
before(async () => {
  receiver = await startReceiver({ port: 0, dataDir: recvDir, token: TOKEN });
});
after(async () => {
  await receiver.close();
  rmSync(recvDir, { recursive: true, force: true });
  await (await testPg()).stop();
});

test('the issue\'s chain on local-fs Parquet, the forward sink and Postgres: the dropped column is gone, secrets masked, user hashed, every row once', { timeout: 120_000 }, async () => {
  const pg = await testPg();
  const url = await pg.database('xform');
  const ws = await workspace({
    archive: { writer: '@hypsink/format-parquet', destination: '@hypsink/local-fs', datasets: ['events'], config: { dir: 'exports' }, transforms: CHAIN },
    central: { plugin: '@hypsink/forward', datasets: ['events'], config: { url: receiver.url, token: TOKEN }, transforms: CHAIN },
    warehouse: { plugin: '@hypsink/postgres', datasets: ['events'], config: { url, maxRows: 7 }, transforms: CHAIN },
  });
  const { k } = await openKernel(ws.config);
  try {
    await ingestText(k, 'alpha', lines(1, 20));
    await k.flush();
    for (const r of await k.export()) assert.equal(r.partitions.reduce((n, p) => n + p.rows, 0), 20, `${r.sink} exported every row`);
    const want = expected(1, 20);

    const files = await readExports(join(ws.dir, 'exports'));
    assert.deepEqual(files[0]!.columns, ['id', 'ts', 'message', 'user'], 'Parquet: debug dropped, msg renamed');
    assert.deepEqual(
      files.flatMap((f) => f.rows).map((r) => ({ id: r.id, message: r.message, user: r.user })),
      want,
    );

    const stored = (await readStored(recvDir)).rows.events!.alpha!;
    assert.deepEqual(
      stored.map((r) => ({ id: Number(r.id), message: r.message, user: r.user })),
      want,
    );
    assert.ok(stored.every((r) => !('debug' in r) && !('msg' in r)), 'forward: no dropped or old column in any body');

    const cols = (await pg.query("SELECT column_name FROM information_schema.columns WHERE table_name = 'events' ORDER BY ordinal_position", [], url)).rows.map((r) => r.column_name);
    assert.deepEqual(cols, ['source', 'id', 'ts', 'message', 'user'], 'Postgres: the table is made from the output columns');
    const rows = (await pg.query('SELECT id::int AS id, message, "user" FROM events ORDER BY id', [], url)).rows;
    assert.deepEqual(rows, want);

    // Nothing new: nothing sent again.
    for (const r of await k.export()) assert.equal(r.partitions.reduce((n, p) => n + p.rows, 0), 0);
  } finally {
    await k.close();
  }
});

test('a retried unit is the same bytes: a forward unit stored before a failure is recognised by the receiver\'s digest; two sinks write identical Parquet', { timeout: 60_000 }, async () => {
  const blob = (dir: string) => ({ writer: '@hypsink/format-parquet', destination: '@hypsink/local-fs', datasets: ['events'], config: { dir }, transforms: CHAIN });
  const ws = await workspace({
    one: blob('one'),
    two: blob('two'),
    central2: { plugin: '@hypsink/forward', datasets: ['events'], config: { url: receiver.url, token: TOKEN, idNamespace: 'retry' }, transforms: CHAIN },
  });
  let opened = await openKernel(ws.config);
  try {
    await ingestText(opened.k, 'beta', lines(100, 9));
    await opened.k.flush();
    process.env.HYPSINK_FAULT = 'export.afterShip';
    process.env.HYPSINK_FAULT_ACTION = 'throw';
    try {
      const failed = await opened.k.export('central2');
      assert.match(failed[0]!.partitions[0]!.error?.message ?? '', /injected failure at fault point export\.afterShip/);
    } finally {
      delete process.env.HYPSINK_FAULT;
      delete process.env.HYPSINK_FAULT_ACTION;
    }
    await opened.k.close();
    // A new process's chain, built again from the config.
    opened = await openKernel(ws.config);
    const unit = (await opened.k.status()).sinks.find((s) => s.name === 'central2')!.partitions[0]!.intent?.unit;
    assert.ok(unit, 'the stored unit is still open');
    // The receiver answers another body under a stored id with 409 (LLP 0027): the retry passes only with the same bytes.
    const [retry] = await opened.k.export('central2');
    assert.equal(retry!.partitions[0]!.error, null, 'the receiver took the re-sent unit as the one it stored');
    assert.equal(retry!.partitions[0]!.rows, 9);
    const ledger = (await readStored(recvDir)).ledger.filter((e) => e.id === unit);
    assert.equal(ledger.length, 1, 'stored once under its id');
    const stored = (await readStored(recvDir)).rows.events!.beta!;
    assert.deepEqual(stored.map((r) => Number(r.id)), Array.from({ length: 9 }, (_, i) => 100 + i), 'every row stored once');

    await opened.k.export('one');
    await opened.k.export('two');
    const a = await walkFiles(join(ws.dir, 'one'), '.hypsink-tmp');
    const b = await walkFiles(join(ws.dir, 'two'), '.hypsink-tmp');
    assert.equal(a.length, 1);
    assert.deepEqual(await fsp.readFile(a[0]!), await fsp.readFile(b[0]!), 'the same unit through the same chain is the same Parquet bytes');
  } finally {
    await opened.k.close();
  }
});

test('rows a transform refuses are not shipped, are counted as rejected, and the local dead letter keeps their seqs and reasons, never their values', { timeout: 60_000 }, async () => {
  const ws = await workspace(
    {
      archive: {
        writer: '@hypsink/format-parquet',
        destination: '@hypsink/local-fs',
        datasets: ['events'],
        config: { dir: 'exports' },
        transforms: [{ plugin: 'test-upper-transform', config: { column: 'msg' } }],
      },
    },
    { plugins: [join(FIXTURE_PLUGINS, 'upper-transform')] },
  );
  const { k, logs } = await openKernel(ws.config);
  try {
    const text = [1, 2, 3, 4, 5, 6].map((id) => JSON.stringify({ id, ts: 1_700_000_000_000 + id, msg: id % 3 === 0 ? 'bad' : `m${id}`, user: null, debug: null })).join('\n');
    await ingestText(k, 'gamma', `${text}\n`);
    await k.flush();
    const [r] = await k.export('archive');
    assert.equal(r!.partitions[0]!.rows, 6, 'the unit advanced over all six rows');
    const files = await readExports(join(ws.dir, 'exports'));
    assert.deepEqual(files.flatMap((f) => f.rows).map((x) => [x.id, x.msg]), [[1, 'M1'], [2, 'M2'], [4, 'M4'], [5, 'M5']]);
    const st = (await k.status()).sinks[0]!.partitions[0]!;
    assert.equal(st.rejectedRows, 2, 'status counts the refused rows');
    assert.equal(st.exportedRows, 6);
    const dead = await walkFiles(join(ws.dir, 'state', 'sinks', 'archive', 'rejected'));
    assert.equal(dead.length, 1, 'one dead-letter file for the unit');
    const rec = JSON.parse(await fsp.readFile(dead[0]!, 'utf8')) as { rows: { seq: string; reason: string }[]; transforms: string };
    assert.equal(rec.rows.length, 2);
    for (const row of rec.rows) {
      assert.match(row.seq, /^\d+$/);
      assert.equal(row.reason, 'transforms[0] (plugin "test-upper-transform"): value refused');
    }
    assert.ok(!(await fsp.readFile(dead[0]!, 'utf8')).includes('"bad"'), 'no value in the dead letter');
    assert.ok(logs.some((l) => l.rejected === 2 && String(l.msg).includes('refused 2 row(s)')), 'a warning says how many and where');
    // verify reads the files back: the unit holds the cache's rows less those its transforms refused.
    const v = await k.verify('archive');
    assert.equal(v.ok, true, JSON.stringify(v.sinks));
  } finally {
    await k.close();
  }
});

test('a changed chain is refused like a moved destination, until the operator accepts it', { timeout: 60_000 }, async () => {
  const sink = (transforms: unknown[]) => ({ archive: { writer: '@hypsink/format-parquet', destination: '@hypsink/local-fs', datasets: ['events'], config: { dir: 'exports' }, transforms } });
  const ws = await workspace(sink([{ drop: ['debug'] }]));
  let { k } = await openKernel(ws.config);
  try {
    await ingestText(k, 'delta', lines(1, 3));
    await k.flush();
    await k.export('archive');
    await k.close();

    // The same chain written otherwise (a comment, keys reordered) is the same chain.
    await ws.write(sink([{ '//': 'no debug output', drop: ['debug'] }]));
    ({ k } = await openKernel(ws.config));
    await ingestText(k, 'delta', lines(4, 1));
    await k.flush();
    assert.equal((await k.export('archive'))[0]!.partitions[0]!.rows, 1);
    await k.close();

    await ws.write(sink([{ drop: ['debug', 'user'] }]));
    ({ k } = await openKernel(ws.config));
    await ingestText(k, 'delta', lines(5, 2));
    await k.flush();
    const refused = (await k.export('archive'))[0]!.partitions[0]!;
    assert.equal(refused.rows, 0);
    assert.equal(refused.error?.code, 'HYPSINK_ERR_CONFIG');
    assert.match(
      refused.error?.message ?? '',
      /its watermarks were delivered with transforms \{"drop":\["debug"\]\}, default keys, but the config now says with transforms \{"drop":\["debug","user"\]\}, default keys; .*hypsink accept-destination archive/,
    );

    await k.acceptDestination('archive');
    const [r] = await k.export('archive');
    assert.equal(r!.partitions[0]!.rows, 2, 'accepted: the new chain delivers from here');
    const files = await readExports(join(ws.dir, 'exports'));
    const last = files.find((f) => f.rows.some((x) => x.id === 5))!;
    assert.deepEqual(last.columns, ['id', 'ts', 'msg']);
  } finally {
    await k.close();
  }
});

test('time keys and transforms together: the keys come from the rows as shipped; a chain that drops the timestamp column is refused at build', { timeout: 60_000 }, async () => {
  const sink = (transforms: unknown[]) => ({
    daily: { writer: '@hypsink/format-parquet', destination: '@hypsink/local-fs', datasets: ['events'], config: { dir: 'daily' }, keys: { time: 'day' }, transforms },
  });
  const ws = await workspace(sink([{ drop: ['debug'] }, { rename: { msg: 'message' } }]));
  let { k } = await openKernel(ws.config);
  try {
    // Two days: ids 1-3 on 2023-11-14, ids 4-6 a day later.
    const text = [1, 2, 3, 4, 5, 6].map((id) => JSON.stringify({ id, ts: Date.UTC(2023, 10, 14, 12) + (id > 3 ? 86_400_000 : 0) + id, msg: `m${id}`, user: null, debug: 'x' })).join('\n');
    await ingestText(k, 'eps', `${text}\n`);
    await k.flush();
    assert.equal((await k.export('daily'))[0]!.rows, 6);
    const files = await readExports(join(ws.dir, 'daily'));
    assert.deepEqual(
      files.map((f) => [f.rel.split('/')[2], f.columns.join(','), f.rows.map((r) => r.id).join(',')]),
      [
        ['dt=2023-11-14', 'id,ts,message,user', '1,2,3'],
        ['dt=2023-11-15', 'id,ts,message,user', '4,5,6'],
      ],
    );
    await k.close();
    await ws.write(sink([{ drop: ['ts'] }]));
    ({ k } = await openKernel(ws.config));
    await assert.rejects(k.export('daily'), (e: Error & { code?: string }) => {
      assert.equal(e.code, 'HYPSINK_ERR_CONFIG');
      assert.match(e.message, /sink "daily": keys\.time needs dataset "events"'s timestamp column "ts" in the rows it ships, and its transforms remove or rename it/);
      return true;
    });
  } finally {
    await k.close();
  }
});

test('a third-party request sink (loaded by path, reading unit.rows()) gets the rows as transformed: select, rename, redact, hash', { timeout: 60_000 }, async () => {
  const ws = await workspace(
    {
      thirdparty: {
        plugin: 'test-file-sink',
        datasets: ['events'],
        config: { out: 'received' },
        transforms: [{ select: ['id', 'msg', 'user'] }, { rename: { msg: 'message' } }, CHAIN[2], CHAIN[3]],
      },
    },
    { plugins: [join(FIXTURE_PLUGINS, 'file-sink')] },
  );
  const { k } = await openKernel(ws.config);
  try {
    await ingestText(k, 'eta', lines(1, 12));
    await k.flush();
    assert.equal((await k.export('thirdparty'))[0]!.rows, 12);
    const got = (await fsp.readFile(join(ws.dir, 'received', 'received.ndjson'), 'utf8'))
      .split('\n')
      .filter(Boolean)
      .flatMap((l) => (JSON.parse(l) as { rows: Json[] }).rows);
    assert.deepEqual(got, expected(1, 12), 'exactly the selected columns, renamed, redacted and hashed, in seq order');
  } finally {
    await k.close();
  }
});

test('all five built-ins in one chain (select, drop, rename, redact, hash) on S3 (s3rver, JSON Lines), the forward sink and Postgres', { timeout: 120_000 }, async () => {
  useS3rverCredentials();
  const s3 = await startS3Server({ buckets: ['lake'] });
  const pg = await testPg();
  const url = await pg.database('xform5');
  const five = [{ select: ['id', 'msg', 'user', 'debug'] }, { drop: ['debug'] }, { rename: { msg: 'message' } }, CHAIN[2], CHAIN[3]];
  try {
    const ws = await workspace({
      lake: {
        writer: '@hypsink/format-jsonl',
        destination: '@hypsink/s3',
        datasets: ['events'],
        config: { bucket: 'lake', prefix: 'hyp', region: 'us-east-1', endpoint: s3.endpoint, forcePathStyle: true },
        transforms: five,
      },
      central5: { plugin: '@hypsink/forward', datasets: ['events'], config: { url: receiver.url, token: TOKEN, idNamespace: 'five' }, transforms: five },
      warehouse: { plugin: '@hypsink/postgres', datasets: ['events'], config: { url }, transforms: five },
    });
    const { k } = await openKernel(ws.config);
    try {
      await ingestText(k, 'theta', lines(1, 15));
      await k.flush();
      for (const r of await k.export()) assert.equal(r.rows, 15, `${r.sink} exported every row`);
      const want = expected(1, 15);

      // Read back with the AWS SDK: every object under the prefix, as JSON Lines.
      const client = new S3Client({ endpoint: s3.endpoint, forcePathStyle: true, region: 'us-east-1' });
      const listed = await client.send(new ListObjectsV2Command({ Bucket: 'lake', Prefix: 'hyp/' }));
      const lakeRows: Json[] = [];
      for (const o of listed.Contents ?? []) {
        const body = await (await client.send(new GetObjectCommand({ Bucket: 'lake', Key: o.Key! }))).Body!.transformToString();
        lakeRows.push(...body.split('\n').filter(Boolean).map((l) => JSON.parse(l) as Json));
      }
      client.destroy();
      assert.deepEqual(lakeRows, want, 'S3: exactly the chain\'s columns, in their order');

      const stored = (await readStored(recvDir)).rows.events!.theta!;
      assert.deepEqual(stored.map((r) => ({ id: Number(r.id), message: r.message, user: r.user })), want);
      assert.deepEqual(Object.keys(stored[0]!).filter((c) => c !== 'source'), ['id', 'message', 'user']);

      const cols = (await pg.query("SELECT column_name FROM information_schema.columns WHERE table_name = 'events' ORDER BY ordinal_position", [], url)).rows.map((r) => r.column_name);
      assert.deepEqual(cols, ['source', 'id', 'message', 'user']);
      assert.deepEqual((await pg.query('SELECT id::int AS id, message, "user" FROM events ORDER BY id', [], url)).rows, want);
    } finally {
      await k.close();
    }
  } finally {
    await s3.stop();
  }
});
