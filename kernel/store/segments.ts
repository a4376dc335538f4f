/**
 * Untrusted names (dataset names, partition values) → safe path segments.
 *
 * Injective: every byte outside [A-Za-z0-9_-] and a '.' anywhere is percent-
 * encoded (so '%' itself becomes %25 and '.'/'..' cannot appear), a lone UTF-16
 * surrogate (which has no UTF-8 form) is `%uXXXX`, the empty string is the lone
 * '%' that no encoding produces, and a segment over the length limit is cut and
 * suffixed with '~' and a hash of the whole encoding ('~' is always encoded
 * otherwise, so a hashed segment never equals a plain one).
 * @ref LLP 0004 (partition identity)
 */
import { createHash } from 'node:crypto';

const MAX_SEGMENT = 160;

const isSafe = (c: number) =>
  (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a) || c === 0x5f || c === 0x2d;

const hex = (n: number, width: number) => n.toString(16).toUpperCase().padStart(width, '0');

export function encodeSegment(value: string): string {
  if (value === '') return '%';
  let out = '';
  for (let i = 0; i < value.length; i++) {
    const c = value.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdfff) {
      const next = value.charCodeAt(i + 1);
      if (c <= 0xdbff && next >= 0xdc00 && next <= 0xdfff) {
        // A surrogate pair: one code point, encoded as its UTF-8 bytes.
        for (const byte of Buffer.from(value.slice(i, i + 2), 'utf8')) out += `%${hex(byte, 2)}`;
        i++;
      } else {
        // Lone surrogate: Buffer would turn it into U+FFFD and collide with a real U+FFFD.
        out += `%u${hex(c, 4)}`;
      }
    } else if (isSafe(c)) {
      out += String.fromCharCode(c);
    } else {
      for (const byte of Buffer.from(value[i]!, 'utf8')) out += `%${hex(byte, 2)}`;
    }
  }
  if (out.length <= MAX_SEGMENT) return out;
  // Hash the (injective, ASCII) encoding, not the raw value: hashing UTF-8 would fold lone surrogates.
  const digest = createHash('sha256').update(out).digest('hex').slice(0, 32);
  return `${out.slice(0, MAX_SEGMENT - 34).replace(/%(u[0-9A-F]{0,3}|[0-9A-F]?)$/, '')}~${digest}`;
}

/**
 * The value a segment encodes, or undefined when it is hashed (cut: only
 * partition.json knows the value) or is not exactly what encodeSegment produces.
 */
export function decodeSegment(segment: string): string | undefined {
  if (segment === '%') return '';
  if (segment === '' || segment.includes('~')) return undefined;
  const decoder = new TextDecoder('utf-8', { fatal: true });
  let out = '';
  let bytes: number[] = [];
  const flush = () => {
    if (bytes.length) out += decoder.decode(Uint8Array.from(bytes));
    bytes = [];
  };
  try {
    for (let i = 0; i < segment.length; ) {
      const c = segment.charCodeAt(i);
      if (isSafe(c)) {
        flush();
        out += segment[i];
        i += 1;
        continue;
      }
      if (c !== 0x25) return undefined;
      const m = /^%(?:u([0-9A-F]{4})|([0-9A-F]{2}))/.exec(segment.slice(i, i + 6));
      if (!m) return undefined;
      if (m[1]) {
        flush();
        out += String.fromCharCode(Number.parseInt(m[1], 16));
        i += 6;
      } else {
        bytes.push(Number.parseInt(m[2]!, 16));
        i += 3;
      }
    }
    flush();
  } catch {
    return undefined; // not UTF-8
  }
  return encodeSegment(out) === segment ? out : undefined;
}
