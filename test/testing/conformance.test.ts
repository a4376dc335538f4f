/**
 * `hypsink/testing` (the conformance kit) over the example third-party sink,
 * over a deliberately broken copy of it, and over every built-in sink: the
 * kit must pass the sinks that keep the promise and fail the one that does
 * not, naming the case. The Postgres sink's destination is a database, not a
 * folder: each case's `sink` makes a fresh database on the test's PostgreSQL
 * and `read` finds it again by the case's folder.
 */
import assert from 'node:assert/strict';
import { promises as fsp } from 'node:fs';
import { basename, join } from 'node:path';
import { test } from 'node:test';
import { GetObjectCommand, ListObjectsV2Command, S3Client } from '@aws-sdk/client-s3';
import { tableFromIPC } from 'apache-arrow';
import * as pw from 'parquet-wasm';
import { conformance, ConformanceError, runConformance } from 'hypsink/testing';
import { readStored } from '../../fixtures/receiver/store.js';
import { startReceiver, type Receiver } from '../../fixtures/receiver/server.js';
import { useCredentials } from '../s3-e2e/helpers.js';
import { createLogger } from '../../kernel/log.js';
import { startS3Server } from '../support/s3server.js';
import { FIXTURE_PLUGINS, REPO } from '../support/kernel.js';
import { testPg } from '../support/pg.js';

const EXAMPLE = join(REPO, 'docs/examples/audit-sink');
/** A case's place in the kit's order. */
const order = (name: string) => conformance({ sink: () => ({}), read: async () => [] }).findIndex((c) => c.name === name);
const BROKEN = join(FIXTURE_PLUGINS, 'broken-audit-sink');

/** Every file under `dir` whose name ends with `ext`. */
async function filesUnder(dir: string, ext: string): Promise<string[]> {
  const out: string[] = [];
  for (const e of await fsp.readdir(dir, { withFileTypes: true, recursive: true })) {
    if (e.isFile() && e.name.endsWith(ext)) out.push(join(e.parentPath, e.name));
  }
  return out;
}

const jsonlRows = (text: string) => text.split('\n').filter(Boolean).map((l) => JSON.parse(l) as { id: unknown });
const parquetRows = (bytes: Uint8Array) => tableFromIPC(pw.readParquet(bytes).intoIPCStream()).toArray() as { id: unknown }[];

/** The audit sink's files: one JSONL file for the kit's one partition. */
const auditRows = async (dir: string) => jsonlRows(await fsp.readFile(join(dir, 'conformance/source=kit.jsonl'), 'utf8').catch(() => ''));

for (const c of conformance({ plugins: [EXAMPLE], sink: (dir) => ({ plugin: 'hypsink-audit-sink', config: { dir } }), read: auditRows })) {
  test(`the example sink: ${c.name}`, c.run);
}

test('a copy of the example that answers before its rows are durable fails the kit where a crash follows an advance or a ship, each case named', async () => {
  // What each failing case says: the kernel advanced past rows never written (the first unit's, crashed
  // while a later one shipped; or all ten, crashed once the partition's advances were written), the
  // rows of the two units acknowledged when the process died, a copy's rows skipped.
  const says: Record<string, RegExp> = {
    'a crash after a ship, before its watermark advance': /4 row\(s\) missing \(ids 1, 2, 3, 4\)/,
    'a crash right after a watermark advance': /10 row\(s\) missing \(ids 1, 2, 3, 4, 5, 6, 7, 8, …\)/,
    'a ship is durable when it resolves': /8 of those rows are not at the destination \(ids 1, 2, 3, 4, 5, 6, 7, 8\)/,
    // Killed in the third unit's ship, with the first unit's advance written when the third's intent was.
    'a crash at each moment inside a ship': /unit conformance\/source=kit:8:10, before its I\/O callback 3\) and a restart: 4 row\(s\) missing \(ids 1, 2, 3, 4\)/,
    'a copy of the cache with other rows under the same labels is refused': /4 of its rows are not at the destination \(ids 1005, 1006, 1007, 1008\): a silent loss/,
  };
  const failed: string[] = [];
  const passed: string[] = [];
  for (const c of conformance({ plugins: [BROKEN], sink: (dir) => ({ plugin: 'broken-audit-sink', config: { dir } }), read: auditRows })) {
    const e = await c.run().then(
      () => undefined,
      (e: unknown) => e,
    );
    if (e === undefined) {
      passed.push(c.name);
      continue;
    }
    assert.ok(e instanceof ConformanceError, `a ConformanceError, not ${String(e)}`);
    assert.equal(e.caseName, c.name);
    assert.ok(says[c.name], `an expected failure, not ${e.message}`);
    assert.match(e.message, new RegExp(`^conformance case "${c.name}": .*${says[c.name]!.source}`));
    failed.push(c.name);
  }
  // Killed before any advance (the replay case: at the next unit's intent), nothing kept was acknowledged for good.
  assert.deepEqual(failed, Object.keys(says).sort((a, b) => order(a) - order(b)));
  assert.deepEqual(
    passed,
    ['an export over several units', 'a tick with nothing new sends nothing', 'a lost acknowledgement, the unit retried in the same process', 'a recorded unit replayed after a crash before its ship', "a unit's id is the same in every process"],
    'without a crash past an advance, close() writes what it kept',
  );
  await assert.rejects(
    runConformance({ plugins: [BROKEN], sink: (dir) => ({ plugin: 'broken-audit-sink', config: { dir } }), read: auditRows }),
    (e: unknown) => e instanceof ConformanceError && e.caseName === 'a crash after a ship, before its watermark advance',
    'runConformance throws the first failing case',
  );
});

