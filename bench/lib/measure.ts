/** Timing and counter helpers. */
import type { ReadCounters } from '../../types/storage.js';

export function median(xs: readonly number[]): number {
  if (xs.length === 0) return Number.NaN;
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

/**
 * An export's rows/s against a raw baseline's, from repetitions that alternate
 * the two. The figure is the median of per-pair ratios: each export and its raw
 * run are neighbours in time, so slow swings of the machine's load cancel.
 */
export function pairedRates(rows: number, exportMs: readonly number[], rawMs: readonly number[]) {
  const exportRate = rows / (median(exportMs) / 1000);
  const rawRate = rows / (median(rawMs) / 1000);
  const ratios = exportMs.map((e, i) => rawMs[i]! / e);
  return {
    paired: median(ratios),
    /** Each pair's ratio: the figure's spread. */
    ratios,
    details: {
      exportRowsPerS: Math.round(exportRate),
      rawRowsPerS: Math.round(rawRate),
      ratioOfMedians: Math.round((exportRate / rawRate) * 1000) / 1000,
    },
  };
}

/** Wall time of `fn` in ms, with its result. */
export async function timed<T>(fn: () => Promise<T>): Promise<{ ms: number; value: T }> {
  const t0 = performance.now();
  const value = await fn();
  return { ms: performance.now() - t0, value };
}

export function snapshot(c: ReadCounters): ReadCounters {
  return { ...c };
}

export function delta(after: ReadCounters, before: ReadCounters): ReadCounters {
  return {
    filesOpened: after.filesOpened - before.filesOpened,
    rowGroupsRead: after.rowGroupsRead - before.rowGroupsRead,
    bytesRead: after.bytesRead - before.bytesRead,
    rowsRead: after.rowsRead - before.rowsRead,
  };
}

/** A collection barrier between measurements, when node runs with --expose-gc. */
export function settle(): void {
  (globalThis as { gc?: () => void }).gc?.();
}
