/**
 * Issue 5, end to end: the `central` forward sink built from a real config file
 * by the real kernel, shipping to the reference receiver over loopback.
 * Delivery, backpressure, 413 re-planning, auth and refused connections.
 * @ref LLP 0008: the batch id; LLP 0009: the receiver's ledger
 */
import { SeqAllocator } from '../../kernel/flush/allocator.js';
import assert from 'node:assert/strict';
import { promises as fsp, readFileSync } from 'node:fs';
import { type AddressInfo, createServer, type Socket } from 'node:net';
import { join } from 'node:path';
import { test } from 'node:test';
import { readStored, startReceiver } from '../../fixtures/receiver/server.js';
import type { WatermarkAdvancedEvent } from '../../types/index.js';
import { deadPort } from '../forward/helpers.js';
import {
  assertExactlyOnce,
  batchIds,
  batchRange,
  e2eConfig,
  FAST,
  ids,
  ingest,
  ingestWith,
  logLines,
  openKernel,
  partitionStatus,
  runCli,
  TOKEN,
  withKernel,
  workspace,
} from './helpers.js';

/** Every file under a dir with its contents: to show a no-new tick wrote nothing. */
async function snapshot(dir: string): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  for (const e of await fsp.readdir(dir, { recursive: true, withFileTypes: true })) {
    if (!e.isFile()) continue;
    const p = join(e.parentPath, e.name);
    out[p] = await fsp.readFile(p, 'utf8');
  }
  return out;
}

