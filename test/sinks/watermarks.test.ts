/**
 * The watermark store's guarantees (DESIGN §5): a damaged watermark or intent is
 * an error naming the file — never a silent reset to zero that would re-export
 * everything, nor a retention pass that trusts it — and a watermark never
 * moves backwards nor carries an intent that does not start at it.
 */
import assert from 'node:assert/strict';
import { promises as fsp } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { partitionRef } from '../../kernel/store/partition.js';
import { WatermarkStore, type WatermarkRecord } from '../../kernel/sinks/watermarks.js';
import { isHypsinkError } from '../../types/errors.js';
import { assertExactlyOnce, cli, ingest, openKernel, range, readExports, sampleConfig, writeConfig } from '../support/kernel.js';
import { tempDir } from '../support/tmp.js';

test('a damaged watermark file stops export, status and ack-coupled retention with an error naming it', async () => {
  const dir = tempDir();
  const cfg = sampleConfig();
  cfg.maintenance = { retention: { maxRows: 1 } };
  const config = await writeConfig(dir, cfg);
  const { k } = await openKernel(config);
  const file = join(dir, '.hypsink/state/sinks/archive/watermarks/events/source=web.json');
  try {
    await ingest(k, 'web', 1, 5);
    await ingest(k, 'app', 1, 2);
    await k.export();
    const good = await fsp.readFile(file, 'utf8');
    await ingest(k, 'web', 6, 2);
    await ingest(k, 'app', 3, 1);

    for (const damage of ['{"v":1,"continuation":', JSON.stringify({ ...JSON.parse(good), continuation: { v: 1, seq: 'abc' } })]) {
      await fsp.writeFile(file, damage);
      const [t] = await k.export();
      const web = t!.partitions.find((p) => p.partition.source === 'web')!;
      assert.equal(web.error?.code, 'HYPSINK_ERR_CORRUPT');
      assert.ok(web.error!.message.includes(file), 'names the file');
      assert.equal(web.rows, 0, 'nothing re-exported from zero');
      assert.equal(await fsp.readFile(file, 'utf8'), damage, 'the damaged file is left for the user');

      const s = await cli('status', '--json', '--config', config);
      assert.equal(s.code, 1);
      assert.match(s.err, new RegExp(`HYPSINK_ERR_CORRUPT: watermark ${file.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}`));

      const m = await cli('maintain', '--retention', '--config', config);
      assert.equal(m.code, 1, 'retention does not guess the ack floor');
      assert.match(m.err, /HYPSINK_ERR_CORRUPT/);
    }
    assert.equal((await k.cache.storage.stats(k.cache.partition('events', 'web'))).rows, 7, 'nothing pruned');

    await fsp.writeFile(file, good);
    const [t] = await k.export();
    assert.equal(t!.failed, 0);
    assertExactlyOnce(await readExports(join(dir, 'exports')), { web: range(1, 7), app: range(1, 3) });
  } finally {
    await k.close();
  }
});

test('watermark store paired assertions: never backwards, an intent starts at the watermark', async () => {
  const store = new WatermarkStore(tempDir());
  const p = partitionRef('events', 'web');
  const zero = await store.read(p);
  assert.deepEqual([zero.continuation, zero.exportedRowCount, zero.intent], [null, 0, null]);
  const at10: WatermarkRecord = { ...zero, continuation: { v: 1, seq: '10' }, exportedRowCount: 10 };
  const r10 = await store.write(p, zero, at10);
  const refused = async (next: WatermarkRecord, re: RegExp) =>
    assert.rejects(store.write(p, r10, next), (e: unknown) => isHypsinkError(e) && e.code === 'HYPSINK_ERR_INVARIANT' && re.test(e.message));
  await refused({ ...at10, continuation: { v: 1, seq: '9' } }, /backwards \(10 → 9\)/);
  await refused({ ...at10, intent: { since: '5', until: '20', unit: 'u' } }, /intent does not start at the watermark/);
  await refused({ ...at10, intent: { since: '10', until: '10', unit: 'u' } }, /not below until/);
  await refused({ ...at10, exportedRowCount: -1 }, /exportedRowCount/);
  // A next intent (LLP 0014) follows the intent without a hole, and only with one.
  const i20 = { since: '10', until: '20', unit: 'u' };
  await refused({ ...at10, intent: null, next: { since: '20', until: '30', unit: 'v' } }, /next intent does not start where the intent ends/);
  await refused({ ...at10, intent: i20, next: { since: '21', until: '30', unit: 'v' } }, /next intent does not start where the intent ends/);
  await refused({ ...at10, intent: i20, next: { since: '20', until: '20', unit: 'v' } }, /next intent since 20 is not below until 20/);
  const withIntent = await store.write(p, r10, { ...at10, intent: { since: '10', until: '20', unit: 'u' } });
  assert.deepEqual((await store.read(p)).intent, withIntent.intent);
  // A record damaged on disk is refused on read.
  await fsp.writeFile(store.path(p), JSON.stringify({ ...withIntent, intent: { since: '3', until: '20', unit: 'u' } }));
  await assert.rejects(store.read(p), (e: unknown) => isHypsinkError(e) && e.code === 'HYPSINK_ERR_CORRUPT' && e.message.includes(store.path(p)));
});

test('retention holds an intent and its next unit: both may be in flight', async () => {
  const dir = tempDir();
  const { k } = await openKernel(await writeConfig(dir, sampleConfig()));
  try {
    const p = k.cache.partition('events', 'web');
    const store = (await k.sink('archive')).watermarks;
    const zero = await store.read(p);
    const inFlight = async (x: typeof p) => (await k.retentionGuards()).inFlight(x);
    assert.deepEqual(await inFlight(p), []);
    const one = await store.write(p, zero, { ...zero, intent: { since: null, until: '7', unit: 'a' } });
    assert.deepEqual(await inFlight(p), [[0n, 7n]]);
    await store.write(p, one, { ...one, intent: { since: null, until: '7', unit: 'a' }, next: { since: '7', until: '14', unit: 'b' } });
    assert.deepEqual(await inFlight(p), [[0n, 14n]]);
  } finally {
    await k.close();
  }
});

test('export of an unknown sink is a config error (exit 2)', async () => {
  const dir = tempDir();
  const config = await writeConfig(dir, sampleConfig());
  const r = await cli('export', '--sink', 'nope', '--config', config);
  assert.equal(r.code, 2);
  assert.match(r.err, /no sink named "nope" \(configured: archive\)/);
});
