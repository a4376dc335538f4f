/**
 * A unit's Arrow batches as `COPY … FROM STDIN` text format, written byte by
 * byte from the batches' buffers: a string's UTF-8 bytes are copied as they
 * are (escaping `\`, tab, newline and carriage return), never decoded. Rows are
 * numbered by their ordinal in the unit (0-based, seq order), the number a
 * refused row is known by in the dead letter; rows in `skip` are left out.
 * A NUL byte, which no PostgreSQL text or jsonb value can hold, is refused here
 * (the row is skipped and `onRefused` told) rather than sent to be refused.
 * @ref LLP 0042
 *
 * Building this text bounds the export's rate (the server parses in another
 * process): numbers and timestamps are written as digits from the Arrow
 * buffers, with no string per cell, and a timestamp's date part is formatted
 * once per day. The text is byte for byte what `String(n)`, `String(x)` and
 * `toISOString()` give (test/postgres/copy-text.test.ts holds it to that), the
 * way the kernel's NDJSON writer does it. @ref LLP 0044
 */
import type { RecordBatch } from 'apache-arrow';
import type { ColumnSpec, ColumnType } from 'hypsink/plugin';

const TAB = 0x09;
const NL = 0x0a;
const BS = 0x5c;
/** A chunk is handed over once it holds this many bytes (whole lines): small, so the server starts parsing soon. @ref LLP 0047 */
const CHUNK = 1 << 18;

const STRING = 0;
const INT64 = 1;
const DOUBLE = 2;
const BOOLEAN = 3;
const TIMESTAMP = 4;
const KINDS: Record<ColumnType, number> = { STRING, JSON: STRING, INT64, DOUBLE, BOOLEAN, TIMESTAMP };

/** Index of the low 32-bit half of an int64 in an Int32Array view of it. */
const LO = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1 ? 0 : 1;
const TWO32 = 4294967296;
/** The high half of every safe integer is within ±2^21 (2^53 = 2^21 · 2^32). */
const HI_SAFE = 2097152;
const MS_PER_DAY = 86_400_000;
/** Date's range (ms): beyond it there is no date to write. */
const MAX_DATE_MS = 8.64e15;
const POW10 = [1, 10, 100, 1e3, 1e4, 1e5, 1e6];
/** Room for any one non-text cell and its tab: `+275760-09-13T00:00:00.000Z`, `-9223372036854775808`, `-1.7976931348623157e+308`. */
const CELL = 32;

/** What a byte of text becomes: 0 = itself, else the letter after a backslash; NUL is refused. */
const ESCAPE = new Uint8Array(256);
ESCAPE[0x5c] = 0x5c; // \\
ESCAPE[0x09] = 0x74; // \t
ESCAPE[0x0a] = 0x6e; // \n
ESCAPE[0x0d] = 0x72; // \r
const REFUSE = 0xff;
ESCAPE[0x00] = REFUSE;
const NUL_REASON = 'holds a NUL byte (U+0000), which PostgreSQL text and jsonb values cannot hold';

/** `00` to `99`: the two digits of n at 2n, 2n + 1. */
const PAIRS = Buffer.from(Array.from({ length: 100 }, (_, n) => String(n).padStart(2, '0')).join(''), 'latin1');

const EMPTY_U8 = new Uint8Array(0);
const EMPTY_I32 = new Int32Array(0);
const EMPTY_F64 = new Float64Array(0);
const EMPTY_I64 = new BigInt64Array(0);

