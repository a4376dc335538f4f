/**
 * A sealed spool segment as per-partition columns, and their encoding once seqs
 * are known: the pure, costly half of a flush. It runs in the flushing thread or
 * in a flush worker (flush-encoder.ts) with the same result.
 * @ref LLP 0013: flush work off the main thread
 * @ref LLP 0015: spool frames as Arrow columns
 */
import type { Data } from 'apache-arrow';
import type { DatasetSchema } from '../../types/schema.js';
import { type EncodedFile, encodeDataFile } from './commit.js';
import { type PreparedRows, prepareBatches, stamp } from './decorate.js';
import { frameBatches } from '../spool/frames.js';
import type { DataFileLayout } from '../store/parquet.js';
import { partitionRef } from '../store/partition.js';
import { readSegment } from '../spool/spool.js';

/** Read a sealed segment and build each partition's columns and row ids, in first-seen order. */
export async function segmentRows(path: string, dataset: string, schema: DatasetSchema): Promise<Map<string, PreparedRows>> {
  const bySource = new Map<string, Data[][]>();
  const frames = await readSegment(path);
  frames.forEach((frame, i) => {
    for (const { source, columns } of frameBatches(frame, schema, `spool segment ${path} frame ${i + 1}`)) {
      const list = bySource.get(source);
      if (list) list.push(columns as Data[]);
      else bySource.set(source, [columns as Data[]]);
    }
  });
  const out = new Map<string, PreparedRows>();
  for (const [source, batches] of bySource) out.set(source, prepareBatches(partitionRef(dataset, source), schema.columns, batches));
  return out;
}

/** Stamp prepared rows with their seqs and batch id and encode them as a data file. */
export function encodeRows(schema: DatasetSchema, rows: PreparedRows, firstSeq: bigint, batchId: string, layout: DataFileLayout): EncodedFile {
  return encodeDataFile(stamp(schema.columns, rows, firstSeq, batchId), schema, layout);
}
