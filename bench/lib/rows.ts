/**
 * Realistic demo rows (fixtures/demo/generate.ts) as NDJSON lines, and as the
 * validated value arrays `Cache.appendValidated` takes, produced in chunks so a
 * million rows never sit in memory as objects at once.
 */
import { promises as fsp } from 'node:fs';
import { demoBatch } from '../../fixtures/demo/generate.js';
import { normalizeRow } from '../../kernel/ingest/normalize.js';
import type { DatasetSchema } from '../../types/schema.js';

/**
 * The demo rows' clock: noon (UTC) of the day before the run. A chunk's rows
 * span the hours before it (some 4.6 h for 50k rows), so they never cross
 * midnight: the Iceberg writer writes a file per day, one read each, and its
 * figure measured one file or two by the hour the bench ran (LLP 0108).
 */
export const DEMO_NOW = Math.floor(Date.now() / 86_400_000) * 86_400_000 - 12 * 3_600_000;

/** `n` demo NDJSON lines (no `source` field), ids from `firstId`; `run` varies the content. */
export function demoLines(n: number, firstId: number, run: number): string[] {
  if (n <= 0) return [];
  // demoBatch yields perSource rows for each of its three sources; the source is not in the line.
  const batches = demoBatch(run, firstId, Math.ceil(n / 3), DEMO_NOW);
  return batches.flatMap((b) => b.lines).slice(0, n);
}

/** Validated rows `[source, ...values]` for appendValidated. */
export function demoValues(schema: DatasetSchema, source: string, n: number, firstId: number, run: number): unknown[][] {
  return demoLines(n, firstId, run).map((line) => {
    const r = normalizeRow(schema, JSON.parse(line) as Record<string, unknown>);
    if (!r.ok) throw new Error(`demo row rejected: ${r.reason}`);
    return [source, ...r.values];
  });
}

/** Write `n` demo lines to `path` in chunks; returns its size. */
export async function writeNdjson(path: string, n: number): Promise<number> {
  const fh = await fsp.open(path, 'w');
  try {
    const chunk = 50_000;
    for (let done = 0; done < n; done += chunk) {
      const lines = demoLines(Math.min(chunk, n - done), done + 1, done / chunk);
      await fh.write(`${lines.join('\n')}\n`);
    }
  } finally {
    await fh.close();
  }
  return (await fsp.stat(path)).size;
}
