/**
 * A sink's local dead letter for rows its transforms refused: one file per
 * unit, `<sink state>/rejected/<partition key>/<since>-<until>.json`, holding
 * each refused row's seq and reason and never a value (a refused value is one
 * that could not be made safe to ship; it stays in the cache, where the seq
 * finds it while retention keeps it). Written before the advance that counts
 * the rows, and again with the same content if a crash comes between: the
 * transforms are pure, so a re-read refuses the same rows.
 * @ref LLP 0049
 */
import { join } from 'node:path';
import type { Logger } from '../../types/plugins.js';
import type { PartitionRef } from '../../types/storage.js';
import { readJsonFile, writeJsonAtomic } from '../io/durable.js';
import { mkdirs } from '../io/mkdirs.js';
import type { SinkRuntime } from './exporter.js';
import type { Refused } from './unit.js';
import type { Intent } from './watermarks.js';

export interface RejectedUnitFile {
  readonly v: 1;
  readonly sink: string;
  readonly dataset: string;
  readonly source: string;
  readonly unit: string;
  readonly since: string | null;
  readonly until: string;
  /** The transforms' identity the rows were refused by (no secrets: hash keys are fingerprints). */
  readonly transforms: string;
  readonly rows: readonly Refused[];
}

/** Where a unit's refused rows are kept. */
export function rejectedPath(stateDir: string, p: PartitionRef, i: Pick<Intent, 'since' | 'until'>): string {
  return join(stateDir, 'rejected', p.key, `${i.since ?? 'start'}-${i.until}.json`);
}

export async function keepRefused(log: Logger, sink: SinkRuntime, p: PartitionRef, i: Intent, rows: readonly Refused[]): Promise<string> {
  const path = rejectedPath(sink.state.dir, p, i);
  await mkdirs(join(path, '..'));
  const file: RejectedUnitFile = { v: 1, sink: sink.name, dataset: p.dataset, source: p.source, unit: i.unit, since: i.since, until: i.until, transforms: i.transforms ?? '', rows };
  await writeJsonAtomic(path, file);
  log.warn(
    { sink: sink.name, dataset: p.dataset, source: p.source, unit: i.unit, rejected: rows.length, reason: rows[0]!.reason, deadLetter: path },
    `the sink's transforms refused ${rows.length} row(s) of the unit; they are not shipped, and ${path} keeps their seqs and reasons (no values)`,
  );
  return path;
}

/** How many rows of a unit's range the sink's transforms refused (what `verify` expects missing from the destination). */
export async function refusedCount(stateDir: string, p: PartitionRef, i: Pick<Intent, 'since' | 'until'>): Promise<number> {
  const file = await readJsonFile<RejectedUnitFile>(rejectedPath(stateDir, p, i), (v) => (Array.isArray((v as RejectedUnitFile)?.rows) ? null : 'no rows list'), 'dead-letter file');
  return file?.rows.length ?? 0;
}
