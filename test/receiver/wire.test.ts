/**
 * `receiver --config` checks a client's lines in its cache's ingest, once
 * (LLP 0087): a line no client may send is still a 400 naming the body's line,
 * and now also leaves nothing of the batch in the cache, so the same id with
 * good rows stores them once. A client cannot name another client, however it
 * writes the column's key. In process: the aggregate and the receiver as
 * `hypsink receiver --config` runs them.
 */
import assert from 'node:assert/strict';
import { promises as fsp } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { openAggregate } from '../../kernel/receiver/aggregate.js';
import { startReceiver } from '../../kernel/receiver/server.js';
import { createLogger } from '../../kernel/log.js';
import { openKernel, readExports, writeConfig } from '../support/kernel.js';
import { ingest as post, RECEIVED, tempDir, tokenOf } from './helpers.js';

const row = (id: number, extra = '') => `{"id":${id},"ts":"2026-01-01T00:00:00.000Z","msg":"m${id}"${extra}}`;

test('receiver --config: a line no client may send is a 400 naming its line, nothing of the batch stays in the cache, and a client never names another', async () => {
  const { dir, cleanup } = await tempDir('aggregator-wire');
  const tokens = join(dir, 'tokens');
  await fsp.writeFile(tokens, `a1 ${tokenOf('a1')}\na2 ${tokenOf('a2')}\n`, { mode: 0o600 });
  const lake = join(dir, 'lake');
  const cfg = await writeConfig(dir, {
    cache: { root: join(dir, 'cache') },
    state: { dir: join(dir, 'state') },
    datasets: { events: RECEIVED },
    sinks: { lake: { writer: '@hypsink/format-parquet', destination: '@hypsink/local-fs', datasets: ['events'], schedule: '0 0 1 1 *', config: { dir: lake } } },
  });
  const { k } = await openKernel(cfg);
  const agg = await openAggregate(k);
  const recv = await startReceiver({ port: 0, dataDir: agg.ledgerDir, tokensFile: tokens, cache: agg.cache, log: createLogger('silent'), maxDepth: 8 });
  const send = (id: string, body: string, client = 'a1') => post(recv.url, { dataset: 'events', source: 'web', id, body, token: tokenOf(client) });
  try {
    // Blank lines count: the line named is the body's, not the rows'.
    const deep = `{"id":3,"ts":"2026-01-01T00:00:00.000Z","msg":"x","n":${'['.repeat(9)}${']'.repeat(9)}}`;
    const bad: [string, RegExp][] = [
      [`${row(1)}\n\n${row(2, ',"msg":"again"')}\n`, /^line 3: an object repeats a key/],
      [`\n${row(1)}\n${deep}\n`, /^line 3: nested deeper than the limit of 8/],
      [`${row(1)}\n   \n\n[1,2]\n`, /^line 4: expected a JSON object, got an array/],
      [`${row(1)}\n${row(2).slice(0, -1)}\n`, /^line 2: not valid JSON/],
      [`${row(1)}\n{"id":2,"n":{"k":1,"k":2}}\n`, /^line 2: an object repeats a key/],
    ];
    for (const [body, want] of bad) {
      const r = await send('b1', body);
      assert.equal(r.status, 400, `${JSON.stringify(body)}: ${r.text}`);
      assert.match(String(r.json?.error), want, JSON.stringify(body));
    }
    const pending = async () => (await k.status()).sinks.flatMap((s) => s.partitions).reduce((n, p) => n + p.pendingRows, 0);
    assert.equal(await pending(), 0, 'no refused batch added a row');
    assert.deepEqual(await k.cache.listSpools(), [], 'no refused batch left a spool');

    // The same id, good rows: stored once. A client's own hyp_client, however its key is written, is overwritten;
    // a value that merely holds the column's name is the client's.
    const good = [row(1), row(2, ',"hyp_client":"a2"'), row(3, ',"hyp\\u005fclient":"a2"'), `{"msg":"hyp_client","id":4,"ts":"2026-01-01T00:00:00.000Z"}`, `{"id":5,"ts":"2026-01-01T00:00:00.000Z","msg":"caf\\u00e9"}`];
    const ok = await send('b1', `${good.join('\n')}\n`);
    assert.equal(ok.status, 200, ok.text);
    assert.equal(ok.json?.stored, 5);
    const forged = await send('f1', `${row(10, ',"hyp_client":"a1"')}\n${row(11)}\n`, 'a2');
    assert.equal(forged.status, 200, forged.text);
    const again = await send('b1', `${good.join('\n')}\n`);
    assert.equal(again.json?.duplicate, true, again.text);

    await k.export('lake');
    const got = (await readExports(lake)).flatMap((f) => f.rows).map((r) => [Number(r.id), r.hyp_client, r.msg]);
    got.sort((a, b) => (a[0] as number) - (b[0] as number));
    assert.deepEqual(got, [
      [1, 'a1', 'm1'],
      [2, 'a1', 'm2'],
      [3, 'a1', 'm3'],
      [4, 'a1', 'hyp_client'],
      [5, 'a1', 'café'],
      [10, 'a2', 'm10'],
      [11, 'a2', 'm11'],
    ]);
  } finally {
    await recv.close();
    await agg.close();
    await k.close();
    await cleanup();
  }
});
