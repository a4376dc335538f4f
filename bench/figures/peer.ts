/**
 * hypsink against what a user would pick instead, on the same rows (issue 30):
 * N demo rows of NDJSON (1M; --quick 200k) through `hypsink ingest` then
 * `hypsink export` (the compiled CLI, a local-fs Parquet sink, zstd), and
 * through one DuckDB job that reads the NDJSON and writes zstd Parquet
 * (bench/child/duckdb-copy.mjs), each a whole process, repetitions
 * interleaved so a slow moment of the machine falls on both. The ratios are
 * of rows/s (DuckDB's time ÷ ours) and of the Parquet bytes written.
 * Reported beside them, with no target: the export against DuckDB reading the
 * same cache files and writing their rows as Parquet (duckdb-copy.mjs's `recode`),
 * the export's own decode and encode done by a native engine. @ref LLP 0101, LLP 0111
 */
import { promises as fsp } from 'node:fs';
import { join } from 'node:path';
import type { BenchContext } from '../lib/context.js';
import { figure, type FigureGroup, ge, le, report, type Target } from '../lib/figure.js';
import { tree } from '../lib/files.js';
import { DATASET, localFsSink, writeWorkspace } from '../lib/kernel.js';
import { median } from '../lib/measure.js';
import { BIN, timeNode } from '../lib/process.js';
import { REPO } from '../lib/receiver.js';
import { writeNdjson } from '../lib/rows.js';

const DUCKDB_COPY = join(REPO, 'bench/child/duckdb-copy.mjs');

export const peer: FigureGroup = {
  id: 'peer',
  title: 'hypsink ingest and export against a DuckDB NDJSON → Parquet job, same rows, same run',
  async run(ctx: BenchContext) {
    const rows = ctx.size(1_000_000, 200_000);
    const reps = 3;
    const dir = await ctx.tempDir('peer');
    const input = join(dir, 'rows.ndjson');
    const ndjsonBytes = await writeNdjson(input, rows);
    const ms = { duckdb: [] as number[], ingest: [] as number[], recode: [] as number[], export: [] as number[] };
    const bytes = { duckdb: [] as number[], hypsink: [] as number[] };
    for (let r = 0; r < reps; r++) {
      ctx.progress(`peer: repetition ${r + 1}/${reps} of ${rows} rows`);
      const out = join(dir, `duckdb-${r}.parquet`);
      ms.duckdb.push(await timeNode([DUCKDB_COPY, 'ndjson', input, out], dir));
      bytes.duckdb.push((await fsp.stat(out)).size);
      await fsp.rm(out);
      // A workspace (cache, state, sink) of its own per repetition: every export starts from nothing.
      const ws = await writeWorkspace(await ctx.tempDir(`peer-${r}`), { lake: localFsSink('lake') });
      ms.ingest.push(await timeNode([BIN, '--config', ws.configPath, 'ingest', DATASET, '--source', 'peer', '--file', input], ws.dir));
      const recoded = join(dir, `recode-${r}.parquet`);
      ms.recode.push(await timeNode([DUCKDB_COPY, 'recode', join(ws.dir, 'cache'), recoded], dir));
      await fsp.rm(recoded);
      ms.export.push(await timeNode([BIN, '--config', ws.configPath, 'export', '--sink', 'lake'], ws.dir));
      bytes.hypsink.push((await tree(join(ws.dir, 'exports', 'lake'), (name) => name.endsWith('.parquet'))).bytes);
      await fsp.rm(ws.dir, { recursive: true });
    }
    ctx.detail('peer', {
      rows,
      ndjsonBytes,
      ms: Object.fromEntries(Object.entries(ms).map(([k, v]) => [k, v.map(Math.round)])),
      bytes,
    });
    // Per repetition: a ÷ b. Of rows/s, ours ÷ theirs is their time ÷ ours.
    const per = (a: number[], b: number[]) => a.map((x, i) => x / b[i]!);
    const ratio = (name: string, samples: number[], target: Target) => figure(name, median(samples), target, samples);
    return [
      ratio('peer_export_vs_duckdb', per(ms.duckdb, ms.export), ge(1.0)),
      ratio('peer_ingest_vs_duckdb', per(ms.duckdb, ms.ingest), ge(0.5)),
      ratio('peer_parquet_bytes_vs_duckdb', per(bytes.hypsink, bytes.duckdb), le(1.05)),
      ratio('peer_export_vs_duckdb_recode', per(ms.recode, ms.export), report),
      ratio('peer_duckdb_recode_vs_duckdb_copy', per(ms.duckdb, ms.recode), report),
    ];
  },
};
