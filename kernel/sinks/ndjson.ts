/**
 * Arrow batches → NDJSON as UTF-8 bytes, column-aware: byte for byte what
 * `JSON.stringify` of each row-form row would give, as UTF-8 (keys in schema
 * order, one line per row, each ending in `\n`), without building row objects
 * or per-cell strings. Utf8 cells are copied from the Arrow value buffer (JSON
 * columns as they are: the cache holds `JSON.stringify` text; STRING columns
 * escaped as `JSON.stringify` escapes), numbers and timestamps written as
 * digits. A unit's batches go into one buffer, so a request body is not
 * concatenated again. Body building bounds the forward export's throughput.
 * @ref LLP 0011: performance bounds
 */
import type { Data, RecordBatch } from 'apache-arrow';
import type { ColumnSpec } from '../../types/schema.js';

const NULL = 0;
const JSON_TEXT = 1;
const STRING = 2;
const INT64 = 3;
const TIMESTAMP = 4;
const DOUBLE = 5;
const BOOLEAN = 6;

const KINDS: Record<ColumnSpec['type'], number> = { JSON: JSON_TEXT, STRING, INT64, TIMESTAMP, DOUBLE, BOOLEAN };

/** Index of the low 32-bit half of an int64 in an Int32Array view of it. */
const LO = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1 ? 0 : 1;
const TWO32 = 4294967296;
/** The high half of every safe integer is within ±2^21 (2^53 = 2^21 · 2^32). */
const HI_SAFE = 2097152;
const MS_PER_DAY = 86_400_000;
/** Date's range (ms); toISOString throws beyond it. */
const MAX_DATE_MS = 8.64e15;
const POW10 = [1, 10, 100, 1e3, 1e4, 1e5, 1e6];

/**
 * What JSON.stringify writes for a byte of a string: 0 = the byte itself, else the
 * escape's second character (`\"`, `\\`, `\n`…), or 0x75 ('u') for `\u00xx`.
 * Bytes ≥ 0x80 (UTF-8 of non-ASCII, U+2028/9 included) are not escaped.
 */
const ESCAPE = new Uint8Array(256);
for (let b = 0; b < 0x20; b++) ESCAPE[b] = 0x75;
ESCAPE[0x08] = 0x62; // \b
ESCAPE[0x09] = 0x74; // \t
ESCAPE[0x0a] = 0x6e; // \n
ESCAPE[0x0c] = 0x66; // \f
ESCAPE[0x0d] = 0x72; // \r
ESCAPE[0x22] = 0x22; // \"
ESCAPE[0x5c] = 0x5c; // \\
const HEX = Buffer.from('0123456789abcdef', 'latin1');

/** Below this many bytes a JSON cell is copied a word at a time (a STRING cell byte by byte, checked); above, by `set` (a view per cell). */
const SHORT = 64;
/** Room reserved per row for each non-Utf8 cell: `"+275760-09-13T00:00:00.000Z"` and `"-9223372036854775808"` fit. */
const FIXED_CELL = 32;
/** A guess of a non-Utf8 cell's usual size, to size the buffer: about a timestamp's or a double's. */
const FIXED_GUESS = 16;

const EMPTY_U8 = new Uint8Array(0);
const EMPTY_I32 = new Int32Array(0);
const EMPTY_F64 = new Float64Array(0);
const EMPTY_I64 = new BigInt64Array(0);
const EMPTY_VIEW = new DataView(new ArrayBuffer(0));

/** One column of a batch, its buffers taken out of the Arrow Data (one shape for every kind). */
class Column {
  /** The schema's type of the column. */
  kind0 = NULL;
  /** As bound to the current batch: NULL when the batch lacks the column. */
  kind = NULL;
  /** `{"name":` for the first column, `,"name":` for the others. */
  key: Uint8Array = EMPTY_U8;
  /** The key as little-endian 32-bit words, the last one padded (see `append`). */
  keyWords: Int32Array = EMPTY_I32;
  /** Validity bitmap (bit `bitOffset + i`), or empty when the column has no nulls. */
  valid: Uint8Array = EMPTY_U8;
  /** The Data's offset: where row 0 is in the bitmaps (validity and BOOLEAN values). */
  bitOffset = 0;
  /** Utf8: offsets into `bytes` (already sliced: entry i is row i), and the unsliced value bytes. */
  offsets: Int32Array = EMPTY_I32;
  bytes: Uint8Array = EMPTY_U8;
  /** Utf8: `bytes`' memory, to read it four bytes at a time. */
  view: DataView = EMPTY_VIEW;
  /** INT64/TIMESTAMP: the values (sliced, as Arrow slices them) and the same memory as 32-bit halves. */
  int64: BigInt64Array = EMPTY_I64;
  halves: Int32Array = EMPTY_I32;
  float64: Float64Array = EMPTY_F64;
  /** TIMESTAMP: the day (epoch ms / 86400000) last written, its `YYYY-MM-DDT` length and words (as `keyWords`). */
  day = Number.NaN;
  dayLength = 0;
  dayWords: Int32Array = EMPTY_I32;
}

