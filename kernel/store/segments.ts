/**
 * The one name rule: untrusted names (dataset and sink names, partition values,
 * batch ids) → path segments, for every path hypsink makes (cache, state,
 * export keys, the receiver's data files).
 *
 * Injective, and still injective where a filesystem folds case: only
 * [a-z0-9_-] pass through; every other byte of the UTF-8 form (an uppercase
 * letter, '.', '%' and '~' included) becomes `%XX` with uppercase hex, a lone
 * UTF-16 surrogate (which has no UTF-8 form) `%uXXXX`. '%' always opens an
 * escape whose digits are uppercase, so no two outputs differ in case alone.
 * Safe on Windows: no reserved character, no trailing '.' or ' ', and a device
 * name (`con`, `nul`, `com1`…) has its first letter escaped. The empty string
 * is the lone '%' that no encoding produces; a segment over the length limit is
 * cut and suffixed with '~' and a hash of the whole encoding ('~' is always
 * encoded otherwise, so a hashed segment never equals a plain one).
 *
 * Names made before this rule (v1, which let uppercase through) are renamed
 * once, by segments-v1.ts.
 * @ref LLP 0004 (partition identity)
 * @ref LLP 0029 (one name rule)
 */
import { createHash } from 'node:crypto';

const MAX_SEGMENT = 160;

/** Which characters pass through as they are. */
export type SafeChars = (c: number) => boolean;

/** The rule: lowercase ASCII letters, digits, '_' and '-'. */
const isSafe: SafeChars = (c) => (c >= 0x30 && c <= 0x39) || (c >= 0x61 && c <= 0x7a) || c === 0x5f || c === 0x2d;

/** Windows device names, which no file may be called (whatever its case). */
const DEVICE = /^(con|prn|aux|nul|com[0-9]|lpt[0-9])$/;

const hex = (n: number, width: number) => n.toString(16).toUpperCase().padStart(width, '0');

/** @internal The encoding with a given set of pass-through characters (segments-v1.ts re-creates the old names). */
export function encodeWith(value: string, safe: SafeChars, devices: boolean): string {
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
    } else if (safe(c)) {
      out += String.fromCharCode(c);
    } else {
      for (const byte of Buffer.from(value[i]!, 'utf8')) out += `%${hex(byte, 2)}`;
    }
  }
  if (devices && DEVICE.test(out)) out = `%${hex(out.charCodeAt(0), 2)}${out.slice(1)}`;
  if (out.length <= MAX_SEGMENT) return out;
  // Hash the (injective, ASCII) encoding, not the raw value: hashing UTF-8 would fold lone surrogates.
  const digest = createHash('sha256').update(out).digest('hex').slice(0, 32);
  return `${out.slice(0, MAX_SEGMENT - 34).replace(/%(u[0-9A-F]{0,3}|[0-9A-F]?)$/, '')}~${digest}`;
}

export function encodeSegment(value: string): string {
  return encodeWith(value, isSafe, true);
}

/** @internal Decoding for a given rule: the value, when `segment` is exactly what `encode` makes of it. */
export function decodeWith(segment: string, safe: SafeChars, encode: (v: string) => string): string | undefined {
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
      if (safe(c)) {
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
  return encode(out) === segment ? out : undefined;
}

/**
 * The value a segment encodes, or undefined when it is hashed (cut: only the
 * metadata beside it knows the value) or is not exactly what encodeSegment produces.
 */
export function decodeSegment(segment: string): string | undefined {
  return decodeWith(segment, isSafe, encodeSegment);
}

/** A cut (hashed) segment, as encodeSegment makes one. */
export const CUT_SEGMENT = /^[a-z0-9_%A-Fu-]+~[0-9a-f]{32}$/;
