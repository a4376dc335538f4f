/**
 * Compaction: rewrite a partition into generation n+1 as few files, in seq
 * order, keeping every committed row and copying seqs verbatim (legacy null
 * seqs stay null): it never changes what any sink will receive. Two identical
 * rows from the host are two rows here; duplicates of one batch are stopped at
 * ingest by batch ids, not folded here. Streams row group by row group; at
 * most `fileRows` rows are held before a file is written.
 * @ref LLP 0004: generations, cursor swap and reader leases
 * @ref LLP 0020: compaction keeps every committed row
 */
import { type RecordBatch, Table } from 'apache-arrow';
import { HypsinkError } from '../../types/errors.js';
import type { DatasetSchema } from '../../types/schema.js';
import type { PartitionRef } from '../../types/storage.js';
import { writeDataFile } from '../flush/commit.js';
import { conformWithRowIds } from './legacy-ids.js';
import { type FileEntry, manifestRows, writeManifest } from './manifest.js';
import { type DataFileLayout, ParquetReader, scratchCounters } from './parquet.js';
import type { PartitionStore } from './partition.js';
import { nextManifest, startGeneration } from './rewrite.js';

export interface CompactResult {
  readonly partition: PartitionRef;
  readonly generation: number;
  readonly rowsBefore: number;
  readonly rowsAfter: number;
}

export async function compactPartition(
  store: PartitionStore,
  schema: DatasetSchema,
  layout: DataFileLayout,
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
  let pending: RecordBatch[] = [];
  let pendingRows = 0;
  const out: FileEntry[] = [];
  // The oldest commit time carries over, so compaction never delays a waiting small-file export.
  const committedAt = Math.min(...manifest.files.map((f) => f.committedAt ?? Date.now()));
  const emit = async () => {
    if (pendingRows === 0) return;
    out.push(await writeDataFile(store, to, new Table(pending), schema, layout, committedAt));
    pending = [];
    pendingRows = 0;
  };
  for (const f of manifest.files) {
    const reader = await ParquetReader.open(`${gdir}/${f.name}`, scratchCounters(), f);
    try {
      for (let g = 0; g < reader.numRowGroups; g++) {
        for (const raw of await reader.readRowGroup(g)) {
          pending.push(conformWithRowIds(store.ref, raw, schema.columns));
          pendingRows += raw.numRows;
          if (pendingRows >= fileRows) await emit();
        }
      }
    } finally {
      reader.close();
    }
  }
  await emit();
  next.files = out;
  if (manifestRows(next) !== manifestRows(manifest)) {
    throw new HypsinkError('HYPSINK_ERR_INVARIANT', `${store.dir}: compaction read ${manifestRows(next)} rows, the manifest lists ${manifestRows(manifest)}`);
  }
  await writeManifest(store.manifestPath(to), next);
  await store.swapTo(to, 'compact');
  return { partition: store.ref, generation: to, rowsBefore: manifestRows(manifest), rowsAfter: manifestRows(next) };
}
