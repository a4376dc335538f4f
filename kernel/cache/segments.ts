/**
 * Untrusted names (dataset names, partition values) → safe path segments.
 *
 * Injective: every byte outside [A-Za-z0-9_-] and a '.' anywhere is percent-
 * encoded (so '%' itself becomes %25 and '.'/'..' cannot appear), the empty
 * string is the lone '%' that no encoding produces, and a segment over the
 * length limit is cut and suffixed with '~' and a hash of the whole value
 * ('~' is always encoded otherwise, so a hashed segment never equals a plain one).
 * @ref LLP 0004 (partition identity)
 */
import { createHash } from 'node:crypto';

const MAX_SEGMENT = 160;

export function encodeSegment(value: string): string {
  if (value === '') return '%';
  let out = '';
  for (const byte of Buffer.from(value, 'utf8')) {
    const safe =
      (byte >= 0x30 && byte <= 0x39) ||
      (byte >= 0x41 && byte <= 0x5a) ||
      (byte >= 0x61 && byte <= 0x7a) ||
      byte === 0x5f ||
      byte === 0x2d;
    out += safe ? String.fromCharCode(byte) : `%${byte.toString(16).toUpperCase().padStart(2, '0')}`;
  }
  if (out.length <= MAX_SEGMENT) return out;
  const digest = createHash('sha256').update(value, 'utf8').digest('hex').slice(0, 32);
  return `${out.slice(0, MAX_SEGMENT - 34).replace(/%[0-9A-F]?$/, '')}~${digest}`;
}