test('1. two sources, unit.maxRows 7: every row once, one batch id per chunk, the watermark advancing per chunk; a second export sends nothing', async () => {
  const ws = await workspace('deliver');
  const r = await startReceiver({ port: 0, dataDir: ws.recv, token: TOKEN });
  try {
    // The sink entry of the issue, verbatim but for the receiver's ephemeral URL, plus small units.
    const text = `{ "cache": { "root": "cache" }, "state": { "dir": "state" },
  "datasets": { "events": { "columns": [ { "name": "id", "type": "INT64", "nullable": false }, { "name": "ts", "type": "TIMESTAMP", "nullable": false }, { "name": "msg", "type": "STRING", "nullable": true } ], "timestampColumn": "ts" } },
  "sinks": { "central": { "plugin": "@hypsink/forward", "datasets": ["events"], "schedule": "* * * * *", "unit": { "maxRows": 7 }, "config": { "url": "${r.url}", "token": "\${HYPSINK_TOKEN}" } } } }`;
    await fsp.writeFile(ws.configPath, text);
    const { k, logs } = await openKernel(ws.configPath);
    try {
      const advanced: (WatermarkAdvancedEvent & { onDisk: string | null })[] = [];
      const central = await k.sink('central');
      k.hooks.watermarkAdvanced.tap('e2e', (e) => {
        // Fired right after the durable write: the record on disk already says `to`.
        const rec = JSON.parse(readFileSync(central.watermarks.path(e.partition), 'utf8')) as { continuation: { seq: string } | null };
        advanced.push({ ...e, onDisk: rec.continuation?.seq ?? null });
      });
      await ingest(k, 'alpha', 1, 20);
      await ingest(k, 'beta', 101, 16);
      await ingest(k, 'alpha', 21, 3); // a second flush into alpha: its units span two data files

      const [rep] = await k.export('central');
      assert.ok(rep);
      assert.equal(rep.failed, 0, JSON.stringify(rep.partitions.map((p) => p.error?.message)));
      assert.equal(rep.rows, 39);
      const st = await assertExactlyOnce(ws.recv, { alpha: ids(1, 23), beta: ids(101, 16) });

      // Several chunks per partition, each ≤ 7 rows under its own batch id, chained by seq range.
      const bySource = (s: string) => st.ledger.filter((e) => e.source === s);
      assert.equal(bySource('alpha').length, 4); // 23 rows / 7
      assert.equal(bySource('beta').length, 3); // 16 rows / 7
      assert.equal(rep.units, 7);
      for (const s of ['alpha', 'beta']) {
        let prev: number | null = null;
        for (const e of bySource(s)) {
          assert.ok(e.rows >= 1 && e.rows <= 7, `batch ${e.id} has ${e.rows} rows`);
          const { since, until } = batchRange(e.id);
          assert.equal(since, prev, `batch ${e.id} starts where the previous one ended`);
          prev = until;
        }
      }
      // Cut in seq order: the third alpha chunk spans both of alpha's flushes.
      assert.deepEqual(batchIds(st, bySource('alpha')[2]!.id), ids(15, 7));
      assert.deepEqual(batchIds(st, bySource('alpha')[3]!.id), [22, 23]);

      // One watermark advance per chunk, in order, each durable when announced, each naming its batch.
      for (const s of ['alpha', 'beta']) {
        const evs = advanced.filter((e) => e.partition.source === s);
        assert.deepEqual(
          evs.map((e) => e.unit),
          bySource(s).map((e) => e.id),
          `${s}: one advance per shipped batch, in order`,
        );
        for (const e of evs) {
          // One write may carry several advances: the watermark on disk is at or past this one.
          assert.ok(e.onDisk !== null && BigInt(e.onDisk) >= BigInt(e.to.seq), `the advance to ${e.to.seq} was durable when announced (disk: ${e.onDisk})`);
          assert.equal(String(batchRange(e.unit).until), e.to.seq);
          assert.equal(e.from ? Number(e.from.seq) : null, batchRange(e.unit).since);
        }
      }
      const status = await k.status();
      for (const s of ['alpha', 'beta']) {
        const p = partitionStatus(status, s);
        assert.equal(p.watermark, p.highWater);
        assert.equal(p.pendingRows, 0);
        assert.equal(p.intent, null);
        assert.equal(p.lastError, null);
      }
      assert.equal(partitionStatus(status, 'alpha').exportedRows, 23);
      assert.equal(partitionStatus(status, 'beta').exportedRows, 16);
      assert.ok(logs.some((l) => l.msg === 'batch delivered'));

      // No new rows: no request, no state write.
      const before = r.stats();
      const state = await snapshot(join(ws.dir, 'state'));
      const [again] = await k.export('central');
      assert.equal(again?.rows, 0);
      assert.equal(again?.units, 0);
      assert.equal(again?.bytes, 0);
      assert.equal(r.stats().requests, before.requests, 'a tick with no new rows sends nothing');
      assert.deepEqual(await snapshot(join(ws.dir, 'state')), state, 'a tick with no new rows writes nothing');

      // New rows: only they go, in a new batch.
      await ingest(k, 'beta', 117, 2);
      const [third] = await k.export('central');
      assert.equal(third?.rows, 2);
      assert.equal(r.stats().requests, before.requests + 1);
      await assertExactlyOnce(ws.recv, { alpha: ids(1, 23), beta: ids(101, 18) });
    } finally {
      await k.close();
    }
  } finally {
    await r.close();
    await ws.cleanup();
  }
});

test('2. 429 with Retry-After: 1 on the first requests is ridden out in place, without duplicates', async () => {
  const ws = await workspace('throttle');
  const r = await startReceiver({ port: 0, dataDir: ws.recv, token: TOKEN, chaos: { throttleFirst: { count: 3, retryAfter: '1' } } });
  try {
    await ws.writeConfig(e2eConfig(r.url, { unit: { maxRows: 7 } }));
    const { k, logs } = await openKernel(ws.configPath);
    try {
      await ingest(k, 'alpha', 1, 10);
      await ingest(k, 'beta', 101, 10);
      const t0 = Date.now();
      const [rep] = await k.export('central');
      const took = Date.now() - t0;
      assert.equal(rep?.failed, 0, JSON.stringify(rep?.partitions.map((p) => p.error?.message)));
      assert.equal(rep?.rows, 20);
      const s = r.stats();
      assert.equal(s.byStatus['429'], 3, 'the throttled requests');
      assert.equal(s.duplicates, 0, 'nothing was stored before its 200');
      assert.equal(s.batchesStored, 4);
      const waits = logs.filter((l) => l.msg === 'receiver busy; waiting before re-sending the same batch');
      assert.equal(waits.length, 3);
      for (const w of waits) {
        assert.equal(w.waitMs, 1000, 'Retry-After: 1 is honoured');
        assert.equal(w.from, 'retry-after');
      }
      assert.ok(took >= 1000, `waited for Retry-After (${took} ms)`);
      const st = await assertExactlyOnce(ws.recv, { alpha: ids(1, 10), beta: ids(101, 10) });
      assert.equal(st.ledger.length, 4);
    } finally {
      await k.close();
    }
  } finally {
    await r.close();
    await ws.cleanup();
  }
});

