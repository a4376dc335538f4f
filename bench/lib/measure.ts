/** Timing and counter helpers. */
import type { ReadCounters } from '../../types/storage.js';

export function median(xs: readonly number[]): number {
  if (xs.length === 0) return Number.NaN;
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
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
