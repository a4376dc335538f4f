/**
 * Unit → one request: the NDJSON body (built once, so every retry of the unit
 * sends the very same bytes) and the headers the receiver keys its ledger by.
 * @ref LLP 0060: the unit's digest travels with its batch id
 */
import { INTERNAL_PREFIX, type Row, type Unit } from 'hypsink/plugin';

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

/** A UTF-16 surrogate without its partner: a valid partition value with no UTF-8 form. */
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;

/**
 * The `X-Hyp-Partition` form of a partition value: percent-encoded UTF-8, except
 * that a lone surrogate (on which encodeURIComponent throws "URI malformed") is
 * sent as `%uXXXX` — never produced otherwise, since 'u' is not a hex digit.
 */
export function encodePartitionValue(s: string): string {
  let out = '';
  let from = 0;
  for (const m of s.matchAll(LONE_SURROGATE)) {
    out += `${encodeURIComponent(s.slice(from, m.index))}%u${m[0].charCodeAt(0).toString(16).toUpperCase()}`;
    from = m.index + 1;
  }
  return out + encodeURIComponent(s.slice(from));
}

/** Read the unit's rows (in seq order) into one NDJSON body. */
export async function buildRequest(unit: Unit, token: string | undefined): Promise<BatchRequest> {
  let body: Buffer;
  let rows = 0;
  if (unit.ndjson) {
    // The kernel's column-wise serializer: the same lines' bytes, without row objects or strings.
    const chunks: Uint8Array[] = [];
    for await (const chunk of unit.ndjson()) {
      chunks.push(chunk.bytes);
      rows += chunk.rows;
    }
    const only = chunks.length === 1 ? chunks[0]! : undefined;
    body = only ? Buffer.from(only.buffer, only.byteOffset, only.byteLength) : Buffer.concat(chunks);
  } else {
    const parts: string[] = [];
    for await (const row of unit.rows()) {
      parts.push(`${rowLine(row)}\n`);
      rows++;
    }
    body = Buffer.from(parts.join(''), 'utf8');
  }
  const headers: Record<string, string> = {
    'Content-Type': 'application/x-ndjson',
    'Content-Length': String(body.length),
    'X-Hyp-Partition': `source=${encodePartitionValue(unit.partition.source)}`,
    'X-Hyp-Batch-Id': unit.id,
    // What the id names, by content: the receiver keeps it with the batch and refuses the id with another (LLP 0060).
    'X-Hyp-Unit-Digest': unit.digest,
  };
  if (token !== undefined) headers.Authorization = `Bearer ${token}`;
  return { path: `/v1/ingest/${encodeSegment(unit.partition.dataset)}`, headers, body, rows };
}
