/**
 * `@hypsink/format-jsonl`: one JSON object per line, streamed in ~1 MiB chunks.
 * A line is the row in row form (`JSON.stringify` of it: the columns in the
 * schema's order, TIMESTAMP as ISO-8601 in UTC, JSON as the value itself),
 * but for one rule: an INT64 is always a JSON integer with all its digits,
 * beyond ±2^53 too (row form has those as strings). So every value of an
 * INT64 column is a number, and DuckDB and pandas read the column as a
 * 64-bit integer; a JavaScript reader needs a parser that keeps big integers.
 * @ref LLP 0069
 */
import type { BlobBody, ColumnSpec, Encoder, PluginContext, Row, StoredBlob, Unit } from 'hypsink/plugin';

const CHUNK = 1 << 20;

/** A row's line: its columns in order, an INT64 given as a decimal string written as the integer it is. */
function line(row: Row, columns: readonly ColumnSpec[], keys: readonly string[]): string {
  let s = '{';
  for (let i = 0; i < columns.length; i++) {
    const c = columns[i]!;
    const v = row[c.name];
    if (v === undefined) continue;
    s += `${s.length > 1 ? ',' : ''}${keys[i]}${c.type === 'INT64' && typeof v === 'string' ? v : JSON.stringify(v)}`;
  }
  return `${s}}\n`;
}

async function* encode(unit: Unit): BlobBody {
  const enc = new TextEncoder();
  const columns = unit.schema.columns;
  const keys = columns.map((c) => `${JSON.stringify(c.name)}:`);
  let buf = '';
  for await (const row of unit.rows()) {
    buf += line(row, columns, keys);
    if (buf.length >= CHUNK) {
      yield enc.encode(buf);
      buf = '';
    }
  }
  if (buf) yield enc.encode(buf);
}

/** A blob's rows: its lines, read back a chunk at a time (a last line without its newline counts too). @ref LLP 0037 */
async function countRows(blob: StoredBlob): Promise<number> {
  let rows = 0;
  let last = 0x0a;
  for (let offset = 0; offset < blob.bytes; ) {
    const chunk = await blob.read(offset, Math.min(CHUNK, blob.bytes - offset));
    if (chunk.byteLength === 0) throw new Error(`cut short at byte ${offset} of ${blob.bytes}`);
    for (let i = chunk.indexOf(0x0a); i >= 0; i = chunk.indexOf(0x0a, i + 1)) rows++;
    last = chunk[chunk.byteLength - 1]!;
    offset += chunk.byteLength;
  }
  return last === 0x0a ? rows : rows + 1;
}

export default function activate(ctx: PluginContext): void {
  ctx.registerEncoder({
    name: ctx.manifest.name,
    // It takes no writerConfig: any key there is a mistake. @ref LLP 0032
    options: { keys: [] },
    create(): Encoder {
      return { extension: 'jsonl', contentType: 'application/x-ndjson', encode, countRows };
    },
  });
}