function bind(col: Column, d: Data | undefined): void {
  col.kind = NULL;
  col.valid = EMPTY_U8;
  if (!d) return; // absent from the batch: null in every row
  col.kind = col.kind0;
  col.bitOffset = d.offset;
  if (d.nullCount > 0 && d.nullBitmap) col.valid = d.nullBitmap;
  const values = d.values as unknown;
  switch (col.kind) {
    case JSON_TEXT:
    case STRING:
      col.offsets = d.valueOffsets as Int32Array;
      col.bytes = values as Uint8Array;
      col.view = new DataView(col.bytes.buffer, col.bytes.byteOffset, col.bytes.byteLength);
      break;
    case INT64:
    case TIMESTAMP: {
      const v = values as BigInt64Array;
      col.int64 = v;
      col.halves = new Int32Array(v.buffer, v.byteOffset, v.length * 2);
      break;
    }
    case DOUBLE:
      col.float64 = values as Float64Array;
      break;
    case BOOLEAN:
      col.bytes = values as Uint8Array; // bits, not sliced: bit `bitOffset + i`
      break;
  }
}

/** `bytes` as little-endian 32-bit words, the last one zero-padded: written with setInt32, four bytes a store. */
function words(bytes: Uint8Array): Int32Array {
  const padded = new Uint8Array(Math.ceil(bytes.length / 4) * 4);
  padded.set(bytes);
  const view = new DataView(padded.buffer);
  const out = new Int32Array(padded.length / 4);
  for (let k = 0; k < out.length; k++) out[k] = view.getInt32(4 * k, true);
  return out;
}

/** Write an ASCII string at `pos`; returns the new position. */
function ascii(buf: Uint8Array, pos: number, s: string): number {
  for (let i = 0; i < s.length; i++) buf[pos++] = s.charCodeAt(i);
  return pos;
}

/** `00` to `99`: the two digits of n at 2n, 2n + 1. */
const PAIRS = Buffer.from(Array.from({ length: 100 }, (_, n) => String(n).padStart(2, '0')).join(''), 'latin1');

/** Digits of 0 ≤ n < 2^31. */
function digitCount(n: number): number {
  if (n < 100000) return n < 10 ? 1 : n < 100 ? 2 : n < 1000 ? 3 : n < 10000 ? 4 : 5;
  return n < 1000000 ? 6 : n < 10000000 ? 7 : n < 100000000 ? 8 : n < 1000000000 ? 9 : 10;
}

