/**
 * One NDJSON line from a peer over the wire (a receiver's client): it must be
 * one JSON object, nested no deeper than a bound, with no key repeated in any
 * of its objects. The receiver used to check this itself, parsing every line
 * before the kernel's ingest parsed it again; the ingest's parse (in the parse
 * worker when it runs) now does it once, and sets the client column there.
 * @ref LLP 0087
 */

/** Rows a receiver takes from a client: checked as one JSON object each, the client's name set on every row. */
export interface WireRows {
  /** JSON nesting depth at most this. */
  readonly maxDepth: number;
  /** The column the receiver writes the client's name in, and that name: set on every row, whatever the row held there. */
  readonly stamp: { readonly column: string; readonly value: string };
}

/**
 * Keys written in the line's text (a ':' outside a string), or -1 when it nests
 * deeper than `maxDepth`. Compared with the keys of the parsed value: JSON.parse
 * keeps the last of a repeated key, so fewer parsed keys means a repeat.
 */
function scanKeys(text: string, maxDepth: number): number {
  let depth = 0;
  let keys = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c) i++;
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x7b || c === 0x5b) {
      if (++depth > maxDepth) return -1;
    } else if (c === 0x7d || c === 0x5d) depth--;
    else if (c === 0x3a) keys++;
  }
  return keys;
}

/** Keys of every object in a parsed value (its depth is bounded by scanKeys first). */
function countKeys(v: unknown): number {
  if (typeof v !== 'object' || v === null) return 0;
  let n = 0;
  if (Array.isArray(v)) {
    for (const x of v) n += countKeys(x);
    return n;
  }
  for (const k in v) {
    if (Object.hasOwn(v, k)) n += 1 + countKeys((v as Record<string, unknown>)[k]);
  }
  return n;
}

function describe(v: unknown): string {
  return v === null ? 'null' : Array.isArray(v) ? 'an array' : `a ${typeof v}`;
}

/** The line as an object, or why it is not one a client may send (the caller names the line). */
export function wireObject(text: string, maxDepth: number): { ok: true; row: Record<string, unknown> } | { ok: false; error: string } {
  const keys = scanKeys(text, maxDepth);
  if (keys < 0) return { ok: false, error: `nested deeper than the limit of ${maxDepth}` };
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (err) {
    return { ok: false, error: `not valid JSON (${(err as Error).message})` };
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return { ok: false, error: `expected a JSON object, got ${describe(v)}` };
  if (countKeys(v) !== keys) return { ok: false, error: 'an object repeats a key; send each key once' };
  return { ok: true, row: v as Record<string, unknown> };
}