/** One column of the current batch, its buffers taken out of the Arrow Data (one shape for every kind). */
class Column {
  kind = STRING;
  /** Validity bitmap (bit `offset + r`), empty when the column has no nulls. */
  valid: Uint8Array = EMPTY_U8;
  /** The Data's offset: where row 0 is in the bitmaps (validity, BOOLEAN values). */
  offset = 0;
  /** Text: offsets (entry r is row r) into the value bytes; BOOLEAN: the value bits (not sliced). */
  offsets: Int32Array = EMPTY_I32;
  bytes: Uint8Array = EMPTY_U8;
  /** INT64, TIMESTAMP: the values and the same memory as 32-bit halves. */
  int64: BigInt64Array = EMPTY_I64;
  halves: Int32Array = EMPTY_I32;
  float64: Float64Array = EMPTY_F64;
  /** TIMESTAMP: the day (epoch ms / 86400000) last written and its `YYYY-MM-DDT` bytes. */
  day = Number.NaN;
  date: Uint8Array = EMPTY_U8;

  constructor(readonly type: ColumnType) {
    this.kind = KINDS[type];
  }

  bind(batch: RecordBatch, i: number): void {
    const d = batch.data.children[i]!;
    this.offset = d.offset;
    this.valid = d.nullBitmap && d.nullBitmap.length > 0 && d.nullCount !== 0 ? d.nullBitmap : EMPTY_U8;
    const values = d.values as unknown;
    switch (this.kind) {
      case STRING:
        this.offsets = d.valueOffsets as Int32Array;
        this.bytes = values as Uint8Array;
        break;
      case INT64:
      case TIMESTAMP: {
        const v = values as BigInt64Array;
        this.int64 = v;
        this.halves = new Int32Array(v.buffer, v.byteOffset, v.length * 2);
        break;
      }
      case DOUBLE:
        this.float64 = values as Float64Array;
        break;
      case BOOLEAN:
        this.bytes = values as Uint8Array;
        break;
    }
  }
}

/** Write an ASCII string at `pos`; returns the new position. */
function ascii(buf: Uint8Array, pos: number, s: string): number {
  for (let i = 0; i < s.length; i++) buf[pos++] = s.charCodeAt(i);
  return pos;
}

/** Digits of 0 ≤ n < 2^31. */
function digitCount(n: number): number {
  if (n < 100000) return n < 10 ? 1 : n < 100 ? 2 : n < 1000 ? 3 : n < 10000 ? 4 : 5;
  return n < 1000000 ? 6 : n < 10000000 ? 7 : n < 100000000 ? 8 : n < 1000000000 ? 9 : 10;
}

/** The decimal digits of a safe integer (or -0, as `0`) at `pos`, as `String(n)` writes them; returns the new position. */
function integer(buf: Uint8Array, pos: number, n: number): number {
  if (n < 0) {
    buf[pos++] = 0x2d;
    n = -n;
  }
  if (n >= 2147483648) return ascii(buf, pos, String(n));
  const end = pos + digitCount(n);
  let i = end;
  while (n >= 100) {
    const q = (n / 100) | 0;
    const d = 2 * (n - 100 * q);
    buf[--i] = PAIRS[d + 1]!;
    buf[--i] = PAIRS[d]!;
    n = q;
  }
  if (n >= 10) {
    buf[--i] = PAIRS[2 * n + 1]!;
    buf[--i] = PAIRS[2 * n]!;
  } else buf[--i] = 0x30 + n;
  return end;
}

/**
 * A non-integer double with at most 6 decimals and |x| < 2^31, as `String(x)`
 * writes it, without the string; -1 for any other x. k is the fewest decimals
 * for which n / 10^k reads back as x; that is the shortest text that does, the
 * one Number#toString picks (kernel/sinks/ndjson.ts `fixedPoint` has the
 * argument); 6 decimals at most keep it out of exponent form (< 1e-6).
 */
function fixedPoint(buf: Uint8Array, pos: number, x: number): number {
  const a = x < 0 ? -x : x;
  if (!(a < 2147483648)) return -1; // also NaN
  for (let k = 1; k <= 6; k++) {
    const p = POW10[k]!;
    const n = Math.round(a * p);
    if (n / p !== a) continue;
    let frac = n % p;
    if (x < 0) buf[pos++] = 0x2d;
    pos = integer(buf, pos, (n - frac) / p);
    buf[pos] = 0x2e; // .
    for (let i = pos + k; i > pos; i--) {
      const d = frac % 10;
      buf[i] = 0x30 + d;
      frac = (frac - d) / 10;
    }
    return pos + k + 1;
  }
  return -1;
}

