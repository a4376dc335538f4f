/** `hypsink run --metrics-port`: a Prometheus scrape shows the export figures. */
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { createServer } from 'node:net';
import { after, test } from 'node:test';
import { createMetrics, serveMetrics } from '../../kernel/metrics.js';
import { type HeldAnswer, fetchWhileHeld } from '../support/held-fetch.js';
import { BIN, ingest, openKernel, sampleConfig, writeConfig } from '../support/kernel.js';
import { tempDir } from '../support/tmp.js';

function metric(text: string, name: string, labels: Record<string, string> = {}): number | undefined {
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`) && !line.startsWith(`${name} `)) continue;
    if (!Object.entries(labels).every(([k, v]) => line.includes(`${k}="${v}"`))) continue;
    return Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return undefined;
}

test('a scrape shows rows, bytes, units, pending rows, gap rows, watermark and tick durations', async () => {
  const dir = tempDir();
  const { k } = await openKernel(await writeConfig(dir, sampleConfig()));
  after(() => k.close());
  const server = await serveMetrics(createMetrics(k), 0);
  after(() => server.close());
  const url = `http://127.0.0.1:${server.port}/metrics`;
  await ingest(k, 'web', 1, 25);
  await k.export('archive');
  await ingest(k, 'web', 100, 7);
  const text = await (await fetch(url)).text();
  const l = { sink: 'archive', dataset: 'events', source: 'web' };
  assert.equal(metric(text, 'hypsink_exported_rows_total', l), 25);
  assert.ok((metric(text, 'hypsink_exported_bytes_total', l) ?? 0) > 0);
  assert.equal(metric(text, 'hypsink_units_committed_total', l), 1);
  assert.equal(metric(text, 'hypsink_pending_rows', l), 7, 'pending rows read at scrape time');
  assert.equal(metric(text, 'hypsink_gap_rows', l), 0);
  const status = await k.status();
  assert.equal(metric(text, 'hypsink_watermark_seq', l), Number(status.sinks[0]!.partitions[0]!.watermark));
  assert.equal(metric(text, 'hypsink_tick_duration_seconds_count', { sink: 'archive' }), 1);
  assert.equal(metric(text, 'hypsink_partition_failures_total', l), undefined, 'no failure yet');
});

async function freePort(): Promise<number> {
  const s = createServer().listen(0, '127.0.0.1');
  await once(s, 'listening');
  const port = (s.address() as { port: number }).port;
  s.close();
  return port;
}

test('hypsink run --metrics-port serves /metrics and drains on SIGTERM', async () => {
  const dir = tempDir();
  const config = await writeConfig(dir, sampleConfig());
  const port = await freePort();
  const child: ChildProcess = spawn(process.execPath, [BIN, 'run', '--config', config, '--metrics-port', String(port)], {
    cwd: dir,
    env: { ...process.env, HYPSINK_LOG_LEVEL: 'warn' },
    stdio: 'ignore',
  });
  const exited = once(child, 'exit');
  let text = '';
  for (let i = 0; i < 100 && !text.includes('hypsink_pending_rows'); i++) {
    await new Promise((r) => setTimeout(r, 100));
    text = await fetch(`http://127.0.0.1:${port}/metrics`).then((r) => r.text(), () => '');
  }
  assert.match(text, /# TYPE hypsink_exported_rows_total counter/);
  assert.match(text, /# TYPE hypsink_tick_duration_seconds histogram/);
  child.kill('SIGTERM');
  const [code] = await exited;
  assert.equal(code, 0);
});

test('a scrape during a tick is answered while the tick holds the kernel thread, with the last gauges (LLP 0068)', async () => {
  const dir = tempDir();
  const { k } = await openKernel(await writeConfig(dir, sampleConfig()));
  after(() => k.close());
  await ingest(k, 'web', 1, 25);
  const server = await serveMetrics(createMetrics(k), 0);
  after(() => server.close());
  let answers: HeldAnswer[] | null | undefined;
  // The tick is held at its start, on this thread: as a long encoding holds it, only harder.
  k.hooks.tickStart.tap('hold', () => {
    answers = fetchWhileHeld([`http://127.0.0.1:${server.port}/metrics`]);
  });
  const [r] = await k.export('archive');
  assert.equal(r?.rows, 25, 'the tick went on after the scrape');
  assert.ok(answers, 'the scrape was answered while the tick held the kernel thread');
  assert.equal(answers[0]?.status, 200);
  const text = answers[0].body;
  const l = { sink: 'archive', dataset: 'events', source: 'web' };
  assert.equal(metric(text, 'hypsink_pending_rows', l), 25, 'the gauges as last read, before the tick');
  assert.equal(metric(text, 'hypsink_exported_rows_total', l), undefined, 'nothing exported yet when it answered');
  // After the tick a scrape reads the gauges afresh.
  const afterTick = await (await fetch(`http://127.0.0.1:${server.port}/metrics`)).text();
  assert.equal(metric(afterTick, 'hypsink_pending_rows', l), 0);
  assert.equal(metric(afterTick, 'hypsink_exported_rows_total', l), 25);
});
