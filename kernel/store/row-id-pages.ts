/**
 * The row ids of a data file's row groups, read from the file's own pages
 * for a unit's digest, without the Parquet decoder. The id column is written
 * PLAIN, uncompressed, without a dictionary (encodeParquet), so its pages are
 * each value's length and its 22 bytes: read as they are, one positional
 * read per row group, they are the bytes the digest hashes. Through
 * parquet-wasm the same ids cost a decode, an Arrow IPC copy out of wasm
 * memory and a parse, and the seq column's with them: three quarters of a
 * 1M-row digest's time.
 *
 * Anything else is not read here: a column compressed or dictionary-encoded,
 * a page of another type or encoding, a null, an id of another length, a
 * footer or a page header that does not parse or does not match the manifest,
 * a read that fails, a chunk whose checksum does not match (LLP 0104). Each gives `null`, and the caller reads that row group
 * through the decoder, which reports a damaged file as it always did (and
 * HYPSINK_FAULT_READ's reads fail here as there).
 * @ref LLP 0098: a digest reads the row ids' pages
 */
import { promises as fsp } from 'node:fs';
import type { ReadCounters } from '../../types/storage.js';
import { footerBytes, type ParquetFooter, ParquetPhysical, parseParquetFooter } from '../../types/parquet-footer.js';
import { ThriftReader, ThriftType as T } from '../../types/thrift-compact.js';
import { readFaulted } from '../fault.js';
import { HASH128_CHARS } from '../flush/hash128.js';
import { type ChunkCheck, checkRead } from './checksums.js';
import { ROW_ID_COLUMN } from './columns.js';

/** The copy of each id below is of 22 bytes: this fails to compile if row ids are ever another length. */
const ID_BYTES: 22 = HASH128_CHARS;

/**
 * Read at the end of the file first: the footer of a flush's file (a few row
 * groups, about 6 KB for 50k demo rows) fits; a longer one is read whole
 * after. Not more: a small file (a tick's 1k new rows) was read whole by a
 * 64 KB tail, then its columns again by the decoder, twice its bytes.
 */
const TAIL = 8 << 10;
// Parquet's enums (parquet.thrift).
const REQUIRED = 0;
const OPTIONAL = 1;
const UNCOMPRESSED = 0;
const DATA_PAGE = 0;
const PLAIN = 0;
const RLE = 3;

/** Where a row group's id column chunk is, from the footer. */
interface Chunk {
  readonly offset: number;
  readonly size: number;
  readonly values: number;
}

/** The id column's chunks, one per row group; null when the file's layout is not the one read here. */
export function idChunks(meta: Uint8Array, rowsPerGroup: readonly number[]): { chunks: Chunk[]; optional: boolean } | null {
  let footer: ParquetFooter;
  try {
    footer = parseParquetFooter(meta);
  } catch {
    return null; // a footer that does not parse
  }
  // Element 0 is the root; the columns follow, flat (a cache file's columns are never nested).
  const columns = footer.schema.slice(1);
  const column = columns.findIndex((c) => c.name === ROW_ID_COLUMN);
  const e = columns[column];
  if (!e || columns.some((c) => c.children > 0) || e.type !== ParquetPhysical.BYTE_ARRAY || (e.repetition !== OPTIONAL && e.repetition !== REQUIRED)) return null;
  if (footer.rowGroups.length !== rowsPerGroup.length) return null;
  const chunks: Chunk[] = [];
  for (const [g, rg] of footer.rowGroups.entries()) {
    const c = rg.columns[column];
    const rows = rowsPerGroup[g];
    if (!c || c.path !== ROW_ID_COLUMN || c.filePath !== undefined || c.codec !== UNCOMPRESSED || c.dictionaryPageOffset !== undefined) return null;
    if (rg.rows !== rows || c.values !== rows || c.compressedSize <= 0 || c.dataPageOffset < 4) return null;
    chunks.push({ offset: c.dataPageOffset, size: c.compressedSize, values: c.values });
  }
  return { chunks, optional: e.repetition === OPTIONAL };
}

/** An unsigned varint at `p` of `b`: [value, next position], or null past `end`. */
function varintAt(b: Uint8Array, p: number, end: number): [number, number] | null {
  let out = 0;
  let mul = 1;
  for (let i = 0; i < 5; i++) {
    if (p >= end) return null;
    const x = b[p++]!;
    out += (x & 0x7f) * mul;
    if ((x & 0x80) === 0) return [out, p];
    mul *= 128;
  }
  return null;
}

