/**
 * A sink may export promptly (DESIGN §6): it taps `cacheFlushed` and asks for a
 * tick (`SinkBuildContext.requestTick`), and `hypsink run` runs one at once
 * instead of waiting for the sink's schedule.
 */
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { test } from 'node:test';
import { Daemon } from '../../kernel/daemon.js';
import type { TickReport } from '../../kernel/sinks/driver.js';
import { FIXTURE_PLUGINS, ingest, openKernel, range, sampleConfig, writeConfig } from '../support/kernel.js';
import { until } from '../support/proc.js';
import { tempDir } from '../support/tmp.js';

function received(dir: string, out: string): number[] {
  const file = join(dir, out, 'received.ndjson');
  if (!existsSync(file)) return [];
  return readFileSync(file, 'utf8')
    .split('\n')
    .filter(Boolean)
    .flatMap((l) => (JSON.parse(l) as { rows: { id: number }[] }).rows.map((r) => r.id));
}

test('under `run`, a sink that asks for a tick on cacheFlushed exports new rows before its next scheduled tick', async () => {
  const dir = tempDir();
  const cfg = sampleConfig();
  cfg.plugins = [relative(dir, join(FIXTURE_PLUGINS, 'file-sink'))];
  // Both sinks are scheduled once a year: only the first tick at start and prompt ticks run.
  const yearly = '0 0 1 1 *';
  cfg.sinks = {
    prompt: { plugin: 'test-file-sink', datasets: ['events'], schedule: yearly, config: { out: 'prompt', promptOnFlush: true } },
    lazy: { plugin: 'test-file-sink', datasets: ['events'], schedule: yearly, config: { out: 'lazy' } },
  };
  const { k } = await openKernel(await writeConfig(dir, cfg));
  const ticks: TickReport[] = [];
  const daemon = new Daemon(k, { onTick: (r) => ticks.push(r) });
  try {
    daemon.start();
    await until(() => ticks.length >= 2, 10_000, 'the first tick of each sink');
    await ingest(k, 'web', 1, 3);
    await until(() => received(dir, 'prompt').length === 3, 10_000, 'the prompt sink to export');
    assert.deepEqual(received(dir, 'prompt'), range(1, 3));
    await ingest(k, 'web', 4, 2);
    await until(() => received(dir, 'prompt').length === 5, 10_000, 'the second export');
    assert.deepEqual(received(dir, 'prompt'), range(1, 5), 'every row once');
    // The other sink waits for its schedule: no tick of its own past the first.
    assert.deepEqual(received(dir, 'lazy'), []);
    assert.equal(ticks.filter((t) => t.sink === 'lazy').length, 1);
  } finally {
    await daemon.stop();
  }
});
