/**
 * Figure 6: ingest + flush rows/s of the demo schema through `ingestNdjson`
 * (NDJSON file stream in → rows committed to the partition), as `hypsink ingest`
 * runs it, in this one Node process. An absolute figure: the machine's noise
 * is in it. The median of 5 runs, each into a fresh partition: the first
 * also starts the parse and flush workers, and the median leaves it out. CPU
 * time (process.cpuUsage, all threads) is kept alongside.
 */
import { createReadStream } from 'node:fs';
import { join } from 'node:path';
import { ingestNdjson } from '../../kernel/ingest/ingest.js';
import type { BenchContext } from '../lib/context.js';
import { figure, type FigureGroup, ge } from '../lib/figure.js';
import { DATASET, openKernel, partitionOf, writeWorkspace } from '../lib/kernel.js';
import { median, settle, timed } from '../lib/measure.js';
import { writeNdjson } from '../lib/rows.js';

export const ingest: FigureGroup = {
  id: 'ingest',
  title: 'ingest + flush rows/s (ingestNdjson, demo schema)',
  async run(ctx: BenchContext) {
    const rows = ctx.size(1_000_000, 200_000);
    const reps = 5;
    const dir = await ctx.tempDir('ingest');
    const file = join(dir, 'rows.ndjson');
    const bytes = await writeNdjson(file, rows);
    const k = await openKernel(await writeWorkspace(dir, {}), ctx.log);
    const ms: number[] = [];
    const cpuMs: number[] = [];
    try {
      for (let r = 0; r < reps; r++) {
        ctx.progress(`ingest: run ${r + 1}/${reps} of ${rows} rows`);
        const source = `ingest-${r}`;
        settle();
        const cpu0 = process.cpuUsage();
        const t = await timed(() => ingestNdjson(k, DATASET, source, createReadStream(file), file));
        const cpu = process.cpuUsage(cpu0);
        if (t.value.accepted !== rows || t.value.rejected !== 0) {
          throw new Error(`ingest: accepted ${t.value.accepted}, rejected ${t.value.rejected} of ${rows}`);
        }
        const stats = await k.cache.storage.stats(partitionOf(k, source));
        if (stats.rows !== rows) throw new Error(`ingest: partition holds ${stats.rows} rows, expected ${rows}`);
        ms.push(t.ms);
        cpuMs.push((cpu.user + cpu.system) / 1000);
      }
    } finally {
      await k.close();
    }
    const rate = rows / (median(ms) / 1000);
    ctx.detail('ingest_flush_rows_per_s', {
      rows,
      ndjsonBytes: bytes,
      ms: ms.map(Math.round),
      cpuMs: cpuMs.map(Math.round),
      rowsPerCpuS: Math.round(rows / (median(cpuMs) / 1000)),
    });
    return [figure('ingest_flush_rows_per_s', rate, ge(200_000), ms.map((x) => rows / (x / 1000)))];
  },
};