/** Whether the first `n` definition levels (bit width 1, RLE/bit-packed hybrid) in b[p, end) are all 1: no nulls. */
function allDefined(b: Uint8Array, p: number, end: number, n: number): boolean {
  let left = n;
  while (left > 0) {
    const h = varintAt(b, p, end);
    if (!h) return false;
    p = h[1];
    if ((h[0] & 1) === 1) {
      // Bit-packed: (h >> 1) groups of 8 values, one byte each at bit width 1.
      const bytes = Math.floor(h[0] / 2);
      if (bytes === 0 || p + bytes > end) return false;
      for (let i = 0; i < bytes && left > 0; i++) {
        const take = Math.min(8, left);
        const mask = take === 8 ? 0xff : (1 << take) - 1;
        if ((b[p + i]! & mask) !== mask) return false;
        left -= take;
      }
      p += bytes;
    } else {
      // A run: (h >> 1) copies of one value, in one byte at bit width 1.
      const count = Math.floor(h[0] / 2);
      if (count === 0 || p >= end || b[p] !== 1) return false;
      p += 1;
      left -= Math.min(count, left);
    }
  }
  return true;
}

/**
 * The ids of one column chunk's pages, `values` of them, each its 22 bytes,
 * one after the other; null when any page or value is not as read here.
 * Moved to the front of `chunk` itself (the result is a view of it): each id
 * is written below where it was read, never over bytes not read yet, and a
 * 1M-row digest allocates 22 MB less.
 */
export function chunkIds(chunk: Uint8Array, values: number, optional: boolean): Uint8Array | null {
  let o = 0;
  let p = 0;
  let left = values;
  const view = new DataView(chunk.buffer, chunk.byteOffset, chunk.byteLength);
  const to = view;
  while (left > 0) {
    const r = new ThriftReader(chunk);
    r.pos = p;
    let type = -1;
    let size = -1;
    let usize = -1;
    let n = -1;
    let encoding = -1;
    let levels = -1;
    try {
      for (const f of r.fields()) {
        if (f.id === 1 && f.type === T.I32) type = r.int();
        else if (f.id === 2 && f.type === T.I32) usize = r.int();
        else if (f.id === 3 && f.type === T.I32) size = r.int();
        else if (f.id === 5 && f.type === T.STRUCT) {
          for (const d of r.fields()) {
            if (d.id === 1 && d.type === T.I32) n = r.int();
            else if (d.id === 2 && d.type === T.I32) encoding = r.int();
            else if (d.id === 3 && d.type === T.I32) levels = r.int();
            else r.skip(d.type);
          }
        } else r.skip(f.type);
      }
    } catch {
      return null;
    }
    const start = r.pos;
    const end = start + size;
    if (type !== DATA_PAGE || encoding !== PLAIN || size !== usize || n <= 0 || n > left || end > chunk.length) return null;
    let q = start;
    if (optional) {
      if (levels !== RLE || q + 4 > end) return null;
      const len = view.getUint32(q, true);
      if (q + 4 + len > end || !allDefined(chunk, q + 4, q + 4 + len, n)) return null;
      q += 4 + len;
    }
    // PLAIN byte arrays: a 4-byte length, then the bytes; every id is 22 bytes, copied as five
    // 32-bit words and a 16-bit one (a third of the time of a byte loop).
    if (end - q !== n * (4 + ID_BYTES)) return null;
    for (let i = 0; i < n; i++) {
      if (view.getUint32(q, true) !== ID_BYTES) return null;
      q += 4;
      to.setUint32(o, view.getUint32(q, true), true);
      to.setUint32(o + 4, view.getUint32(q + 4, true), true);
      to.setUint32(o + 8, view.getUint32(q + 8, true), true);
      to.setUint32(o + 12, view.getUint32(q + 12, true), true);
      to.setUint32(o + 16, view.getUint32(q + 16, true), true);
      to.setUint16(o + 20, view.getUint16(q + 20, true), true);
      o += ID_BYTES;
      q += ID_BYTES;
    }
    left -= n;
    p = end;
  }
  return p === chunk.length ? chunk.subarray(0, o) : null;
}

/** One data file's id pages, opened on the footer; null (the caller decodes instead) when its layout is not the one read here. */
export class RowIdPages {
  private constructor(
    private readonly fh: fsp.FileHandle,
    private readonly counters: ReadCounters,
    private readonly chunks: readonly Chunk[],
    private readonly optional: boolean,
    /** HYPSINK_FAULT_READ: reads that start before this byte fail (-1: none), as the decoder's do. */
    private readonly eioBelow: number,
    /** The manifest's chunk checksums: an id chunk that does not match is not read here (LLP 0104). */
    private readonly checks: readonly ChunkCheck[] | undefined,
  ) {}