/** Two digits (00–99) at `pos`. */
function two(buf: Uint8Array, pos: number, n: number): void {
  buf[pos] = PAIRS[2 * n]!;
  buf[pos + 1] = PAIRS[2 * n + 1]!;
}

/** A growing byte buffer handed out in chunks of about CHUNK bytes. */
class Out {
  buf: Buffer = Buffer.allocUnsafe(CHUNK + 64 * 1024);
  pos = 0;
  /** Room for `n` more bytes; the buffer may be replaced (read `buf` again after). */
  ensure(n: number): void {
    if (this.pos + n <= this.buf.length) return;
    const next = Buffer.allocUnsafe(Math.max(this.buf.length * 2, this.pos + n));
    this.buf.copy(next, 0, 0, this.pos);
    this.buf = next;
  }
  /** The bytes so far, handed over: a fresh buffer takes the next ones. */
  take(): Buffer {
    const out = this.buf.subarray(0, this.pos);
    this.buf = Buffer.allocUnsafe(CHUNK + 64 * 1024);
    this.pos = 0;
    return out;
  }
}

/**
 * Append row `r` (after its source) at `out.pos`: each column's tab and value,
 * then the newline. Returns null, or the index of the column whose value
 * cannot be written and the reason (`out.pos` is then left where it was).
 */
