/**
 * Figure 4: local-fs Parquet export rows/s (N rows from a fresh watermark;
 * 1M, --quick 200k) ÷ rows/s of a raw copy of the same rows with no hypsink
 * code: each of the partition's cache data files read with parquet-wasm
 * `readParquet` (user columns only), taken to Arrow JS and back, written with
 * `writeParquet` (zstd, the encoder's row-group size) to a file. That is the
 * floor any cache → Parquet copy pays. Repetitions interleave raw and export;
 * each export uses a sink of its own, so each starts from no watermark.
 */
import { promises as fsp } from 'node:fs';
import { join } from 'node:path';
import { tableFromIPC, tableToIPC } from 'apache-arrow';
import * as pw from 'parquet-wasm/node';
import { DEFAULT_CONFIG } from '../../kernel/config/defaults.js';
import type { BenchContext } from '../lib/context.js';
import { figure, type FigureGroup, ge } from '../lib/figure.js';
import { dataFiles, localFsSink, openKernel, partitionOf, tick, writeWorkspace } from '../lib/kernel.js';
import { delta, pairedRates, settle, snapshot, timed } from '../lib/measure.js';
import type { ReadCounters } from '../../types/storage.js';
import { sharedPartition } from '../lib/shared.js';

const USER_COLUMNS = DEFAULT_CONFIG.datasets.activity.columns.map((c) => c.name);

/** Decode the user columns of each file, through Arrow JS, encode with zstd, write. */
async function rawCopy(files: readonly string[], outDir: string): Promise<number> {
  const props = () => new pw.WriterPropertiesBuilder().setCompression(pw.Compression.ZSTD).setMaxRowGroupSize(65_536).build();
  let rows = 0;
  for (const [i, path] of files.entries()) {
    const decoded = pw.readParquet(await fsp.readFile(path), { columns: [...USER_COLUMNS] });
    const table = tableFromIPC(decoded.intoIPCStream());
    rows += table.numRows;
    const out = pw.writeParquet(pw.Table.fromIPCStream(tableToIPC(table, 'stream')), props());
    await fsp.writeFile(join(outDir, `raw-${i}.parquet`), out);
  }
  return rows;
}

export const localFsVsRaw: FigureGroup = {
  id: 'localfs',
  title: 'local-fs Parquet export rows/s ÷ raw parquet-wasm decode+encode rows/s',
  async run(ctx: BenchContext) {
    const rows = ctx.size(1_000_000, 200_000);
    const reps = ctx.size(3, 5);
    const shared = await sharedPartition(ctx, rows);
    const dir = await ctx.tempDir('localfs');
    const sinks = Object.fromEntries(Array.from({ length: reps }, (_, i) => [`copy${i}`, localFsSink(`copy${i}`)]));
    const ws = await writeWorkspace(dir, sinks, shared.cacheRoot);
    const k = await openKernel(ws, ctx.log);
    const exportMs: number[] = [];
    const rawMs: number[] = [];
    const exportCpuMs: number[] = [];
    let files: string[] = [];
    let reads: ReadCounters | undefined;
    try {
      files = (await dataFiles(k, partitionOf(k, shared.source))).map((f) => f.path);
      for (let r = 0; r < reps; r++) {
        ctx.progress(`localfs: repetition ${r + 1}/${reps}`);
        const rawOut = join(dir, `raw-${r}`);
        await fsp.mkdir(rawOut);
        settle();
        const raw = await timed(() => rawCopy(files, rawOut));
        if (raw.value !== rows) throw new Error(`localfs: raw copy saw ${raw.value} rows, expected ${rows}`);
        rawMs.push(raw.ms);
        await fsp.rm(rawOut, { recursive: true });
        settle();
        const c0 = snapshot(k.cache.storage.counters);
        const cpu0 = process.cpuUsage();
        const exp = await timed(() => tick(k, `copy${r}`));
        const cpu = process.cpuUsage(cpu0);
        reads = delta(k.cache.storage.counters, c0);
        if (exp.value.rows !== rows) throw new Error(`localfs: export shipped ${exp.value.rows} rows, expected ${rows}`);
        exportMs.push(exp.ms);
        exportCpuMs.push((cpu.user + cpu.system) / 1000);
        await fsp.rm(join(dir, 'exports', `copy${r}`), { recursive: true });
      }
    } finally {
      await k.close();
    }
    const { paired, ratios, details } = pairedRates(rows, exportMs, rawMs);
    ctx.detail('localfs_export_vs_raw_parquet', {
      rows,
      cacheFiles: files.length,
      readsPerExport: reads,
      ...details,
      exportMs: exportMs.map(Math.round),
      exportCpuMs: exportCpuMs.map(Math.round),
      rawMs: rawMs.map(Math.round),
    });
    return [figure('localfs_export_vs_raw_parquet', paired, ge(0.7), ratios)];
  },
};