  static async open(path: string, rowsPerGroup: readonly number[], counters: ReadCounters, checks?: readonly ChunkCheck[]): Promise<RowIdPages | null> {
    let fh: fsp.FileHandle;
    try {
      fh = await fsp.open(path, 'r');
    } catch {
      return null;
    }
    try {
      const size = (await fh.stat()).size;
      const eioBelow = readFaulted(path) ? size / 2 : -1;
      if (size < 12) throw new Error('short');
      const tailAt = Math.max(0, size - TAIL);
      if (tailAt < eioBelow) throw new Error('faulted');
      const tail = await readAt(fh, tailAt, size - tailAt, counters);
      let end = footerBytes(tail);
      // A footer longer than the tail read (a file of very many row groups): read it whole.
      if (end && 'needed' in end && size - end.needed >= Math.max(4, eioBelow)) end = footerBytes(await readAt(fh, size - end.needed, end.needed, counters));
      const meta = end && 'meta' in end ? end.meta : null;
      const layout = meta ? idChunks(meta, rowsPerGroup) : null;
      const dataEnd = size - 8 - (meta?.length ?? 0);
      if (!layout || layout.chunks.some((c) => c.offset + c.size > dataEnd)) throw new Error('layout');
      // Counted once read from here: a file declined is opened again, and counted, by the decoder.
      counters.filesOpened += 1;
      return new RowIdPages(fh, counters, layout.chunks, layout.optional, eioBelow, checks);
    } catch {
      await fh.close().catch(() => undefined);
      return null;
    }
  }

  /**
   * Row group `g`'s ids, 22 bytes each, in row order; null when they are not
   * read here. `next`: the group the caller reads after this one, whose read
   * starts now, so the thread pool reads it while this one is hashed.
   */
  async ids(g: number, next?: number): Promise<Uint8Array | null> {
    const bytes = this.read(g);
    if (next !== undefined) this.prefetch(next);
    this.ahead.delete(g);
    const chunk = await bytes;
    const c = this.chunks[g]!;
    return chunk && chunkIds(chunk, c.values, this.optional);
  }

  /** Start reading group `g`'s chunk, for an `ids(g)` to come. */
  prefetch(g: number): void {
    void this.read(g);
  }

  private readonly ahead = new Map<number, Promise<Uint8Array | null>>();

  private read(g: number): Promise<Uint8Array | null> {
    let r = this.ahead.get(g);
    if (!r) {
      const c = this.chunks[g];
      // A chunk whose bytes do not match its checksum goes to the decoder, whose read names the damage.
      r =
        !c || c.offset < this.eioBelow
          ? Promise.resolve(null)
          : readAt(this.fh, c.offset, c.size, this.counters).then(
              (bytes) => (this.checks && checkRead(this.checks, c.offset, bytes) !== null ? null : bytes),
              () => null,
            );
      this.ahead.set(g, r);
    }
    return r;
  }

  /** Closed once no read of it is in flight. */
  close(): void {
    const reads = [...this.ahead.values()];
    this.ahead.clear();
    void Promise.all(reads).finally(() => this.fh.close().catch(() => undefined));
  }
}

async function readAt(fh: fsp.FileHandle, at: number, n: number, counters: ReadCounters): Promise<Uint8Array> {
  const buf = Buffer.allocUnsafe(n);
  for (let got = 0; got < n; ) {
    const { bytesRead } = await fh.read(buf, got, n - got, at + got);
    if (bytesRead === 0) throw new Error('the file ended early');
    got += bytesRead;
  }
  counters.bytesRead += n;
  return buf;
}

/**
 * A digest's id pages, one file ahead: the next file is opened (its footer
 * read, its first group's chunk read) while this one's ids are hashed. Opened
 * one by one, each file's open and first read were idle time of the kernel's
 * thread. Each file's pages are taken once and closed by the one that took
 * them; `close` closes those opened ahead and never taken (a read that
 * stopped early).
 * @ref LLP 0109: a digest opens its next file while it hashes this one
 */
export class IdPagesAhead {
  private readonly opened = new Map<string, Promise<RowIdPages | null>>();

  constructor(private readonly counters: ReadCounters) {}

  /** Open `path` now (once), and start reading group `first`'s ids when given. */
  open(path: string, rowsPerGroup: readonly number[], checks: readonly ChunkCheck[] | undefined, first?: number): void {
    if (this.opened.has(path)) return;
    const pages = RowIdPages.open(path, rowsPerGroup, this.counters, checks);
    if (first !== undefined) void pages.then((p) => p?.prefetch(first));
    this.opened.set(path, pages);
  }

  /** `path`'s pages, opened ahead or now: the caller closes them. */
  take(path: string, rowsPerGroup: readonly number[], checks: readonly ChunkCheck[] | undefined): Promise<RowIdPages | null> {
    this.open(path, rowsPerGroup, checks);
    const pages = this.opened.get(path)!;
    this.opened.delete(path);
    return pages;
  }

  close(): void {
    for (const pages of this.opened.values()) void pages.then((p) => p?.close());
    this.opened.clear();
  }
}
