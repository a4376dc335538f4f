/**
 * `hypsink ctl` against a real `hypsink run --api` in a child process (README
 * "Operating hypsink", LLP 0067): status, pause, resume, reload (refused with a
 * broken config; SIGHUP with a good one), health; a wrong token; and `run`
 * refusing to listen beyond loopback without a token.
 */
import assert from 'node:assert/strict';
import { promises as fsp } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { test } from 'node:test';
import { startReceiver } from '../../fixtures/receiver/server.js';
import { cli } from '../support/kernel.js';
import { e2eConfig, ingestWith, type Json, spawnCli, TOKEN, workspace } from '../forward-e2e/helpers.js';

const YEARLY = '0 0 1 1 *';
const API_TOKEN = 'ctl-token-Hs7Dk2Pw9Lq4Mz8X';

/** A port nobody listens on: taken and released. */
function freePort(): Promise<number> {
  return new Promise<number>((done) => {
    const s = createServer().listen(0, '127.0.0.1', () => {
      const p = (s.address() as { port: number }).port;
      s.close(() => done(p));
    });
  });
}

test('hypsink ctl drives a running daemon: status, pause, resume, reload (broken, then SIGHUP), health; a wrong token is refused', async () => {
  const ws = await workspace('ctl');
  const r = await startReceiver({ port: 0, dataDir: ws.recv, token: TOKEN });
  const tokenFile = join(ws.dir, 'api-token');
  const badFile = join(ws.dir, 'bad-token');
  await fsp.writeFile(tokenFile, `${API_TOKEN}\n`);
  await fsp.writeFile(badFile, 'ctl-token-Hs7Dk2Pw9Lq4Mz8Y\n');
  const cfg = e2eConfig(r.url, { schedule: YEARLY });
  await ws.writeConfig(cfg);
  await ingestWith(ws.configPath, { alpha: [1, 5] });
  const metricsPort = await freePort();
  const run = spawnCli(['run', '--config', ws.configPath, '--api', '127.0.0.1:0', '--metrics-port', String(metricsPort), '--log-format', 'json'], {
    HYPSINK_API_TOKEN: API_TOKEN,
  });
  try {
    const url = String((await run.waitForLog((l) => l.msg === 'control API listening')).url);
    await run.waitForLog((l) => l.msg === 'tick' && l.sink === 'central');
    const ctl = (...args: string[]) => cli('ctl', ...args, '--api', url, '--token-file', tokenFile);

    const st = await ctl('status', '--json');
    assert.equal(st.code, 0, st.err);
    const status = JSON.parse(st.out) as { sinks: Json[]; daemon: Json };
    const central = status.sinks[0];
    assert.ok(central);
    assert.equal(central.state, 'running');
    assert.equal((central.partitions as Json[])[0]?.exportedRows, 5);
    assert.equal(status.daemon.config, ws.configPath);
    const text = await ctl('status');
    assert.match(text.out, /sink "central": running; last tick .*: 5 row\(s\)/);
    assert.match(text.out, /alpha/, 'the partitions table follows');

    const paused = await ctl('pause', 'central');
    assert.equal(paused.code, 0, paused.err);
    assert.match(paused.out, /^sink "central": paused/);
    assert.equal(JSON.parse((await ctl('status', 'central', '--json')).out).state, 'paused');
    const resumed = await ctl('resume', 'central');
    assert.match(resumed.out, /^sink "central": running/);

    // Replay of the exported range through the API: the receiver already holds it, nothing is sent.
    const wm = String((central.partitions as Json[])[0]?.watermark);
    const replay = await ctl('replay', 'central', '--dataset', 'events', '--source', 'alpha', '--until', wm);
    assert.equal(replay.code, 0, replay.err);
    assert.match(replay.out, /^sink "central": events\/source=alpha \(start, \d+\], 5 row\(s\) as .*: the destination already holds it/);
    const badSeq = await ctl('replay', 'central', '--dataset', 'events', '--source', 'alpha', '--until', 'x1');
    assert.equal(badSeq.code, 2);
    assert.match(badSeq.err, /--until "x1" is not a seq/);

    // Mistakes: no sink, an unknown sink, an unknown action.
    const noSink = await ctl('pause');
    assert.equal(noSink.code, 2);
    assert.match(noSink.err, /HYPSINK_ERR_USAGE: ctl pause needs the sink's name/);
    const unknown = await ctl('restart', 'nope');
    assert.equal(unknown.code, 2);
    assert.match(unknown.err, /HYPSINK_ERR_CONFIG: no sink named "nope"/);
    assert.equal((await ctl('explode')).code, 2);

    // A wrong token: 401, exit 1, nothing changed.
    const wrong = await cli('ctl', 'pause', 'central', '--api', url, '--token-file', badFile);
    assert.equal(wrong.code, 1);
    assert.match(wrong.err, /HYPSINK_ERR_AUTH: POST \/v1\/sinks\/central\/pause: this request carries no valid API token/);
    assert.doesNotMatch(wrong.err, /Hs7Dk2Pw9Lq4Mz8/, 'no token in the message');

    // A broken config: refused, exit 2, the running one stays.
    await fsp.writeFile(ws.configPath, '{ "sinks": ');
    const broken = await ctl('reload');
    assert.equal(broken.code, 2);
    assert.match(broken.err, /HYPSINK_ERR_CONFIG: .*hypsink\.config\.json: not valid JSON/);
    assert.equal(JSON.parse((await ctl('status', '--json')).out).sinks[0].state, 'running');

    // A good one, by SIGHUP: a second sink.
    const files = { writer: '@hypsink/format-jsonl', destination: '@hypsink/local-fs', datasets: ['events'], schedule: YEARLY, config: { dir: 'exports' } };
    await ws.writeConfig({ ...cfg, sinks: { ...(cfg.sinks as Json), files } });
    run.child.kill('SIGHUP');
    const reloaded = await run.waitForLog((l) => l.msg === 'config reloaded');
    assert.deepEqual(reloaded.added, ['files']);
    const after = JSON.parse((await ctl('status', '--json')).out) as { sinks: Json[] };
    assert.deepEqual(
      after.sinks.map((s) => s.name),
      ['central', 'files'],
    );
    // /metrics follows the kernel the reload put in place: the new sink's gauges are there.
    await run.waitForLog((l) => l.msg === 'tick' && l.sink === 'files');
    const scrape = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
    assert.match(scrape, /hypsink_watermark_seq\{sink="files",dataset="events",source="alpha"\} \d+/);
    assert.match(scrape, /hypsink_exported_rows_total\{sink="files",dataset="events",source="alpha"\} 5/);
    const viaCtl = await ctl('reload');
    assert.equal(viaCtl.code, 0, viaCtl.err);
    assert.match(viaCtl.out, /^config reloaded from .*: sinks central, files \(no sink changed\)/);

    const health = await ctl('health');
    assert.equal(health.code, 0, health.err);
    assert.equal(health.out.trim(), 'live; ready');

    run.child.kill('SIGTERM');
    const end = await run.exited;
    assert.equal(end.code, 0, end.stderr);
    assert.doesNotMatch(end.stderr, new RegExp(API_TOKEN), 'the token is never logged');
  } finally {
    if (run.child.exitCode === null) run.child.kill('SIGKILL');
    await r.close();
    await ws.cleanup();
  }
});

test('run --api beyond loopback without a token refuses to start, naming the flag; ctl with nothing listening says so', async () => {
  const ws = await workspace('ctl-refused');
  try {
    await ws.writeConfig(e2eConfig('http://127.0.0.1:9', { schedule: YEARLY }));
    const saved = process.env.HYPSINK_API_TOKEN;
    delete process.env.HYPSINK_API_TOKEN;
    try {
      const refused = await cli('run', '--config', ws.configPath, '--api', '0.0.0.0:0');
      assert.equal(refused.code, 2);
      assert.match(refused.err, /HYPSINK_ERR_CONFIG: --api 0\.0\.0\.0:0: 0\.0\.0\.0 is not a loopback address, and no API token is set/);
      assert.match(refused.err, /HYPSINK_API_TOKEN or a file named by --api-token-file/);
    } finally {
      if (saved !== undefined) process.env.HYPSINK_API_TOKEN = saved;
    }
    await assert.rejects(fsp.access(join(ws.dir, 'cache')), 'nothing was opened');

    const port = await freePort();
    const nobody = await cli('ctl', 'status', '--api', `127.0.0.1:${port}`);
    assert.equal(nobody.code, 1);
    assert.match(nobody.err, /HYPSINK_ERR_RETRYABLE: no hypsink API answers at http:\/\/127\.0\.0\.1:\d+ \(ECONNREFUSED\)/);
    assert.match(nobody.err, /hypsink run --api/);
  } finally {
    await ws.cleanup();
  }
});
