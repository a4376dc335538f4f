/**
 * The receiver looks an id up in its ledger before it applies the size limit:
 * a client re-sending a batch that was stored (say, under a larger limit than
 * the one in force now) learns it was stored, instead of a 413 it can never get
 * past. The body is still compared with the stored one (LLP 0027): hashed as it
 * streams in, never buffered, never read past the stored body's length. Auth,
 * content type and headers still come first.
 */
import assert from 'node:assert/strict';
import * as http from 'node:http';
import { after, before, describe, test } from 'node:test';
import { type Receiver, readStored, startReceiver, storedRows } from '../../fixtures/receiver/server.js';
import { ingest, ndjson, tempDir } from './helpers.js';

const ndjsonRows = (n: number) => Array.from({ length: n }, (_, i) => ({ n: i }));

const TOKEN = 'ledger-first-token-0123456789';
const LIMIT = 4096;

/**
 * POST a chunked body (no Content-Length, unless `length` is given); `end: false` never finishes it,
 * so only an early answer can arrive.
 */
function chunked(url: string, id: string, source: string, body: string, end: boolean, length?: number): Promise<{ status: number; json: unknown }> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      `${url}/v1/ingest/ds`,
      {
        method: 'POST',
        agent: false,
        headers: {
          'content-type': 'application/x-ndjson',
          authorization: `Bearer ${TOKEN}`,
          'x-hyp-partition': `source=${source}`,
          'x-hyp-batch-id': id,
          ...(length === undefined ? {} : { 'content-length': String(length) }),
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          resolve({ status: res.statusCode ?? 0, json: JSON.parse(Buffer.concat(chunks).toString('utf8')) });
          if (!end) req.destroy();
        });
      },
    );
    req.on('error', (e) => {
      if (!req.destroyed) reject(e);
    });
    const half = Math.floor(body.length / 2);
    req.write(body.slice(0, half));
    if (end) req.end(body.slice(half));
    else req.write(body.slice(half));
  });
}

describe('receiver: the ledger before the size limit', () => {
  let r: Receiver;
  let dir: string;
  let cleanup: () => Promise<void>;
  const big = ndjson(1000); // ~11 KiB, well past LIMIT

  before(async () => {
    ({ dir, cleanup } = await tempDir('rcv-ledger-first'));
    // Stored under the default limit; the receiver then restarts with a smaller one.
    const roomy = await startReceiver({ port: 0, dataDir: dir, token: TOKEN });
    const first = await ingest(roomy.url, { id: 'led-1', token: TOKEN, dataset: 'ds', source: 'a', body: big });
    assert.deepEqual(first.json, { stored: 1000 });
    await roomy.close();
    r = await startReceiver({ port: 0, dataDir: dir, token: TOKEN, maxBodyBytes: LIMIT });
    assert.ok(Buffer.byteLength(big) > 2 * LIMIT);
  });
  const storedA = () => ndjsonRows(1000);
  after(async () => {
    await r.close();
    await cleanup();
  });

  test('a ledgered id re-sent with a body over the limit (Content-Length) answers duplicate, stores nothing', async () => {
    const before = r.stats().duplicates;
    const res = await ingest(r.url, { id: 'led-1', token: TOKEN, dataset: 'ds', source: 'a', body: big });
    assert.equal(res.status, 200, res.text);
    assert.deepEqual(res.json, { duplicate: true });
    assert.equal(r.stats().duplicates, before + 1);
    assert.deepEqual(storedRows(await readStored(dir), 'ds', 'a'), storedA());
  });

  test('a ledgered id re-sent chunked past the limit answers duplicate', async () => {
    const res = await chunked(r.url, 'led-1', 'a', big, true);
    assert.equal(res.status, 200, JSON.stringify(res.json));
    assert.deepEqual(res.json, { duplicate: true });
  });

  test('another body of the same length over the limit is a 409 naming only the id', async () => {
    const other = big.replace('"n":0}', '"n":9}');
    assert.equal(Buffer.byteLength(other), Buffer.byteLength(big));
    const res = await chunked(r.url, 'led-1', 'a', other, true);
    assert.equal(res.status, 409, JSON.stringify(res.json));
    assert.match(String((res.json as { error?: string }).error), /batch id led-1 was stored with another body/);
    const longer = await chunked(r.url, 'led-1', 'a', `${big}{"n":1000}\n`, true);
    assert.equal(longer.status, 409, 'a body longer than the stored one is cut off at its length');
  });

  test('a declared length other than the stored body is a 409 before the body is read', async () => {
    const res = await chunked(r.url, 'led-1', 'a', big.slice(0, 100), false, Buffer.byteLength(big) + 1);
    assert.equal(res.status, 409, JSON.stringify(res.json));
  });

  test('the connection stays usable after a discarded duplicate body', async () => {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    try {
      const post = (id: string, body: string) =>
        new Promise<number>((resolve, reject) => {
          const req = http.request(
            `${r.url}/v1/ingest/ds`,
            {
              method: 'POST',
              agent,
              headers: {
                'content-type': 'application/x-ndjson',
                authorization: `Bearer ${TOKEN}`,
                'x-hyp-partition': 'source=a',
                'x-hyp-batch-id': id,
                'content-length': String(Buffer.byteLength(body)),
              },
            },
            (res) => {
              res.resume();
              res.on('end', () => resolve(res.statusCode ?? 0));
            },
          );
          req.on('error', reject);
          req.end(body);
        });
      assert.equal(await post('led-1', big), 200);
      assert.equal(await post('led-2', ndjson(1, 3)), 200);
    } finally {
      agent.destroy();
    }
    assert.deepEqual(storedRows(await readStored(dir), 'ds', 'a'), [...storedA(), { n: 3 }]);
  });

  test('a ledgered id re-sent for another partition is a 409, whatever the size', async () => {
    const res = await ingest(r.url, { id: 'led-1', token: TOKEN, dataset: 'ds', source: 'b', body: big });
    assert.equal(res.status, 409, res.text);
    assert.match(String(res.json?.error), /batch id led-1 was already stored for another dataset or source/);
    assert.ok(!res.text.includes('"ds"') && !res.text.includes('source "a"'), 'a 409 names no partition');
    const other = await ingest(r.url, { id: 'led-1', token: TOKEN, dataset: 'other', source: 'a', body: ndjson(1) });
    assert.equal(other.status, 409, other.text);
    assert.equal(storedRows(await readStored(dir), 'ds', 'b').length, 0);
  });

  test('auth, content type and headers are still checked before the ledger', async () => {
    const noAuth = await ingest(r.url, { id: 'led-1', dataset: 'ds', source: 'a', body: big });
    assert.equal(noAuth.status, 401);
    const ctype = await ingest(r.url, { id: 'led-1', token: TOKEN, dataset: 'ds', source: 'a', body: big, headers: { 'content-type': 'text/plain' } });
    assert.equal(ctype.status, 415);
    const noPartition = await ingest(r.url, { id: 'led-1', token: TOKEN, dataset: 'ds', source: null, body: big });
    assert.equal(noPartition.status, 400);
  });

  test('an id not in the ledger still gets 413 over the limit, and stays unspent', async () => {
    const res = await ingest(r.url, { id: 'new-1', token: TOKEN, dataset: 'ds', source: 'a', body: big });
    assert.equal(res.status, 413);
    const streamed = await chunked(r.url, 'new-1', 'a', big, true);
    assert.equal(streamed.status, 413);
    const ok = await ingest(r.url, { id: 'new-1', token: TOKEN, dataset: 'ds', source: 'a', body: ndjson(1, 9) });
    assert.deepEqual(ok.json, { stored: 1 });
  });
});
