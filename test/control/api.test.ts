/**
 * The daemon's API (README "Operating hypsink", LLP 0067), over real HTTP on
 * loopback: a real kernel from a real config file, the daemon in this process,
 * the forward sink and the reference receiver. Every endpoint (replay included); pause during a
 * tick (the unit in flight finishes, no new tick, resume exports, each row
 * once); reload refused with a broken config and applied with a good one;
 * restart of a sink stopped by a refused login; the token rule.
 */
import assert from 'node:assert/strict';
import { promises as fsp } from 'node:fs';
import { join } from 'node:path';
import { type TestContext, test } from 'node:test';
import { type ReceiverOptions, startReceiver } from '../../fixtures/receiver/server.js';
import { type ApiServer, apiAddress, serveApi } from '../../kernel/control/api.js';
import { Supervisor } from '../../kernel/control/state.js';
import { loadConfig } from '../../kernel/config/load.js';
import { Hypsink } from '../../kernel/runtime.js';
import type { TickReport } from '../../kernel/sinks/driver.js';
import { isHypsinkError } from '../../types/errors.js';
import { walkFiles } from '../support/kernel.js';
import { assertExactlyOnce, e2eConfig, ids, ingestWith, type Json, openKernel, TOKEN, until, type Workspace, workspace } from '../forward-e2e/helpers.js';

/** Scheduled once a year: only the first tick at start and the ticks asked for run. */
const YEARLY = '0 0 1 1 *';
const API_TOKEN = 'api-token-Vq3Lm8Rx2Tz6Wn4Y';

interface Running {
  readonly sup: Supervisor;
  readonly api: ApiServer;
  readonly ticks: TickReport[];
  readonly logs: Json[];
  call(method: string, path: string, token?: string | null): Promise<{ status: number; body: Json }>;
  close(): Promise<void>;
}

/** `hypsink run --api 127.0.0.1:0` in this process: the kernel from `configPath`, the supervisor, the API. */
async function running(configPath: string, opts: { token?: string } = {}): Promise<Running> {
  const { k, logs } = await openKernel(configPath);
  await k.buildSinks();
  const ticks: TickReport[] = [];
  const sup = new Supervisor(k, {
    open: async () => Hypsink.open(await loadConfig(configPath), { log: k.log }),
    daemon: { onTick: (t) => ticks.push(t), drainMs: 5000 },
  });
  sup.start();
  const api = await serveApi(sup, { ...apiAddress('127.0.0.1:0', opts.token), token: opts.token });
  return {
    sup,
    api,
    ticks,
    logs,
    async call(method, path, token = opts.token ?? null) {
      const res = await fetch(`${api.url}${path}`, { method, headers: token ? { authorization: `Bearer ${token}` } : {} });
      return { status: res.status, body: (await res.json()) as Json };
    },
    async close() {
      await api.close();
      await sup.stop();
    },
  };
}

type ReceiverAs = Omit<ReceiverOptions, 'port' | 'dataDir'>;

/**
 * A workspace, the reference receiver in it (`recv`, or what `recv` makes once
 * the folder is there) and `run()` for the daemon; when the test ends, each is
 * closed, the last made first, whatever the test did.
 */
async function scene(t: TestContext, prefix: string, recv: ReceiverAs | ((ws: Workspace) => Promise<ReceiverAs>)) {
  const made: (() => Promise<unknown>)[] = [];
  t.after(async () => {
    for (const close of made.reverse()) await close();
  });
  const ws = await workspace(prefix);
  made.push(() => ws.cleanup());
  const r = await startReceiver({ port: 0, dataDir: ws.recv, ...(typeof recv === 'function' ? await recv(ws) : recv) });
  made.push(() => r.close());
  const run = async (opts: { token?: string } = {}) => {
    const d = await running(ws.configPath, opts);
    made.push(() => d.close());
    return d;
  };
  return { ws, r, run };
}

const sinkOf = (status: Json, name: string) => (status.sinks as Json[]).find((s) => s.name === name) as Json & { partitions: Json[] };

