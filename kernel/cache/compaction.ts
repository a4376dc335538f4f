/**
 * Compaction: rewrite a partition into generation n+1 as few files, in seq
 * order, dropping only exact row-id duplicates and keeping the copy with the
 * lowest seq — so a row already exported is never re-exported under a new seq.
 * Seqs are copied verbatim (legacy null seqs stay null). Streams row group by
 * row group; at most `fileRows` rows are held before a file is written.
 * @ref LLP 0004: generations, cursor swap and reader leases
 */
import { makeData, RecordBatch, Table } from 'apache-arrow';
import type { ColumnSpec, DatasetSchema } from '../../types/schema.js';
import type { PartitionRef } from '../../types/storage.js';
import { buildUtf8, ROW_ID_COLUMN } from './columns.js';
import { writeDataFile } from './commit.js';
import { rowId } from './decorate.js';
import { type FileEntry, manifestRows, writeManifest } from './manifest.js';
import { ParquetReader, scratchCounters } from './parquet.js';
import type { PartitionStore } from './partition.js';
import { conform, nextManifest, startGeneration } from './rewrite.js';

export interface CompactResult {
  readonly partition: PartitionRef;
  readonly generation: number;
  readonly rowsBefore: number;
  readonly rowsAfter: number;
}

export async function compactPartition(
  store: PartitionStore,
  schema: DatasetSchema,
  rowGroupRows: number,
  fileRows: number,
  minFiles = 2,
): Promise<CompactResult | null> {
  const { generation, manifest } = await store.current();
  await store.sweep();
  if (manifest.files.length < Math.max(2, minFiles)) return null;
  const to = generation + 1;
  const next = nextManifest(manifest, to);
  await startGeneration(store, to);
  const gdir = store.manifestPath(generation).replace(/\/manifest\.json$/, '');
  const seen = new Set<string>();
  let pending: RecordBatch[] = [];
  let pendingRows = 0;
  const out: FileEntry[] = [];
  // The oldest commit time carries over, so compaction never delays a waiting small-file export.
  const committedAt = Math.min(...manifest.files.map((f) => f.committedAt ?? Date.now()));
  const emit = async () => {
    if (pendingRows === 0) return;
    out.push(await writeDataFile(store, to, new Table(pending), schema, rowGroupRows, committedAt));
    pending = [];
    pendingRows = 0;
  };
  for (const f of manifest.files) {
    const reader = await ParquetReader.open(`${gdir}/${f.name}`, scratchCounters(), f);
    try {
      for (let g = 0; g < reader.numRowGroups; g++) {
        for (const raw of await reader.readRowGroup(g)) {
          const b = withRowIds(store.ref, conform(raw, schema.columns), raw.getChild(ROW_ID_COLUMN) === null);
          const ids = b.getChild(ROW_ID_COLUMN)!;
          let i = 0;
          while (i < b.numRows) {
            // Runs of first-seen rows are sliced whole.
            const start = i;
            while (i < b.numRows && !seen.has(ids.get(i) as string)) seen.add(ids.get(i++) as string);
            if (i > start) {
              pending.push(b.slice(start, i));
              pendingRows += i - start;
            }
            while (i < b.numRows && seen.has(ids.get(i) as string)) i++;
          }
          if (pendingRows >= fileRows) await emit();
        }
      }
    } finally {
      reader.close();
    }
  }
  await emit();
  next.files = out;
  // Folded duplicates were never distinct rows: no sink owes them.
  next.committedRows = (next.committedRows ?? 0) - (manifestRows(manifest) - manifestRows(next));
  await writeManifest(store.manifestPath(to), next);
  await store.swapTo(to, 'compact');
  return { partition: store.ref, generation: to, rowsBefore: manifestRows(manifest), rowsAfter: manifestRows(next) };
}

/** A legacy row's id hashes its JSON text as one column. */
const LEGACY_ROW: readonly ColumnSpec[] = [{ name: 'row', type: 'JSON', nullable: false }];

/** Legacy rows carry no row id: derive one from their values so their duplicates fold too. */
function withRowIds(p: PartitionRef, b: RecordBatch, legacy: boolean): RecordBatch {
  if (!legacy) return b;
  const ids: string[] = [];
  for (let i = 0; i < b.numRows; i++) {
    const row = b.get(i)?.toJSON() ?? {};
    ids.push(rowId(p, LEGACY_ROW, [JSON.stringify(row, (_k, v) => (typeof v === 'bigint' ? v.toString() : v))]));
  }
  const children = b.schema.fields.map((f) =>
    f.name === ROW_ID_COLUMN ? buildUtf8(ids) : b.getChild(f.name)!.data[0]!,
  );
  return new RecordBatch(b.schema, makeData({ type: b.data.type, length: b.numRows, nullCount: 0, children }));
}