function writeRow(out: Out, cols: readonly Column[], r: number): { column: number; reason: string } | null {
  const n = cols.length;
  out.ensure(n * CELL + 1);
  let buf = out.buf;
  let pos = out.pos;
  for (let c = 0; c < n; c++) {
    const col = cols[c]!;
    buf[pos++] = TAB;
    const valid = col.valid;
    if (valid.length !== 0 && (valid[(col.offset + r) >> 3]! & (1 << ((col.offset + r) & 7))) === 0) {
      buf[pos++] = BS;
      buf[pos++] = 0x4e; // \N
      continue;
    }
    switch (col.kind) {
      case STRING: {
        const src = col.bytes;
        const s = col.offsets[r]!;
        const e = col.offsets[r + 1]!;
        // Worst case: every byte escaped; and room for the rest of the row's cells.
        if (buf.length - pos < 2 * (e - s) + (n - c) * CELL + 1) {
          out.pos = pos;
          out.ensure(2 * (e - s) + (n - c) * CELL + 1);
          buf = out.buf;
        }
        for (let i = s; i < e; i++) {
          const x = src[i]!;
          const esc = ESCAPE[x]!;
          if (esc === 0) buf[pos++] = x;
          else if (esc === REFUSE) return { column: c, reason: NUL_REASON };
          else {
            buf[pos++] = BS;
            buf[pos++] = esc;
          }
        }
        break;
      }
      case INT64: {
        // The two halves, not a bigint per cell.
        const hi = col.halves[2 * r + 1 - LO]!;
        if (hi >= -HI_SAFE && hi < HI_SAFE) {
          const v = hi * TWO32 + (col.halves[2 * r + LO]! >>> 0);
          if (v >= Number.MIN_SAFE_INTEGER) {
            pos = integer(buf, pos, v);
            break;
          }
        }
        pos = ascii(buf, pos, col.int64[r]!.toString());
        break;
      }
      case DOUBLE: {
        const x = col.float64[r]!;
        // String(-0) is "0": a negative zero keeps its sign.
        if (x === 0 && 1 / x < 0) pos = ascii(buf, pos, '-0');
        else if (Number.isInteger(x) && x < 2147483648 && x > -2147483648) pos = integer(buf, pos, x);
        else {
          const end = fixedPoint(buf, pos, x);
          pos = end >= 0 ? end : ascii(buf, pos, String(x));
        }
        break;
      }
      case BOOLEAN: {
        const bit = col.offset + r;
        buf[pos++] = (col.bytes[bit >> 3]! & (1 << (bit & 7))) !== 0 ? 0x74 : 0x66; // t / f
        break;
      }
      case TIMESTAMP: {
        const ms = col.halves[2 * r + 1 - LO]! * TWO32 + (col.halves[2 * r + LO]! >>> 0);
        if (!(ms >= -MAX_DATE_MS && ms <= MAX_DATE_MS)) return { column: c, reason: `timestamp ${Number(col.int64[r]!)} ms is outside the range of a date` };
        // toISOString's text: the date part once per day, the time of day in digits.
        const day = Math.floor(ms / MS_PER_DAY);
        if (col.day !== day) {
          const iso = new Date(day * MS_PER_DAY).toISOString(); // `YYYY-MM-DD` or `±YYYYYY-MM-DD`, then `T00:00:00.000Z`
          // Years 1 to 9999 only: PostgreSQL reads no sign, and year 0 and before as BC (timestampText).
          col.date = /^[0-9]{4}-/.test(iso) && !iso.startsWith('0000') ? Buffer.from(iso.slice(0, iso.length - 13), 'latin1') : EMPTY_U8;
          col.day = day;
        }
        const date = col.date;
        if (date.length === 0) {
          pos = ascii(buf, pos, timestampText(new Date(ms)));
          break;
        }
        for (let k = 0; k < date.length; k++) buf[pos++] = date[k]!;
        let t = ms - day * MS_PER_DAY;
        const milli = t % 1000;
        t = (t - milli) / 1000;
        const sec = t % 60;
        t = (t - sec) / 60;
        const min = t % 60;
        two(buf, pos, (t - min) / 60);
        buf[pos + 2] = 0x3a; // :
        two(buf, pos + 3, min);
        buf[pos + 5] = 0x3a;
        two(buf, pos + 6, sec);
        buf[pos + 8] = 0x2e; // .
        buf[pos + 9] = 0x30 + ((milli / 100) | 0);
        two(buf, pos + 10, milli % 100);
        buf[pos + 12] = 0x5a; // Z
        pos += 13;
        break;
      }
    }
  }
  buf[pos++] = NL;
  out.pos = pos;
  return null;
}

/** The text of COPY's text format for a string (the source), as bytes. */
function escapedText(s: string): Buffer {
  const bytes = Buffer.from(s, 'utf8');
  const out: number[] = [];
  for (const x of bytes) {
    const esc = ESCAPE[x]!;
    if (esc === 0 || esc === REFUSE) out.push(x);
    else out.push(BS, esc);
  }
  return Buffer.from(out);
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
      // The text the COPY would have sent (timestampText), so the dead letter shows what was refused.
      const d = new Date(Number(v));
      row[c.name] = Number.isNaN(d.getTime()) ? Number(v) : timestampText(d);
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
  const src = escapedText(o.source);
  const cols = o.columns.map((c) => new Column(c.type));
  let ordinal = 0;
  for await (const batch of batches) {
    for (let i = 0; i < cols.length; i++) cols[i]!.bind(batch, i);
    for (let r = 0; r < batch.numRows; r++, ordinal++) {
      if (o.skip.size > 0 && o.skip.has(ordinal)) {
        const at = r;
        o.onSkipped(ordinal, () => rowOf(batch, o.columns, at, o.source));
        continue;
      }
      const start = out.pos;
      out.ensure(src.length);
      out.buf.set(src, out.pos);
      out.pos += src.length;
      const refused = writeRow(out, cols, r);
      if (refused) {
        out.pos = start;
        o.onRefused(ordinal, `column "${o.columns[refused.column]!.name}" ${refused.reason}`, rowOf(batch, o.columns, r, o.source));
        continue;
      }
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
