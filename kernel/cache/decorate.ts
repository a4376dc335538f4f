/**
 * The one write chokepoint: every row that enters a partition passes here and
 * leaves with its internal columns stamped — `_hyp_ingest_seq` (from the
 * allocator, inside the partition's commit section), `_hyp_cache_row_id` (a
 * content hash: identical rows of one partition share it, which is what
 * compaction dedupes on) and `_hyp_cache_batch_id` (the spool segment it came from).
 * @ref LLP 0001: commit order = seq order
 */
import { makeData, makeVector, Table, Int64 } from 'apache-arrow';
import type { ColumnSpec } from '../../types/schema.js';
import type { PartitionRef } from '../../types/storage.js';
import { hash128 } from './hash128.js';
import { BATCH_ID_COLUMN, buildColumn, buildUtf8, ROW_ID_COLUMN, SEQ_COLUMN } from './columns.js';

/**
 * The content a row id hashes: its normalized values joined by U+001F, null as
 * U+0000. A string holding either control character is written as U+0000 + its
 * JSON, which no plain value can equal. (JSON.stringify of the whole row cost
 * twice as much: it re-escapes JSON columns.)
 */
function rowContent(values: readonly unknown[]): string {
  let out = '';
  for (const v of values) {
    if (v === null || v === undefined) out += '\u0000';
    else if (typeof v === 'string') out += v.includes('\u001f') || v.includes('\u0000') ? `\u0000${JSON.stringify(v)}` : v;
    else out += String(v);
    out += '\u001f';
  }
  return out;
}

export function rowId(partition: PartitionRef, values: readonly unknown[]): string {
  return hash128(`${partition.key}\u0000${rowContent(values)}`);
}

/** Build the Arrow table of a commit: user columns, then seq first..first+n-1, row ids, batch id. */
export function decorate(
  partition: PartitionRef,
  columns: readonly ColumnSpec[],
  rows: readonly (readonly unknown[])[],
  firstSeq: bigint,
  batchId: string,
): Table {
  const n = rows.length;
  const vectors: Record<string, ReturnType<typeof makeVector>> = {};
  columns.forEach((c, ci) => {
    vectors[c.name] = makeVector(buildColumn(c.type, rows.map((r) => r[ci])));
  });
  const seqs = new BigInt64Array(n);
  for (let i = 0; i < n; i++) seqs[i] = firstSeq + BigInt(i);
  vectors[SEQ_COLUMN] = makeVector(makeData({ type: new Int64(), length: n, nullCount: 0, data: seqs } as never));
  vectors[ROW_ID_COLUMN] = makeVector(buildUtf8(rows.map((r) => rowId(partition, r))));
  vectors[BATCH_ID_COLUMN] = makeVector(buildUtf8(new Array(n).fill(batchId)));
  return new Table(vectors);
}
