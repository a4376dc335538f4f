import assert from 'node:assert/strict';
import { appendFile, readFile, stat } from 'node:fs/promises';
import * as path from 'node:path';
import { test } from 'node:test';
import { LEDGER_FILE, readStored, startReceiver, storedRows } from '../../fixtures/receiver/server.js';
import { ingest, ndjson, spawnReceiver, tempDir } from './helpers.js';

test('a restart keeps the ledger: a duplicate after restart is still a duplicate', async () => {
  const { dir, cleanup } = await tempDir('rcv-restart');
  try {
    const a = await startReceiver({ port: 0, dataDir: dir, insecureNoAuth: true });
    assert.deepEqual((await ingest(a.url, { id: 'r-1', body: ndjson(4) })).json, { stored: 4 });
    await a.close();
    const b = await startReceiver({ port: 0, dataDir: dir, insecureNoAuth: true });
    try {
      assert.equal(b.stats().ledgerSize, 1);
      assert.deepEqual((await ingest(b.url, { id: 'r-1', body: ndjson(4) })).json, { duplicate: true });
      assert.deepEqual((await ingest(b.url, { id: 'r-2', body: ndjson(1, 4) })).json, { stored: 1 });
    } finally {
      await b.close();
    }
    assert.deepEqual(
      storedRows(await readStored(dir), 'activity', 'src').map((r) => r.n),
      [0, 1, 2, 3, 4],
    );
  } finally {
    await cleanup();
  }
});

test('startup drops a torn ledger line and the data tail it would have covered', async () => {
  const { dir, cleanup } = await tempDir('rcv-torn');
  try {
    const a = await startReceiver({ port: 0, dataDir: dir, insecureNoAuth: true });
    await ingest(a.url, { id: 't-1', body: ndjson(2) });
    await a.close();
    const stored = await readStored(dir);
    const file = path.join(dir, stored.ledger[0]!.file);
    // A crash mid-way through the second batch's ledger write.
    await appendFile(file, ndjson(3, 2));
    await appendFile(path.join(dir, LEDGER_FILE), '{"id":"t-2","dataset":"activ');
    assert.equal((await readStored(dir)).unledgeredBytes, Buffer.byteLength(ndjson(3, 2)));
    const b = await startReceiver({ port: 0, dataDir: dir, insecureNoAuth: true });
    try {
      assert.equal(b.stats().recovery.tornLedgerTail, true);
      assert.equal(b.stats().recovery.truncatedBytes, Buffer.byteLength(ndjson(3, 2)));
      assert.deepEqual((await ingest(b.url, { id: 't-2', body: ndjson(3, 2) })).json, { stored: 3 });
    } finally {
      await b.close();
    }
    const after = await readStored(dir);
    assert.deepEqual(
      storedRows(after, 'activity', 'src').map((r) => r.n),
      [0, 1, 2, 3, 4],
    );
    assert.equal(after.unledgeredBytes, 0);
    assert.equal((await readFile(file, 'utf8')).split('\n').length - 1, 5);
  } finally {
    await cleanup();
  }
});

test('a corrupt ledger line in the middle refuses to start, naming the file and line', async () => {
  const { dir, cleanup } = await tempDir('rcv-corrupt');
  try {
    await appendFile(path.join(dir, LEDGER_FILE), 'garbage\n');
    await assert.rejects(startReceiver({ port: 0, dataDir: dir, insecureNoAuth: true }), (e: Error & { code?: string }) => {
      assert.equal(e.code, 'HYPSINK_ERR_CORRUPT');
      assert.match(e.message, /_ledger\.ndjson: line 1 is not JSON/);
      return true;
    });
  } finally {
    await cleanup();
  }
});

