/**
 * An export to several sinks emits no process warning (issue 28: every such
 * export printed a MaxListenersExceededWarning). Many partitions of one
 * Iceberg table commit at once and lose races to each other, and each wait
 * before a retry left its listener on the signal every unit shares; the
 * kernel's signal is a fan-out to every unit in flight, and each unit now has
 * its own.
 * @ref LLP 0069
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ingest, openKernel, sampleConfig, writeConfig } from '../support/kernel.js';
import { tempDir } from '../support/tmp.js';

test('an export of many partitions to several sinks emits no warning', async () => {
  const warnings: string[] = [];
  const onWarning = (w: Error) => warnings.push(`${w.name}: ${w.message}\n${w.stack}`);
  process.on('warning', onWarning);
  try {
    const dir = tempDir('hypsink-listeners-');
    const c = sampleConfig();
    c.sinks.lines = { writer: '@hypsink/format-jsonl', destination: '@hypsink/local-fs', datasets: ['events'], config: { dir: 'lines' } };
    c.sinks.lake = { writer: '@hypsink/format-iceberg', destination: '@hypsink/local-fs', datasets: ['events'], config: { dir: 'lake' } };
    c.driver = { concurrency: 12 };
    const { k } = await openKernel(await writeConfig(dir, c));
    try {
      for (let s = 0; s < 12; s++) await ingest(k, `h${s}`, 1, 5);
      for (const t of await k.export()) for (const p of t.partitions) assert.equal(p.error, null, `${t.sink}: ${JSON.stringify(p.error)}`);
    } finally {
      await k.close();
    }
    // A warning is emitted on the next tick.
    await new Promise((r) => setImmediate(r));
    assert.deepEqual(warnings, []);
  } finally {
    process.off('warning', onWarning);
  }
});
