/**
 * The bad-input matrix (issue 6, DESIGN §7): one table of kinds of bad input,
 * bad config, damaged state and failing destinations. Every kind asserts
 *   (a) a clear error: the CLI's exit code (2 bad input or config, 1 failure),
 *       the error code, and a message naming the file, line, sink or field; and
 *   (b) that no valid row is lost or duplicated: valid rows ingested alongside
 *       are exported and found in the destination exactly once (read back
 *       directly: Parquet decoded with parquet-wasm, S3 objects from s3rver, the
 *       receiver's ledger); for config errors, that nothing at all was written.
 *
 * The CLI runs through its own entry point (`main`) in this process, so exit
 * codes and messages are the real ones; child processes only where a second
 * process is the point (the lock holders) and for one `status --json` of the
 * real binary (hostile partition values crossing a real stdout). Services are
 * shared: one reference receiver (with a fault proxy in front), one s3rver
 * (with a fault proxy), one hung server. The full disk is a 64 KiB tmpfs
 * mounted for the case and unmounted after it (needs root; without mount(2)
 * the case is skipped, saying why: nothing else makes one folder run out of space).
 *
 * Kinds with a `kernelBug` note assert the correct behaviour and fail until the
 * named kernel defect is fixed; a failure of one prints its note.
 */
import assert from 'node:assert/strict';
import { promises as fsp, realpathSync } from 'node:fs';
import { join, relative } from 'node:path';
import { after, before, describe, type TestContext, test } from 'node:test';
import { CreateBucketCommand, S3Client } from '@aws-sdk/client-s3';
import { type Receiver, readStored, startReceiver } from '../../fixtures/receiver/server.js';
import type { StatusReport } from '../../kernel/runtime.js';
import { type FaultProxy, s3ErrorResponse, startFaultProxy } from '../support/fault-proxy.js';
import { runBin } from '../support/kernel.js';
import { S3RVER_ACCESS_KEY_ID, S3RVER_SECRET_ACCESS_KEY, type TestS3Server, startS3Server, useS3rverCredentials } from '../support/s3server.js';
import { tempDir } from '../support/tmp.js';
import {
  archiveSink,
  assertExactlyOnce,
  assertFails,
  assertUnchanged,
  BIN,
  centralSink,
  closedPort,
  config,
  EVENTS,
  fillDisk,
  freshIds,
  type HangServer,
  type Json,
  lakeSink,
  line,
  localDelivered,
  localFiles,
  mountTmpfs,
  partitionOf,
  receiverBatches,
  receiverDelivered,
  row,
  s3Delivered,
  snapshot,
  spawnChild,
  startHangServer,
  tempLeft,
  until,
  Workspace,
} from './bad-input/harness.js';

// The in-process CLI logs through pino to fd 2; the error it prints is what is asserted.
process.env.HYPSINK_LOG_LEVEL = 'silent';
useS3rverCredentials();

const TOKEN = 'bi-receiver-token-7Hq2';

interface Kind {
  readonly name: string;
  readonly run: (t: TestContext) => Promise<void>;
  /** A kernel defect (file:line) this case exposes; it fails until that is fixed. */
  readonly kernelBug?: string;
}

const KINDS: Kind[] = [];
const kind = (name: string, run: (t: TestContext) => Promise<void>, kernelBug?: string) => KINDS.push({ name, run, ...(kernelBug ? { kernelBug } : {}) });

/** Memoize an async setup shared by the kinds of one group. */
function shared<T>(make: () => Promise<T>): () => Promise<T> {
  let p: Promise<T> | undefined;
  return () => (p ??= make());
}