/**
 * The kit's newer cases, each over a copy of the example with one bug planted
 * that the first six cases pass: the case must fail it, naming what was lost
 * and how to fix it (the example itself passes every case, above).
 */
const PLANTED = [
  { plugin: 'buggy-early-ack', case: 'a ship is durable when it resolves', says: /ship resolved for 2 unit\(s\) \(8 rows; .*: 4 of those rows are not at the destination \(ids 5, 6, 7, 8\)\. A ship resolves only once/ },
  { plugin: 'buggy-ledger-first', case: 'a crash at each moment inside a ship', says: /after a kill inside a ship \(unit conformance\/source=kit:-:4, before its I\/O callback \d+\) and a restart: (4 row\(s\) missing \(ids 1, 2, 3, 4\)|reading back what the destination holds failed)/ },
  { plugin: 'buggy-impure-id', case: "a unit's id is the same in every process", says: /unitId gave ".*" for the range of unit ".*" \(\d+ unit\(s\) differ\): a unit's id must be a pure function/ },
  {
    plugin: 'buggy-ignores-digest',
    case: 'a copy of the cache with other rows under the same labels is refused',
    says: /its export succeeded, but 4 of its rows are not at the destination \(ids 1005, 1006, 1007, 1008\): a silent loss\. Record unit\.digest/,
  },
] as const;

for (const p of PLANTED) {
  test(`a copy of the example with a planted bug (${p.plugin}) fails "${p.case}"`, async () => {
    const c = conformance({ plugins: [join(FIXTURE_PLUGINS, p.plugin)], sink: (dir) => ({ plugin: p.plugin, config: { dir } }), read: auditRows }).find((c) => c.name === p.case);
    assert.ok(c, `the kit has a case "${p.case}"`);
    await assert.rejects(c.run(), (e: unknown) => {
      assert.ok(e instanceof ConformanceError, `a ConformanceError, not ${String(e)}`);
      assert.equal(e.caseName, p.case);
      assert.match(e.message, p.says);
      return true;
    });
  });
}

for (const writer of ['@hypsink/format-jsonl', '@hypsink/format-parquet'] as const) {
  for (const c of conformance({
    sink: (dir) => ({ writer, destination: '@hypsink/local-fs', config: { dir } }),
    read: async (dir) => {
      if (writer === '@hypsink/format-jsonl') return (await Promise.all((await filesUnder(dir, '.jsonl')).map(async (f) => jsonlRows(await fsp.readFile(f, 'utf8'))))).flat();
      return (await Promise.all((await filesUnder(dir, '.parquet')).map(async (f) => parquetRows(await fsp.readFile(f))))).flat();
    },
  })) {
    test(`local-fs with ${writer}: ${c.name}`, c.run);
  }
}

test('the forward sink, to the reference receiver: every case', async (t) => {
  const receivers = new Map<string, Receiver>();
  t.after(async () => {
    for (const r of receivers.values()) await r.close();
  });
  await runConformance({
    sink: async (dir) => {
      const r = await startReceiver({ port: 0, dataDir: dir, insecureNoAuth: true, log: createLogger('silent') });
      receivers.set(dir, r);
      return { plugin: '@hypsink/forward', config: { url: r.url } };
    },
    read: async (dir) => Object.values((await readStored(dir)).rows.conformance ?? {}).flat() as { id: unknown }[],
  });
});

test('the s3 sink with Parquet, to s3rver: every case', async (t) => {
  useCredentials();
  const s3 = await startS3Server({ buckets: ['kit'] });
  const client = new S3Client({ region: 'us-east-1', endpoint: s3.endpoint, forcePathStyle: true });
  t.after(async () => {
    client.destroy();
    await s3.stop();
  });
  await runConformance({
    // Each case its own prefix: its folder's name.
    sink: (dir) => ({
      writer: '@hypsink/format-parquet',
      destination: '@hypsink/s3',
      config: { bucket: 'kit', prefix: basename(join(dir, '..')), region: 'us-east-1', endpoint: s3.endpoint, forcePathStyle: true },
    }),
    read: async (dir) => {
      const listed = await client.send(new ListObjectsV2Command({ Bucket: 'kit', Prefix: `${basename(join(dir, '..'))}/` }));
      const rows = [];
      for (const o of listed.Contents ?? []) {
        const body = await (await client.send(new GetObjectCommand({ Bucket: 'kit', Key: o.Key! }))).Body!.transformToByteArray();
        rows.push(...parquetRows(body));
      }
      return rows;
    },
  });
});

test('the postgres sink, to a real PostgreSQL: every case', async (t) => {
  const pg = await testPg();
  t.after(() => pg.stop());
  const databases = new Map<string, string>();
  await runConformance({
    sink: async (dir) => {
      const url = await pg.database('kit');
      databases.set(dir, url);
      return { plugin: '@hypsink/postgres', config: { url } };
    },
    // Every row of the dataset's table (named after it), read with plain SQL, duplicates included.
    read: async (dir) => (await pg.query<{ id: string }>('SELECT id::text AS id FROM conformance', [], databases.get(dir))).rows,
  });
});
