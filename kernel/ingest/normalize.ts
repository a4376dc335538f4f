/**
 * Row validation against a dataset schema, into the normalized form the spool
 * stores: INT64 as a safe number or a decimal string, TIMESTAMP as epoch ms,
 * JSON as its JSON text. Every rejection says which field and why.
 */
import type { ColumnSpec, DatasetSchema } from '../../types/schema.js';

const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;
const ISO_DATE = /^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?)?$/;

/** Date.parse rolls 2026-02-30 over to March 2: check the calendar date itself. */
function realDate(v: string): boolean {
  const y = Number(v.slice(0, 4));
  const m = Number(v.slice(5, 7));
  const d = Number(v.slice(8, 10));
  const days = new Date(Date.UTC(y, m, 0)).getUTCDate();
  return m >= 1 && m <= 12 && d >= 1 && d <= days;
}

/** Days in, and days before, each month of a common year. */
const DAYS_IN = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
const DAYS_BEFORE = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
const isLeap = (y: number) => y % 4 === 0 && (y % 100 !== 0 || y % 400 === 0);
/** Two digits at `i` as a number. (Module-level: a closure in the parser would be made per call.) */
const two = (v: string, i: number) => (v.charCodeAt(i) - 48) * 10 + v.charCodeAt(i + 1) - 48;

/**
 * The form `toISOString` writes (`2026-11-29T10:57:09.123Z`), parsed by hand:
 * nearly every timestamp a host sends, at a fraction of a regex, a calendar
 * check and Date.parse. NaN for anything else, which takes the general path.
 */
function isoUtcMs(v: string): number {
  if (v.length !== 24 || v.charCodeAt(23) !== 90 /* Z */) return Number.NaN;
  const y = (v.charCodeAt(0) - 48) * 1000 + (v.charCodeAt(1) - 48) * 100 + (v.charCodeAt(2) - 48) * 10 + (v.charCodeAt(3) - 48);
  let bad = 0;
  for (let i = 0; i < 23; i++) {
    const c = v.charCodeAt(i);
    // Separators at 4, 7, 10, 13, 16, 19; digits everywhere else.
    if (i === 4 || i === 7) bad |= c ^ 45;
    else if (i === 10) bad |= c ^ 84;
    else if (i === 13 || i === 16) bad |= c ^ 58;
    else if (i === 19) bad |= c ^ 46;
    else if (c < 48 || c > 57) bad = 1;
  }
  if (bad !== 0) return Number.NaN;
  const mo = two(v, 5);
  const d = two(v, 8);
  const h = two(v, 11);
  const mi = two(v, 14);
  const sec = two(v, 17);
  // Years 0–99 and any out-of-range field take the general path (Date.UTC maps 0–99 to 19xx).
  if (y < 100 || mo < 1 || mo > 12 || d < 1 || h > 23 || mi > 59 || sec > 59) return Number.NaN;
  const leap = isLeap(y);
  if (d > 28 && d > DAYS_IN[mo - 1]! + (mo === 2 && leap ? 1 : 0)) return Number.NaN;
  // Days since 1970-01-01 (proleptic Gregorian), as Date.UTC counts them.
  const yb = y - 1;
  const days = 365 * (y - 1970) + (Math.floor(yb / 4) - Math.floor(yb / 100) + Math.floor(yb / 400)) - 477 + DAYS_BEFORE[mo - 1]! + (mo > 2 && leap ? 1 : 0) + d - 1;
  return days * 86_400_000 + h * 3_600_000 + mi * 60_000 + sec * 1000 + (v.charCodeAt(20) - 48) * 100 + two(v, 21);
}

const INHERITED = new Set(Object.getOwnPropertyNames(Object.prototype));

/**
 * Normalize one value of column `col` into `out[at]`. Returns why it is
 * rejected, or null. (A result object per value cost a fifth of an ingest in
 * allocation alone: this runs for every cell.)
 */