test('6a. 413: the unit is re-planned half as big and every row still arrives once', async () => {
  const ws = await workspace('413-fits');
  // 8 rows of this dataset are ~420 bytes of NDJSON, 4 rows ~210: 8 do not fit, 4 do.
  const r = await startReceiver({ port: 0, dataDir: ws.recv, token: TOKEN, maxBodyBytes: 300 });
  try {
    await ws.writeConfig(e2eConfig(r.url, { unit: { maxRows: 8 } }));
    await withKernel(ws.configPath, async ({ k }) => {
      await ingest(k, 'alpha', 1, 20);
      const [rep] = await k.export('central');
      assert.equal(rep?.failed, 0, JSON.stringify(rep?.partitions.map((p) => p.error?.message)));
      assert.equal(rep?.rows, 20);
      assert.ok((r.stats().byStatus['413'] ?? 0) >= 1, 'the receiver refused a unit as too large');
      const st = await assertExactlyOnce(ws.recv, { alpha: ids(1, 20) });
      for (const e of st.ledger) {
        assert.ok(e.rows <= 4, `batch ${e.id} (${e.rows} rows) is a half unit`);
        const { since, until } = batchRange(e.id);
        assert.ok(until - (since ?? 0) <= 4, `batch ${e.id} covers at most 4 seqs`);
      }
      const p = partitionStatus(await k.status(), 'alpha');
      assert.equal(p.pendingRows, 0);
      assert.equal(p.intent, null);
      assert.equal(p.lastError, null);
    });
  } finally {
    await r.close();
    await ws.cleanup();
  }
});

test('6b. 413 even at half size: the partition fails, status shows the receiver\'s message, nothing advances', async () => {
  const ws = await workspace('413-fails');
  const r = await startReceiver({ port: 0, dataDir: ws.recv, token: TOKEN, maxBodyBytes: 100 });
  try {
    await ws.writeConfig(e2eConfig(r.url, { unit: { maxRows: 8 } }));
    await withKernel(ws.configPath, async ({ k }) => {
      await ingest(k, 'alpha', 1, 8);
      const [rep] = await k.export('central');
      const err = rep?.partitions[0]?.error;
      assert.ok(err, 'the partition failed');
      assert.equal(err.code, 'HYPSINK_ERR_DESTINATION');
      assert.equal(r.stats().byStatus['413'], 2, 'sent whole, then once at half size');
      const p = partitionStatus(await k.status(), 'alpha');
      assert.ok(p.lastError, 'status shows the last error');
      assert.match(p.lastError, /^HYPSINK_ERR_DESTINATION: /);
      assert.match(p.lastError, /HTTP 413/);
      assert.match(p.lastError, /body of \d+ bytes exceeds the limit of 100/, 'the receiver\'s own message');
      assert.equal(p.watermark, null);
      assert.equal(p.exportedRows, 0);
      assert.equal(p.pendingRows, 8);
      assert.equal((await readStored(ws.recv)).ledger.length, 0);
    });
  } finally {
    await r.close();
    await ws.cleanup();
  }
});

