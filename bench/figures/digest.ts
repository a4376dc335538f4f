/**
 * The unit digest's cost (issue 29): local-fs Parquet export rows/s as
 * shipped (every unit's digest computed when it is planned) ÷ rows/s without
 * the digest, over the same units (N rows from a fresh watermark; 1M,
 * --quick 200k). The digest runs on its own, before each unit's intent is
 * written, so "without" is the export's time less the time of the same
 * digests computed alone, in the same repetition, over the same units (read
 * back from the blob keys the export wrote). @ref LLP 0054
 */
import { promises as fsp } from 'node:fs';
import { join } from 'node:path';
import { unitDigest } from '../../kernel/sinks/digest.js';
import type { BenchContext } from '../lib/context.js';
import { figure, type FigureGroup, ge } from '../lib/figure.js';
import { localFsSink, openKernel, partitionOf, tick, writeWorkspace } from '../lib/kernel.js';
import { settle, timed } from '../lib/measure.js';
import { sharedPartition } from '../lib/shared.js';

/** Every `(since, until]` of the blobs under `dir`, from their keys. */
async function unitRanges(dir: string): Promise<[bigint, string][]> {
  const out: [bigint, string][] = [];
  const walk = async (d: string): Promise<void> => {
    for (const e of await fsp.readdir(d, { withFileTypes: true })) {
      if (e.name === '.hypsink-tmp') continue;
      if (e.isDirectory()) await walk(join(d, e.name));
      const m = /\.(\d+)-(\d+)\.parquet$/.exec(e.name);
      if (m) out.push([m[1] === '0' ? -1n : BigInt(m[1]!), m[2]!]);
    }
  };
  await walk(dir);
  return out;
}

export const digestCost: FigureGroup = {
  id: 'digest',
  title: "local-fs Parquet export rows/s with every unit's digest ÷ the same export without it",
  async run(ctx: BenchContext) {
    const rows = ctx.size(1_000_000, 200_000);
    const reps = ctx.size(3, 5);
    const shared = await sharedPartition(ctx, rows);
    const dir = await ctx.tempDir('digest');
    const sinks = Object.fromEntries(Array.from({ length: reps }, (_, r) => [`d${r}`, localFsSink(`d${r}`)]));
    const k = await openKernel(await writeWorkspace(dir, sinks, shared.cacheRoot), ctx.log);
    const withMs: number[] = [];
    const digestMs: number[] = [];
    let units = 0;
    try {
      const p = partitionOf(k, shared.source);
      for (let r = 0; r < reps; r++) {
        ctx.progress(`digest: repetition ${r + 1}/${reps}`);
        settle();
        const t = await timed(() => tick(k, `d${r}`));
        if (t.value.rows !== rows) throw new Error(`digest: d${r} shipped ${t.value.rows} rows, expected ${rows}`);
        const out = join(dir, 'exports', `d${r}`);
        const ranges = await unitRanges(out);
        units = ranges.length;
        settle();
        const d = await timed(async () => {
          for (const [since, until] of ranges) await unitDigest(k.cache, p, since, until);
        });
        withMs.push(t.ms);
        digestMs.push(d.ms);
        await fsp.rm(out, { recursive: true });
      }
    } finally {
      await k.close();
    }
    // rows/s with ÷ rows/s without = (time with the digest − the digest's time) ÷ time with it.
    const ratios = withMs.map((w, i) => (w - digestMs[i]!) / w);
    const sorted = [...ratios].sort((a, b) => a - b);
    ctx.detail('export_with_digest_vs_without', { rows, units, withMs: withMs.map(Math.round), digestMs: digestMs.map(Math.round) });
    return [figure('export_with_digest_vs_without', sorted[Math.floor(sorted.length / 2)]!, ge(0.95), ratios)];
  },
};
