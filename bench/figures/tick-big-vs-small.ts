/**
 * Figures 1 and 2: a tick that exports 1k new rows from a big partition (1M
 * rows; --quick 100k) against the same tick on a 1k-row partition, and the data
 * bytes the big tick read against the bytes of the files holding the new rows.
 *
 * Each partition lives in its own cache with one local-fs Parquet sink. Both
 * are exported up to their high water first; then, per repetition, 1k rows
 * are committed to each and one tick of each sink is timed (order alternating).
 * The figure is the median over repetitions of big ÷ small within a repetition:
 * the two ticks of a pair run back to back, so slow swings of the machine's
 * load cancel. The small partition grows by 1k per repetition: it stays tiny
 * next to the big one.
 */
import type { BenchContext } from '../lib/context.js';
import { figure, type FigureGroup, le } from '../lib/figure.js';
import { fillPartition } from '../lib/fill.js';
import { dataFiles, localFsSink, openKernel, partitionOf, tick, watermark, writeWorkspace } from '../lib/kernel.js';
import { delta, median, settle, snapshot, timed } from '../lib/measure.js';
import { BIG_FLUSH_ROWS } from '../lib/shared.js';
import type { Hypsink } from '../../kernel/runtime.js';

const NEW_ROWS = 1000;
const SINK = 'archive';

interface Side {
  readonly name: 'big' | 'small';
  readonly k: Hypsink;
  nextId: number;
  readonly ms: number[];
  /** CPU ms of the tick (all threads): steadier than wall time on a shared machine. */
  readonly cpuMs: number[];
  /** bytesRead of the tick ÷ bytes of the data files holding the new rows. */
  readonly readRatio: number[];
  readonly bytesRead: number[];
  readonly filesOpened: number[];
}

async function open(ctx: BenchContext, name: Side['name'], rows: number): Promise<Side> {
  const ws = await writeWorkspace(await ctx.tempDir(`tick-${name}`), { [SINK]: localFsSink(SINK) });
  const k = await openKernel(ws, ctx.log);
  ctx.progress(`tick: filling the ${name} partition with ${rows} rows`);
  const nextId = await fillPartition(k, name, rows, { flushRows: BIG_FLUSH_ROWS });
  ctx.progress(`tick: exporting the ${name} partition up to its high water`);
  const first = await tick(k, SINK);
  if (first.rows !== rows) throw new Error(`tick ${name}: first export shipped ${first.rows} of ${rows} rows`);
  return { name, k, nextId, ms: [], cpuMs: [], readRatio: [], bytesRead: [], filesOpened: [] };
}

/** Commit 1k rows, then time one tick exporting exactly them. */
async function step(side: Side, record: boolean): Promise<void> {
  const { k } = side;
  const p = partitionOf(k, side.name);
  const before = await watermark(k, SINK, p);
  side.nextId = await fillPartition(k, side.name, NEW_ROWS, { firstId: side.nextId, run: side.nextId });
  const newBytes = (await dataFiles(k, p)).filter((f) => f.maxSeq > before).reduce((n, f) => n + f.bytes, 0);
  settle();
  const c0 = snapshot(k.cache.storage.counters);
  const cpu0 = process.cpuUsage();
  const t = await timed(() => tick(k, SINK));
  const cpu = process.cpuUsage(cpu0);
  const d = delta(k.cache.storage.counters, c0);
  if (t.value.rows !== NEW_ROWS) throw new Error(`tick ${side.name}: exported ${t.value.rows} rows, expected ${NEW_ROWS}`);
  if (!record) return;
  side.ms.push(t.ms);
  side.cpuMs.push((cpu.user + cpu.system) / 1000);
  side.readRatio.push(d.bytesRead / newBytes);
  side.bytesRead.push(d.bytesRead);
  side.filesOpened.push(d.filesOpened);
}

export const tickBigVsSmall: FigureGroup = {
  id: 'tick',
  title: 'tick exporting 1k new rows: big ÷ small partition; bytes read ÷ new files',
  async run(ctx) {
    const bigRows = ctx.size(1_000_000, 100_000);
    const reps = ctx.size(41, 31);
    const warmup = 2;
    const big = await open(ctx, 'big', bigRows);
    const small = await open(ctx, 'small', NEW_ROWS);
    try {
      for (let r = 0; r < warmup + reps; r++) {
        const order = r % 2 ? [small, big] : [big, small];
        for (const s of order) await step(s, r >= warmup);
      }
    } finally {
      await big.k.close();
      await small.k.close();
    }
    const ratios = big.ms.map((b, i) => b / small.ms[i]!);
    const ratio = median(ratios);
    const readRatio = median(big.readRatio);
    ctx.detail('tick_1k_on_big_vs_small', {
      bigRows,
      reps,
      ratioOfMedians: Math.round((median(big.ms) / median(small.ms)) * 1000) / 1000,
      bigMsMedian: Math.round(median(big.ms) * 10) / 10,
      smallMsMedian: Math.round(median(small.ms) * 10) / 10,
      bigCpuMsMedian: Math.round(median(big.cpuMs) * 10) / 10,
      smallCpuMsMedian: Math.round(median(small.cpuMs) * 10) / 10,
      bigMs: big.ms.map(Math.round),
      smallMs: small.ms.map(Math.round),
    });
    ctx.detail('bytes_read_vs_new_files', {
      bigBytesReadMedian: median(big.bytesRead),
      bigFilesOpened: big.filesOpened,
      ratios: big.readRatio.map((x) => Math.round(x * 1000) / 1000),
    });
    return [figure('tick_1k_on_big_vs_small', ratio, le(1.5), ratios), figure('bytes_read_vs_new_files', readRatio, le(2), big.readRatio)];
  },
};
