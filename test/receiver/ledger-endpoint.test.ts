/**
 * The receiver's `GET /v1/ledger` (what `hypsink verify` reads for the forward
 * sink): authenticated like an ingest, it answers the calling client's entries
 * of one partition only, in commit order, and survives a restart (read from
 * the ledger file). @ref LLP 0038
 */
import assert from 'node:assert/strict';
import { chmod, writeFile } from 'node:fs/promises';
import * as path from 'node:path';
import { test } from 'node:test';
import { startReceiver } from '../../fixtures/receiver/server.js';
import { ingest, ndjson, tempDir } from './helpers.js';

const A = 'client-a-token-0123456789abcdef';
const B = 'client-b-token-fedcba9876543210';

const ledger = async (url: string, query: string, token?: string) => {
  const res = await fetch(`${url}/v1/ledger${query}`, { headers: token ? { authorization: `Bearer ${token}` } : {} });
  return { status: res.status, json: (await res.json()) as { entries?: { id: string; dataset: string; source: string; rows: number; at: string }[]; next?: number | null; error?: string } };
};

test("GET /v1/ledger: the client's own entries of one partition, after a restart too; 401 without a token, 400 without a partition", async (t) => {
  const { dir, cleanup } = await tempDir('rcv-ledger');
  t.after(cleanup);
  const tokens = path.join(dir, 'tokens');
  await writeFile(tokens, `alice ${A}\nbob ${B}\n`);
  await chmod(tokens, 0o600);
  const data = path.join(dir, 'data');
  let r = await startReceiver({ port: 0, dataDir: data, tokensFile: tokens, unauthorizedDelayMs: 0 });
  t.after(() => r.close());
  const src = 'web/é 1';
  assert.equal((await ingest(r.url, { token: A, id: 'a-1', source: src, body: ndjson(3) })).status, 200);
  assert.equal((await ingest(r.url, { token: B, id: 'b-1', source: src, body: ndjson(2) })).status, 200);
  assert.equal((await ingest(r.url, { token: A, id: 'a-2', source: src, body: ndjson(4, 3) })).status, 200);
  assert.equal((await ingest(r.url, { token: A, id: 'a-3', source: 'other', body: ndjson(1) })).status, 200);

  const q = `?dataset=activity&source=${encodeURIComponent(src)}`;
  const check = async () => {
    const a = await ledger(r.url, q, A);
    assert.equal(a.status, 200);
    assert.deepEqual(a.json.entries!.map((e) => [e.id, e.dataset, e.source, e.rows]), [
      ['a-1', 'activity', src, 3],
      ['a-2', 'activity', src, 4],
    ]);
    assert.equal(a.json.next, null);
    const b = await ledger(r.url, q, B);
    assert.deepEqual(b.json.entries!.map((e) => e.id), ['b-1']);
  };
  await check();
  await r.close();
  r = await startReceiver({ port: 0, dataDir: data, tokensFile: tokens, unauthorizedDelayMs: 0 });
  await check();

  assert.equal((await ledger(r.url, q)).status, 401);
  assert.equal((await ledger(r.url, q, 'not-a-token-of-anyone-xyz')).status, 401);
  const noPartition = await ledger(r.url, '?dataset=activity', A);
  assert.equal(noPartition.status, 400);
  assert.match(noPartition.json.error ?? '', /dataset=.*source=/);
  assert.equal((await ledger(r.url, `${q}&after=x`, A)).status, 400);
  const post = await fetch(`${r.url}/v1/ledger${q}`, { method: 'POST', headers: { authorization: `Bearer ${A}` } });
  assert.equal(post.status, 405);
});
