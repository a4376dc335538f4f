/**
 * The transforms figure (issue 17): local-fs Parquet export rows/s of a sink
 * with `select` (every column, so the output is the same size) and `redact`
 * (email, bearer) on the JSON payload ÷ rows/s of the same sink without
 * transforms, over the same units (N rows from a fresh watermark; 1M,
 * --quick 200k). Each repetition runs both, in alternating order, each with
 * a sink of its own. @ref LLP 0046, LLP 0049
 */
import { promises as fsp } from 'node:fs';
import { join } from 'node:path';
import { DEFAULT_CONFIG } from '../../kernel/config/defaults.js';
import type { BenchContext } from '../lib/context.js';
import { figure, type FigureGroup, ge } from '../lib/figure.js';
import { localFsSink, openKernel, type SinkSpec, tick, writeWorkspace } from '../lib/kernel.js';
import { pairedRates, settle, timed } from '../lib/measure.js';
import { sharedPartition } from '../lib/shared.js';

const COLUMNS = DEFAULT_CONFIG.datasets.activity.columns.map((c) => c.name);
const CHAIN = [{ select: COLUMNS }, { redact: { columns: ['payload'], patterns: ['email', 'bearer'] } }];

export const transformsExport: FigureGroup = {
  id: 'transforms',
  title: 'local-fs Parquet export rows/s with select + redact on one column ÷ the same sink without transforms',
  async run(ctx: BenchContext) {
    const rows = ctx.size(1_000_000, 200_000);
    const reps = ctx.size(3, 5);
    const shared = await sharedPartition(ctx, rows);
    const dir = await ctx.tempDir('transforms');
    const sinks: Record<string, SinkSpec> = {};
    for (let r = 0; r < reps; r++) {
      sinks[`plain${r}`] = localFsSink(`plain${r}`);
      sinks[`xform${r}`] = { ...localFsSink(`xform${r}`), transforms: CHAIN };
    }
    const k = await openKernel(await writeWorkspace(dir, sinks, shared.cacheRoot), ctx.log);
    const plainMs: number[] = [];
    const xformMs: number[] = [];
    try {
      const side = async (name: string, into: number[]) => {
        settle();
        const t = await timed(() => tick(k, name));
        if (t.value.rows !== rows) throw new Error(`transforms: ${name} shipped ${t.value.rows} rows, expected ${rows}`);
        into.push(t.ms);
        await fsp.rm(join(dir, 'exports', name), { recursive: true });
      };
      for (let r = 0; r < reps; r++) {
        ctx.progress(`transforms: repetition ${r + 1}/${reps}`);
        if (r % 2 === 0) {
          await side(`plain${r}`, plainMs);
          await side(`xform${r}`, xformMs);
        } else {
          await side(`xform${r}`, xformMs);
          await side(`plain${r}`, plainMs);
        }
      }
    } finally {
      await k.close();
    }
    const { paired, ratios, details } = pairedRates(rows, xformMs, plainMs);
    ctx.detail('transforms_export_vs_plain', { rows, chain: CHAIN, ...details, xformMs: xformMs.map(Math.round), plainMs: plainMs.map(Math.round) });
    return [figure('transforms_export_vs_plain', paired, ge(0.8), ratios)];
  },
};
