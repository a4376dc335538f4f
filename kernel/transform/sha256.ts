/**
 * HMAC-SHA256 of byte ranges, written as lowercase hex straight into a
 * column's buffer. The key's padded blocks are compressed once, so a value
 * costs its own blocks and one outer block, with no allocation per value:
 * node:crypto's createHmac costs an object and a digest Buffer per call,
 * several times the hash itself for short values (LLP 0046). Checked against
 * node:crypto in test/transform/hash.test.ts.
 */

const K = new Int32Array([
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3,
  0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
  0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
  0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
  0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
  0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
]);
const IV = new Int32Array([0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19]);
const HEX = new TextEncoder().encode('0123456789abcdef');

const W = new Int32Array(64);

/** Fold the 64-byte block at `bytes[at]` into `h`. */
function compress(h: Int32Array, bytes: Uint8Array, at: number): void {
  for (let t = 0; t < 16; t++) {
    const p = at + 4 * t;
    W[t] = (bytes[p]! << 24) | (bytes[p + 1]! << 16) | (bytes[p + 2]! << 8) | bytes[p + 3]!;
  }
  for (let t = 16; t < 64; t++) {
    const x = W[t - 15]!;
    const y = W[t - 2]!;
    const s0 = ((x >>> 7) | (x << 25)) ^ ((x >>> 18) | (x << 14)) ^ (x >>> 3);
    const s1 = ((y >>> 17) | (y << 15)) ^ ((y >>> 19) | (y << 13)) ^ (y >>> 10);
    W[t] = (W[t - 16]! + s0 + W[t - 7]! + s1) | 0;
  }
  let a = h[0]!;
  let b = h[1]!;
  let c = h[2]!;
  let d = h[3]!;
  let e = h[4]!;
  let f = h[5]!;
  let g = h[6]!;
  let k = h[7]!;
  for (let t = 0; t < 64; t++) {
    const S1 = ((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^ ((e >>> 25) | (e << 7));
    const ch = (e & f) ^ (~e & g);
    const t1 = (k + S1 + ch + K[t]! + W[t]!) | 0;
    const S0 = ((a >>> 2) | (a << 30)) ^ ((a >>> 13) | (a << 19)) ^ ((a >>> 22) | (a << 10));
    const maj = (a & b) ^ (a & c) ^ (b & c);
    const t2 = (S0 + maj) | 0;
    k = g;
    g = f;
    f = e;
    e = (d + t1) | 0;
    d = c;
    c = b;
    b = a;
    a = (t1 + t2) | 0;
  }
  h[0] = (h[0]! + a) | 0;
  h[1] = (h[1]! + b) | 0;
  h[2] = (h[2]! + c) | 0;
  h[3] = (h[3]! + d) | 0;
  h[4] = (h[4]! + e) | 0;
  h[5] = (h[5]! + f) | 0;
  h[6] = (h[6]! + g) | 0;
  h[7] = (h[7]! + k) | 0;
}

export class HmacSha256 {
  private readonly inner = new Int32Array(8);
  private readonly outer = new Int32Array(8);
  private readonly h = new Int32Array(8);
  private readonly block = new Uint8Array(128);
  private readonly digest = new Uint8Array(32);

  constructor(key: Uint8Array) {
    let k = key;
    if (k.length > 64) {
      this.h.set(IV);
      this.run(this.h, k, 0, k.length, 0);
      k = this.bytes(this.h).slice();
    }
    const pad = new Uint8Array(64);
    for (let i = 0; i < 64; i++) pad[i] = (k[i] ?? 0) ^ 0x36;
    this.inner.set(IV);
    compress(this.inner, pad, 0);
    for (let i = 0; i < 64; i++) pad[i] = (k[i] ?? 0) ^ 0x5c;
    this.outer.set(IV);
    compress(this.outer, pad, 0);
  }

  /** Hash `bytes[start, end)` from state `h`, `prefix` bytes already folded in; pads and finishes. */
  private run(h: Int32Array, bytes: Uint8Array, start: number, end: number, prefix: number): void {
    let p = start;
    while (end - p >= 64) {
      compress(h, bytes, p);
      p += 64;
    }
    const rest = end - p;
    const block = this.block;
    block.fill(0);
    block.set(bytes.subarray(p, end));
    block[rest] = 0x80;
    const blocks = rest >= 56 ? 2 : 1;
    const bits = (prefix + end - start) * 8;
    const last = blocks * 64;
    // The length in bits, big-endian in the last 8 bytes (values stay far below 2^53).
    const hi = Math.floor(bits / 4294967296);
    block[last - 8] = hi >>> 24;
    block[last - 7] = hi >>> 16;
    block[last - 6] = hi >>> 8;
    block[last - 5] = hi;
    block[last - 4] = bits >>> 24;
    block[last - 3] = bits >>> 16;
    block[last - 2] = bits >>> 8;
    block[last - 1] = bits;
    compress(h, block, 0);
    if (blocks === 2) compress(h, block, 64);
  }

  private bytes(h: Int32Array): Uint8Array {
    const d = this.digest;
    for (let i = 0; i < 8; i++) {
      const v = h[i]!;
      d[4 * i] = v >>> 24;
      d[4 * i + 1] = v >>> 16;
      d[4 * i + 2] = v >>> 8;
      d[4 * i + 3] = v;
    }
    return d;
  }

  /** Write the 64 hex characters of HMAC(key, bytes[start, end)) at `out[at]`. */
  hexInto(bytes: Uint8Array, start: number, end: number, out: Uint8Array, at: number): void {
    const h = this.h;
    h.set(this.inner);
    this.run(h, bytes, start, end, 64);
    const inner = this.bytes(h);
    h.set(this.outer);
    this.run(h, inner, 0, 32, 64);
    const d = this.bytes(h);
    for (let i = 0; i < 32; i++) {
      out[at + 2 * i] = HEX[d[i]! >>> 4]!;
      out[at + 2 * i + 1] = HEX[d[i]! & 15]!;
    }
  }
}
