/**
 * Read-only partitions shared by several figures (the local-fs copy and the
 * peak-RSS export read the same rows): built once per run, keyed by size.
 * A figure reads one through a workspace of its own whose config points at the
 * shared cache root, with sinks of its own, so no figure sees another's
 * watermarks. Figures that add rows build their own partitions.
 */
import { join } from 'node:path';
import type { BenchContext } from './context.js';
import { fillPartition } from './fill.js';
import { openKernel, writeWorkspace } from './kernel.js';

export interface SharedPartition {
  readonly cacheRoot: string;
  readonly source: string;
  readonly rows: number;
}

/** Rows per flush (one data file each) when building big partitions. */
export const BIG_FLUSH_ROWS = 200_000;

const built = new Map<number, Promise<SharedPartition>>();

export function sharedPartition(ctx: BenchContext, rows: number): Promise<SharedPartition> {
  let p = built.get(rows);
  if (!p) {
    p = build(ctx, rows);
    built.set(rows, p);
  }
  return p;
}

async function build(ctx: BenchContext, rows: number): Promise<SharedPartition> {
  const dir = await ctx.tempDir(`shared-${rows}`);
  const ws = await writeWorkspace(dir, {});
  const k = await openKernel(ws, ctx.log);
  try {
    ctx.progress(`building a shared partition of ${rows} rows`);
    await fillPartition(k, 'big', rows, { flushRows: BIG_FLUSH_ROWS });
  } finally {
    await k.close();
  }
  return { cacheRoot: join(dir, 'cache'), source: 'big', rows };
}