describe('bad-input matrix', () => {
  // Temp dirs live as long as the suite (tempDir registers their removal).
  const root = tempDir('hypsink-badinput-');
  let wsN = 0;
  /** A fresh workspace folder under the suite's temp dir. */
  const newWs = async (label: string) => {
    const dir = join(root, `${++wsN}-${label}`);
    await fsp.mkdir(dir, { recursive: true });
    return new Workspace(dir);
  };

  let receiver: Receiver;
  let recvDir: string;
  /** A fault proxy in front of the receiver (500s). */
  let recvProxy: FaultProxy;
  let hang: HangServer;
  let s3: TestS3Server;
  let s3Proxy: FaultProxy;
  let s3Client: S3Client;

  before(async () => {
    recvDir = join(root, 'receiver-data');
    receiver = await startReceiver({ port: 0, dataDir: recvDir, token: TOKEN });
    recvProxy = await startFaultProxy({ target: receiver.url });
    hang = await startHangServer();
    s3 = await startS3Server({ buckets: ['lake'] });
    s3Proxy = await startFaultProxy({ target: s3.endpoint });
    s3Client = new S3Client({
      region: 'us-east-1',
      endpoint: s3.endpoint,
      forcePathStyle: true,
      credentials: { accessKeyId: S3RVER_ACCESS_KEY_ID, secretAccessKey: S3RVER_SECRET_ACCESS_KEY },
    });
  });

  after(async () => {
    s3Client?.destroy();
    await s3Proxy?.stop();
    await s3?.stop();
    await hang?.stop();
    await recvProxy?.stop();
    await receiver?.close();
  });

  // ================================================================ bad input rows

  const input = shared(async () => {
    const ws = await newWs('input');
    const cfg = await ws.writeConfig(config({ archive: archiveSink() }));
    return { ws, cfg };
  });
  let inputN = 0;

  /** The last dead-letter record. */
  const lastDeadLetter = async (ws: Workspace): Promise<Json> => {
    const text = await fsp.readFile(ws.path('state/dead-letter/events.ndjson'), 'utf8');
    return JSON.parse(text.trimEnd().split('\n').pop()!) as Json;
  };

  /**
   * Three valid rows around one bad line (line 3) of a fresh source: exit 2
   * naming line 3 and the reason; the whole line in the dead letter with its
   * file, line and reason; the three valid rows exported exactly once.
   */
  const badLine = async (bad: (id: number) => string, ...reason: (string | RegExp)[]) => {
    const { ws, cfg } = await input();
    const source = `input-${++inputN}`;
    const [a, b, c, badId] = freshIds(4) as [number, number, number, number];
    const text = bad(badId);
    const r = await ws.ingest(cfg, source, [line(a), line(b), text, line(c)]);
    ws.valid.push(a, b, c);
    assertFails(r, 2, 'HYPSINK_ERR_INPUT', '1 row(s) of dataset "events" rejected', 'line 3: ', ...reason);
    assert.match(r.out, /ingested 3 row\(s\)/, 'the valid rows of the file were kept');
    const dl = await lastDeadLetter(ws);
    assert.equal(dl.line, 3, 'dead letter: line number');
    assert.equal(dl.raw, text, 'dead letter: the whole line, as sent');
    assert.equal(dl.file, r.file, 'dead letter: the input file');
    assert.equal(dl.source, source);
    for (const m of reason) {
      if (typeof m === 'string') assert.ok(String(dl.reason).includes(m), `dead letter reason names ${m}: ${String(dl.reason)}`);
      else assert.match(String(dl.reason), m);
    }
    await ws.exportOk(cfg);
    assertExactlyOnce(await localDelivered(ws.path('exports')), [a, b, c], 'local-fs', [badId]);
    const p = partitionOf(await ws.status(cfg), 'archive', source);
    assert.deepEqual([p.committedRows, p.exportedRows, p.pendingRows], [3, 3, 0], 'exactly the valid rows were committed and exported');
  };

  const ts = (id: number) => row(id).ts as string;

  kind('input: malformed NDJSON line', () => badLine((id) => `{"id":${id},"ts":"${ts(id)}","msg":"cut off`, 'malformed JSON'));
  kind('input: a JSON line that is not an object', () => badLine(() => '[1,2,3]', 'not a JSON object'));
  kind('input: string for INT64', () => badLine(() => JSON.stringify({ id: '12abc', ts: ts(1) }), 'field "id" must be an INT64'));
  kind('input: INT64 out of range', () => badLine(() => JSON.stringify({ id: '9223372036854775808', ts: ts(1) }), 'field "id" must be an INT64'));
  kind('input: fractional number for INT64', () => badLine(() => JSON.stringify({ id: 1.5, ts: ts(1) }), 'field "id" must be an integer'));
  kind('input: number for STRING', () => badLine((id) => JSON.stringify({ id, ts: ts(id), msg: 42 }), 'field "msg" must be a string'));
  kind('input: bad ISO timestamp', () => badLine((id) => JSON.stringify({ id, ts: '31/12/2026 10:00' }), 'field "ts" must be an ISO-8601 timestamp'));
  kind(
    'input: impossible calendar date (2026-02-30) is rejected, not shifted to March 2',
    () => badLine((id) => JSON.stringify({ id, ts: '2026-02-30T10:00:00Z' }), 'field "ts" must be an ISO-8601 timestamp'),
    'kernel/ingest/normalize.ts:42-44 (TIMESTAMP): Date.parse rolls 2026-02-30 over to 2026-03-02 and 2026-04-31 to 2026-05-01; the row is accepted with a different instant than it states',
  );
  kind('input: NaN-ish DOUBLE ("NaN" as a string)', () => badLine((id) => JSON.stringify({ id, ts: ts(id), dur: 'NaN' }), 'field "dur" must be a finite number'));
  kind('input: DOUBLE overflow (1e999 parses to Infinity)', () => badLine((id) => `{"id":${id},"ts":"${ts(id)}","dur":1e999}`, 'field "dur" must be a finite number'));
  kind('input: missing required field', () => badLine((id) => JSON.stringify({ id, msg: 'no ts' }), 'field "ts" is required'));
  kind('input: null in a required field', () => badLine((id) => JSON.stringify({ id: null, ts: ts(id) }), 'field "id" is required'));
  kind('input: oversized row (over maxRowBytes)', () => badLine((id) => JSON.stringify({ ...row(id), msg: 'x'.repeat(400) }), "over the dataset's maxRowBytes 300"));
  kind('input: unknown field', () => badLine((id) => JSON.stringify({ ...row(id), colour: 'red' }), 'field "colour" is not in the dataset schema'));
  kind('input: a _hyp_ field (cannot set its own seq)', () => badLine((id) => JSON.stringify({ ...row(id), _hyp_ingest_seq: '1' }), 'field "_hyp_ingest_seq"'));
  kind('input: a "source" field that contradicts --source', () => badLine((id) => JSON.stringify({ ...row(id), source: 'elsewhere' }), 'field "source"', '"elsewhere"'));

  kind('input: unknown dataset (nothing written)', async () => {
    const { ws, cfg } = await input();
    const file = ws.path('unknown-dataset.ndjson');
    await fsp.writeFile(file, `${line(freshIds(1)[0]!)}\n`);
    const before = await snapshot(ws.dir);
    const r = await ws.cli(cfg, 'ingest', 'nosuch', '--source', 'web', '--file', file);
    assertFails(r, 2, 'HYPSINK_ERR_INPUT', 'unknown dataset "nosuch"', 'configured: events');
    assertUnchanged(before, await snapshot(ws.dir), 'ingest into an unknown dataset');
  });

  kind('input: missing input file (nothing written)', async () => {
    const { ws, cfg } = await input();
    const file = ws.path('does-not-exist.ndjson');
    const before = await snapshot(ws.dir);
    const r = await ws.cli(cfg, 'ingest', 'events', '--source', 'web', '--file', file);
    assertFails(r, 2, 'HYPSINK_ERR_INPUT', `cannot read input file ${file}`, 'ENOENT');
    assertUnchanged(before, await snapshot(ws.dir), 'ingest of a missing file');
  });

  kind(
    'input: the rejection message names the input file, not only the line',
    async () => {
      const { ws, cfg } = await input();
      const [a, b] = freshIds(2) as [number, number];
      const r = await ws.ingest(cfg, `input-${++inputN}`, [line(a), '{oops', line(b)]);
      ws.valid.push(a, b);
      await ws.exportOk(cfg);
      assertExactlyOnce(await localDelivered(ws.path('exports')), [a, b], 'local-fs', []);
      assertFails(r, 2, 'HYPSINK_ERR_INPUT', 'line 2', r.file);
    },
    'kernel/ingest/ingest.ts:113-119 (rejectedError): the message names the line and the dead-letter file but not the input file (`label`, which only the dead-letter record keeps), so "line 2" is ambiguous when several files are ingested',
  );

  kind(
    'input: invalid UTF-8 in a line is rejected, not silently replaced by U+FFFD',
    async () => {
      const { ws, cfg } = await input();
      const source = `input-${++inputN}`;
      const [a, b, badId] = freshIds(3) as [number, number, number];
      const file = ws.path(`utf8-${source}.ndjson`);
      const bad = Buffer.concat([Buffer.from(`{"id":${badId},"ts":"${ts(badId)}","msg":"bad `), Buffer.from([0xff, 0xfe]), Buffer.from('"}')]);
      await fsp.writeFile(file, Buffer.concat([Buffer.from(`${line(a)}\n`), bad, Buffer.from(`\n${line(b)}\n`)]));
      const r = await ws.cli(cfg, 'ingest', 'events', '--source', source, '--file', file);
      ws.valid.push(a, b);
      await ws.exportOk(cfg);
      assertExactlyOnce(await localDelivered(ws.path('exports')), [a, b], 'local-fs: the altered row must not be exported', [badId]);
      assertFails(r, 2, 'HYPSINK_ERR_INPUT', 'line 2', /UTF-8/);
    },
    'kernel/io/lines.ts:10-14 (lineBatches): StringDecoder("utf8") turns invalid bytes into U+FFFD, so the row is accepted with a value it never had (exit 0, no dead letter)',
  );

  // ================================================================ hostile partition values

  /** [kind label, source value]; pairs that must not collide sit next to each other. */
  const HOSTILE: [string, string][] = [
    ['".." (parent folder)', '..'],
    ['"." (this folder)', '.'],
    ['"a/b" (a path separator)', 'a/b'],
    ['"a%2Fb" (the percent-encoding of a/b)', 'a%2Fb'],
    ['"../../escape" (a traversal)', '../../escape'],
    ['a NUL byte', 'a\u0000b'],
    ['300 characters', 'p'.repeat(300)],
    ['300 characters, differing from those only in the last', `${'p'.repeat(299)}q`],
    ['unicode (accents, CJK, emoji, RTL)', 'naïve-東京-🚀-שלום'],
    ['the empty string', ''],
    ['"%" (the empty string\'s own encoding)', '%'],
    ['a lone UTF-16 surrogate', '\uD800'],
    ['U+FFFD (what a lone surrogate becomes in UTF-8)', '\uFFFD'],
  ];

  const hostile = shared(async () => {
    const ws = await newWs('hostile');
    const cfg = await ws.writeConfig(config({ archive: archiveSink(), central: centralSink(receiver.url, TOKEN) }));
    const ids = new Map<string, number[]>();
    for (const [, source] of HOSTILE) ids.set(source, await ws.ingestValid(cfg, source, 3));
    const exp = await ws.cli(cfg, 'export', '--json');
    const report = JSON.parse(exp.out) as { sinks: { name: string; partitions: { source: string; error: string | null; rows: number }[] }[] };
    // status --json of the real binary: the values cross a real stdout (NUL, lone surrogates).
    const bin = await runBin(['status', '--json', '--config', cfg]);
    assert.equal(bin.code, 0, bin.stderr);
    const status = JSON.parse(bin.stdout) as StatusReport;
    const files = await localFiles(ws.path('exports'));
    return { ws, cfg, ids, exp, report, status, files };
  });

  const SAFE_SEGMENT = /^source=[A-Za-z0-9_%~-]+$/;

  for (const [label, source] of HOSTILE) {
    kind(`partition value: ${label}`, async () => {
      const { ws, ids, exp, report, status, files } = await hostile();
      const mine = ids.get(source)!;
      // Export: no error for this partition in either sink.
      for (const sink of ['archive', 'central']) {
        const p = report.sinks.find((s) => s.name === sink)?.partitions.filter((x) => x.source === source) ?? [];
        assert.equal(p.length, 1, `${sink}: one export report for ${JSON.stringify(source)}`);
        assert.equal(p[0]!.error, null, `${sink}: ${p[0]!.error} (${exp.err})`);
      }
      // The cache: its own partition folder, one safe segment under the cache root.
      const dsDir = join(ws.cacheRoot, 'datasets', 'events');
      const folders: string[] = [];
      for (const name of await fsp.readdir(dsDir)) {
        const meta = JSON.parse(await fsp.readFile(join(dsDir, name, 'partition.json'), 'utf8')) as { source: string };
        if (meta.source === source) folders.push(name);
      }
      assert.equal(folders.length, 1, 'exactly one cache partition holds the value');
      const folder = folders[0]!;
      assert.match(folder, SAFE_SEGMENT, 'the partition folder is one safe path segment');
      assert.ok(Buffer.byteLength(folder) <= 255, 'the folder name fits NAME_MAX');
      const real = realpathSync(join(dsDir, folder));
      assert.equal(relative(realpathSync(ws.cacheRoot), real).startsWith('..'), false, 'the partition stays under the cache root');
      assert.equal((await fsp.readdir(dsDir)).length, HOSTILE.length, 'one partition per distinct value, nothing else');
      // Nothing landed beside the cache, state and exports (a traversal would show up here).
      const top = (await fsp.readdir(ws.dir)).filter((n) => !/^input-\d+\.ndjson$/.test(n)).sort();
      assert.deepEqual(top, ['cache', 'exports', 'hypsink.config.json', 'state']);
      // local-fs: its rows exactly once, all under one safe key of their own.
      const found = files.flatMap((f) => f.ids.map((id) => ({ id, where: f.folder })));
      assertExactlyOnce(
        found.filter((d) => mine.includes(d.id)),
        mine,
        'local-fs',
      );
      const keys = new Set(found.filter((d) => mine.includes(d.id)).map((d) => d.where));
      assert.equal(keys.size, 1, 'one key prefix per partition');
      const key = [...keys][0]!;
      const [ds, seg, ...rest] = key.split('/');
      assert.equal(ds, 'events');
      assert.deepEqual(rest, [], 'the blob key is <dataset>/source=<segment>/<file>');
      assert.match(seg!, SAFE_SEGMENT, 'the export key segment is safe');
      assert.deepEqual(
        found.filter((d) => d.where === key && !mine.includes(d.id)),
        [],
        'no other partition shares the key',
      );
      // status --json: the source value round-trips exactly, for both sinks.
      for (const sink of ['archive', 'central']) {
        const p = partitionOf(status, sink, source);
        assert.deepEqual([p.pendingRows, p.exportedRows, p.committedRows], [0, 3, 3], `${sink}: counts`);
      }
      // The receiver: stored under the exact value, once, in a data file of its own.
      assertExactlyOnce(await receiverDelivered(recvDir, [source]), mine, 'receiver');
      const ledger = (await readStored(recvDir)).ledger;
      const myFiles = new Set(ledger.filter((e) => e.source === source).map((e) => e.file));
      assert.equal(myFiles.size, 1, 'one receiver data file per partition');
      const sharers = ledger.filter((e) => myFiles.has(e.file) && e.source !== source).map((e) => e.source);
      assert.deepEqual(sharers, [], 'no other partition shares the receiver data file');
      assert.match([...myFiles][0]!, /^events\/source=[A-Za-z0-9_%~-]+\.ndjson$/, 'a safe receiver file name');
    });
  }

  // ================================================================ damaged state


  /** The current data files of a partition, in manifest order. */
  const dataFiles = async (ws: Workspace, source: string): Promise<string[]> => {
    const dir = join(ws.cacheRoot, 'datasets/events', `source=${source}`);
    const cur = JSON.parse(await fsp.readFile(join(dir, 'cursor.json'), 'utf8')) as { generation: number };
    const m = JSON.parse(await fsp.readFile(join(dir, `table-${cur.generation}`, 'manifest.json'), 'utf8')) as { files: { name: string }[] };
    return m.files.map((f) => join(dir, `table-${cur.generation}`, f.name));
  };

  interface Damage {
    /** The file to damage, once `web` holds two data files (rows A exported, rows B pending). */
    readonly target: (ws: Workspace) => Promise<string>;
    readonly damage: (path: string) => Promise<void>;
    /** `status` must refuse too (it reads this file). */
    readonly statusFails: boolean;
    /** A flush into the partition must refuse (and keep the rows spooled). */
    readonly ingestFails: boolean;
  }

  /**
   * `web` gets rows A (exported) then B (pending, a second data file); `app`
   * gets rows on both sides too. The file is damaged: export fails with
   * HYPSINK_ERR_CORRUPT naming it (exit 1), `app` still exports, nothing of
   * `web` is exported twice or skipped, the file is left exactly as found;
   * once it is restored, the export completes exactly once.
   */
  const damaged = async (label: string, d: Damage) => {
    const ws = await newWs(label);
    const cfg = await ws.writeConfig(config({ archive: archiveSink() }));
    const a = await ws.ingestValid(cfg, 'web', 4);
    const c0 = await ws.ingestValid(cfg, 'app', 2);
    await ws.exportOk(cfg);
    const b = await ws.ingestValid(cfg, 'web', 3);
    const c1 = await ws.ingestValid(cfg, 'app', 2);
    const wmBefore = partitionOf(await ws.status(cfg), 'archive', 'web').watermark;
    assert.ok(wmBefore !== null);

    const path = await d.target(ws);
    const original = await fsp.readFile(path);
    await d.damage(path);
    const bad = await fsp.readFile(path);

    const r = await ws.cli(cfg, 'export');
    assertFails(r, 1, 'HYPSINK_ERR_CORRUPT', path);
    assertExactlyOnce(await localDelivered(ws.path('exports')), [...a, ...c0, ...c1], 'after the failed export (app still exported, web unchanged)');
    assert.deepEqual(await tempLeft(ws.path('exports')), [], 'no temp file left behind');

    const st = await ws.cli(cfg, 'status', '--json');
    if (d.statusFails) {
      assertFails(st, 1, 'HYPSINK_ERR_CORRUPT', path);
    } else {
      assert.equal(st.code, 0, st.err);
      const p = partitionOf(JSON.parse(st.out), 'archive', 'web');
      assert.equal(p.watermark, wmBefore, 'the watermark did not move');
      assert.ok(p.lastError?.includes(path), `status shows the error naming the file: ${p.lastError}`);
    }

    let dIds: number[] = [];
    if (d.ingestFails) {
      dIds = freshIds(2);
      const ri = await ws.ingest(cfg, 'web', dIds.map(line));
      assertFails(ri, 1, 'HYPSINK_ERR_CORRUPT', path);
      ws.valid.push(...dIds); // acknowledged into the spool: they must not be lost
    }
    assert.deepEqual(await fsp.readFile(path), bad, 'the damaged file is left exactly as found (no silent reset or rewrite)');

    await fsp.writeFile(path, original);
    await ws.exportOk(cfg);
    assertExactlyOnce(await localDelivered(ws.path('exports')), [...a, ...c0, ...b, ...c1, ...dIds], 'after restoring the file');
  };

  const truncate = async (p: string) => fsp.truncate(p, Math.floor((await fsp.stat(p)).size / 2));

  kind('damaged state: truncated Parquet data file', () =>
    damaged('parquet-truncated', { target: async (ws) => (await dataFiles(ws, 'web'))[1]!, damage: truncate, statusFails: false, ingestFails: false }),
  );
  kind('damaged state: garbage Parquet data file', () =>
    damaged('parquet-garbage', {
      target: async (ws) => (await dataFiles(ws, 'web'))[1]!,
      damage: async (p) => fsp.writeFile(p, Buffer.alloc((await fsp.stat(p)).size, 0x5a)),
      statusFails: false,
      ingestFails: false,
    }),
  );
  kind('damaged state: corrupt manifest', () =>
    damaged('manifest', {
      target: async (ws) => join((await dataFiles(ws, 'web'))[0]!, '..', 'manifest.json'),
      damage: truncate,
      statusFails: true,
      ingestFails: true,
    }),
  );
  kind('damaged state: corrupt cursor', () =>
    damaged('cursor', {
      target: async (ws) => join(ws.cacheRoot, 'datasets/events/source=web/cursor.json'),
      damage: async (p) => fsp.writeFile(p, '{"v":1,"generation":'),
      statusFails: true,
      ingestFails: true,
    }),
  );
  kind('damaged state: corrupt watermark', () =>
    damaged('watermark', {
      target: async (ws) => ws.path('state/sinks/archive/watermarks/events/source=web.json'),
      damage: async (p) => fsp.writeFile(p, 'garbage, not a watermark'),
      statusFails: true,
      ingestFails: false,
    }),
  );

  kind('damaged state: corrupt seq allocator (_hyp_ingest_seq.json)', async () => {
    const ws = await newWs('allocator');
    const cfg = await ws.writeConfig(config({ archive: archiveSink() }));
    const a = await ws.ingestValid(cfg, 'web', 3);
    await ws.exportOk(cfg);
    const path = join(ws.cacheRoot, '_hyp_ingest_seq.json');
    const original = await fsp.readFile(path);
    await fsp.writeFile(path, '{"v":1,"reservedThrough":');

    const b = freshIds(3);
    const ri = await ws.ingest(cfg, 'web', b.map(line));
    assertFails(ri, 1, 'HYPSINK_ERR_CORRUPT', `seq allocator file ${path}`);
    ws.valid.push(...b);
    const re = await ws.cli(cfg, 'export');
    assertFails(re, 1, 'HYPSINK_ERR_CORRUPT', path);
    assert.equal(await fsp.readFile(path, 'utf8'), '{"v":1,"reservedThrough":', 'never a silent restart from seq 1');
    assertExactlyOnce(await localDelivered(ws.path('exports')), a, 'nothing new exported');

    await fsp.writeFile(path, original);
    await ws.exportOk(cfg);
    const files = await localFiles(ws.path('exports'));
    assertExactlyOnce(
      files.flatMap((f) => f.ids.map((id) => ({ id, where: f.folder }))),
      [...a, ...b],
      'the spooled rows commit once the file is restored',
    );
    // The rows committed after the repair got new seqs above every seq already issued.
    const ranges = files.map((f) => /\.(\d+)-(\d+)\.parquet$/.exec(f.rel)!.slice(1).map(Number) as [number, number]).sort((x, y) => x[0] - y[0]);
    assert.equal(ranges.length, 2);
    assert.ok(ranges[1]![0] >= ranges[0]![1], `seqs never re-issued: ${JSON.stringify(ranges)}`);
  });

  // ================================================================ bad config

  const cfgGroup = shared(async () => {
    const ws = await newWs('config');
    const good = await ws.writeConfig(config({ archive: archiveSink() }));
    await ws.ingestValid(good, 'web', 3);
    await ws.exportOk(good);
    return { ws, good };
  });

  /**
   * Valid rows are pending; `export` with the bad config exits 2 naming the
   * problem and writes nothing at all (the whole workspace is compared); the
   * good config then exports every row exactly once.
   */
  const badConfig = async (bad: Json | string | ((ws: Workspace) => Json | string), exitCode: 'HYPSINK_ERR_CONFIG' | 'HYPSINK_ERR_PLUGIN', ...mentions: (string | RegExp | ((p: string) => string))[]) => {
    const { ws, good } = await cfgGroup();
    await ws.ingestValid(good, 'web', 2);
    const badPath = await ws.writeConfig(typeof bad === 'function' ? bad(ws) : bad, 'bad.config.json');
    const before = await snapshot(ws.dir);
    const r = await ws.cli(badPath, 'export');
    assertFails(r, 2, exitCode, ...mentions.map((m) => (typeof m === 'function' ? m(badPath) : m)));
    assertUnchanged(before, await snapshot(ws.dir), 'a config error');
    await fsp.rm(badPath);
    await ws.exportOk(good);
    assertExactlyOnce(await localDelivered(ws.path('exports')), ws.valid, 'the good config then exports everything once');
  };

  const withArchive = (patch: Json): Json => config({ archive: { ...archiveSink(), ...patch } });

  kind('config: unknown plugin (writer)', () =>
    badConfig(withArchive({ writer: '@hypsink/format-nope' }), 'HYPSINK_ERR_CONFIG', (p) => p, 'sink "archive"', 'writer', '"@hypsink/format-nope"'),
  );
  kind('config: unknown plugin (plugins list)', () =>
    badConfig({ ...config({ archive: archiveSink() }), plugins: ['./no-such-plugin'] }, 'HYPSINK_ERR_PLUGIN', 'unknown plugin "./no-such-plugin"', 'does not exist'),
  );
  kind('config: bad cron', () => badConfig(withArchive({ schedule: '61 * * * *' }), 'HYPSINK_ERR_CONFIG', (p) => p, 'sink "archive": schedule', '"61 * * * *"'));
  kind('config: cron with six fields', () =>
    badConfig(withArchive({ schedule: '0 */5 * * * *' }), 'HYPSINK_ERR_CONFIG', (p) => p, 'sink "archive": schedule', 'not a 5-field cron expression'),
  );
  kind('config: writer/destination mismatch (swapped)', () =>
    badConfig(withArchive({ writer: '@hypsink/local-fs', destination: '@hypsink/format-parquet' }), 'HYPSINK_ERR_CONFIG', (p) => p, 'sink "archive": writer', '"@hypsink/local-fs" is a destination, not an encoder'),
  );
  kind('config: a request sink plugin as a blob destination', () =>
    badConfig(withArchive({ destination: '@hypsink/forward' }), 'HYPSINK_ERR_CONFIG', (p) => p, 'sink "archive": destination', 'is a sink, not a destination', 'without "writer"'),
  );
  kind('config: a missing environment variable ($-brace reference)', () =>
    badConfig(
      // biome-ignore lint/suspicious/noTemplateCurlyInString: the config's own ${ENV} reference
      withArchive({ config: { dir: '${HYPSINK_BADINPUT_UNSET}/exports' } }),
      'HYPSINK_ERR_CONFIG',
      (p) => p,
      'sink "archive": config.dir',
      'environment variable HYPSINK_BADINPUT_UNSET is not set',
    ),
  );
  {
    // A trailing comma on line 5, before the "}" at column 68.
    const text = [
      '{',
      ' "cache": { "root": "cache" },',
      ' "state": { "dir": "state" },',
      ` "datasets": { "events": ${JSON.stringify(EVENTS)} },`,
      ' "sinks": { "archive": { "writer": "@hypsink/format-parquet", "x": 1, } }',
      '}',
      '',
    ].join('\n');
    const lines = text.split('\n');
    const col = lines[4]!.indexOf(', }') + 3;
    kind('config: invalid JSON (line and column)', () => badConfig(text, 'HYPSINK_ERR_CONFIG', (p) => p, 'not valid JSON', `at line 5, column ${col}`));
  }
  kind('config: a sink naming an unknown dataset', () =>
    badConfig(withArchive({ datasets: ['events', 'nosuch'] }), 'HYPSINK_ERR_CONFIG', (p) => p, 'sink "archive": datasets[1]: unknown dataset "nosuch"'),
  );
  kind('config: S3 sink without a bucket', () =>
    badConfig(
      config({ lake: { ...lakeSink(s3.endpoint, 'lake', 'x'), config: { region: 'us-east-1', endpoint: s3.endpoint, forcePathStyle: true } } }),
      'HYPSINK_ERR_CONFIG',
      'sink "lake": config.bucket: required',
    ),
  );
  kind('config: forward sink with a non-http url', () =>
    badConfig(config({ central: centralSink('ftp://127.0.0.1:1/', TOKEN) }), 'HYPSINK_ERR_CONFIG', 'sink "central": config.url: must be an http(s) URL'),
  );
  kind('config: local-fs sink without config.dir', () =>
    badConfig(withArchive({ config: {} }), 'HYPSINK_ERR_CONFIG', 'sink "archive": config.dir'),
  );
  kind(
    'config: an unknown plugin in a fresh folder writes nothing (not even empty cache folders)',
    async () => {
      const ws = await newWs('config-fresh');
      const cfg = await ws.writeConfig(withArchive({ writer: '@hypsink/format-nope' }));
      const before = await snapshot(ws.dir);
      const r = await ws.cli(cfg, 'export');
      assertFails(r, 2, 'HYPSINK_ERR_CONFIG', cfg, 'sink "archive": writer');
      assertUnchanged(before, await snapshot(ws.dir), 'a config error in a fresh folder');
    },
    'kernel/runtime.ts:60 (Hypsink.open): Cache.open, which creates <cache>/datasets and <cache>/spools (kernel/cache.ts:82-83), runs before plugins are loaded and sinks built (runtime.ts:70-71), so a config error there leaves a cache folder behind',
  );
  kind('config: --config names a file that does not exist', async () => {
    const { ws } = await cfgGroup();
    const missing = ws.path('nope.config.json');
    const before = await snapshot(ws.dir);
    const r = await ws.cli(missing, 'export');
    assertFails(r, 2, 'HYPSINK_ERR_CONFIG', `config file ${missing} does not exist`);
    assertUnchanged(before, await snapshot(ws.dir), 'a missing config file');
  });

  // ================================================================ failing destinations

  /** A new workspace with one sink `name`; returns its config path and ids of rows pending for `source`. */
  const destWs = async (label: string, sinks: Record<string, Json>, source: string) => {
    const ws = await newWs(label);
    const cfg = await ws.writeConfig(config(sinks));
    const ids = await ws.ingestValid(cfg, source, 4);
    return { ws, cfg, ids };
  };

  /** The watermark did not move and no row is counted exported. */
  const unmoved = async (ws: Workspace, cfg: string, sink: string, source: string) => {
    const p = partitionOf(await ws.status(cfg), sink, source);
    assert.equal(p.watermark, null, 'the watermark did not advance');
    assert.equal(p.exportedRows, 0);
    assert.equal(p.pendingRows, 4);
    assert.ok(p.lastError, 'status shows the last error');
    return p;
  };

  kind('destination: S3 answers 403', async () => {
    const { ws, cfg, ids } = await destWs('s3-403', { lake: lakeSink(s3Proxy.endpoint, 'lake', 'p403') }, 'web');
    s3Proxy.setRule((r) => (r.key.startsWith('p403/') ? s3ErrorResponse(403, 'AccessDenied', 'Access Denied') : undefined));
    try {
      const r = await ws.cli(cfg, 'export');
      assertFails(r, 1, 'HYPSINK_ERR_AUTH', 'sink "lake"', 's3://lake/p403/events/source=web/', 'HTTP 403', 'bucket "lake"');
      assert.deepEqual(await s3Delivered(s3Client, 'lake', 'p403'), [], 'nothing stored');
      await unmoved(ws, cfg, 'lake', 'web');
    } finally {
      s3Proxy.setRule(undefined);
    }
    await ws.exportOk(cfg);
    assertExactlyOnce(await s3Delivered(s3Client, 'lake', 'p403'), ids, 's3');
  });

  kind('destination: S3 bucket does not exist', async () => {
    const { ws, cfg, ids } = await destWs('s3-nobucket', { lake: lakeSink(s3.endpoint, 'bi-missing', 'pmiss') }, 'web');
    const r = await ws.cli(cfg, 'export');
    assertFails(r, 1, 'HYPSINK_ERR_DESTINATION', 'sink "lake"', 'bucket "bi-missing" does not exist', 's3://bi-missing/pmiss/');
    await unmoved(ws, cfg, 'lake', 'web');
    await s3Client.send(new CreateBucketCommand({ Bucket: 'bi-missing' }));
    await ws.exportOk(cfg);
    assertExactlyOnce(await s3Delivered(s3Client, 'bi-missing', 'pmiss'), ids, 's3');
  });

  kind('destination: receiver answers 401 (wrong token)', async () => {
    const src = 'auth-401';
    const { ws, cfg, ids } = await destWs('recv-401', { central: centralSink(receiver.url, 'not-the-token') }, src);
    const r = await ws.cli(cfg, 'export');
    assertFails(r, 1, 'HYPSINK_ERR_AUTH', 'sink "central"', 'HTTP 401', 'config.token');
    assert.doesNotMatch(r.err, /not-the-token/, 'the token never appears in the message');
    assert.deepEqual(await receiverDelivered(recvDir, [src]), []);
    await unmoved(ws, cfg, 'central', src);
    await ws.writeConfig(config({ central: centralSink(receiver.url, TOKEN) }));
    await ws.acceptDestination(cfg, 'central');
    await ws.exportOk(cfg);
    assertExactlyOnce(await receiverDelivered(recvDir, [src]), ids, 'receiver');
  });

  kind('destination: receiver answers 413 (max body smaller than any row)', async () => {
    const src = 'too-large-413';
    const small = await startReceiver({ port: 0, dataDir: join(root, 'receiver-413'), token: TOKEN, maxBodyBytes: 40 });
    try {
      const { ws, cfg, ids } = await destWs('recv-413', { central: centralSink(small.url, TOKEN) }, src);
      assert.ok(line(ids[0]!).length > 40, 'every row is larger than the body limit');
      const r = await ws.cli(cfg, 'export');
      assertFails(r, 1, 'HYPSINK_ERR_DESTINATION', 'sink "central"', 'HTTP 413', 'too large', `source=${src}`);
      assert.deepEqual(await receiverDelivered(join(root, 'receiver-413'), [src]), [], 'the small receiver stored nothing');
      await unmoved(ws, cfg, 'central', src);
      // The receiver is reconfigured (here: the one with the default limit) and the operator
      // says so (the sink's watermarks belong to a destination, LLP 0022): every row once.
      await ws.writeConfig(config({ central: centralSink(receiver.url, TOKEN) }));
      await ws.acceptDestination(cfg, 'central');
      await ws.exportOk(cfg);
      assertExactlyOnce(await receiverDelivered(recvDir, [src]), ids, 'receiver');
    } finally {
      await small.close();
    }
  });

  kind('destination: receiver answers 500 (retried, then respooled; watermark unchanged)', async () => {
    const src = 'fail-500';
    const { ws, cfg, ids } = await destWs('recv-500', { central: centralSink(recvProxy.endpoint, TOKEN) }, src);
    const mine = (h: Record<string, unknown>) => h['x-hyp-partition'] === `source=${src}`;
    recvProxy.setRule((r) =>
      mine(r.headers) ? { kind: 'respond', status: 500, headers: { 'content-type': 'application/json' }, body: '{"error":"disk on fire"}' } : undefined,
    );
    const seen = () => recvProxy.log.filter((e) => mine(e.req.headers)).map((e) => String(e.req.headers['x-hyp-batch-id']));
    try {
      const r = await ws.cli(cfg, 'export');
      assertFails(r, 1, 'HYPSINK_ERR_RETRYABLE', 'sink "central"', 'HTTP 500', 'disk on fire', 'after 2 tries', `source=${src}`);
      const first = seen();
      assert.equal(first.length, 2, 'retried in place: the configured 2 tries');
      assert.equal(new Set(first).size, 1, 'every try carried the same batch id');
      assert.ok(r.err.includes(first[0]!), 'the message names the batch id');
      const p = await unmoved(ws, cfg, 'central', src);
      assert.equal(p.intent?.unit, first[0], 'the unit stays recorded as the intent (respooled)');
      // The next tick re-sends the very same unit.
      assertFails(await ws.cli(cfg, 'export'), 1, 'HYPSINK_ERR_RETRYABLE', 'HTTP 500');
      assert.deepEqual(new Set(seen()), new Set(first), 'the respooled unit keeps its batch id');
      assert.deepEqual(await receiverDelivered(recvDir, [src]), []);
    } finally {
      recvProxy.setRule(undefined);
    }
    const id = seen()[0]!;
    await ws.exportOk(cfg);
    assertExactlyOnce(await receiverDelivered(recvDir, [src]), ids, 'receiver');
    assert.deepEqual(await receiverBatches(recvDir, src), [id], 'delivered once, under the id of the failed tries');
  });

  kind('destination: receiver hangs (accepts, never answers)', async () => {
    const src = 'hang';
    const { ws, cfg, ids } = await destWs('recv-hang', { central: centralSink(hang.url, TOKEN, { timeoutMs: 300 }) }, src);
    const before = hang.connections();
    const t0 = Date.now();
    const r = await ws.cli(cfg, 'export');
    const took = Date.now() - t0;
    assertFails(r, 1, 'HYPSINK_ERR_RETRYABLE', 'sink "central"', 'no answer within 300 ms', `${hang.url}/v1/ingest/events`);
    assert.ok(hang.connections() > before, 'the hung server was reached');
    assert.ok(took < 10_000, `bounded by the timeout, took ${took} ms`);
    await unmoved(ws, cfg, 'central', src);
    await ws.writeConfig(config({ central: centralSink(receiver.url, TOKEN) }));
    await ws.acceptDestination(cfg, 'central');
    await ws.exportOk(cfg);
    assertExactlyOnce(await receiverDelivered(recvDir, [src]), ids, 'receiver');
  });

  kind('destination: connection refused', async () => {
    const src = 'refused';
    const url = `http://127.0.0.1:${await closedPort()}`;
    const { ws, cfg, ids } = await destWs('recv-refused', { central: centralSink(url, TOKEN) }, src);
    const r = await ws.cli(cfg, 'export');
    assertFails(r, 1, 'HYPSINK_ERR_RETRYABLE', 'sink "central"', 'ECONNREFUSED', `${url}/v1/ingest/events`);
    await unmoved(ws, cfg, 'central', src);
    await ws.writeConfig(config({ central: centralSink(receiver.url, TOKEN) }));
    await ws.acceptDestination(cfg, 'central');
    await ws.exportOk(cfg);
    assertExactlyOnce(await receiverDelivered(recvDir, [src]), ids, 'receiver');
  });

  kind('destination: full disk (ENOSPC on a 64 KiB tmpfs)', async (t) => {
    const ws = await newWs('enospc');
    const mnt = ws.path('full');
    const m = mountTmpfs(mnt, '64k');
    if ('reason' in m) {
      // Fallback: without mount(2) (not root) there is no way to make one folder run out
      // of space; the case is skipped with the reason rather than faked.
      t.skip(`cannot mount a tmpfs: ${m.reason}`);
      return;
    }
    try {
      const exportDir = join(mnt, 'exports');
      const cfg = await ws.writeConfig(config({ archive: archiveSink(exportDir) }));
      const ids = await ws.ingestValid(cfg, 'web', 4);
      await fsp.mkdir(exportDir);
      await fillDisk(join(mnt, 'filler'));
      const r = await ws.cli(cfg, 'export');
      assertFails(r, 1, 'HYPSINK_ERR_RETRYABLE', 'sink "archive"', `cannot write ${exportDir}/events/source=web/`, 'ENOSPC');
      assert.deepEqual(await localDelivered(exportDir), [], 'no file committed');
      assert.deepEqual(await tempLeft(exportDir), [], 'no temp file left behind');
      await unmoved(ws, cfg, 'archive', 'web');
      await fsp.rm(join(mnt, 'filler'));
      await ws.exportOk(cfg);
      assertExactlyOnce(await localDelivered(exportDir), ids, 'local-fs after space was freed');
    } finally {
      m.unmount();
    }
  });

  // ================================================================ two processes

  kind('concurrency: two exporters on one sink instance', async () => {
    const src = 'two-exporters';
    const ws = await newWs('two-exporters');
    const good = await ws.writeConfig(config({ central: centralSink(receiver.url, TOKEN) }));
    const ids = await ws.ingestValid(good, src, 3);
    // The holder ships to the hung server with a long timeout: it holds the sink lock.
    const holdCfg = await ws.writeConfig(config({ central: centralSink(hang.url, TOKEN, { timeoutMs: 60_000, retry: { attempts: 1, baseMs: 1, maxMs: 1 } }) }), 'hold.config.json');
    const lockCfg = await ws.writeConfig({ ...config({ central: centralSink(receiver.url, TOKEN) }), driver: { lockWaitMs: 300 } }, 'second.config.json');
    const before = hang.connections();
    const holder = spawnChild([BIN, 'export', '--config', holdCfg]);
    try {
      await until(() => hang.connections() > before || holder.child.exitCode !== null, 'the holder to start shipping');
      assert.equal(holder.child.exitCode, null, `the holder is still shipping: ${holder.stderr()}`);
      const t0 = Date.now();
      const r = await ws.cli(lockCfg, 'export');
      const took = Date.now() - t0;
      assertFails(r, 1, 'HYPSINK_ERR_LOCKED', 'sink "central"', `pid ${holder.pid} `, ws.path('state/sinks/central'));
      assert.ok(took < 5_000, `a bounded wait, took ${took} ms`);
      assert.deepEqual(await receiverDelivered(recvDir, [src]), []);
    } finally {
      holder.child.kill('SIGKILL');
      await holder.exited;
    }
    await ws.acceptDestination(good, 'central');
    await ws.exportOk(good);
    assertExactlyOnce(await receiverDelivered(recvDir, [src]), ids, 'receiver');
  });

  kind('concurrency: two writers on one cache', async () => {
    const ws = await newWs('two-writers');
    const cfg = await ws.writeConfig({ ...config({ archive: archiveSink() }), cache: { root: 'cache', lockWaitMs: 300 } });
    const a = await ws.ingestValid(cfg, 'web', 2);
    const holder = spawnChild(['--import', 'tsx', 'test/support/cache-worker.ts', JSON.stringify({ root: ws.cacheRoot, steps: [{ op: 'holdLock', ms: 60_000 }] })]);
    let b: number[] = [];
    try {
      await holder.waitOut(/"ev":"locked"/);
      b = freshIds(3);
      const t0 = Date.now();
      const r = await ws.ingest(cfg, 'web', b.map(line));
      const took = Date.now() - t0;
      assertFails(r, 1, 'HYPSINK_ERR_LOCKED', `cache ${ws.cacheRoot} is locked by pid ${holder.pid} `);
      assert.ok(took < 5_000, `a bounded wait, took ${took} ms`);
      ws.valid.push(...b); // spooled: acknowledged, so they must not be lost
      assertFails(await ws.cli(cfg, 'flush'), 1, 'HYPSINK_ERR_LOCKED', `pid ${holder.pid} `);
    } finally {
      holder.child.kill('SIGKILL');
      await holder.exited;
    }
    await ws.exportOk(cfg);
    assertExactlyOnce(await localDelivered(ws.path('exports')), [...a, ...b], 'local-fs');
  });

  // ================================================================ the table

  for (const k of KINDS) {
    test(k.name, async (t) => {
      try {
        await k.run(t);
      } catch (e) {
        // Say which kernel defect a failing case exposes (the case asserts the correct behaviour).
        if (k.kernelBug && e instanceof Error) e.message = `[known kernel bug: ${k.kernelBug}]\n${e.message}`;
        throw e;
      }
    });
  }

  test('the matrix covers at least 30 kinds', () => {
    assert.ok(KINDS.length >= 30, `${KINDS.length} kinds`);
    assert.equal(new Set(KINDS.map((k) => k.name)).size, KINDS.length, 'kind names are unique');
  });
});
