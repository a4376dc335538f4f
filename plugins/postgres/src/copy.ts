/**
 * A unit's Arrow batches as `COPY … FROM STDIN` text format, written byte by
 * byte from the batches' buffers: a string's UTF-8 bytes are copied as they
 * are (escaping `\`, tab, newline and carriage return), never decoded. Rows are
 * numbered by their ordinal in the unit (0-based, seq order), the number a
 * refused row is known by in the dead letter; rows in `skip` are left out.
 * A NUL byte, which no PostgreSQL text or jsonb value can hold, is refused here
 * (the row is skipped and `onRefused` told) rather than sent to be refused.
 * @ref LLP 0042
 */
import type { RecordBatch } from 'apache-arrow';
import type { ColumnSpec, ColumnType } from 'hypsink/plugin';

const TAB = 0x09;
const NL = 0x0a;
const CR = 0x0d;
const BS = 0x5c;
const CHUNK = 1 << 20;
const NULL_TEXT = Buffer.from('\\N');

interface ColumnData {
  readonly type: ColumnType;
  readonly offset: number;
  readonly nullBitmap: Uint8Array | undefined;
  readonly values: ArrayLike<number> & { readonly buffer: ArrayBufferLike; readonly byteOffset: number; readonly length: number };
  readonly valueOffsets: Int32Array | undefined;
  /** INT64 values as 32-bit halves: a safe integer is read without a BigInt. */
  readonly halves: Int32Array | undefined;
  readonly get: (r: number) => unknown;
}

function columnsOf(batch: RecordBatch, columns: readonly ColumnSpec[]): ColumnData[] {
  return columns.map((c, i) => {
    const d = batch.data.children[i]!;
    const vec = batch.getChildAt(i)!;
    return {
      type: c.type,
      offset: d.offset,
      nullBitmap: d.nullBitmap && d.nullBitmap.length > 0 && d.nullCount !== 0 ? d.nullBitmap : undefined,
      values: d.values,
      valueOffsets: d.valueOffsets as Int32Array | undefined,
      halves: c.type === 'INT64' ? new Int32Array(d.values.buffer, d.values.byteOffset, d.values.length * 2) : undefined,
      get: (r: number) => vec.get(r),
    };
  });
}

const isNull = (c: ColumnData, r: number) => c.nullBitmap !== undefined && ((c.nullBitmap[(c.offset + r) >> 3]! >> ((c.offset + r) & 7)) & 1) === 0;

/** A growing byte buffer handed out in chunks of about 1 MiB. */
class Out {
  buf = Buffer.allocUnsafe(CHUNK + 64 * 1024);
  pos = 0;
  ensure(n: number): void {
    if (this.pos + n <= this.buf.length) return;
    const next = Buffer.allocUnsafe(Math.max(this.buf.length * 2, this.pos + n));
    this.buf.copy(next, 0, 0, this.pos);
    this.buf = next;
  }
  ascii(s: string): void {
    this.ensure(s.length);
    this.pos += this.buf.write(s, this.pos, 'latin1');
  }
  bytes(b: Uint8Array): void {
    this.ensure(b.length);
    this.buf.set(b, this.pos);
    this.pos += b.length;
  }
  byte(x: number): void {
    this.ensure(1);
    this.buf[this.pos++] = x;
  }
  take(): Buffer {
    const out = Buffer.from(this.buf.subarray(0, this.pos));
    this.pos = 0;
    return out;
  }
}

/** The text of COPY's text format for a string's UTF-8 bytes; false if they hold a NUL. */
function escaped(out: Out, bytes: Uint8Array, from: number, to: number): boolean {
  out.ensure((to - from) * 2);
  const b = out.buf;
  let p = out.pos;
  for (let i = from; i < to; i++) {
    const x = bytes[i]!;
    if (x > BS || (x !== BS && x > CR) || (x < TAB && x !== 0)) {
      b[p++] = x;
    } else if (x === BS) {
      b[p++] = BS;
      b[p++] = BS;
    } else if (x === NL) {
      b[p++] = BS;
      b[p++] = 0x6e; // n
    } else if (x === CR) {
      b[p++] = BS;
      b[p++] = 0x72; // r
    } else if (x === TAB) {
      b[p++] = BS;
      b[p++] = 0x74; // t
    } else if (x === 0) {
      return false;
    } else {
      b[p++] = x; // 0x0b, 0x0c: as they are
    }
  }
  out.pos = p;
  return true;
}

