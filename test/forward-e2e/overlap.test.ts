/**
 * Two ticks of the same sink in one process. `hypsink run` starts one tick at
 * once and another on every cron fire (kernel/daemon.ts start()); croner's
 * `protect` only keeps a job from overlapping itself, and a forward tick can sit
 * in a backpressure wait for minutes (maxInlineWaitMs, default 300 s), so the
 * start tick and the next minute's tick do overlap. The sink lock is shared
 * within a process (kernel/io/lock.ts), so only an in-process guard can keep
 * them apart. Whatever the guard, no row may be delivered twice and the
 * watermark may never move backwards.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { startReceiver } from '../../fixtures/receiver/server.js';
import type { WatermarkAdvancedEvent } from '../../types/index.js';
import { assertExactlyOnce, e2eConfig, ids, ingest, openKernel, TOKEN, until, workspace } from './helpers.js';

test('overlapping ticks of one sink in one process deliver no row twice and never move the watermark back', async () => {
  const ws = await workspace('overlap');
  // The first POST is held 3 s after its body arrived: tick A stays mid-unit meanwhile.
  const r = await startReceiver({ port: 0, dataDir: ws.recv, token: TOKEN, chaos: { delayFirst: { count: 1, ms: 3000 } } });
  try {
    await ws.writeConfig(e2eConfig(r.url, { unit: { maxRows: 7 } }));
    const { k } = await openKernel(ws.configPath);
    try {
      const advances: WatermarkAdvancedEvent[] = [];
      k.hooks.watermarkAdvanced.tap('e2e', (e) => advances.push(e));
      await ingest(k, 'alpha', 1, 5); // a partial unit: (start, 5 rows]

      const tickA = k.export('central');
      await until(() => r.stats().inflight >= 1, 'tick A mid-POST');
      await ingest(k, 'alpha', 6, 2);
      // Tick B (the cron fire) while A waits for its answer.
      const b = await k.export('central');
      await ingest(k, 'alpha', 8, 1);
      const a = await tickA;
      // Whatever either tick left, one more tick finishes it.
      const c = await k.export('central');
      const errors = [a, b, c].flatMap((t) => t[0]?.partitions.map((p) => p.error?.message) ?? []).filter(Boolean);

      await assertExactlyOnce(ws.recv, { alpha: ids(1, 8) });
      const seqs = advances.map((e) => BigInt(e.to.seq));
      const back = seqs.findIndex((s, i) => i > 0 && s < seqs[i - 1]!);
      assert.equal(back, -1, `the watermark moved backwards: ${advances.map((e) => `${e.from?.seq ?? 'start'}→${e.to.seq}`).join(', ')}`);
      const status = await k.status();
      assert.equal(status.sinks[0]?.partitions[0]?.exportedRows, 8, `exported rows counted once (errors: ${errors.join('; ')})`);
    } finally {
      await k.close();
    }
  } finally {
    await r.close();
    await ws.cleanup();
  }
});
