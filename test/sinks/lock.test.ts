/**
 * Two exporters on one sink instance: while a child process is in a long
 * export (holding the sink lock), a second exporter with a short
 * `driver.lockWaitMs` fails with HYPSINK_ERR_LOCKED naming the holder's pid —
 * in this process and through the CLI (exit 1) — and never hangs. Once the
 * holder is SIGKILLed, its lock is taken over at once and the export finishes
 * the dead holder's unit: every row once.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, promises as fsp, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { test } from 'node:test';
import { isHypsinkError } from '../../types/errors.js';
import { BIN, FIXTURE_PLUGINS, ingest, openKernel, partitionStatus, range, runBin, sampleConfig, writeConfig } from '../support/kernel.js';
import { until } from '../support/proc.js';
import { tempDir } from '../support/tmp.js';

test('a second exporter of a locked sink fails fast with HYPSINK_ERR_LOCKED naming the holder pid', async () => {
  const dir = tempDir();
  const cfg = sampleConfig();
  cfg.plugins = [relative(dir, join(FIXTURE_PLUGINS, 'file-sink'))];
  cfg.driver = { lockWaitMs: 300 };
  cfg.sinks = { slow: { plugin: 'test-file-sink', datasets: ['events'], config: { out: 'received', holdWhile: 'hold' } } };
  const config = await writeConfig(dir, cfg);
  await fsp.writeFile(join(dir, 'hold'), '');
  const { k } = await openKernel(config);
  try {
    await ingest(k, 'web', 1, 5);

    const holder = spawn(process.execPath, [BIN, 'export', '--config', config], {
      env: { ...process.env, HYPSINK_FAULT: '', HYPSINK_LOG_LEVEL: 'warn' },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let holderErr = '';
    holder.stderr.on('data', (c: Buffer) => {
      holderErr += c.toString();
    });
    const exited = new Promise<NodeJS.Signals | null>((r) => holder.on('close', (_c, sig) => r(sig)));
    try {
      const marker = join(dir, 'received/shipping');
      await until(() => existsSync(marker), 15_000, `the child to start shipping (${holderErr})`);
      assert.equal(readFileSync(marker, 'utf8'), String(holder.pid), 'the child is the one shipping');

      const t0 = Date.now();
      const err = await k.export('slow').then(
        () => assert.fail('the second exporter must not run while the first holds the lock'),
        (e: unknown) => e,
      );
      const waited = Date.now() - t0;
      assert.ok(isHypsinkError(err), String(err));
      assert.equal(err.code, 'HYPSINK_ERR_LOCKED');
      assert.match(err.message, new RegExp(`sink "slow".*locked by pid ${holder.pid}\\b`));
      assert.ok(waited >= 250 && waited < 5_000, `bounded wait, took ${waited} ms`);

      const c = await runBin(['export', '--config', config]);
      assert.equal(c.code, 1, c.stderr);
      assert.match(c.stderr, new RegExp(`HYPSINK_ERR_LOCKED: sink "slow".*pid ${holder.pid}\\b`));
      assert.equal(partitionStatus(await k.status(), 'slow', 'web').watermark, null, 'nothing exported meanwhile');
    } finally {
      holder.kill('SIGKILL');
    }
    assert.equal(await exited, 'SIGKILL');
    await fsp.rm(join(dir, 'hold'));

    // The dead holder's lock is taken over at once; its open intent is finished.
    const [t] = await k.export('slow');
    assert.equal(t!.rows, 5);
    const got = readFileSync(join(dir, 'received/received.ndjson'), 'utf8')
      .split('\n')
      .filter(Boolean)
      .flatMap((l) => (JSON.parse(l) as { rows: { id: number }[] }).rows.map((r) => r.id));
    assert.deepEqual(got, range(1, 5));
    const p = partitionStatus(await k.status(), 'slow', 'web');
    assert.deepEqual([p.intent, p.watermark, p.exportedRows], [null, p.highWater, 5]);
  } finally {
    await k.close();
  }
});