test('health, status, one sink, and the errors of unknown routes and sinks', async (t) => {
  const { ws, r, run } = await scene(t, 'api-endpoints', { token: TOKEN });
  await ws.writeConfig(e2eConfig(r.url, { schedule: YEARLY }));
  await ingestWith(ws.configPath, { alpha: [1, 5] });
  const d = await run();
  await until(() => d.ticks.length === 1, 'the first tick');
  const live = await d.call('GET', '/v1/health/live');
  assert.equal(live.status, 200);
  assert.equal(live.body.live, true);
  const ready = await d.call('GET', '/v1/health/ready');
  assert.equal(ready.status, 200);
  assert.equal(ready.body.ready, true);

  const st = await d.call('GET', '/v1/status');
  assert.equal(st.status, 200);
  const central = sinkOf(st.body, 'central');
  assert.equal(central.state, 'running');
  assert.equal(central.error, null);
  assert.equal(central.ticking, false);
  assert.equal((central.lastTick as Json).rows, 5);
  assert.equal(central.partitions[0]?.exportedRows, 5, 'what status --json shows, per partition');
  assert.equal((st.body.daemon as Json).state, 'running');

  const one = await d.call('GET', '/v1/sinks/central');
  assert.equal(one.status, 200);
  assert.equal(one.body.name, 'central');
  assert.equal((one.body.partitions as Json[])[0]?.source, 'alpha');

  // Replay of the range exported: the receiver holds it under its name and digest, so nothing is sent again.
  const wm = String(central.partitions[0]?.watermark);
  const replay = await d.call('POST', `/v1/sinks/central/replay?dataset=events&source=alpha&until=${wm}`);
  assert.equal(replay.status, 200, JSON.stringify(replay.body));
  assert.equal(replay.body.rows, 5);
  assert.equal(replay.body.duplicate, true);
  assert.equal(replay.body.since, null);
  const noUntil = await d.call('POST', '/v1/sinks/central/replay?dataset=events&source=alpha');
  assert.equal(noUntil.status, 400);
  assert.equal(noUntil.body.code, 'HYPSINK_ERR_USAGE');
  assert.match(String(noUntil.body.message), /a replay needs the query parameter "until"/);
  const beyond = await d.call('POST', `/v1/sinks/central/replay?dataset=events&source=alpha&until=${BigInt(wm) + 100n}`);
  assert.equal(beyond.status, 400);
  assert.match(String(beyond.body.message), /above its watermark/);
  assert.equal((await d.call('GET', '/v1/sinks/central/replay?dataset=events&source=alpha&until=1')).status, 405);

  const unknown = await d.call('POST', '/v1/sinks/nope/pause');
  assert.equal(unknown.status, 404);
  assert.equal(unknown.body.code, 'HYPSINK_ERR_CONFIG');
  assert.match(String(unknown.body.message), /no sink named "nope" \(configured: central\)/);
  assert.equal(typeof unknown.body.hint, 'string');

  const route = await d.call('GET', '/v1/nothing');
  assert.equal(route.status, 404);
  assert.equal(route.body.code, 'HYPSINK_ERR_USAGE');
  const method = await d.call('GET', '/v1/reload');
  assert.equal(method.status, 405);
  assert.equal(method.body.code, 'HYPSINK_ERR_USAGE');
});

test('pause during a tick: the unit in flight finishes, no tick starts while paused, resume exports the rest, each row once', async (t) => {
  // The first POST is held at the receiver: a tick is under way when the pause comes.
  const { ws, r, run } = await scene(t, 'api-pause', { token: TOKEN, chaos: { delayFirst: { count: 1, ms: 1200 } } });
  await ws.writeConfig(e2eConfig(r.url, { schedule: YEARLY, unit: { maxRows: 2 } }));
  await ingestWith(ws.configPath, { alpha: [1, 20] });
  const d = await run();
  await until(() => r.stats().inflight >= 1, 'the first POST to be held at the receiver');
  const during = await d.call('GET', '/v1/sinks/central');
  assert.equal(during.body.ticking, true, 'a tick is under way');
  // Answers once the tick in flight has ended.
  const paused = await d.call('POST', '/v1/sinks/central/pause');
  assert.equal(paused.status, 200, JSON.stringify(paused.body));
  assert.equal(paused.body.state, 'paused');
  assert.equal(paused.body.ticking, false);
  assert.equal(d.ticks.length, 1, 'the tick in flight ended');
  assert.equal(d.ticks[0]?.failed, 0, 'its unit was not aborted');
  const p = (paused.body.partitions as Json[])[0]!;
  const exported = Number(p.exportedRows);
  assert.ok(exported > 0 && exported < 20, `the tick stopped after the units it had under way (${exported} of 20 rows)`);
  assert.equal(p.intent, null, 'no unit left open: the ones under way finished');
  await assertExactlyOnce(ws.recv, { alpha: ids(1, exported) });

  // No tick while paused: a scheduled or asked-for tick returns without exporting.
  const requests = r.stats().requests;
  await d.sup.daemon.tick('central');
  assert.equal(d.ticks.length, 1, 'no tick ran while paused');
  assert.equal(r.stats().requests, requests, 'nothing was sent while paused');
  const again = await d.call('POST', '/v1/sinks/central/pause');
  assert.equal(again.body.state, 'paused', 'pausing a paused sink is no error');

  const resumed = await d.call('POST', '/v1/sinks/central/resume');
  assert.equal(resumed.status, 200);
  assert.equal(resumed.body.state, 'running');
  await until(() => d.ticks.length === 2, 'a tick after resume');
  assert.equal(d.ticks[1]?.rows, 20 - exported);
  await assertExactlyOnce(ws.recv, { alpha: ids(1, 20) });
});

