/**
 * Outbox respool: a partition whose destination fails keeps its rows (and its
 * open intent), shows `lastError` in status, is deferred by the daemon's
 * backoff, and once the destination is fixed the next tick exports every row
 * once — none skipped, none twice — while other partitions go on exporting.
 */
import assert from 'node:assert/strict';
import { promises as fsp, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { test } from 'node:test';
import {
  assertExactlyOnce,
  cli,
  FIXTURE_PLUGINS,
  ingest,
  openKernel,
  partitionStatus,
  range,
  readExports,
  sampleConfig,
  writeConfig,
  cliStatus,
} from '../support/kernel.js';
import { tempDir } from '../support/tmp.js';

const status = cliStatus;

test('local-fs: a partition whose folder is a regular file fails alone, is respooled, and exports every row once when fixed', async () => {
  const dir = tempDir();
  const config = await writeConfig(dir, sampleConfig());
  const exports = join(dir, 'exports');
  // The destination folder of partition "bad" is taken by a regular file.
  await fsp.mkdir(join(exports, 'events'), { recursive: true });
  const blocker = join(exports, 'events/source=bad');
  await fsp.writeFile(blocker, 'not a folder');
  const { k, logs } = await openKernel(config);
  try {
    await ingest(k, 'web', 1, 5);
    await ingest(k, 'bad', 1, 5);
    const [t1] = await k.export();
    const bad = t1!.partitions.find((p) => p.partition.source === 'bad')!;
    const web = t1!.partitions.find((p) => p.partition.source === 'web')!;
    assert.equal(bad.error?.code, 'HYPSINK_ERR_DESTINATION');
    assert.match(bad.error!.message, /sink "archive"/);
    assert.match(bad.error!.message, /source=bad/);
    assert.equal(bad.rows, 0);
    assert.equal(web.rows, 5, 'the healthy partition exported');
    assert.equal(t1!.failed, 1);
    assert.equal(k.driver.outboxSize(), 1);
    assert.ok(logs.some((l) => l.level === 50 && l.source === 'bad' && l.code === 'HYPSINK_ERR_DESTINATION'));

    let s = await status(config);
    const failing = partitionStatus(s, 'archive', 'bad');
    assert.match(failing.lastError ?? '', /^HYPSINK_ERR_DESTINATION: .*source=bad/);
    assert.equal(failing.watermark, null, 'a failure never advances the watermark');
    assert.equal(failing.pendingRows, 5);
    assert.notEqual(failing.intent, null, 'the planned unit stays as the intent');
    assert.equal(partitionStatus(s, 'archive', 'web').lastError, null);

    // The CLI export reports the failure with exit 1 and names it.
    const c = await cli('export', '--json', '--config', config);
    assert.equal(c.code, 1);
    assert.match(c.err, /HYPSINK_ERR_DESTINATION/);

    // The daemon's tick leaves a failed partition until its backoff has passed.
    const [t2] = await k.export(undefined, { respectBackoff: true });
    assert.equal(t2!.partitions.find((p) => p.partition.source === 'bad')!.deferred, true);

    // More rows arrive while it fails, then the destination is fixed.
    await ingest(k, 'bad', 6, 3);
    await ingest(k, 'web', 6, 1);
    await fsp.rm(blocker);
    const [t3] = await k.export();
    assert.equal(t3!.failed, 0);
    assert.equal(t3!.partitions.find((p) => p.partition.source === 'bad')!.rows, 8);
    assert.equal(k.driver.outboxSize(), 0, 'out of the outbox');
    s = await status(config);
    const fixed = partitionStatus(s, 'archive', 'bad');
    assert.deepEqual(
      [fixed.lastError, fixed.intent, fixed.pendingRows, fixed.exportedRows, fixed.watermark],
      [null, null, 0, 8, fixed.highWater],
    );
    assertExactlyOnce(await readExports(exports), { web: range(1, 6), bad: range(1, 8) });
  } finally {
    await k.close();
  }
});

test('a retryable destination failure over several ticks, then recovery: every row once', async () => {
  const dir = tempDir();
  const cfg = sampleConfig();
  cfg.plugins = [relative(dir, join(FIXTURE_PLUGINS, 'file-sink'))];
  cfg.sinks = {
    central: { plugin: 'test-file-sink', datasets: ['events'], config: { out: 'received', maxRows: 3, failWhile: 'down' } },
  };
  const config = await writeConfig(dir, cfg);
  await fsp.writeFile(join(dir, 'down'), '');
  const { k } = await openKernel(config);
  try {
    let id = 1;
    for (let tick = 0; tick < 3; tick++) {
      await ingest(k, 'web', id, 2);
      id += 2;
      const [t] = await k.export();
      assert.equal(t!.partitions[0]!.error?.code, 'HYPSINK_ERR_RETRYABLE');
      assert.equal(t!.partitions[0]!.error?.retryable, true);
    }
    const failing = partitionStatus(await status(config), 'central', 'web');
    assert.match(failing.lastError ?? '', /^HYPSINK_ERR_RETRYABLE: .*receiver is down/);
    assert.deepEqual([failing.watermark, failing.pendingRows], [null, 6]);

    await fsp.rm(join(dir, 'down'));
    const [t] = await k.export();
    assert.equal(t!.failed, 0);
    assert.equal(t!.rows, 6);
    const got = readFileSync(join(dir, 'received/received.ndjson'), 'utf8')
      .split('\n')
      .filter(Boolean)
      .flatMap((l) => (JSON.parse(l) as { rows: { id: number }[] }).rows.map((r) => r.id));
    assert.deepEqual(got, range(1, 6), 'every row once, in order');
    const ok = partitionStatus(await status(config), 'central', 'web');
    assert.deepEqual([ok.lastError, ok.intent, ok.exportedRows, ok.watermark], [null, null, 6, ok.highWater]);
  } finally {
    await k.close();
  }
});

test('a unit refused as too large (413) is re-planned half as big under a new id, once per unit', async () => {
  const dir = tempDir();
  const cfg = sampleConfig();
  cfg.plugins = [relative(dir, join(FIXTURE_PLUGINS, 'file-sink'))];
  cfg.sinks = {
    central: { plugin: 'test-file-sink', datasets: ['events'], config: { out: 'received', maxRows: 8, maxAccept: 4 } },
    strict: { plugin: 'test-file-sink', datasets: ['events'], config: { out: 'strict', maxRows: 8, maxAccept: 3 } },
  };
  const config = await writeConfig(dir, cfg);
  const { k } = await openKernel(config);
  try {
    await ingest(k, 'web', 1, 20);
    const [t] = await k.export('central');
    assert.deepEqual([t!.failed, t!.rows, t!.units], [0, 20, 5], 'each refused 8-row unit went as a 4-row one');
    const got = readFileSync(join(dir, 'received/received.ndjson'), 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as { unit: string; rows: { id: number }[] });
    assert.deepEqual(
      got.map((r) => r.rows.length),
      [4, 4, 4, 4, 4],
    );
    assert.deepEqual(
      got.flatMap((r) => r.rows.map((x) => x.id)),
      range(1, 20),
    );
    const p = partitionStatus(await status(config), 'central', 'web');
    assert.deepEqual([p.intent, p.exportedRows, p.watermark, p.lastError], [null, 20, p.highWater, null]);

    // Halved once and still too large: the partition fails (outbox), nothing is advanced past what was stored.
    const [s] = await k.export('strict');
    const e = s!.partitions[0]!.error;
    assert.equal(e?.code, 'HYPSINK_ERR_DESTINATION');
    assert.equal(e?.tooLarge, true);
    const sp = partitionStatus(await status(config), 'strict', 'web');
    assert.equal(sp.watermark, null);
    assert.match(sp.lastError ?? '', /too large/);
  } finally {
    await k.close();
  }
});