test('6c. 413 on a unit smaller than unit.maxRows whose seqs are not consecutive: the half is half the rows, and it fits', async () => {
  const ws = await workspace('413-sparse');
  // 6 rows are ~310 bytes of NDJSON, 3 rows ~155: the whole unit does not fit, its half does.
  const r = await startReceiver({ port: 0, dataDir: ws.recv, token: TOKEN, maxBodyBytes: 200 });
  try {
    // The usual bound (5000 rows by default) is far above the rows pending, so the unit is cut by the data.
    await ws.writeConfig(e2eConfig(r.url, { unit: { maxRows: 100 } }));
    await withKernel(ws.configPath, async ({ k }) => {
      // Three ingests with another writer reserving seqs between them, as other `hypsink ingest`
      // runs would: each flush then stamps seqs from a block of its own (LLP 0016).
      const otherWriter = () => new SeqAllocator(k.cache.root, 1024).allocate(1);
      await ingest(k, 'alpha', 1, 2);
      await otherWriter();
      await ingest(k, 'alpha', 3, 2);
      await otherWriter();
      await ingest(k, 'alpha', 5, 2);
      const hw = Number(partitionStatus(await k.status(), 'alpha').highWater);
      assert.ok(hw >= 2 * 6, `precondition: the 6 rows span ${hw} seqs, more than twice their count`);

      const first = await k.export('central');
      const again = await k.export('central');
      const errors = [...first, ...again].flatMap((t) => t.partitions.map((p) => p.error?.message)).filter(Boolean);
      assert.ok((r.stats().byStatus['413'] ?? 0) >= 1, 'the whole unit was refused');
      assert.deepEqual(errors, [], 'the half fits: no tick should fail');
      const st = await assertExactlyOnce(ws.recv, { alpha: ids(1, 6) });
      for (const e of st.ledger) assert.ok(e.rows <= 3, `batch ${e.id} (${e.rows} rows) is at most half the refused unit`);
    });
  } finally {
    await r.close();
    await ws.cleanup();
  }
});

test('8b. a POST that may have reached the receiver, then refused connections: the unit stays recorded (it may be stored)', async () => {
  const ws = await workspace('reached');
  // Takes the first connection and never answers, then listens no more: the first POST may
  // have been stored for all the client knows; the retry is refused before a connection.
  const held: Socket[] = [];
  const trap = createServer((sock) => {
    held.push(sock);
    sock.resume();
    trap.close();
  });
  await new Promise<void>((r) => trap.listen(0, '127.0.0.1', r));
  const { port } = trap.address() as AddressInfo;
  await ws.writeConfig(e2eConfig(`http://127.0.0.1:${port}`, { unit: { maxRows: 20 }, forward: { ...FAST, timeoutMs: 300, retry: { attempts: 3, baseMs: 20, maxMs: 40 } } }));
  const { k } = await openKernel(ws.configPath);
  try {
    await ingest(k, 'alpha', 1, 4);
    const [rep] = await k.export('central');
    assert.equal(rep?.failed, 1);
    assert.match(rep?.partitions[0]?.error?.message ?? '', /ECONNREFUSED/, 'the last try was refused');
    const p = partitionStatus(await k.status(), 'alpha');
    assert.ok(p.intent, 'the unit stays recorded: its first POST may have been stored');
    assert.equal(p.watermark, null);
  } finally {
    for (const sock of held) sock.destroy();
    await k.close();
    await ws.cleanup();
  }
});

