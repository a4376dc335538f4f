/**
 * Shutdown an operator controls (README "Shutdown", LLP 0068), with `hypsink
 * run` in a child process and the reference receiver over loopback:
 * `--drain-timeout` bounds the drain; a second SIGINT exits at once, and the
 * next run still delivers every row exactly once; `--require-healthy` refuses
 * to start on a sink whose connection check fails.
 *
 * `chaos.delayFirst` holds the first POST at the receiver (after its body
 * arrived): a unit in the middle of its write when the signal comes.
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createServer } from 'node:net';
import { test } from 'node:test';
import { startReceiver } from '../../fixtures/receiver/server.js';
import {
  assertExactlyOnce,
  e2eConfig,
  ids,
  ingestWith,
  type Json,
  logLines,
  partitionStatus,
  spawnCli,
  statusOf,
  TOKEN,
  until,
  withKernel,
  workspace,
} from '../forward-e2e/helpers.js';

/** Scheduled once a year: only the first tick at start runs. */
const YEARLY = '0 0 1 1 *';
const tick = (l: Json) => l.msg === 'tick';

/** The next run, in this process: one export of `central`, which must not fail. */
async function exportOnce(configPath: string): Promise<void> {
  await withKernel(configPath, async ({ k }) => {
    const [rep] = await k.export('central');
    assert.equal(rep?.failed, 0, JSON.stringify(rep?.partitions.map((p) => p.error?.message)));
  });
}

test('--drain-timeout 200ms: a unit held longer than that is aborted at the bound (the default 30 s would have let it finish), and the next run finishes it once', async () => {
  const ws = await workspace('drain-timeout');
  const r = await startReceiver({ port: 0, dataDir: ws.recv, token: TOKEN, chaos: { delayFirst: { count: 1, ms: 3000 } } });
  try {
    await ws.writeConfig(e2eConfig(r.url, { schedule: YEARLY }));
    await ingestWith(ws.configPath, { alpha: [1, 5] });
    const run = spawnCli(['run', '--config', ws.configPath, '--drain-timeout', '200ms']);
    await until(() => r.stats().inflight >= 1, 'the POST to be held at the receiver');
    run.child.kill('SIGTERM');
    const exit = await run.exited;
    assert.equal(exit.code, 0, exit.stderr);
    const lines = logLines(exit.stderr);
    assert.equal(lines.find((l) => l.msg?.toString().startsWith('draining'))?.drainTimeoutMs, 200);
    const t = lines.find(tick);
    assert.equal(t?.failed, 1, `the unit was cut off at the drain bound: ${exit.stderr}`);
    assert.ok(lines.some((l) => l.code === 'HYPSINK_ERR_ABORTED'));
    const p = partitionStatus(await statusOf(ws.configPath), 'alpha');
    assert.equal(p.exportedRows, 0, 'no advance for an aborted unit');
    assert.ok(p.intent, 'the intent is kept for the next run');
    await until(() => r.stats().batchesStored === 1, 'the held batch to be stored');
    await exportOnce(ws.configPath);
    await assertExactlyOnce(ws.recv, { alpha: ids(1, 5) });
  } finally {
    await r.close();
    await ws.cleanup();
  }
});

test('--drain-timeout that is not a duration is a usage mistake (exit 2)', async () => {
  const ws = await workspace('drain-timeout-bad');
  try {
    await ws.writeConfig(e2eConfig('http://127.0.0.1:9/', { schedule: YEARLY }));
    const exit = await spawnCli(['run', '--config', ws.configPath, '--drain-timeout', 'soon']).exited;
    assert.equal(exit.code, 2, exit.stderr);
    assert.match(exit.stderr, /--drain-timeout.*must be a duration/);
  } finally {
    await ws.cleanup();
  }
});

