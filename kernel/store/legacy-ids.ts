/**
 * Row ids for legacy rows, written before the row-id column existed: derived
 * from each row's values, conformed to the dataset's columns. Compaction writes
 * them into the next generation, and a unit's digest derives the same ones
 * from a file not compacted yet, so the digest holds across compaction.
 * @ref LLP 0015: row ids over column bytes
 * @ref LLP 0054: a unit's digest
 */
import { makeData, RecordBatch } from 'apache-arrow';
import type { ColumnSpec } from '../../types/schema.js';
import type { PartitionRef } from '../../types/storage.js';
import { rowId } from '../flush/decorate.js';
import { buildUtf8, ROW_ID_COLUMN } from './columns.js';
import { conform } from './rewrite.js';

/** A legacy row's id hashes its JSON text as one column. */
const LEGACY_ROW: readonly ColumnSpec[] = [{ name: 'row', type: 'JSON', nullable: false }];

/** `b` conformed to `columns`, with row ids derived from the values where the file has none. */
export function conformWithRowIds(p: PartitionRef, raw: RecordBatch, columns: readonly ColumnSpec[]): RecordBatch {
  const b = conform(raw, columns);
  if (raw.getChild(ROW_ID_COLUMN) !== null) return b;
  const ids: string[] = [];
  for (let i = 0; i < b.numRows; i++) {
    const row = b.get(i)?.toJSON() ?? {};
    ids.push(rowId(p, LEGACY_ROW, [JSON.stringify(row, (_k, v) => (typeof v === 'bigint' ? v.toString() : v))]));
  }
  const children = b.schema.fields.map((f) => (f.name === ROW_ID_COLUMN ? buildUtf8(ids) : b.getChild(f.name)!.data[0]!));
  return new RecordBatch(b.schema, makeData({ type: b.data.type, length: b.numRows, nullCount: 0, children }));
}
