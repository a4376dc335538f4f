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

export type Normalized = { ok: true; value: unknown } | { ok: false; reason: string };

export function normalizeValue(col: ColumnSpec, v: unknown): Normalized {
  if (v === undefined || v === null) {
    return col.nullable ? { ok: true, value: null } : { ok: false, reason: `field "${col.name}" is required` };
  }
  switch (col.type) {
    case 'INT64': {
      if (typeof v === 'number') {
        if (Number.isSafeInteger(v)) return { ok: true, value: v };
        return { ok: false, reason: `field "${col.name}" must be an integer (INT64), got ${v}` };
      }
      if (typeof v === 'string' && /^-?\d{1,19}$/.test(v)) {
        const b = BigInt(v);
        if (b >= INT64_MIN && b <= INT64_MAX) {
          return { ok: true, value: Number.isSafeInteger(Number(b)) ? Number(b) : b.toString() };
        }
      }
      return { ok: false, reason: `field "${col.name}" must be an INT64, got ${JSON.stringify(v).slice(0, 40)}` };
    }
    case 'DOUBLE':
      if (typeof v === 'number' && Number.isFinite(v)) return { ok: true, value: v };
      return { ok: false, reason: `field "${col.name}" must be a finite number (DOUBLE)` };
    case 'STRING':
      if (typeof v === 'string') return { ok: true, value: v };
      return { ok: false, reason: `field "${col.name}" must be a string` };
    case 'BOOLEAN':
      if (typeof v === 'boolean') return { ok: true, value: v };
      return { ok: false, reason: `field "${col.name}" must be true or false` };
    case 'TIMESTAMP': {
      if (typeof v === 'string' && ISO_DATE.test(v) && realDate(v)) {
        const ms = Date.parse(v);
        if (!Number.isNaN(ms)) return { ok: true, value: ms };
      }
      if (typeof v === 'number' && Number.isSafeInteger(v)) return { ok: true, value: v };
      return { ok: false, reason: `field "${col.name}" must be an ISO-8601 timestamp, got ${JSON.stringify(v).slice(0, 40)}` };
    }
    case 'JSON':
      return { ok: true, value: JSON.stringify(v) };
  }
}

/**
 * Validate a row object. Returns the normalized values in schema column order,
 * or the first reason it is rejected. Unknown fields are rejected: silently
 * dropping data the user sent is worse than asking them to declare it.
 */
export function normalizeRow(
  schema: DatasetSchema,
  row: Record<string, unknown>,
  ignore: ReadonlySet<string> = new Set(),
): { ok: true; values: unknown[] } | { ok: false; reason: string } {
  const values: unknown[] = new Array(schema.columns.length);
  for (let i = 0; i < schema.columns.length; i++) {
    const col = schema.columns[i]!;
    const r = normalizeValue(col, row[col.name]);
    if (!r.ok) return r;
    values[i] = r.value;
  }
  for (const key of Object.keys(row)) {
    if (ignore.has(key)) continue;
    if (!schema.columns.some((c) => c.name === key)) {
      return { ok: false, reason: `field "${key}" is not in the dataset schema` };
    }
  }
  return { ok: true, values };
}