test('a second SIGINT during an export exits at once (130), saying the unit keeps its intent; the next run delivers every row exactly once', async () => {
  const ws = await workspace('second-signal');
  // Held far longer than it takes to send both signals; the receiver still stores it after.
  const r = await startReceiver({ port: 0, dataDir: ws.recv, token: TOKEN, chaos: { delayFirst: { count: 1, ms: 5000 } } });
  try {
    await ws.writeConfig(e2eConfig(r.url, { unit: { maxRows: 4 }, schedule: YEARLY }));
    await ingestWith(ws.configPath, { alpha: [1, 10], beta: [101, 3] });
    const run = spawnCli(['run', '--config', ws.configPath]);
    await until(() => r.stats().inflight >= 1, 'a POST to be held at the receiver');
    run.child.kill('SIGINT');
    await run.waitForLog((l) => String(l.msg).startsWith('draining'));
    run.child.kill('SIGINT');
    const exit = await run.exited;
    assert.equal(exit.signal, null, exit.stderr);
    assert.equal(exit.code, 130, `exited at once on the second SIGINT, not after the drain: ${exit.stderr}`);
    const forced = logLines(exit.stderr).find((l) => String(l.msg).startsWith('second SIGINT'));
    assert.match(String(forced?.msg), /keeps its intent and the next run finishes it, exactly once/);
    assert.equal(logLines(exit.stderr).filter(tick).length, 0, 'the tick never ended: the process left mid-unit');
    const before = await statusOf(ws.configPath);
    assert.ok(
      ['alpha', 'beta'].some((s) => partitionStatus(before, s).intent !== null),
      'a unit was cut off with its intent on disk',
    );
    await until(() => r.stats().batchesStored >= 1, 'the held batch to be stored');
    await exportOnce(ws.configPath);
    await assertExactlyOnce(ws.recv, { alpha: ids(1, 10), beta: ids(101, 3) });
  } finally {
    await r.close();
    await ws.cleanup();
  }
});

async function closedPort(): Promise<number> {
  const s = createServer().listen(0, '127.0.0.1');
  await once(s, 'listening');
  const port = (s.address() as { port: number }).port;
  await new Promise((done) => s.close(done));
  return port;
}

test('run --require-healthy: a sink whose destination refuses the connection stops the start (non-zero, naming the sink and the error); nothing is exported', async () => {
  const ws = await workspace('require-healthy-bad');
  try {
    await ws.writeConfig(e2eConfig(`http://127.0.0.1:${await closedPort()}`, { schedule: YEARLY }));
    await ingestWith(ws.configPath, { alpha: [1, 5] });
    const exit = await spawnCli(['run', '--config', ws.configPath, '--require-healthy']).exited;
    assert.notEqual(exit.code, 0, exit.stderr);
    assert.match(exit.stderr, /run --require-healthy: not starting: sink "central": FAILED — HYPSINK_ERR_\w+: .*ECONNREFUSED/);
    assert.equal(logLines(exit.stderr).filter((l) => String(l.msg).startsWith('hypsink running')).length, 0, 'the daemon never started');
    const p = partitionStatus(await statusOf(ws.configPath), 'alpha');
    assert.equal(p.exportedRows, 0);
    assert.equal(p.intent, null, 'no unit was begun');
  } finally {
    await ws.cleanup();
  }
});

test('run --require-healthy: with every destination reachable it starts and exports', async () => {
  const ws = await workspace('require-healthy-good');
  const r = await startReceiver({ port: 0, dataDir: ws.recv, token: TOKEN });
  try {
    await ws.writeConfig(e2eConfig(r.url, { schedule: YEARLY }));
    await ingestWith(ws.configPath, { alpha: [1, 5] });
    const run = spawnCli(['run', '--config', ws.configPath, '--require-healthy']);
    await run.waitForLog(tick);
    run.child.kill('SIGTERM');
    const exit = await run.exited;
    assert.equal(exit.code, 0, exit.stderr);
    await assertExactlyOnce(ws.recv, { alpha: ids(1, 5) });
  } finally {
    await r.close();
    await ws.cleanup();
  }
});
