/**
 * `GET /v1/whoami`: the reference receiver says which client a token
 * authenticates, through the same token check as every authenticated route,
 * without touching the ledger. What `hypsink validate --connect` asks.
 * @ref LLP 0036
 */
import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import * as http from 'node:http';
import * as path from 'node:path';
import { test } from 'node:test';
import { startReceiver } from '../../fixtures/receiver/server.js';
import { tempDir } from './helpers.js';

const TOKEN = 'whoami-secret-token-0123456789';

interface Answer {
  status: number;
  headers: http.IncomingHttpHeaders;
  json: Record<string, unknown> | null;
  text: string;
}

function call(url: string, method: string, token?: string): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const headers: Record<string, string> = token === undefined ? {} : { authorization: `Bearer ${token}` };
    const req = http.request(`${url}/v1/whoami`, { method, headers, agent: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        let json: Record<string, unknown> | null = null;
        try {
          json = JSON.parse(text) as Record<string, unknown>;
        } catch {}
        resolve({ status: res.statusCode ?? 0, headers: res.headers, json, text });
      });
    });
    req.on('error', reject);
    req.end();
  });
}

test('a valid token: 200 {"client":"default"}; none or a wrong one: 401 with WWW-Authenticate, like ingest; the ledger untouched', async () => {
  const { dir, cleanup } = await tempDir('rcv-whoami');
  const r = await startReceiver({ port: 0, dataDir: dir, token: TOKEN, unauthorizedDelayMs: 0 });
  try {
    const ok = await call(r.url, 'GET', TOKEN);
    assert.equal(ok.status, 200);
    assert.deepEqual(ok.json, { client: 'default' });
    for (const token of [undefined, `${TOKEN}x`, TOKEN.slice(0, 20)]) {
      const no = await call(r.url, 'GET', token);
      assert.equal(no.status, 401, `token ${String(token)}`);
      assert.equal(no.headers['www-authenticate'], 'Bearer');
      assert.equal(no.headers.connection, 'close');
      assert.deepEqual(no.json, { error: 'missing or invalid bearer token' });
      assert.ok(!no.text.includes(TOKEN));
    }
    const post = await call(r.url, 'POST', TOKEN);
    assert.equal(post.status, 405);
    const s = r.stats();
    assert.deepEqual([s.ledgerSize, s.batchesStored], [0, 0]);
  } finally {
    await r.close();
    await cleanup();
  }
});

test('a tokens file: each token names its own client', async () => {
  const { dir, cleanup } = await tempDir('rcv-whoami-file');
  const file = path.join(dir, 'tokens');
  await writeFile(file, `alice ${TOKEN}-alice\nbob ${TOKEN}-bob\n`, { mode: 0o600 });
  const r = await startReceiver({ port: 0, dataDir: path.join(dir, 'data'), tokensFile: file, unauthorizedDelayMs: 0 });
  try {
    assert.deepEqual((await call(r.url, 'GET', `${TOKEN}-alice`)).json, { client: 'alice' });
    assert.deepEqual((await call(r.url, 'GET', `${TOKEN}-bob`)).json, { client: 'bob' });
    assert.equal((await call(r.url, 'GET', TOKEN)).status, 401);
  } finally {
    await r.close();
    await cleanup();
  }
});

test('auth off (--insecure-no-auth): every caller is client "default"', async () => {
  const { dir, cleanup } = await tempDir('rcv-whoami-open');
  const r = await startReceiver({ port: 0, dataDir: dir, insecureNoAuth: true });
  try {
    const a = await call(r.url, 'GET');
    assert.equal(a.status, 200);
    assert.deepEqual(a.json, { client: 'default' });
  } finally {
    await r.close();
    await cleanup();
  }
});
