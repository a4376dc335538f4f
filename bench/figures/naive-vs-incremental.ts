/**
 * Figure 8: over 50 ticks, each committing 1k new rows to a partition that
 * starts empty, the rows read by the incremental local-fs sink (the storage
 * counters over its ticks) ÷ the rows a naive exporter reads by re-reading the
 * whole partition every tick (`readBatchesSince` with no `since`). Starting
 * empty is the incremental sink's least favourable case.
 */
import type { BenchContext } from '../lib/context.js';
import { figure, type FigureGroup, le } from '../lib/figure.js';
import { fillPartition } from '../lib/fill.js';
import { localFsSink, openKernel, partitionOf, tick, writeWorkspace } from '../lib/kernel.js';
import { delta, snapshot } from '../lib/measure.js';

const TICKS = 50;
const ROWS_PER_TICK = 1000;

export const naiveVsIncremental: FigureGroup = {
  id: 'naive',
  title: 'rows read over 50 ticks: incremental sink ÷ naive full re-export',
  async run(ctx: BenchContext) {
    const k = await openKernel(await writeWorkspace(await ctx.tempDir('naive'), { archive: localFsSink('archive') }), ctx.log);
    const storage = k.cache.storage;
    const p = partitionOf(k, 'web');
    let incremental = 0;
    let naive = 0;
    let exported = 0;
    try {
      let nextId = 1;
      for (let t = 0; t < TICKS; t++) {
        nextId = await fillPartition(k, 'web', ROWS_PER_TICK, { firstId: nextId, run: t });
        const c0 = snapshot(storage.counters);
        exported += (await tick(k, 'archive')).rows;
        const c1 = snapshot(storage.counters);
        incremental += delta(c1, c0).rowsRead;
        let seen = 0;
        for await (const b of storage.readBatchesSince(p)) seen += b.rows;
        if (seen !== (t + 1) * ROWS_PER_TICK) throw new Error(`naive: read ${seen} rows at tick ${t + 1}`);
        naive += delta(storage.counters, c1).rowsRead;
      }
    } finally {
      await k.close();
    }
    if (exported !== TICKS * ROWS_PER_TICK) throw new Error(`naive: the sink exported ${exported} rows`);
    ctx.detail('naive_vs_incremental_rows_read_50_ticks', { ticks: TICKS, rowsPerTick: ROWS_PER_TICK, incrementalRowsRead: incremental, naiveRowsRead: naive });
    // Row counts, not times: the same on every run.
    return [figure('naive_vs_incremental_rows_read_50_ticks', incremental / naive, le(0.1), [incremental / naive])];
  },
};
