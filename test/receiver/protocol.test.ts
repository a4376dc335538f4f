import assert from 'node:assert/strict';
import { readdir, readFile } from 'node:fs/promises';
import * as http from 'node:http';
import * as path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { type Receiver, readStored, startReceiver, storedRows } from '../../fixtures/receiver/server.js';
import { ingest, ndjson, tempDir } from './helpers.js';

const TOKEN = 'rcv-secret-token-0123456789';

describe('receiver protocol', () => {
  let r: Receiver;
  let dir: string;
  let cleanup: () => Promise<void>;

  before(async () => {
    ({ dir, cleanup } = await tempDir('rcv-proto'));
    r = await startReceiver({ port: 0, dataDir: dir, token: TOKEN, maxBodyBytes: 4096 });
  });
  after(async () => {
    await r.close();
    await cleanup();
  });

  test('health answers without a token', async () => {
    const res = await fetch(`${r.url}/v1/health`);
    assert.equal(res.status, 200);
    assert.deepEqual(await res.json(), { ok: true });
  });

  test('a token is required when configured, and a wrong one is refused', async () => {
    const none = await ingest(r.url, { id: 'auth-1' });
    assert.equal(none.status, 401);
    assert.equal(none.headers['www-authenticate'], 'Bearer');
    const wrong = await ingest(r.url, { id: 'auth-1', token: `${TOKEN}x` });
    assert.equal(wrong.status, 401);
    const prefix = await ingest(r.url, { id: 'auth-1', token: TOKEN.slice(0, 5) });
    assert.equal(prefix.status, 401);
    assert.ok(!none.text.includes(TOKEN) && !wrong.text.includes(TOKEN));
    const ok = await ingest(r.url, { id: 'auth-1', token: TOKEN, dataset: 'auth', body: ndjson(2) });
    assert.equal(ok.status, 200);
    assert.deepEqual(ok.json, { stored: 2 });
    assert.deepEqual(storedRows(await readStored(dir), 'auth', 'src'), [{ n: 0 }, { n: 1 }]);
  });

  test('413 from Content-Length, before reading the body; nothing stored', async () => {
    const res = await ingest(r.url, { id: 'big-1', token: TOKEN, dataset: 'big', body: ndjson(1000) });
    assert.equal(res.status, 413);
    assert.match(String(res.json?.error), /exceeds the limit of 4096/);
    assert.equal(storedRows(await readStored(dir), 'big', 'src').length, 0);
  });

  test('413 while streaming a chunked body: answered before the client finishes sending', async () => {
    const reply = await new Promise<number>((resolve, reject) => {
      const req = http.request(
        `${r.url}/v1/ingest/big`,
        {
          method: 'POST',
          agent: false,
          headers: {
            'content-type': 'application/x-ndjson',
            authorization: `Bearer ${TOKEN}`,
            'x-hyp-partition': 'source=src',
            'x-hyp-batch-id': 'big-2',
          },
        },
        (res) => {
          resolve(res.statusCode ?? 0);
          res.resume();
          req.destroy();
        },
      );
      req.on('error', (e) => {
        if (!req.destroyed) reject(e);
      });
      // ~11 KiB sent, the request never ends: only a streaming check can answer.
      req.write(ndjson(1200));
    });
    assert.equal(reply, 413);
    const again = await ingest(r.url, { id: 'big-2', token: TOKEN, dataset: 'big', body: ndjson(1) });
    assert.deepEqual(again.json, { stored: 1 }, 'a 413 leaves the id unspent');
  });

  test('400 names the 1-based line of bad NDJSON; nothing stored', async () => {
    const cases: [string, RegExp][] = [
      ['{"a":1}\n[1,2]\n{"a":3}\n', /^line 2: expected a JSON object, got an array/],
      ['{"a":1}\n\n{"a":2}\n{oops\n', /^line 4: not valid JSON/],
      ['{"a":1}\r\n"str"\r\n', /^line 2: expected a JSON object, got a string/],
      ['null\n', /^line 1: expected a JSON object, got null/],
    ];
    for (const [body, re] of cases) {
      const res = await ingest(r.url, { id: 'bad-1', token: TOKEN, dataset: 'bad', body });
      assert.equal(res.status, 400, body);
      assert.match(String(res.json?.error), re);
    }
    const latin1 = Buffer.from([0x7b, 0x22, 0x61, 0x22, 0x3a, 0x22, 0xff, 0x22, 0x7d, 0x0a]);
    const res = await ingest(r.url, { id: 'bad-1', token: TOKEN, dataset: 'bad', body: latin1 });
    assert.equal(res.status, 400);
    assert.match(String(res.json?.error), /UTF-8/);
    assert.equal(storedRows(await readStored(dir), 'bad', 'src').length, 0);
    const ok = await ingest(r.url, { id: 'bad-1', token: TOKEN, dataset: 'bad', body: '{"a":1}\r\n\n  \n{"a":2}' });
    assert.deepEqual(ok.json, { stored: 2 }, 'CRLF, blank lines and a missing final newline are fine');
  });

  test('missing batch id, partition or content type are refused', async () => {
    const noId = await ingest(r.url, { id: null, token: TOKEN });
    assert.equal(noId.status, 400);
    assert.match(String(noId.json?.error), /X-Hyp-Batch-Id is required/);
    const longId = await ingest(r.url, { id: 'x'.repeat(300), token: TOKEN });
    assert.equal(longId.status, 400);
    const noPart = await ingest(r.url, { source: null, token: TOKEN });
    assert.equal(noPart.status, 400);
    assert.match(String(noPart.json?.error), /X-Hyp-Partition/);
    const badPart = await ingest(r.url, { token: TOKEN, headers: { 'x-hyp-partition': 'source=%E0%A4%A' } });
    assert.equal(badPart.status, 400);
    const ctype = await ingest(r.url, { token: TOKEN, headers: { 'content-type': 'application/json' } });
    assert.equal(ctype.status, 415);
    const get = await fetch(`${r.url}/v1/ingest/x`);
    assert.equal(get.status, 405);
    const notFound = await fetch(`${r.url}/nope`, { method: 'POST' });
    assert.equal(notFound.status, 404);
  });

  test('a repeated id with the same body answers duplicate and stores nothing; another body is a 409', async () => {
    const first = await ingest(r.url, { id: 'dup-1', token: TOKEN, dataset: 'dup', body: ndjson(3) });
    assert.deepEqual(first.json, { stored: 3 });
    const again = await ingest(r.url, { id: 'dup-1', token: TOKEN, dataset: 'dup', body: ndjson(3) });
    assert.equal(again.status, 200);
    assert.deepEqual(again.json, { duplicate: true });
    const other = await ingest(r.url, { id: 'dup-1', token: TOKEN, dataset: 'dup', body: ndjson(5, 100) });
    assert.equal(other.status, 409, 'a batch id names one body: another body is never dropped as a duplicate');
    assert.match(String(other.json?.error), /^batch id dup-1 was stored with another body; a batch id names one body/);
    const stored = await readStored(dir);
    assert.deepEqual(storedRows(stored, 'dup', 'src'), [{ n: 0 }, { n: 1 }, { n: 2 }]);
    assert.equal(stored.ledger.filter((e) => e.id === 'dup-1').length, 1);
  });

  test('an id already stored for another partition is a 409, never a silent duplicate', async () => {
    await ingest(r.url, { id: 'cf-1', token: TOKEN, dataset: 'cf', source: 'a', body: ndjson(1) });
    const res = await ingest(r.url, { id: 'cf-1', token: TOKEN, dataset: 'cf', source: 'b', body: ndjson(1) });
    assert.equal(res.status, 409);
    assert.equal(storedRows(await readStored(dir), 'cf', 'b').length, 0);
  });

  test('concurrent requests with one id store once', async () => {
    const replies = await Promise.all(
      Array.from({ length: 8 }, () =>
        ingest(r.url, { id: 'race-1', token: TOKEN, dataset: 'race', body: ndjson(50) }),
      ),
    );
    assert.ok(replies.every((x) => x.status === 200));
    assert.equal(replies.filter((x) => x.json?.stored === 50).length, 1);
    assert.equal(replies.filter((x) => x.json?.duplicate === true).length, 7);
    assert.equal(storedRows(await readStored(dir), 'race', 'src').length, 50);
  });

  test('concurrent batches of one partition keep whole, non-interleaved byte ranges', async () => {
    await Promise.all(
      Array.from({ length: 10 }, (_, i) =>
        ingest(r.url, { id: `many-${i}`, token: TOKEN, dataset: 'many', body: ndjson(20, i * 20) }),
      ),
    );
    const stored = await readStored(dir);
    const rows = storedRows(stored, 'many', 'src').map((x) => x.n as number);
    assert.deepEqual(
      [...rows].sort((a, b) => a - b),
      Array.from({ length: 200 }, (_, i) => i),
    );
    for (const e of stored.ledger.filter((x) => x.dataset === 'many')) assert.equal(e.rows, 20);
  });

  test('untrusted dataset and source names stay inside the data dir and never collide', async () => {
    const names: [string, string][] = [
      ['..', '../../etc/passwd'],
      ['a.b', 'x'],
      ['a%2Eb', 'x'],
      ['a', '.'],
      ['a', '..'],
      ['a', 'ü/€ \u0000'],
      ['a', 'y'.repeat(400)],
      ['a', ''],
    ];
    let i = 0;
    for (const [dataset, source] of names) {
      const res = await ingest(r.url, { id: `safe-${i}`, token: TOKEN, dataset, source, body: ndjson(1, i) });
      assert.deepEqual(res.json, { stored: 1 }, `${dataset} / ${source}`);
      i++;
    }
    const stored = await readStored(dir);
    i = 0;
    for (const [dataset, source] of names) {
      assert.deepEqual(storedRows(stored, dataset, source), [{ n: i }], `${dataset} / ${source}`);
      i++;
    }
    const files = new Set(stored.ledger.filter((e) => e.id.startsWith('safe-')).map((e) => e.file));
    assert.equal(files.size, names.length, 'distinct values, distinct files');
    for (const f of files) {
      const abs = path.resolve(dir, f);
      assert.ok(abs.startsWith(dir + path.sep), f);
      assert.ok(path.basename(abs).length < 255, f);
    }
    assert.ok((await readdir(path.dirname(dir))).includes(path.basename(dir)));
  });

  test('data files are plain NDJSON and the ledger records each batch', async () => {
    await ingest(r.url, { id: 'plain-1', token: TOKEN, dataset: 'plain', source: 'host/1', body: ndjson(2) });
    const stored = await readStored(dir);
    const entry = stored.ledger.find((e) => e.id === 'plain-1');
    assert.ok(entry);
    assert.equal(entry.dataset, 'plain');
    assert.equal(entry.source, 'host/1');
    assert.equal(entry.rows, 2);
    assert.ok(!Number.isNaN(Date.parse(entry.at)));
    const text = await readFile(path.join(dir, entry.file), 'utf8');
    assert.equal(text, '{"n":0}\n{"n":1}\n');
    assert.equal(stored.unledgeredBytes, 0);
  });
});
