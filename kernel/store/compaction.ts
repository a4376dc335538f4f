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
import { makeData, RecordBatch, Table } from 'apache-arrow';
import { HypsinkError } from '../../types/errors.js';
import type { ColumnSpec, DatasetSchema } from '../../types/schema.js';
import type { PartitionRef } from '../../types/storage.js';
import { buildUtf8, ROW_ID_COLUMN } from './columns.js';
import { writeDataFile } from '../flush/commit.js';
import { rowId } from '../flush/decorate.js';
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
          pending.push(withRowIds(store.ref, conform(raw, schema.columns), raw.getChild(ROW_ID_COLUMN) === null));
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

/** A legacy row's id hashes its JSON text as one column. */
const LEGACY_ROW: readonly ColumnSpec[] = [{ name: 'row', type: 'JSON', nullable: false }];

/** Legacy rows carry no row id: derive one from their values, as every other row has one. */
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