test('restart: a sink stopped by a refused login comes back once the login is fixed, without restarting the process', async (t) => {
  const { ws, r, run } = await scene(t, 'api-restart', async (ws) => {
    const tokens = join(ws.dir, 'tokens');
    // The receiver knows another client only: the sink's token is refused.
    await fsp.writeFile(tokens, 'other other-token-Pd8Kq2Zx\n');
    return { tokensFile: tokens };
  });
  const tokens = join(ws.dir, 'tokens');
  await ws.writeConfig(e2eConfig(r.url, { schedule: YEARLY }));
  await ingestWith(ws.configPath, { alpha: [1, 5] });
  const d = await run();
  await until(() => d.ticks.length === 1, 'the first tick');
  const failed = await d.call('GET', '/v1/sinks/central');
  assert.equal(failed.body.state, 'failed');
  assert.equal((failed.body.error as Json).code, 'HYPSINK_ERR_AUTH');
  assert.match(String((failed.body.error as Json).message), /rejected the token/);
  const ready = await d.call('GET', '/v1/health/ready');
  assert.equal(ready.status, 503, 'not ready while a sink is failed');
  assert.deepEqual(ready.body.failed, ['central']);
  // Stopped: a tick skips it.
  await d.sup.daemon.tick('central');
  assert.equal(d.ticks.at(-1)?.partitions[0]?.deferred, true, 'the stopped sink is not tried again on its own');

  // The operator fixes the login at the receiver, then restarts the sink.
  await fsp.writeFile(tokens, `other other-token-Pd8Kq2Zx\nhost-a ${TOKEN}\n`);
  assert.equal((await r.reload()).ok, true);
  const ticks = d.ticks.length;
  const restarted = await d.call('POST', '/v1/sinks/central/restart');
  assert.equal(restarted.status, 200, JSON.stringify(restarted.body));
  assert.equal(restarted.body.state, 'running');
  assert.equal(restarted.body.error, null);
  await until(() => d.ticks.length > ticks && (d.ticks.at(-1)?.rows ?? 0) > 0, 'an export after restart');
  await assertExactlyOnce(ws.recv, { alpha: ids(1, 5) });
  assert.equal((await d.call('GET', '/v1/health/ready')).status, 200);
});