test('crash between the data append and the ledger append: the retry stores the rows exactly once', async () => {
  const { dir, cleanup } = await tempDir('rcv-crash-data');
  try {
    const a = await spawnReceiver(['--data', dir], { HYPSINK_FAULT: 'receiver.afterData' });
    await assert.rejects(ingest(a.url, { id: 'c-1', body: ndjson(5) }), /socket hang up|ECONNRESET/);
    assert.equal((await a.exited).signal, 'SIGKILL');
    const torn = await readStored(dir);
    assert.equal(torn.ledger.length, 0, 'died before the ledger line');
    assert.equal(torn.unledgeredBytes, Buffer.byteLength(ndjson(5)), 'the rows did reach the data file');

    const b = await spawnReceiver(['--data', dir]);
    try {
      assert.deepEqual((await ingest(b.url, { id: 'c-1', body: ndjson(5) })).json, { stored: 5 });
      assert.deepEqual((await ingest(b.url, { id: 'c-1', body: ndjson(5) })).json, { duplicate: true });
    } finally {
      b.child.kill('SIGTERM');
      assert.equal((await b.exited).code, 0);
    }
    const stored = await readStored(dir);
    assert.deepEqual(
      storedRows(stored, 'activity', 'src').map((r) => r.n),
      [0, 1, 2, 3, 4],
    );
    assert.equal(stored.unledgeredBytes, 0);
    assert.equal((await stat(path.join(dir, stored.ledger[0]!.file))).size, Buffer.byteLength(ndjson(5)));
  } finally {
    await cleanup();
  }
});

test('crash after the ledger line, before the 200: the retry is a duplicate', async () => {
  const { dir, cleanup } = await tempDir('rcv-crash-ledger');
  try {
    const a = await spawnReceiver(['--data', dir], { HYPSINK_FAULT: 'receiver.afterLedger' });
    await assert.rejects(ingest(a.url, { id: 'l-1', body: ndjson(2) }), /socket hang up|ECONNRESET/);
    assert.equal((await a.exited).signal, 'SIGKILL');
    const b = await spawnReceiver(['--data', dir]);
    try {
      assert.deepEqual((await ingest(b.url, { id: 'l-1', body: ndjson(2) })).json, { duplicate: true });
    } finally {
      b.child.kill('SIGTERM');
      await b.exited;
    }
    assert.equal(storedRows(await readStored(dir), 'activity', 'src').length, 2);
  } finally {
    await cleanup();
  }
});

test('SIGTERM finishes an in-flight request, refuses new connections, then exits 0', async () => {
  const { dir, cleanup } = await tempDir('rcv-sigterm');
  try {
    const r = await spawnReceiver(['--data', dir, '--log-level', 'debug']);
    let release!: () => void;
    const held = new Promise<void>((res) => {
      release = res;
    });
    const inflight = ingest(r.url, { id: 's-1', body: ndjson(3), hold: () => held });
    await new Promise((res) => setTimeout(res, 300)); // the server has the headers and one byte
    r.child.kill('SIGTERM');
    await r.waitFor('draining');
    await assert.rejects(ingest(r.url, { id: 's-2', body: ndjson(1) }), /ECONNREFUSED/);
    release();
    const reply = await inflight;
    assert.deepEqual(reply.json, { stored: 3 });
    assert.equal(reply.headers.connection, 'close');
    assert.deepEqual(await r.exited, { code: 0, signal: null });
    assert.equal(storedRows(await readStored(dir), 'activity', 'src').length, 3);
  } finally {
    await cleanup();
  }
});

test('close() waits for an in-flight request (in process)', async () => {
  const { dir, cleanup } = await tempDir('rcv-close');
  try {
    const r = await startReceiver({ port: 0, dataDir: dir, insecureNoAuth: true });
    let release!: () => void;
    const held = new Promise<void>((res) => {
      release = res;
    });
    const inflight = ingest(r.url, { id: 'cl-1', body: ndjson(2), hold: () => held });
    while (r.stats().inflight === 0) await new Promise((res) => setTimeout(res, 5));
    let closed = false;
    const closing = r.close().then(() => {
      closed = true;
    });
    await new Promise((res) => setTimeout(res, 50));
    assert.equal(closed, false, 'close waits for the request');
    release();
    assert.deepEqual((await inflight).json, { stored: 2 });
    await closing;
    assert.equal(storedRows(await readStored(dir), 'activity', 'src').length, 2);
  } finally {
    await cleanup();
  }
});