/** Write the decimal digits of an integer (a safe one, or -0) at `pos`; returns the new position. */
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
 * A non-integer double with at most 6 decimals and |x| < 2^31, as Number#toString
 * writes it (JSON.stringify's text), without the string; -1 for any other x.
 * k is the fewest decimals for which the decimal n / 10^k reads back as x (both
 * exact, so the division is the correctly rounded parse). n < 2^31 · 10^6 < 2^52,
 * so no other n of k decimals reads back as x and Math.round(x · 10^k) finds it;
 * a text of fewer significant digits would have fewer decimals. That is the text
 * Number#toString picks; 6 decimals at most keep it out of exponent form (< 1e-6).
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

/** Beyond Date's range (ms): fail as the row form does, with toISOString's RangeError. */
function outOfDateRange(ms: bigint): never {
  new Date(Number(ms)).toISOString();
  throw new RangeError(`timestamp ${ms} ms is outside the Date range`);
}

/** Two digits (00–99) at `pos`. */
function two(buf: Uint8Array, pos: number, n: number): void {
  buf[pos] = PAIRS[2 * n]!;
  buf[pos + 1] = PAIRS[2 * n + 1]!;
}

/**
 * NDJSON lines of batches with the same columns, appended to one growing UTF-8
 * buffer. `expectRows` (the unit's planned rows) sizes the buffer from the first
 * batch, so it rarely grows; growing doubles it.
 */
export class NdjsonWriter {
  private buf: Uint8Array = EMPTY_U8;
  private view: DataView = EMPTY_VIEW;
  private pos = 0;
  private lines = 0;
  private readonly columns: Column[];

  constructor(
    private readonly cols: readonly ColumnSpec[],
    private readonly expectRows = 0,
  ) {
    this.columns = cols.map((c, i) => {
      const col = new Column();
      col.kind0 = KINDS[c.type];
      col.key = Buffer.from(`${i === 0 ? '{' : ','}${JSON.stringify(c.name)}:`, 'utf8');
      col.keyWords = words(col.key);
      return col;
    });
  }

  /** Rows written so far. */
  get rows(): number {
    return this.lines;
  }

  /** The lines written so far (a view of the buffer: valid until the next append). */
  bytes(): Uint8Array {
    return this.buf.subarray(0, this.pos);
  }

  /** Append one line per row of `batch`. */
  append(batch: RecordBatch): void {
    const rows = batch.numRows;
    if (rows === 0) return;
    const columns = this.columns;
    const n = columns.length;
    // A RecordBatch's children are single Data (no chunks), sliced with the batch.
    const children = batch.data.children;
    const fields = batch.schema.fields;
    // Room every row needs besides its Utf8 cells' bytes (checked per cell), and a guess of the batch's size.
    let fixed = n === 0 ? 3 : 2; // `}\n`, or `{}\n` without columns
    let perRow = fixed;
    let utf8 = 0;
    for (let c = 0; c < n; c++) {
      const col = columns[c]!;
      const at = fields.findIndex((f) => f.name === this.cols[c]!.name);
      bind(col, at < 0 ? undefined : children[at]);
      fixed += col.key.length;
      perRow += col.key.length;
      if (col.kind === JSON_TEXT || col.kind === STRING) {
        fixed += 4; // quotes, or `null`
        perRow += 2;
        utf8 += col.offsets[rows]! - col.offsets[0]!;
      } else {
        fixed += FIXED_CELL;
        perRow += FIXED_GUESS;
      }
    }
    const guess = perRow * rows + utf8;
    if (this.buf.length - this.pos < guess) {
      // The rest of the unit is likely alike: room for it too, when known (bounded: a hint, not a promise).
      const rest = Math.min(Math.max(rows, this.expectRows - this.lines), 16 * rows);
      this.grow(Math.ceil((guess / rows) * rest * 1.05));
    }
    let buf = this.buf;
    let out = this.view;
    let pos = this.pos;

    for (let r = 0; r < rows; r++) {
      if (buf.length - pos < fixed) {
        this.pos = pos;
        this.grow(fixed);
        buf = this.buf;
        out = this.view;
      }
      if (n === 0) {
        buf[pos++] = 0x7b; // {
      }
      for (let c = 0; c < n; c++) {
        const col = columns[c]!;
        // The key a word at a time; the last word's padding lands where the cell goes next
        // (the room checked per row covers it).
        const key = col.keyWords;
        for (let k = 0; k < key.length; k++) out.setInt32(pos + 4 * k, key[k]!, true);
        pos += col.key.length;
        const valid = col.valid;
        const kind = col.kind;
        if (kind === NULL || (valid.length !== 0 && (valid[(col.bitOffset + r) >> 3]! & (1 << ((col.bitOffset + r) & 7))) === 0)) {
          buf[pos++] = 0x6e; // null
          buf[pos++] = 0x75;
          buf[pos++] = 0x6c;
          buf[pos++] = 0x6c;
          continue;
        }
        switch (kind) {
          case JSON_TEXT: {
            const src = col.bytes;
            const s = col.offsets[r]!;
            const e = col.offsets[r + 1]!;
            if (buf.length - pos < e - s + fixed) {
              this.pos = pos;
              this.grow(e - s + fixed);
              buf = this.buf;
              out = this.view;
            }
            if (e - s < SHORT) {
              const from = col.view;
              let i = s;
              for (; i + 4 <= e; i += 4, pos += 4) out.setInt32(pos, from.getInt32(i, true), true);
              for (; i < e; i++) buf[pos++] = src[i]!;
            } else {
              buf.set(src.subarray(s, e), pos);
              pos += e - s;
            }
            break;
          }
          case STRING: {
            const src = col.bytes;
            const s = col.offsets[r]!;
            const e = col.offsets[r + 1]!;
            // Worst case: every byte a `\u00xx`.
            if (buf.length - pos < 6 * (e - s) + fixed) {
              this.pos = pos;
              this.grow(6 * (e - s) + fixed);
              buf = this.buf;
              out = this.view;
            }
            buf[pos++] = 0x22;
            let i = s;
            if (e - s >= SHORT) {
              // A long cell: the run before the first byte to escape in one copy.
              while (i < e && ESCAPE[src[i]!] === 0) i++;
              buf.set(src.subarray(s, i), pos);
              pos += i - s;
            }
            for (; i < e; i++) {
              const b = src[i]!;
              const esc = ESCAPE[b]!;
              if (esc === 0) buf[pos++] = b;
              else {
                buf[pos++] = 0x5c;
                buf[pos++] = esc;
                if (esc === 0x75) {
                  buf[pos++] = 0x30;
                  buf[pos++] = 0x30;
                  buf[pos++] = HEX[b >> 4]!;
                  buf[pos++] = HEX[b & 15]!;
                }
              }
            }
            buf[pos++] = 0x22;
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
            // Beyond ±(2^53 − 1): the row form keeps it as a decimal string.
            buf[pos++] = 0x22;
            pos = ascii(buf, pos, col.int64[r]!.toString());
            buf[pos++] = 0x22;
            break;
          }
          case TIMESTAMP: {
            // toISOString's text: the date part once per day, the time of day in digits.
            const ms = col.halves[2 * r + 1 - LO]! * TWO32 + (col.halves[2 * r + LO]! >>> 0);
            if (ms < -MAX_DATE_MS || ms > MAX_DATE_MS) outOfDateRange(col.int64[r]!);
            const day = Math.floor(ms / MS_PER_DAY);
            if (col.day !== day) {
              const iso = new Date(day * MS_PER_DAY).toISOString(); // `YYYY-MM-DD` or `±YYYYYY-MM-DD`, then `T00:00:00.000Z`
              const date = Buffer.from(`"${iso.slice(0, iso.length - 13)}`, 'latin1');
              col.dayWords = words(date);
              col.dayLength = date.length;
              col.day = day;
            }
            const date = col.dayWords;
            for (let k = 0; k < date.length; k++) out.setInt32(pos + 4 * k, date[k]!, true);
            pos += col.dayLength;
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
            buf[pos + 13] = 0x22;
            pos += 14;
            break;
          }
          case DOUBLE: {
            const x = col.float64[r]!;
            if (Number.isInteger(x) && x < 2147483648 && x > -2147483648) pos = integer(buf, pos, x);
            else {
              const end = fixedPoint(buf, pos, x);
              // Other doubles (and NaN, ±Infinity: `null`) as JSON.stringify writes them.
              pos = end >= 0 ? end : ascii(buf, pos, JSON.stringify(x));
            }
            break;
          }
          case BOOLEAN: {
            const bit = col.bitOffset + r;
            if ((col.bytes[bit >> 3]! & (1 << (bit & 7))) !== 0) {
              buf[pos++] = 0x74; // true
              buf[pos++] = 0x72;
              buf[pos++] = 0x75;
              buf[pos++] = 0x65;
            } else {
              buf[pos++] = 0x66; // false
              buf[pos++] = 0x61;
              buf[pos++] = 0x6c;
              buf[pos++] = 0x73;
              buf[pos++] = 0x65;
            }
            break;
          }
        }
      }
      buf[pos++] = 0x7d; // }
      buf[pos++] = 0x0a;
    }
    this.pos = pos;
    this.lines += rows;
  }

  /** Make room for `need` more bytes (at least doubling). */
  private grow(need: number): void {
    const size = Math.max(64, this.buf.length * 2, this.pos + need);
    const next = Buffer.allocUnsafe(size);
    next.set(this.buf.subarray(0, this.pos));
    this.buf = next;
    this.view = new DataView(next.buffer, next.byteOffset, next.byteLength);
  }
}

/** One NDJSON line per row of `batch`, each ending in a newline, as UTF-8 bytes. */
export function batchToNdjsonBytes(batch: RecordBatch, cols: readonly ColumnSpec[]): Uint8Array {
  const w = new NdjsonWriter(cols, batch.numRows);
  w.append(batch);
  return w.bytes();
}