/** Append row `r`'s value of column `c`; a reason when the value cannot be written. */
function value(out: Out, c: ColumnData, r: number): string | null {
  if (isNull(c, r)) {
    out.bytes(NULL_TEXT);
    return null;
  }
  switch (c.type) {
    case 'STRING':
    case 'JSON': {
      const o = c.valueOffsets!;
      const bytes = c.values as unknown as Uint8Array;
      return escaped(out, bytes, o[r]!, o[r + 1]!) ? null : 'holds a NUL byte (U+0000), which PostgreSQL text and jsonb values cannot hold';
    }
    case 'INT64': {
      const halves = c.halves!;
      const lo = halves[2 * r]! >>> 0;
      const hi = halves[2 * r + 1]!;
      const n = hi * 4294967296 + lo;
      out.ascii(Number.isSafeInteger(n) ? String(n) : String(c.get(r)));
      return null;
    }
    case 'DOUBLE': {
      const x = c.values[r]!;
      // String(-0) is "0": the sign of a negative zero the cache holds would be lost.
      out.ascii(x === 0 && 1 / x < 0 ? '-0' : String(x));
      return null;
    }
    case 'BOOLEAN':
      out.byte(c.get(r) ? 0x74 : 0x66); // t / f
      return null;
    case 'TIMESTAMP': {
      const ms = Number(c.get(r));
      const d = new Date(ms);
      if (Number.isNaN(d.getTime())) return `timestamp ${ms} ms is outside the range of a date`;
      out.ascii(timestampText(d));
      return null;
    }
  }
}

/**
 * A timestamp as PostgreSQL reads it: toISOString's form for years 1 to 9999;
 * past 9999 the year without toISOString's sign and padding ("12345-…", not
 * "+012345-…"), and at or before year 0 (ISO's 0 is 1 BC) the year BC.
 * @ref LLP 0045
 */
export function timestampText(d: Date): string {
  const iso = d.toISOString();
  const y = d.getUTCFullYear();
  if (y >= 1 && y <= 9999) return iso;
  const rest = iso.slice(iso.indexOf('-', 1));
  return y > 9999 ? `${y}${rest}` : `${String(1 - y).padStart(4, '0')}${rest} BC`;
}

/** Row `r` of `batch` in row form (for the dead letter): what `Unit.rows()` would give. */
export function rowOf(batch: RecordBatch, columns: readonly ColumnSpec[], r: number, source: string): Record<string, unknown> {
  const row: Record<string, unknown> = { source };
  columns.forEach((c, i) => {
    const v = batch.getChildAt(i)!.get(r) as unknown;
    if (v === null || v === undefined) row[c.name] = null;
    else if (c.type === 'INT64') {
      const n = Number(v);
      row[c.name] = Number.isSafeInteger(n) ? n : String(v);
    } else if (c.type === 'TIMESTAMP') {
      const d = new Date(Number(v));
      row[c.name] = Number.isNaN(d.getTime()) ? Number(v) : d.toISOString();
    } else if (c.type === 'JSON') {
      try {
        row[c.name] = JSON.parse(String(v));
      } catch {
        row[c.name] = String(v);
      }
    } else row[c.name] = v;
  });
  return row;
}

export interface CopyPass {
  /** Rows sent, in order: COPY's line n (1-based) is ordinal `sent[n - 1]`. */
  readonly sent: number[];
  bytes: number;
}

export interface CopyOptions {
  readonly columns: readonly ColumnSpec[];
  readonly source: string;
  /** Ordinals not to send (refused before). */
  readonly skip: ReadonlySet<number>;
  /** A row refused before it was sent (a NUL byte): its ordinal, the reason, the row. */
  readonly onRefused: (ordinal: number, reason: string, row: Record<string, unknown>) => void;
  /** A skipped row, handed over so its row form can go to the dead letter. */
  readonly onSkipped: (ordinal: number, row: () => Record<string, unknown>) => void;
}

/** The unit's rows as COPY text chunks; `pass` says which ordinal each line is. */
export async function* copyText(batches: AsyncIterable<RecordBatch>, o: CopyOptions, pass: CopyPass): AsyncIterable<Buffer> {
  const out = new Out();
  const sourceText = new Out();
  escaped(sourceText, Buffer.from(o.source, 'utf8'), 0, Buffer.byteLength(o.source, 'utf8'));
  const src = sourceText.take();
  let ordinal = 0;
  for await (const batch of batches) {
    const cols = columnsOf(batch, o.columns);
    for (let r = 0; r < batch.numRows; r++, ordinal++) {
      if (o.skip.has(ordinal)) {
        const at = ordinal;
        o.onSkipped(at, () => rowOf(batch, o.columns, r, o.source));
        continue;
      }
      const start = out.pos;
      out.bytes(src);
      let refused: string | null = null;
      for (let i = 0; i < cols.length; i++) {
        out.byte(TAB);
        refused = value(out, cols[i]!, r);
        if (refused) {
          refused = `column "${o.columns[i]!.name}" ${refused}`;
          break;
        }
      }
      if (refused) {
        out.pos = start;
        o.onRefused(ordinal, refused, rowOf(batch, o.columns, r, o.source));
        continue;
      }
      out.byte(NL);
      pass.sent.push(ordinal);
      if (out.pos >= CHUNK) {
        pass.bytes += out.pos;
        yield out.take();
      }
    }
  }
  if (out.pos > 0) {
    pass.bytes += out.pos;
    yield out.take();
  }
}
