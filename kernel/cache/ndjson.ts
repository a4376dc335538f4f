/**
 * Arrow batches → NDJSON text, column-aware: the same lines `JSON.stringify` of
 * each row-form row would give (keys in schema order), without building row
 * objects. JSON columns are written as the JSON text the cache holds instead of
 * parsed and stringified again; ASCII string columns are decoded once per batch
 * and cut by their offsets.
 */
import type { Data, RecordBatch, Vector } from 'apache-arrow';
import type { ColumnSpec } from '../../types/schema.js';

const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);
const MIN_SAFE = BigInt(Number.MIN_SAFE_INTEGER);

type CellReader = (i: number) => string;

/** All strings of a one-chunk Utf8 column when its bytes are ASCII, else undefined. */
function asciiStrings(v: Vector): ((i: number) => string) | undefined {
  if (v.data.length !== 1) return undefined;
  const d = v.data[0] as Data & { valueOffsets: Int32Array; values: Uint8Array };
  // A sliced Data's valueOffsets are already sliced (as Vector.get reads them); values are not.
  const offs = d.valueOffsets;
  const start = offs[0]!;
  const bytes = d.values.subarray(start, offs[d.length]!);
  for (let i = 0; i < bytes.length; i++) if (bytes[i]! > 0x7f) return undefined;
  const text = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('latin1');
  return (i) => text.slice(offs[i]! - start, offs[i + 1]! - start);
}

function reader(type: ColumnSpec['type'], v: Vector | null): CellReader {
  if (!v) return () => 'null';
  const valid = v.nullCount > 0 ? (i: number) => v.isValid(i) : () => true;
  switch (type) {
    case 'INT64':
      return (i) => {
        if (!valid(i)) return 'null';
        const b = v.get(i) as bigint;
        return b >= MIN_SAFE && b <= MAX_SAFE ? b.toString() : `"${b}"`;
      };
    case 'DOUBLE':
      return (i) => (valid(i) ? JSON.stringify(v.get(i)) : 'null');
    case 'BOOLEAN':
      return (i) => (valid(i) ? (v.get(i) ? 'true' : 'false') : 'null');
    case 'TIMESTAMP':
      return (i) => (valid(i) ? `"${new Date(Number(v.get(i))).toISOString()}"` : 'null');
    case 'STRING': {
      const at = asciiStrings(v);
      return at ? (i) => (valid(i) ? JSON.stringify(at(i)) : 'null') : (i) => (valid(i) ? JSON.stringify(v.get(i)) : 'null');
    }
    case 'JSON': {
      const at = asciiStrings(v);
      return at ? (i) => (valid(i) ? at(i) : 'null') : (i) => (valid(i) ? (v.get(i) as string) : 'null');
    }
  }
}

/** One NDJSON line per row of `batch`, each ending in a newline. */
export function batchToNdjson(batch: RecordBatch, cols: readonly ColumnSpec[]): string {
  if (cols.length === 0) return '{}\n'.repeat(batch.numRows);
  const keys = cols.map((c, i) => `${i === 0 ? '{' : ','}${JSON.stringify(c.name)}:`);
  const cells = cols.map((c) => reader(c.type, batch.getChild(c.name)));
  const parts: string[] = new Array(batch.numRows);
  for (let r = 0; r < batch.numRows; r++) {
    let line = '';
    for (let c = 0; c < cells.length; c++) line += keys[c] + cells[c]!(r);
    parts[r] = `${line}}\n`;
  }
  return parts.join('');
}
