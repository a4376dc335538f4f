/**
 * Build partitions fast: validated demo rows appended to a spool in frames,
 * flushed every `flushRows` rows (each flush commits one data file per
 * partition). Not the ingest path: figure 6 measures that one.
 */
import type { Hypsink } from '../../kernel/runtime.js';
import { DATASET } from './kernel.js';
import { demoValues } from './rows.js';

export interface FillOptions {
  /** Rows per appended frame (default 50k). */
  readonly frameRows?: number;
  /** Flush after this many rows (default: once, at the end). */
  readonly flushRows?: number;
  /** The first row's id (default 1). */
  readonly firstId?: number;
  /** Varies the generated content. */
  readonly run?: number;
}

/** Append `n` demo rows to the partition `source` and flush them; returns the next free id. */
export async function fillPartition(k: Hypsink, source: string, n: number, opts: FillOptions = {}): Promise<number> {
  const frameRows = opts.frameRows ?? 50_000;
  const flushRows = opts.flushRows ?? n;
  const first = opts.firstId ?? 1;
  const schema = k.cache.schema(DATASET);
  const spool = { dataset: DATASET, id: `bench-${source.replace(/[^A-Za-z0-9_-]/g, '_')}` };
  let sinceFlush = 0;
  for (let done = 0; done < n; ) {
    const m = Math.min(frameRows, n - done, flushRows - sinceFlush);
    await k.cache.appendValidated(spool, demoValues(schema, source, m, first + done, (opts.run ?? 0) * 1000 + done / frameRows));
    done += m;
    sinceFlush += m;
    if (sinceFlush >= flushRows || done >= n) {
      await k.cache.flushTable(spool);
      sinceFlush = 0;
    }
  }
  return first + n;
}
