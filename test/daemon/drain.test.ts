/**
 * The daemon's drain (README "Restarts and shutdown"): stop() stops the
 * scheduling, ends parked waits at once, lets a unit in the middle of its POST
 * finish within `drainMs`, then closes the plugins. A unit still running at the
 * bound is aborted and keeps its intent for the next run.
 *
 * The real kernel from a real config, the forward sink, and the reference
 * receiver over loopback; `chaos.delayFirst` holds the first POST at the
 * receiver (after its body arrived) to make a slow unit.
 */
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { test } from 'node:test';
import { startReceiver } from '../../fixtures/receiver/server.js';
import { Daemon } from '../../kernel/daemon.js';
import type { TickReport } from '../../kernel/sinks/driver.js';
import {
  assertExactlyOnce,
  e2eConfig,
  ids,
  ingestWith,
  type Json,
  openKernel,
  partitionStatus,
  statusOf,
  TOKEN,
  until,
  workspace,
} from '../forward-e2e/helpers.js';

/** Scheduled once a year: only the first tick at start runs. */
const YEARLY = '0 0 1 1 *';

test('stop() while a unit is mid-POST: the unit finishes within drainMs and its watermark advances', async () => {
  const ws = await workspace('drain-finish');
  const r = await startReceiver({ port: 0, dataDir: ws.recv, token: TOKEN, chaos: { delayFirst: { count: 1, ms: 1500 } } });
  try {
    await ws.writeConfig(e2eConfig(r.url, { schedule: YEARLY }));
    await ingestWith(ws.configPath, { alpha: [1, 5] });
    const { k, logs } = await openKernel(ws.configPath);
    const ticks: TickReport[] = [];
    const d = new Daemon(k, { onTick: (t) => ticks.push(t), drainMs: 20_000 });
    d.start();
    // The first tick's POST has reached the receiver, which holds it.
    await until(() => r.stats().inflight >= 1, 'the POST to be held at the receiver');
    await d.stop();

    assert.equal(ticks.length, 1, 'the running tick finished during the drain');
    const [t] = ticks;
    assert.equal(t?.failed, 0, `the unit was not aborted: ${JSON.stringify(t?.partitions.map((p) => p.error?.message))}`);
    assert.equal(t?.rows, 5);
    assert.deepEqual(
      logs.filter((l: Json) => l.code === 'HYPSINK_ERR_ABORTED'),
      [],
    );
    const p = partitionStatus(await statusOf(ws.configPath), 'alpha');
    assert.equal(p.exportedRows, 5, 'the watermark advanced past the unit');
    assert.equal(p.pendingRows, 0);
    assert.equal(p.intent, null, 'no intent left for the next run');
    await assertExactlyOnce(ws.recv, { alpha: ids(1, 5) });
  } finally {
    await r.close();
    await ws.cleanup();
  }
});

test('stop() with a unit slower than drainMs: it is aborted at the bound, and the next run finishes it under the same id', async () => {
  const ws = await workspace('drain-bound');
  // Held far longer than the drain bound (the receiver still stores it once the hold ends).
  const r = await startReceiver({ port: 0, dataDir: ws.recv, token: TOKEN, chaos: { delayFirst: { count: 1, ms: 3000 } } });
  try {
    await ws.writeConfig(e2eConfig(r.url, { schedule: YEARLY }));
    await ingestWith(ws.configPath, { alpha: [1, 5] });
    const { k } = await openKernel(ws.configPath);
    const ticks: TickReport[] = [];
    const d = new Daemon(k, { onTick: (t) => ticks.push(t), drainMs: 300 });
    d.start();
    await until(() => r.stats().inflight >= 1, 'the POST to be held at the receiver');
    await d.stop();
    assert.equal(ticks[0]?.failed, 1, 'the unit was cut off at the drain bound');
    assert.equal(ticks[0]?.partitions[0]?.error?.code, 'HYPSINK_ERR_ABORTED');
    const before = partitionStatus(await statusOf(ws.configPath), 'alpha');
    assert.equal(before.exportedRows, 0, 'no advance for an aborted unit');
    assert.ok(before.intent, 'the intent is kept for the next run');
    // The receiver ends its hold and stores the batch; the next run re-sends it under the same id.
    await until(() => r.stats().batchesStored === 1, 'the held batch to be stored');
    const next = await openKernel(ws.configPath);
    try {
      const [rep] = await next.k.export('central');
      assert.equal(rep?.failed, 0);
    } finally {
      await next.k.close();
    }
    assert.equal(r.stats().duplicates, 1, 'the re-sent unit was a duplicate at the receiver');
    const st = await assertExactlyOnce(ws.recv, { alpha: ids(1, 5) });
    assert.equal(st.ledger[0]?.id, before.intent.unit);
    assert.equal(partitionStatus(await statusOf(ws.configPath), 'alpha').exportedRows, 5);
  } finally {
    await r.close();
    await ws.cleanup();
  }
});

test('stop() while a unit is parked on backpressure: the wait ends at once, not at drainMs', async () => {
  const ws = await workspace('drain-parked');
  // Always 503 with Retry-After: 120.
  const r = await startReceiver({
    port: 0,
    dataDir: ws.recv,
    token: TOKEN,
    chaos: { throttleFirst: { count: 1_000_000, status: 503, retryAfter: '120' } },
  });
  try {
    await ws.writeConfig(e2eConfig(r.url, { schedule: YEARLY }));
    await ingestWith(ws.configPath, { alpha: [1, 5] });
    const { k, logs } = await openKernel(ws.configPath);
    const ticks: TickReport[] = [];
    // A bound far beyond the test's own patience: only an aborted wait lets stop() return.
    const d = new Daemon(k, { onTick: (t) => ticks.push(t), drainMs: 600_000 });
    d.start();
    await until(() => logs.some((l) => l.msg === 'receiver busy; waiting before re-sending the same batch' && l.waitMs === 120_000), 'the unit to park');
    const requests = r.stats().requests;
    const patience = new AbortController();
    const outcome = await Promise.race([d.stop().then(() => 'stopped'), sleep(30_000, 'still draining', { signal: patience.signal })]);
    patience.abort();
    assert.equal(outcome, 'stopped', 'the parked wait was abandoned, not waited out');
    assert.equal(r.stats().requests, requests, 'no request after the drain began');
    assert.equal(ticks[0]?.partitions[0]?.error?.code, 'HYPSINK_ERR_ABORTED');
    const p = partitionStatus(await statusOf(ws.configPath), 'alpha');
    assert.equal(p.exportedRows, 0);
    assert.ok(p.intent, 'the intent is kept for the next run');
  } finally {
    await r.close();
    await ws.cleanup();
  }
});
