/**
 * Figure 3: a tick over 100 partitions with nothing new, for a local-fs Parquet
 * sink and a forward sink (to the reference receiver, in this process). Both
 * have exported everything first. The figures: data files the tick opened, and
 * bytes sent — bytes of files the local-fs sink wrote plus bytes the receiver
 * was sent (the sinks' own byte counts; any request at all also fails it).
 */
import { join } from 'node:path';
import { startReceiver } from '../../fixtures/receiver/server.js';
import type { BenchContext } from '../lib/context.js';
import { eq, figure, type FigureGroup } from '../lib/figure.js';
import { tree } from '../lib/files.js';
import { DATASET, exportDir, forwardSink, localFsSink, openKernel, tick, writeWorkspace } from '../lib/kernel.js';
import { delta, snapshot, timed } from '../lib/measure.js';
import { demoValues } from '../lib/rows.js';

const PARTITIONS = 100;
const ROWS_EACH = 100;

export const noNewTick: FigureGroup = {
  id: 'nonew',
  title: 'no-new-rows tick over 100 partitions: files opened, bytes sent',
  async run(ctx: BenchContext) {
    const dir = await ctx.tempDir('nonew');
    const receiver = await startReceiver({ port: 0, dataDir: join(dir, 'receiver'), insecureNoAuth: true });
    try {
      const ws = await writeWorkspace(dir, { archive: localFsSink('archive'), central: forwardSink(receiver.url) });
      const k = await openKernel(ws, ctx.log);
      try {
        // One frame per partition, one flush: a data file in each of the 100 partitions.
        const schema = k.cache.schema(DATASET);
        const spool = { dataset: DATASET, id: 'bench-nonew' };
        for (let i = 0; i < PARTITIONS; i++) {
          const source = `p${String(i).padStart(3, '0')}`;
          await k.cache.appendValidated(spool, demoValues(schema, source, ROWS_EACH, i * ROWS_EACH + 1, i));
        }
        await k.cache.flushTable(spool);
        ctx.progress('nonew: first export of 100 partitions by both sinks');
        for (const s of ['archive', 'central']) {
          const r = await tick(k, s);
          if (r.rows !== PARTITIONS * ROWS_EACH) throw new Error(`nonew: sink ${s} exported ${r.rows} rows`);
        }
        const files0 = await tree(join(dir, exportDir('.', 'archive')));
        const req0 = receiver.stats().requests;
        const c0 = snapshot(k.cache.storage.counters);
        const a = await timed(() => tick(k, 'archive'));
        const f = await timed(() => tick(k, 'central'));
        const d = delta(k.cache.storage.counters, c0);
        const files1 = await tree(join(dir, exportDir('.', 'archive')));
        const requests = receiver.stats().requests - req0;
        const newFiles = files1.files - files0.files;
        const bytes = files1.bytes - files0.bytes + a.value.bytes + f.value.bytes;
        ctx.detail('no_new_tick_100_partitions_files_opened', { ...d, archiveTickMs: Math.round(a.ms), forwardTickMs: Math.round(f.ms) });
        ctx.detail('no_new_tick_100_partitions_bytes_sent', { newFiles, receiverRequests: requests, localFsBytes: files1.bytes - files0.bytes, forwardBytes: f.value.bytes });
        return [
          figure('no_new_tick_100_partitions_files_opened', d.filesOpened, eq(0), [d.filesOpened]),
          // Any request or new file is traffic, even an empty one.
          figure('no_new_tick_100_partitions_bytes_sent', bytes, eq(0), [bytes], requests === 0 && newFiles === 0),
        ];
      } finally {
        await k.close();
      }
    } finally {
      await receiver.close();
    }
  },
};
