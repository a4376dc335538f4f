/**
 * The daemon's read routes answer while a tick holds the kernel's thread
 * (LLP 0076): the status from the last reading, saying when it was read, with
 * each sink's run state as it is now; after the tick a request reads afresh.
 */
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { apiAddress, serveApi } from '../../kernel/control/api.js';
import { Supervisor } from '../../kernel/control/state.js';
import { loadConfig } from '../../kernel/config/load.js';
import { Hypsink } from '../../kernel/runtime.js';
import { fetchWhileHeld, type HeldAnswer } from '../support/held-fetch.js';
import { ingest, type Json, openKernel, sampleConfig, writeConfig } from '../support/kernel.js';
import { tempDir } from '../support/tmp.js';

const YEARLY = '0 0 1 1 *';
const API_TOKEN = 'api-token-Vq3Lm8Rx2Tz6Wn4Y';

test('status, one sink and ready answer while a tick holds the kernel thread, from the last reading and saying when it was read', async () => {
  const dir = tempDir();
  const config = sampleConfig();
  config.sinks.archive!.schedule = YEARLY;
  const configPath = await writeConfig(dir, config);
  const { k } = await openKernel(configPath);
  await ingest(k, 'web', 1, 25);
  await k.buildSinks();
  const sup = new Supervisor(k, { open: async () => Hypsink.open(await loadConfig(configPath), { log: k.log }) });
  const api = await serveApi(sup, { ...apiAddress('127.0.0.1:0', API_TOKEN), token: API_TOKEN });
  after(async () => {
    await api.close();
    await sup.stop();
  });
  const auth = { authorization: `Bearer ${API_TOKEN}` };
  const before = (await (await fetch(`${api.url}/v1/status`, { headers: auth })).json()) as Json;
  const readBefore = Date.parse(String(before.readAt));
  assert.ok(Number.isFinite(readBefore), `a status says when it was read: ${JSON.stringify(before.readAt)}`);

  let heldAt = 0;
  let answers: HeldAnswer[] | null = null;
  let held = false;
  // The first tick is held at its start, on this thread: as a long encoding holds it, only harder.
  k.hooks.tickStart.tap('hold', () => {
    if (held) return;
    held = true;
    heldAt = Date.now();
    answers = fetchWhileHeld([`${api.url}/v1/status`, `${api.url}/v1/sinks/archive`, `${api.url}/v1/health/ready`], { headers: auth, boundMs: 15_000 });
  });
  sup.start();
  await sup.daemon.idle('archive');
  assert.ok(held, 'the tick ran');

  const got = answers as HeldAnswer[] | null;
  assert.ok(got, 'status, the sink and ready were answered while the tick held the kernel thread');
  const [status, sink, ready] = got.map((a) => ({ status: a.status, body: JSON.parse(a.body) as Json }));
  assert.equal(status?.status, 200, JSON.stringify(status?.body));
  const readAt = Date.parse(String(status!.body.readAt));
  assert.ok(readAt <= heldAt, 'the figures are the last reading, made before the tick');
  const s = (status!.body.sinks as Json[])[0]! as Json & { partitions: Json[] };
  assert.equal(s.partitions[0]?.pendingRows, 25, 'the last reading: nothing exported yet');
  assert.equal(s.ticking, true, 'the run state is as it is now: a tick is in flight');
  assert.equal(s.state, 'running');
  assert.equal(sink?.status, 200, JSON.stringify(sink?.body));
  assert.equal(sink!.body.name, 'archive');
  assert.equal(sink!.body.readAt, status!.body.readAt);
  assert.equal(sink!.body.ticking, true);
  assert.equal(ready?.status, 200);
  assert.equal(ready!.body.ready, true);

  // After the tick a request reads afresh.
  const now = (await (await fetch(`${api.url}/v1/sinks/archive`, { headers: auth })).json()) as Json & { partitions: Json[] };
  assert.ok(Date.parse(String(now.readAt)) > readAt);
  assert.equal(now.partitions[0]?.pendingRows, 0);
  assert.equal(now.partitions[0]?.exportedRows, 25);
  assert.equal(now.ticking, false);
  // The token is checked on an answer from the last reading as on any other.
  assert.equal((await fetch(`${api.url}/v1/status`)).status, 401);
});