function normalizeInto(col: ColumnSpec, v: unknown, out: unknown[], at: number): string | null {
  if (v === undefined || v === null) {
    out[at] = null;
    return col.nullable ? null : `field "${col.name}" is required`;
  }
  switch (col.type) {
    case 'INT64': {
      if (typeof v === 'number') {
        out[at] = v;
        return Number.isSafeInteger(v) ? null : `field "${col.name}" must be an integer (INT64), got ${v}`;
      }
      if (typeof v === 'string' && /^-?\d{1,19}$/.test(v)) {
        const b = BigInt(v);
        if (b >= INT64_MIN && b <= INT64_MAX) {
          out[at] = Number.isSafeInteger(Number(b)) ? Number(b) : b.toString();
          return null;
        }
      }
      return `field "${col.name}" must be an INT64, got ${JSON.stringify(v).slice(0, 40)}`;
    }
    case 'DOUBLE':
      out[at] = v;
      return typeof v === 'number' && Number.isFinite(v) ? null : `field "${col.name}" must be a finite number (DOUBLE)`;
    case 'STRING':
      out[at] = v;
      return typeof v === 'string' ? null : `field "${col.name}" must be a string`;
    case 'BOOLEAN':
      out[at] = v;
      return typeof v === 'boolean' ? null : `field "${col.name}" must be true or false`;
    case 'TIMESTAMP': {
      const fast = typeof v === 'string' ? isoUtcMs(v) : Number.NaN;
      if (!Number.isNaN(fast)) {
        out[at] = fast;
        return null;
      }
      const iso = typeof v === 'string' ? ISO_DATE.exec(v) : null;
      if (iso && realDate(v as string)) {
        // A date-time without a zone is UTC, as a date alone is: never the machine's local time,
        // so the same row gets the same instant wherever it is ingested.
        const ms = Date.parse(iso[1] !== undefined && iso[4] === undefined ? `${(v as string).replace(' ', 'T')}Z` : (v as string));
        if (!Number.isNaN(ms)) {
          out[at] = ms;
          return null;
        }
      }
      if (typeof v === 'number' && Number.isSafeInteger(v)) {
        out[at] = v;
        return null;
      }
      return `field "${col.name}" must be an ISO-8601 timestamp, got ${JSON.stringify(v).slice(0, 40)}`;
    }
    case 'JSON': {
      // Host rows (appendRows) are objects, not parsed text: they may hold what JSON cannot.
      let text: string | undefined;
      try {
        text = JSON.stringify(v);
      } catch (e) {
        return `field "${col.name}" is not JSON-serializable (${(e as Error).message})`;
      }
      if (text === undefined) return `field "${col.name}" is not JSON-serializable (a ${typeof v})`;
      out[at] = text;
      return null;
    }
  }
}

/**
 * Validate a row object into `out[offset..]`, in schema column order. Returns
 * the first reason it is rejected, or null. Unknown fields are rejected:
 * silently dropping data the user sent is worse than asking them to declare it.
 */
export function normalizeRowInto(
  schema: DatasetSchema,
  row: Record<string, unknown>,
  out: unknown[],
  offset: number,
  ignore?: ReadonlySet<string>,
): string | null {
  const cols = schema.columns;
  let present = 0;
  for (let i = 0; i < cols.length; i++) {
    const col = cols[i]!;
    // A column named like an Object.prototype member ("constructor") is read as an own field only.
    const v = INHERITED.has(col.name) && !Object.hasOwn(row, col.name) ? undefined : row[col.name];
    if (v !== undefined) present++;
    const reason = normalizeInto(col, v, out, offset + i);
    if (reason !== null) return reason;
  }
  // Counting keys finds an unknown field without a lookup per key; name it only then.
  let keys = 0;
  for (const key in row) if (!ignore?.has(key)) keys++;
  if (keys === present) return null;
  for (const key of Object.keys(row)) {
    if (ignore?.has(key)) continue;
    if (!cols.some((c) => c.name === key)) return `field "${key}" is not in the dataset schema`;
  }
  return null;
}

/** `normalizeRowInto` as a fresh array of values in schema column order. */
export function normalizeRow(
  schema: DatasetSchema,
  row: Record<string, unknown>,
  ignore?: ReadonlySet<string>,
): { ok: true; values: unknown[] } | { ok: false; reason: string } {
  const values: unknown[] = new Array(schema.columns.length);
  const reason = normalizeRowInto(schema, row, values, 0, ignore);
  return reason === null ? { ok: true, values } : { ok: false, reason };
}
