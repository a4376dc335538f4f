/**
 * Rewriting a partition into generation n+1 (retention, compaction): files kept
 * as they are are hard-linked, so a rewrite costs only what it changes; the new
 * manifest carries the spool markers and retention records verbatim; then the
 * cursor swaps and generation n is retired once its readers are gone.
 * @ref LLP 0004: generations, cursor swap and reader leases
 */
import { promises as fsp } from 'node:fs';
import { join } from 'node:path';
import { type Field, makeData, RecordBatch, type Schema, Struct, type Data } from 'apache-arrow';
import type { ColumnSpec } from '../../types/schema.js';
import { buildColumn, buildUtf8, cacheSchema, SEQ_COLUMN } from './columns.js';
import { generationDir } from './generations.js';
import { type Manifest, manifestRows } from './manifest.js';
import type { PartitionStore } from './partition.js';
import { mkdirs } from '../io/mkdirs.js';

export async function startGeneration(store: PartitionStore, generation: number): Promise<string> {
  const dir = generationDir(store.dir, generation);
  await fsp.rm(dir, { recursive: true, force: true }); // a rewrite that crashed before its swap
  await mkdirs(dir);
  return dir;
}

export async function linkFile(store: PartitionStore, from: number, to: number, name: string): Promise<void> {
  await fsp.link(join(generationDir(store.dir, from), name), join(generationDir(store.dir, to), name));
}

export function nextManifest(old: Manifest, generation: number): Manifest {
  return {
    v: 1,
    generation,
    files: [],
    spools: { ...old.spools },
    prunedThroughSeq: old.prunedThroughSeq,
    forcedPrunes: [...old.forcedPrunes],
    committedRows: old.committedRows ?? manifestRows(old),
  };
}

/** Fit a cache batch (user + internal columns) to the current cache schema; added columns become null. */
export function conform(batch: RecordBatch, columns: readonly ColumnSpec[]): RecordBatch {
  const schema: Schema = cacheSchema(columns);
  const children: Data[] = schema.fields.map((f: Field) => {
    const child = batch.getChild(f.name);
    if (child) return child.data[0]!;
    const spec = columns.find((c) => c.name === f.name);
    const nulls = new Array(batch.numRows).fill(null);
    if (spec) return buildColumn(spec.type, nulls);
    // Legacy files (before the seq column existed) lack the internal columns: null seq, ids filled by the caller.
    if (f.name === SEQ_COLUMN) return buildColumn('INT64', nulls);
    return buildUtf8(new Array(batch.numRows).fill(''));
  });
  const data = makeData({ type: new Struct(schema.fields), length: batch.numRows, nullCount: 0, children });
  return new RecordBatch(schema, data);
}
