/**
 * The spec's snapshot summary counts, for an append (a unit) and a replace (a
 * compaction): what the snapshot adds and removes, and the table's totals
 * carried from the parent's summary when the parent has them.
 * @ref LLP 0051, LLP 0078
 */
import type { Snapshot } from './table.js';

export interface Change {
  readonly addedFiles: number;
  readonly addedRows: number;
  readonly addedBytes: number;
  readonly deletedFiles?: number;
  readonly deletedRows?: number;
  readonly deletedBytes?: number;
  readonly partitions: number;
}

export function summaryOf(parent: Snapshot | undefined, c: Change): Record<string, string> {
  const deletedFiles = c.deletedFiles ?? 0;
  const deletedRows = c.deletedRows ?? 0;
  const deletedBytes = c.deletedBytes ?? 0;
  const out: Record<string, string> = {
    'added-data-files': String(c.addedFiles),
    'added-records': String(c.addedRows),
    'added-files-size': String(c.addedBytes),
    'changed-partition-count': String(c.partitions),
  };
  if (deletedFiles > 0) {
    out['deleted-data-files'] = String(deletedFiles);
    out['deleted-records'] = String(deletedRows);
    out['removed-files-size'] = String(deletedBytes);
  }
  const p = parent?.summary;
  const total = (k: string, add: number) => {
    if (p === undefined) return String(add);
    const v = p[k];
    return v === undefined ? undefined : String(Number(v) + add);
  };
  const totals: [string, number][] = [
    ['total-data-files', c.addedFiles - deletedFiles],
    ['total-records', c.addedRows - deletedRows],
    ['total-files-size', c.addedBytes - deletedBytes],
    ['total-delete-files', 0],
    ['total-position-deletes', 0],
    ['total-equality-deletes', 0],
  ];
  for (const [k, add] of totals) {
    const v = total(k, add);
    if (v !== undefined) out[k] = v;
  }
  return out;
}
