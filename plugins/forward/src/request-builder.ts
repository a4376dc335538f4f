/**
 * Unit → one request: the NDJSON body (built once, so every retry of the unit
 * sends the very same bytes) and the headers the receiver keys its ledger by.
 */
import { INTERNAL_PREFIX, type Row, type Unit } from '../../../types/index.js';

export interface BatchRequest {
  /** Path and query, already encoded: `/v1/ingest/<dataset>`. */
  readonly path: string;
  readonly headers: Readonly<Record<string, string>>;
  readonly body: Buffer;
  readonly rows: number;
}

/** JSON has no bigint; a stray one (INT64 beyond 2^53 should arrive as a string) is sent as its decimal text. */
function bigintAsString(_key: string, value: unknown): unknown {
  return typeof value === 'bigint' ? value.toString() : value;
}

/** Rows never carry `_hyp_*` columns; drop any that slip through rather than leak them. */
function stripInternal(row: Row): Row {
  for (const k in row) {
    if (k.startsWith(INTERNAL_PREFIX)) {
      const clean: Row = {};
      for (const [key, v] of Object.entries(row)) if (!key.startsWith(INTERNAL_PREFIX)) clean[key] = v;
      return clean;
    }
  }
  return row;
}

function rowLine(row: Row): string {
  const r = stripInternal(row);
  try {
    return JSON.stringify(r);
  } catch (e) {
    if (e instanceof TypeError && /BigInt/i.test(e.message)) return JSON.stringify(r, bigintAsString);
    throw e;
  }
}

/** Encode a path segment; '.' and '..' would be resolved away by URL normalization on the way. */
export function encodeSegment(s: string): string {
  const enc = encodeURIComponent(s);
  return enc === '.' || enc === '..' ? enc.replace(/\./g, '%2E') : enc;
}

/** Read the unit's rows (in seq order) into one NDJSON body. */
export async function buildRequest(unit: Unit, token: string | undefined): Promise<BatchRequest> {
  const lines: string[] = [];
  for await (const row of unit.rows()) lines.push(rowLine(row));
  const body = Buffer.from(lines.length === 0 ? '' : `${lines.join('\n')}\n`, 'utf8');
  const headers: Record<string, string> = {
    'Content-Type': 'application/x-ndjson',
    'Content-Length': String(body.length),
    'X-Hyp-Partition': `source=${encodeURIComponent(unit.partition.source)}`,
    'X-Hyp-Batch-Id': unit.id,
  };
  if (token !== undefined) headers.Authorization = `Bearer ${token}`;
  return { path: `/v1/ingest/${encodeSegment(unit.partition.dataset)}`, headers, body, rows: lines.length };
}
