/**
 * Checksums of a data file's column chunks: a CRC-32 of each chunk's bytes
 * (page headers and pages), taken from the encoded file before it is written
 * and kept in its manifest entry; checked on every read that takes a chunk
 * whole (the decoder's, the digest's row id pages). A flipped bit in a page
 * is found there, named, and fails the read: the codec alone does not find
 * it (zstd decoded 194 of 200 one-bit flips in string pages into other values
 * without an error, LZ4 and snappy most of theirs). Files written before have
 * no checksums and are read as before.
 * @ref LLP 0104: data files carry chunk checksums
 */
import { crc32 } from 'node:zlib';
import { footerBytes, parseParquetFooter } from '../../types/parquet-footer.js';

/** One column chunk: its first byte in the file, its length, the CRC-32 of those bytes. */
export type ChunkCheck = readonly [offset: number, size: number, crc: number];

/** The checksums of every column chunk of an encoded Parquet file, in file order. */
export function chunkChecks(file: Uint8Array): ChunkCheck[] {
  const end = footerBytes(file);
  if (!end || !('meta' in end)) throw new Error('the encoded file has no footer');
  const out: ChunkCheck[] = [];
  for (const group of parseParquetFooter(end.meta).rowGroups) {
    for (const c of group.columns) {
      // A chunk starts at its dictionary page when it has one, else at its first data page.
      const offset = c.dictionaryPageOffset ?? c.dataPageOffset;
      out.push([offset, c.compressedSize, crc32(file.subarray(offset, offset + c.compressedSize))]);
    }
  }
  return out;
}

/**
 * Why `bytes`, read from the file at `start`, do not hold what was written:
 * the first chunk wholly inside them whose CRC-32 differs. Null when every such
 * chunk matches (a read that holds no whole chunk, a footer, checks nothing).
 */
export function checkRead(checks: readonly ChunkCheck[], start: number, bytes: Uint8Array): string | null {
  const end = start + bytes.length;
  for (const [offset, size, crc] of checks) {
    if (offset < start || offset + size > end) continue;
    const mismatch = crcMismatch(crc, bytes.subarray(offset - start, offset - start + size));
    if (mismatch) return `its column chunk at bytes ${offset}..${offset + size} does not match the checksum the cache wrote (${mismatch}): damaged on disk`;
  }
  return null;
}

/** Whether `v` can be a CRC-32 (an unsigned 32-bit integer). */
export function isCrc32(v: unknown): v is number {
  return Number.isInteger(v) && (v as number) >= 0 && (v as number) <= 0xffffffff;
}

/** `CRC-32 <want>, read <got>` when `bytes` do not have the CRC-32 `want`, else null. Spool frames check theirs here too (LLP 0106). */
export function crcMismatch(want: number, bytes: Uint8Array): string | null {
  const got = crc32(bytes);
  return got === want ? null : `CRC-32 ${hex(want)}, read ${hex(got)}`;
}

const hex = (n: number) => n.toString(16).padStart(8, '0');

/** Whether a manifest entry's `chunks` has the shape written here. */
export function validChecks(v: unknown): boolean {
  return (
    Array.isArray(v) &&
    v.every(
      (c) =>
        Array.isArray(c) && c.length === 3 && Number.isSafeInteger(c[0]) && c[0] >= 4 && Number.isSafeInteger(c[1]) && c[1] > 0 && isCrc32(c[2]),
    )
  );
}