test('7. 401: HYPSINK_ERR_AUTH in status lastError; the token never appears in the CLI\'s output', async () => {
  const ws = await workspace('auth');
  const WRONG = 'wrong-client-token-Vb83Hq';
  const r = await startReceiver({ port: 0, dataDir: ws.recv, token: TOKEN });
  try {
    await ws.writeConfig(e2eConfig(r.url, { unit: { maxRows: 7 } }));
    await ingestWith(ws.configPath, { alpha: [1, 5] });
    // Debug logging: every line the CLI can write is written.
    const env = { HYPSINK_TOKEN: WRONG, HYPSINK_LOG_LEVEL: 'debug' };
    const exp = await runCli(['export', '--config', ws.configPath, '--json'], env);
    const [table, status, statusTable] = await Promise.all([
      runCli(['export', '--config', ws.configPath], env),
      runCli(['status', '--config', ws.configPath, '--json'], env),
      runCli(['status', '--config', ws.configPath], env),
    ]);

    assert.equal(exp.code, 1, exp.stderr);
    assert.match(exp.stderr, /hypsink: HYPSINK_ERR_AUTH: sink "central": the receiver rejected the token \(HTTP 401\)/);
    const json = JSON.parse(exp.stdout) as { sinks: { partitions: { error: string | null }[] }[] };
    assert.match(json.sinks[0]!.partitions[0]!.error ?? '', /^HYPSINK_ERR_AUTH: /);
    assert.equal(table.code, 1);
    assert.equal(status.code, 0, status.stderr);
    const p = JSON.parse(status.stdout).sinks[0].partitions[0] as { lastError: string; watermark: string | null };
    assert.match(p.lastError, /^HYPSINK_ERR_AUTH: /);
    assert.equal(p.watermark, null);
    assert.match(statusTable.stdout, /HYPSINK_ERR_AUTH/);
    assert.ok((r.stats().byStatus['401'] ?? 0) >= 2);

    for (const [name, out] of Object.entries({ exp, table, status, statusTable })) {
      assert.ok(!out.stdout.includes(WRONG), `${name}: the token is on stdout`);
      assert.ok(!out.stderr.includes(WRONG), `${name}: the token is on stderr`);
    }
    assert.ok(logLines(exp.stderr).length > 0, 'the export did log (so the check above looked at something)');
    // Nor in the state the status reads from.
    const state = await snapshot(join(ws.dir, 'state'));
    for (const [file, text] of Object.entries(state)) assert.ok(!text.includes(WRONG), `the token is in ${file}`);
    assert.equal((await readStored(ws.recv)).rowCount, 0);
  } finally {
    await r.close();
    await ws.cleanup();
  }
});

test('8. connection refused: a retryable error, the watermark unchanged; once a receiver listens, every row once', async () => {
  const ws = await workspace('refused');
  const port = await deadPort();
  await ws.writeConfig(e2eConfig(`http://127.0.0.1:${port}`, { unit: { maxRows: 7 }, forward: FAST }));
  const { k } = await openKernel(ws.configPath);
  try {
    await ingest(k, 'alpha', 1, 10);
    await ingest(k, 'beta', 101, 3);
    const [rep] = await k.export('central');
    assert.equal(rep?.failed, 2);
    for (const part of rep?.partitions ?? []) {
      assert.equal(part.error?.code, 'HYPSINK_ERR_RETRYABLE');
      assert.equal(part.error?.retryable, true);
      assert.match(part.error?.message ?? '', /ECONNREFUSED/);
    }
    const before = await k.status();
    for (const s of ['alpha', 'beta']) {
      const p = partitionStatus(before, s);
      assert.equal(p.watermark, null, 'a refused connection never advances the watermark');
      assert.equal(p.exportedRows, 0);
      // Every POST was refused before a connection: nothing of the unit left, so it is withdrawn (LLP 0070).
      assert.equal(p.intent, null, 'a unit nothing of which was sent is not kept recorded');
      assert.match(p.lastError ?? '', /^HYPSINK_ERR_RETRYABLE: .*ECONNREFUSED/);
    }

    const r = await startReceiver({ port, dataDir: ws.recv, token: TOKEN });
    try {
      const [ok] = await k.export('central');
      assert.equal(ok?.failed, 0);
      assert.equal(ok?.rows, 13);
      const st = await assertExactlyOnce(ws.recv, { alpha: ids(1, 10), beta: ids(101, 3) });
      assert.ok(st.ledger.length > 0);
      const after = await k.status();
      for (const s of ['alpha', 'beta']) {
        const p = partitionStatus(after, s);
        assert.equal(p.lastError, null);
        assert.equal(p.pendingRows, 0);
      }
      const n = r.stats().requests;
      await k.export('central');
      assert.equal(r.stats().requests, n);
    } finally {
      await r.close();
    }
  } finally {
    await k.close();
    await ws.cleanup();
  }
});
