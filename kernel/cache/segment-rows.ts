/**
 * A sealed spool segment as per-partition columns, and their encoding once seqs
 * are known: the pure, costly half of a flush. It runs in the flushing thread or
 * in a flush worker (flush-encoder.ts) with the same result.
 * @ref LLP 0013: flush work off the main thread
 */
import type { DatasetSchema } from '../../types/schema.js';
import { type EncodedFile, encodeDataFile } from './commit.js';
import { type PreparedRows, prepareRows, stamp } from './decorate.js';
import { partitionRef } from './partition.js';
import { readSegment } from './spool.js';

/** Read a sealed segment and build each partition's columns and row ids, in first-seen order. */
export async function segmentRows(path: string, dataset: string, schema: DatasetSchema): Promise<Map<string, PreparedRows>> {
  const bySource = new Map<string, unknown[][]>();
  for (const frame of await readSegment(path)) {
    // Map frame columns (as of append) onto the current schema: added columns read as null.
    const idx = schema.columns.map((c) => frame.cols.indexOf(c.name) + 1);
    // Frames of the current schema are kept as they are: [source, ...values].
    const identity = idx.every((j, i) => j === i + 1);
    for (const r of frame.rows) {
      const source = r[0] as string;
      let list = bySource.get(source);
      if (!list) {
        list = [];
        bySource.set(source, list);
      }
      list.push(identity ? r : [source, ...idx.map((j) => (j === 0 ? null : r[j]))]);
    }
  }
  const out = new Map<string, PreparedRows>();
  for (const [source, rows] of bySource) out.set(source, prepareRows(partitionRef(dataset, source), schema.columns, rows, 1));
  return out;
}

/** Stamp prepared rows with their seqs and batch id and encode them as a data file. */
export function encodeRows(schema: DatasetSchema, rows: PreparedRows, firstSeq: bigint, batchId: string, rowGroupRows: number): EncodedFile {
  return encodeDataFile(stamp(schema.columns, rows, firstSeq, batchId), schema, rowGroupRows);
}
