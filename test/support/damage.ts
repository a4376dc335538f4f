/**
 * Damage aimed at one column of a Parquet data file: zeros over the pages of
 * `column` in the file's last row group, or one bit of them flipped, the
 * footer and every other column's pages whole. A unit over the file is then planned and digested (those read
 * only seqs and row ids) and fails only where its body is read.
 */
import { openAsBlob, promises as fsp } from 'node:fs';

export async function zeroColumnPages(path: string, column: string): Promise<void> {
  const pages = await lastColumnChunk(path, column, 256);
  const bytes = await fsp.readFile(path);
  // Past the page header, short of the chunk's end.
  bytes.fill(0, pages.start + 64, pages.start + pages.size - 16);
  await fsp.writeFile(path, bytes);
}

/**
 * One bit flipped in the middle of `column`'s pages in the file's last row
 * group: the commonest damage a disk does silently, which a codec's decoder
 * mostly reads as other values without an error (LLP 0104).
 */
export async function flipColumnBit(path: string, column: string): Promise<void> {
  const pages = await lastColumnChunk(path, column, 48);
  const bytes = await fsp.readFile(path);
  bytes[pages.start + Math.floor(pages.size / 2)]! ^= 0x10;
  await fsp.writeFile(path, bytes);
}

/** Where `column`'s chunk of the last row group is; it must be bigger than `min` bytes. */
async function lastColumnChunk(path: string, column: string, min: number): Promise<{ start: number; size: number }> {
  const { ParquetFile } = await import('parquet-wasm');
  const file = await ParquetFile.fromFile(await openAsBlob(path));
  // Column chunks follow each other from byte 4 (after PAR1), row group by row group, in schema order.
  let at = 4;
  let pages: { start: number; size: number } | undefined;
  try {
    for (const group of file.metadata().rowGroups()) {
      for (const c of group.columns()) {
        if (c.columnPath().join('.') === column) pages = { start: at, size: c.compressedSize() };
        at += c.compressedSize();
      }
    }
  } finally {
    file.free();
  }
  if (!pages || pages.size <= min) throw new Error(`${path}: the last row group has no pages of "${column}" big enough to damage`);
  return pages;
}
