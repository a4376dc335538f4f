import type { DatasetSchema } from '../../types/schema.js';
import { Cache, type CacheOptions } from '../../kernel/cache.js';

export const EVENTS: DatasetSchema = {
  columns: [
    { name: 'id', type: 'INT64', nullable: false },
    { name: 'ts', type: 'TIMESTAMP', nullable: false },
    { name: 'msg', type: 'STRING', nullable: true },
  ],
  timestampColumn: 'ts',
};

/** EVENTS with one nullable column added later (schema evolution). */
export const EVENTS_V2: DatasetSchema = {
  columns: [...EVENTS.columns, { name: 'level', type: 'STRING', nullable: true }],
  timestampColumn: 'ts',
};

export const COLS = ['source', 'id', 'ts', 'msg'];

/** The cache options a test or a child worker may set (root and datasets are fixed by the caller). */
export type WorkerCacheOptions = Partial<Omit<CacheOptions, 'root' | 'datasets'>>;

/** Rows [source, id, ts, msg] with ids from `from`, ts at 1 s steps from `t0`. */
export function rows(source: string, from: number, n: number, t0 = Date.parse('2026-01-01T00:00:00Z')): unknown[][] {
  return Array.from({ length: n }, (_, i) => [source, from + i, new Date(t0 + (from + i) * 1000).toISOString(), `m${from + i}`]);
}

export function openCache(root: string, extra: Partial<CacheOptions> = {}): Promise<Cache> {
  return Cache.open({ root, datasets: { events: EVENTS }, lockWaitMs: 2000, ...extra });
}

export async function collect<T>(it: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const x of it) out.push(x);
  return out;
}
