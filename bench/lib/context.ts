/**
 * What every figure group gets: the run mode, a temp folder of its own (removed
 * at the end of the run), a silent kernel logger, and a place for details the
 * table leaves out (medians, totals, what a figure was computed from).
 */
import { promises as fsp } from 'node:fs';
import { join } from 'node:path';
import type { Logger as Pino } from 'pino';
import { createLogger } from '../../kernel/log.js';

export interface BenchContext {
  readonly quick: boolean;
  readonly log: Pino;
  /** `full` rows in a full run, `quick` rows with --quick. */
  size(full: number, quick: number): number;
  /** A fresh folder under the run's temp root. */
  tempDir(name: string): Promise<string>;
  /** Record details of a figure (kept in results.json under `details`). */
  detail(figure: string, data: Record<string, unknown>): void;
  /** One progress line on stderr. */
  progress(msg: string): void;
}

export interface ContextState {
  readonly details: Record<string, Record<string, unknown>>;
}

export function createContext(root: string, quick: boolean, verbose: boolean): BenchContext & ContextState {
  const details: Record<string, Record<string, unknown>> = {};
  let n = 0;
  const started = performance.now();
  return {
    quick,
    details,
    log: createLogger('silent'),
    size: (full, q) => (quick ? q : full),
    async tempDir(name) {
      const dir = join(root, `${String(++n).padStart(2, '0')}-${name}`);
      await fsp.mkdir(dir, { recursive: true });
      return dir;
    },
    detail(figure, data) {
      details[figure] = { ...details[figure], ...data };
    },
    progress(msg) {
      if (verbose) process.stderr.write(`[bench +${((performance.now() - started) / 1000).toFixed(1)}s] ${msg}\n`);
    },
  };
}
