/**
 * A unit's digest: what makes its label (cache id, partition, `(since, until]`)
 * an identity of its content. It hashes, in seq order, every row's seq and its
 * row id (the content hash flush stamped on it from the row's column bytes).
 * What ships is a pure function of those rows and of the columns and
 * transforms the intent fixes (and refuses to change), so two units with one
 * digest ship the same rows, and verify can compute a held unit's digest
 * without knowing the columns or transforms it shipped with. It reads two
 * columns, never decodes the user's, and does not depend on how files or row
 * groups cut the range (compaction moves rows between them).
 * @ref LLP 0054: a unit's digest
 */
import { createHash, type Hash } from 'node:crypto';
import type { Data, Utf8 } from 'apache-arrow';
import { HypsinkError } from '../../types/errors.js';
import type { Continuation, PartitionRef } from '../../types/storage.js';
import type { Cache } from '../cache.js';
import { HASH128_CHARS } from '../flush/hash128.js';

/** The scheme's tag: a digest names how it was made, so a later scheme is never compared with this one. */
export const DIGEST_SCHEME = 'u1';

const cont = (seq: bigint): Continuation | null => (seq < 0n ? null : { v: 1, seq: seq.toString() });

/** Feed one batch's row ids: each 22-byte id as it is; any other length marked and length-prefixed (never in a 22-char id). */
function feedIds(h: Hash, ids: Data<Utf8>): void {
  const o = ids.valueOffsets;
  const v = ids.values;
  const first = o[0]!;
  const last = o[ids.length]!;
  if (last - first === ids.length * HASH128_CHARS) {
    h.update(v.subarray(first, last));
    return;
  }
  for (let i = 0; i < ids.length; i++) {
    const a = o[i]!;
    const b = o[i + 1]!;
    if (b - a === HASH128_CHARS) h.update(v.subarray(a, b));
    else {
      const len = Buffer.alloc(5);
      len[0] = 0x0a;
      len.writeUInt32LE(b - a, 1);
      h.update(len);
      h.update(v.subarray(a, b));
    }
  }
}

/** The digest of the rows of `p` in `(since, until]`: `u1-` and 43 base64url characters (SHA-256). */
export async function unitDigest(cache: Cache, p: PartitionRef, since: bigint, until: string): Promise<string> {
  const seqs = createHash('sha256');
  const ids = createHash('sha256');
  let rows = 0;
  for await (const b of cache.storage.scan(cache.store(p), { since: cont(since), until: { v: 1, seq: until } }, [], false, true)) {
    if (!b.ids || b.ids.length !== b.seqs.length) {
      throw new HypsinkError('HYPSINK_ERR_INVARIANT', `${p.key}: a read of (${since}, ${until}] for its digest gave rows without row ids`);
    }
    // Seqs as 8 bytes each, little-endian (BigInt64Array is the platform's order; every Node platform is little-endian).
    seqs.update(new Uint8Array(b.seqs.buffer, b.seqs.byteOffset, b.seqs.byteLength));
    feedIds(ids, b.ids);
    rows += b.seqs.length;
  }
  const h = createHash('sha256');
  h.update(`hypsink-unit/${DIGEST_SCHEME}\u0000${p.key}\u0000${rows}\u0000`);
  h.update(seqs.digest());
  h.update(ids.digest());
  return `${DIGEST_SCHEME}-${h.digest('base64url')}`;
}
