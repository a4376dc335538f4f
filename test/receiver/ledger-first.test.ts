/**
 * The receiver looks an id up in its ledger before it applies the size limit:
 * a client re-sending a batch that was stored (say, recovered from an intent
 * with a larger body than the limit now allows) learns it was stored, instead
 * of a 413 it can never get past. Auth, content type and headers still come first.
 */
import assert from 'node:assert/strict';
import * as http from 'node:http';
import { after, before, describe, test } from 'node:test';
import { type Receiver, readStored, startReceiver, storedRows } from '../../fixtures/receiver/server.js';
import { ingest, ndjson, tempDir } from './helpers.js';

const TOKEN = 'ledger-first-token-0123456789';
const LIMIT = 4096;

/** POST a chunked body (no Content-Length); `end: false` never finishes it, so only an early answer can arrive. */
function chunked(url: string, id: string, source: string, body: string, end: boolean): Promise<{ status: number; json: unknown }> {
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
    r = await startReceiver({ port: 0, dataDir: dir, token: TOKEN, maxBodyBytes: LIMIT });
    const first = await ingest(r.url, { id: 'led-1', token: TOKEN, dataset: 'ds', source: 'a', body: ndjson(3) });
    assert.deepEqual(first.json, { stored: 3 });
    assert.ok(Buffer.byteLength(big) > 2 * LIMIT);
  });
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
    assert.deepEqual(storedRows(await readStored(dir), 'ds', 'a'), [{ n: 0 }, { n: 1 }, { n: 2 }]);
  });

  test('a ledgered id re-sent chunked past the limit answers duplicate', async () => {
    const res = await chunked(r.url, 'led-1', 'a', big, true);
    assert.equal(res.status, 200, JSON.stringify(res.json));
    assert.deepEqual(res.json, { duplicate: true });
  });

  test('the duplicate answer comes before the client finishes sending (the body is not read first)', async () => {
    const res = await chunked(r.url, 'led-1', 'a', big, false);
    assert.equal(res.status, 200, JSON.stringify(res.json));
    assert.deepEqual(res.json, { duplicate: true });
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
    assert.deepEqual(storedRows(await readStored(dir), 'ds', 'a'), [{ n: 0 }, { n: 1 }, { n: 2 }, { n: 3 }]);
  });

  test('a ledgered id re-sent for another partition is a 409, whatever the size', async () => {
    const res = await ingest(r.url, { id: 'led-1', token: TOKEN, dataset: 'ds', source: 'b', body: big });
    assert.equal(res.status, 409, res.text);
    assert.match(String(res.json?.error), /already stored for dataset "ds" source "a"/);
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
