/**
 * MurmurHash3 x86_128 over bytes, little-endian blocks, as the reference
 * implementation. A content fingerprint, not a security boundary: ~10x faster
 * per row than a node:crypto digest, whose per-call setup dominates for short
 * rows.
 * @ref LLP 0015: row ids over column bytes
 */
const C1 = 0x239b961b;
const C2 = 0xab0e9789;
const C3 = 0x38b34ae5;
const C4 = 0xa1e38b93;

const rotl = (x: number, r: number) => (x << r) | (x >>> (32 - r));
function fmix(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  return h ^ (h >>> 16);
}

const LITTLE_ENDIAN = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;

const B64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
const B64_CODES = Uint8Array.from(B64, (c) => c.charCodeAt(0));

/** Length of a hash128 in characters (ASCII, so also in bytes). */
export const HASH128_CHARS = 22;

/**
 * The hash of `src[0..len)` as 22 base64url ASCII bytes at `out[at]`: a row-id
 * column is built straight into its Arrow buffer. A 32-bit view of the
 * same bytes (`view`), lets blocks be read a word at a time.
 */
export function hash128Into(src: Uint8Array, len: number, out: Uint8Array, at: number, seed = 0, view?: Int32Array): void {
  let h1 = seed;
  let h2 = seed;
  let h3 = seed;
  let h4 = seed;
  const blocks = len >> 4;
  let i = 0;
  // Blocks as 32-bit words straight from `view` (the same bytes, aligned) on little-endian hosts.
  const w = LITTLE_ENDIAN && view !== undefined && view.buffer === src.buffer && view.byteOffset === src.byteOffset ? view : null;
  for (let b = 0; b < blocks; b++, i += 16) {
    let k1: number;
    let k2: number;
    let k3: number;
    let k4: number;
    if (w !== null) {
      const x = i >> 2;
      k1 = w[x]!;
      k2 = w[x + 1]!;
      k3 = w[x + 2]!;
      k4 = w[x + 3]!;
    } else {
      k1 = src[i]! | (src[i + 1]! << 8) | (src[i + 2]! << 16) | (src[i + 3]! << 24);
      k2 = src[i + 4]! | (src[i + 5]! << 8) | (src[i + 6]! << 16) | (src[i + 7]! << 24);
      k3 = src[i + 8]! | (src[i + 9]! << 8) | (src[i + 10]! << 16) | (src[i + 11]! << 24);
      k4 = src[i + 12]! | (src[i + 13]! << 8) | (src[i + 14]! << 16) | (src[i + 15]! << 24);
    }
    k1 = Math.imul(rotl(Math.imul(k1, C1), 15), C2);
    h1 ^= k1;
    h1 = (Math.imul(rotl(h1, 19) + h2, 5) + 0x561ccd1b) | 0;
    k2 = Math.imul(rotl(Math.imul(k2, C2), 16), C3);
    h2 ^= k2;
    h2 = (Math.imul(rotl(h2, 17) + h3, 5) + 0x0bcaa747) | 0;
    k3 = Math.imul(rotl(Math.imul(k3, C3), 17), C4);
    h3 ^= k3;
    h3 = (Math.imul(rotl(h3, 15) + h4, 5) + 0x96cd1c35) | 0;
    k4 = Math.imul(rotl(Math.imul(k4, C4), 18), C1);
    h4 ^= k4;
    h4 = (Math.imul(rotl(h4, 13) + h1, 5) + 0x32ac3b17) | 0;
  }
  // Tail: up to 15 bytes, folded into the four lanes.
  let k1 = 0;
  let k2 = 0;
  let k3 = 0;
  let k4 = 0;
  const rest = len - i;
  if (rest > 14) k4 ^= src[i + 14]! << 16;
  if (rest > 13) k4 ^= src[i + 13]! << 8;
  if (rest > 12) k4 ^= src[i + 12]!;
  if (rest > 11) k3 ^= src[i + 11]! << 24;
  if (rest > 10) k3 ^= src[i + 10]! << 16;
  if (rest > 9) k3 ^= src[i + 9]! << 8;
  if (rest > 8) k3 ^= src[i + 8]!;
  if (rest > 7) k2 ^= src[i + 7]! << 24;
  if (rest > 6) k2 ^= src[i + 6]! << 16;
  if (rest > 5) k2 ^= src[i + 5]! << 8;
  if (rest > 4) k2 ^= src[i + 4]!;
  if (rest > 3) k1 ^= src[i + 3]! << 24;
  if (rest > 2) k1 ^= src[i + 2]! << 16;
  if (rest > 1) k1 ^= src[i + 1]! << 8;
  if (rest > 0) k1 ^= src[i]!;
  if (k4) h4 ^= Math.imul(rotl(Math.imul(k4, C4), 18), C1);
  if (k3) h3 ^= Math.imul(rotl(Math.imul(k3, C3), 17), C4);
  if (k2) h2 ^= Math.imul(rotl(Math.imul(k2, C2), 16), C3);
  if (k1) h1 ^= Math.imul(rotl(Math.imul(k1, C1), 15), C2);
  h1 ^= len;
  h2 ^= len;
  h3 ^= len;
  h4 ^= len;
  h1 = (h1 + h2 + h3 + h4) | 0;
  h2 = (h2 + h1) | 0;
  h3 = (h3 + h1) | 0;
  h4 = (h4 + h1) | 0;
  h1 = fmix(h1);
  h2 = fmix(h2);
  h3 = fmix(h3);
  h4 = fmix(h4);
  h1 = (h1 + h2 + h3 + h4) | 0;
  h2 = (h2 + h1) | 0;
  h3 = (h3 + h1) | 0;
  h4 = (h4 + h1) | 0;
  words.setInt32(0, h1);
  words.setInt32(4, h2);
  words.setInt32(8, h3);
  words.setInt32(12, h4);
  // 16 bytes = five 3-byte groups (4 characters each), then one byte (2 characters).
  for (let g = 0; g < 15; g += 3) {
    const v = (bytes[g]! << 16) | (bytes[g + 1]! << 8) | bytes[g + 2]!;
    out[at++] = B64_CODES[v >>> 18]!;
    out[at++] = B64_CODES[(v >>> 12) & 63]!;
    out[at++] = B64_CODES[(v >>> 6) & 63]!;
    out[at++] = B64_CODES[v & 63]!;
  }
  out[at++] = B64_CODES[bytes[15]! >>> 2]!;
  out[at] = B64_CODES[(bytes[15]! & 3) << 4]!;
}

const bytes = new Uint8Array(16);
const words = new DataView(bytes.buffer);

/** 128-bit hash of `s` (its UTF-8 bytes) as 22 base64url characters. */
export function hash128(s: string | Uint8Array, seed = 0): string {
  const src = typeof s === 'string' ? Buffer.from(s, 'utf8') : s;
  const out = new Uint8Array(HASH128_CHARS);
  hash128Into(src, src.length, out, 0, seed);
  return String.fromCharCode(...out);
}