test('reload: a config that does not validate is refused and the running one stays; a valid one replaces the sinks', async (t) => {
  const { ws, r, run } = await scene(t, 'api-reload', { token: TOKEN });
  const cfg = e2eConfig(r.url, { schedule: YEARLY });
  await ws.writeConfig(cfg);
  await ingestWith(ws.configPath, { alpha: [1, 5] });
  const d = await run();
  await until(() => d.ticks.length === 1, 'the first tick');
  await d.call('POST', '/v1/sinks/central/pause');

  // A key the schema does not know: refused, naming the file and the key.
  await ws.writeConfig({ ...cfg, sinks: { central: { ...(cfg.sinks as Json).central as Json, schedulee: '* * * * *' } } });
  const bad = await d.call('POST', '/v1/reload');
  assert.equal(bad.status, 400);
  assert.equal(bad.body.code, 'HYPSINK_ERR_CONFIG');
  assert.match(String(bad.body.message), /hypsink\.config\.json: sink "central": schedulee: unknown key; did you mean "schedule"\?/);
  assert.equal(typeof bad.body.hint, 'string');
  // A sink whose own config fails its plugin's check: refused too (every sink is built first).
  await ws.writeConfig({ ...cfg, sinks: { central: { ...((cfg.sinks as Json).central as Json), config: { url: 'not a url', token: TOKEN } } } });
  const unbuildable = await d.call('POST', '/v1/reload');
  assert.equal(unbuildable.status, 400);
  assert.equal(unbuildable.body.code, 'HYPSINK_ERR_CONFIG');
  assert.match(String(unbuildable.body.message), /sink "central"/);
  // The running config stays, and it still works.
  const still = await d.call('GET', '/v1/status');
  assert.deepEqual((still.body.sinks as Json[]).map((s) => s.name), ['central']);
  assert.equal(sinkOf(still.body, 'central').state, 'paused', 'a refused reload changes nothing');

  // A valid config: a second sink (local-fs, JSONL) beside the first.
  const good = {
    ...cfg,
    sinks: {
      ...(cfg.sinks as Json),
      files: { writer: '@hypsink/format-jsonl', destination: '@hypsink/local-fs', datasets: ['events'], schedule: YEARLY, config: { dir: 'exports' } },
    },
  };
  await ws.writeConfig(good);
  const ok = await d.call('POST', '/v1/reload');
  assert.equal(ok.status, 200, JSON.stringify(ok.body));
  assert.deepEqual(ok.body.added, ['files']);
  assert.deepEqual(ok.body.removed, []);
  assert.deepEqual(ok.body.sinks, ['central', 'files']);
  const after = await d.call('GET', '/v1/status');
  assert.deepEqual((after.body.sinks as Json[]).map((s) => s.name), ['central', 'files']);
  assert.equal(sinkOf(after.body, 'central').state, 'paused', 'a pause outlives a reload');
  // The new sink ticks at once, as at start.
  await until(() => d.ticks.some((t) => t.sink === 'files' && t.rows === 5), 'the new sink to export');
  const files = await walkFiles(join(ws.dir, 'exports'), '.hypsink-tmp');
  let rows = 0;
  for (const f of files) rows += (await fsp.readFile(f, 'utf8')).split('\n').filter(Boolean).length;
  assert.equal(rows, 5, 'the new sink wrote every row once');
  assert.ok(d.logs.some((l) => l.msg === 'config reloaded'));
});

test('the token: required when set, 401 for none or a wrong one, health open; off loopback a token is required to start', async (t) => {
  const { ws, r, run } = await scene(t, 'api-token', { token: TOKEN });
  await ws.writeConfig(e2eConfig(r.url, { schedule: YEARLY }));
  const d = await run({ token: API_TOKEN });
  const none = await d.call('GET', '/v1/status', null);
  assert.equal(none.status, 401);
  assert.equal(none.body.code, 'HYPSINK_ERR_AUTH');
  assert.equal(typeof none.body.hint, 'string');
  const wrong = await d.call('POST', '/v1/sinks/central/pause', 'api-token-Vq3Lm8Rx2Tz6Wn4Z');
  assert.equal(wrong.status, 401);
  assert.equal(wrong.body.code, 'HYPSINK_ERR_AUTH');
  assert.equal(sinkOf((await d.call('GET', '/v1/status')).body, 'central').state, 'running', 'a refused request changed nothing');
  assert.equal((await d.call('GET', '/v1/health/live', null)).status, 200, 'health needs no token');
  assert.equal((await d.call('GET', '/v1/status')).status, 200);
  // Every address that is not loopback: refused at start, naming the flag.
  for (const addr of ['0.0.0.0:0', '[::]:0', '192.0.2.10:4977', 'example.com:4977']) {
    assert.throws(
      () => apiAddress(addr, undefined),
      (e: unknown) => isHypsinkError(e) && e.code === 'HYPSINK_ERR_CONFIG' && /--api/.test(e.message) && /HYPSINK_API_TOKEN/.test(e.hint),
      addr,
    );
  }
  for (const addr of ['127.0.0.1:0', 'localhost:0', '[::1]:0', '4977']) assert.doesNotThrow(() => apiAddress(addr, undefined), addr);
  assert.doesNotThrow(() => apiAddress('0.0.0.0:0', API_TOKEN));
  // A short token is no protection.
  assert.throws(() => apiAddress('0.0.0.0:0', 'short'), (e: unknown) => isHypsinkError(e) && e.code === 'HYPSINK_ERR_CONFIG');
});
