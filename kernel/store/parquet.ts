/**
 * Parquet I/O for cache data files (parquet-wasm + apache-arrow). Writes fix
 * row-group boundaries so the manifest can keep per-row-group seq stats; reads
 * go through a byte-counting Blob so tests can assert what a read cost.
 * @ref LLP 0003: seq-stat pruning
 */
import { promises as fsp } from 'node:fs';
import { createRequire } from 'node:module';
import { type RecordBatch, type Table, tableFromIPC, tableToIPC } from 'apache-arrow';
import type * as PW from 'parquet-wasm/node';
import type { ReadCounters } from '../../types/storage.js';
import { accessError } from '../../types/access.js';
import { HypsinkError, isHypsinkError } from '../../types/errors.js';
import { readFaulted } from '../fault.js';
import { type ChunkCheck, checkRead } from './checksums.js';
import { ROW_ID_COLUMN, SEQ_COLUMN } from './columns.js';

/**
 * Rows per row group of a cache file: a read decodes a whole group at once, and
 * 16k rows keeps that decode under one forward POST (LLP 0017).
 * @ref LLP 0017: cache row groups of 16k rows
 */
export const DEFAULT_ROW_GROUP_ROWS = 16_384;

/**
 * The codec of a cache data file's columns (the row id column is stored
 * uncompressed either way). LZ4 by default: in parquet-wasm, zstd took three
 * quarters of a cache file's decode, which is the export's critical path, and
 * half of the flush's encode, for files about a third smaller. `zstd` for a
 * cache that must hold more rows on the same disk. A reader takes either, so
 * a cache may hold both.
 * @ref LLP 0103: cache files are LZ4 by default
 */
export type CacheCompression = 'lz4' | 'zstd';
export const DEFAULT_CACHE_COMPRESSION: CacheCompression = 'lz4';

/** How the cache writes a data file: rows per row group and codec. */
export interface DataFileLayout {
  readonly rowGroupRows: number;
  readonly compression: CacheCompression;
}
export const DEFAULT_LAYOUT: DataFileLayout = { rowGroupRows: DEFAULT_ROW_GROUP_ROWS, compression: DEFAULT_CACHE_COMPRESSION };

/**
 * A row group decodes into one batch, not parquet-wasm's default of 1,024-row
 * batches: every batch costs each reader a slice, a projection and a hash
 * call, which for a 1M-row unit's digest cost more than the hashing (the
 * digest's bench figure). The group is decoded whole either way.
 */
const ROW_GROUP_BATCH = 1 << 20;

/**
 * parquet-wasm, loaded on the first read or write of a data file, not when
 * this module is: loading it reads and compiles 6 MB of wasm (about 60 ms),
 * which commands that open no data file (`status`, `--help`, a `validate`)
 * paid at every start. A synchronous require, so `encodeParquet` stays
 * synchronous; the package's `node` build is CommonJS.
 * @ref LLP 0089: parquet-wasm loaded on first use
 */
let loaded: typeof PW | undefined;
const requireHere = createRequire(import.meta.url);
function parquetWasm(): typeof PW {
  loaded ??= requireHere('parquet-wasm/node') as typeof PW;
  return loaded;
}

/** Counters for maintenance reads, which are not part of the storage service's figures. */
export const scratchCounters = (): ReadCounters => ({ filesOpened: 0, rowGroupsRead: 0, bytesRead: 0, rowsRead: 0 });

export function encodeParquet(table: Table, layout: DataFileLayout = DEFAULT_LAYOUT): Uint8Array {
  // Row ids are random by nature: compressing or gathering stats on them costs a
  // third of the encode time and gains nothing. No column is dictionary-encoded:
  // on the demo rows the codec alone gave smaller files (zstd: 2.15 vs 2.30 MB
  // per 50k rows) that encode and decode in half the time (LLP 0013).
  const pw = parquetWasm();
  const props = new pw.WriterPropertiesBuilder()
    .setCompression(layout.compression === 'zstd' ? pw.Compression.ZSTD : pw.Compression.LZ4_RAW)
    .setDictionaryEnabled(false)
    .setColumnCompression(ROW_ID_COLUMN, pw.Compression.UNCOMPRESSED)
    .setColumnStatisticsEnabled(ROW_ID_COLUMN, pw.EnabledStatistics.None)
    .setMaxRowGroupSize(layout.rowGroupRows)
    .build();
  return pw.writeParquet(pw.Table.fromIPCStream(tableToIPC(table, 'stream')), props);
}

/**
 * What the manifest says a data file holds. Checked against the footer on open
 * and against each row group's seqs as it is read (a paired assertion): a file
 * swapped, cut or rewritten behind the manifest's back is an error naming it,
 * never rows skipped by stale stats.
 */
export interface ExpectedFile {
  readonly rows: number;
  readonly rowGroups: readonly { readonly rows: number; readonly minSeq: string | null; readonly maxSeq: string | null }[];
  /** Its column chunks' checksums, checked as each chunk is read (files written before LLP 0104 have none). */
  readonly chunks?: readonly ChunkCheck[];
}

/** A chunk read whole whose bytes are not the ones written (LLP 0104). */
class ChecksumMismatch extends Error {}

/** Reads in flight in parquet-wasm's async reader, for `onUncaught`. */
const inFlight = new Set<ByteReads>();
/** Files whose read trapped or failed: their wasm tasks are left waiting, and may trap again later. */
let leftBroken = 0;

/**
 * parquet-wasm's async reader panics on damaged pages and on a rejected byte
 * read: a wasm trap thrown in a promise callback no one holds, so it surfaces
 * only as an uncaught exception (which would end the process). While reads
 * are in flight, a trap fails them (it cannot say whose it was; the others are
 * retried). Heard only while reads are in flight; any other uncaught error is
 * thrown on as Node would.
 */
function onUncaught(e: unknown): void {
  if (e instanceof WebAssembly.RuntimeError && (inFlight.size > 0 || leftBroken > 0)) {
    // With nothing in flight, it is the rest of a broken file's read, already reported.
    for (const r of inFlight) r.trap(e);
    return;
  }
  // Not ours: end the process as Node would have, with no listener of ours in the way.
  process.off('uncaughtException', onUncaught);
  process.nextTick(() => {
    throw e;
  });
}

function hearTraps(): void {
  if (process.listeners('uncaughtException').includes(onUncaught)) return;
  process.on('uncaughtException', onUncaught);
}

/**
 * The byte reads of one data file. A read that fails (EIO, a file cut behind
 * the blob's back) or a decoder trap must fail the read that asked, and nothing
 * else: the rejection never reaches parquet-wasm (it would trap), the failure is
 * kept here, the wasm read is left waiting forever (its file is never freed),
 * and every read of the file races against the failure.
 */
class ByteReads {
  private failed: ((e: unknown) => void) | undefined;
  /** Rejects with the first failed read. */
  readonly failure = new Promise<never>((_, reject) => {
    this.failed = reject;
  });
  broken = false;

  constructor(
    readonly path: string,
    /** HYPSINK_FAULT_READ: reads that start before this byte fail with EIO (-1: none do). */
    private readonly eioBelow: number,
    /** The manifest's chunk checksums: every chunk a read holds whole is checked against them. @ref LLP 0104 */
    private readonly checks: readonly ChunkCheck[] | undefined,
  ) {
    this.failure.catch(() => undefined); // raced against each read; never unhandled
  }

  /** What parquet-wasm gets for a slice's bytes: `read()`, checked, or a promise that never settles once the read failed. */
  read(start: number, read: () => Promise<ArrayBuffer>): Promise<ArrayBuffer> {
    const fail = start < this.eioBelow;
    return (fail ? Promise.reject(Object.assign(new Error(`EIO: i/o error, read '${this.path}'`), { code: 'EIO' })) : read().then((buf) => this.checked(start, buf))).catch((e: unknown) => {
      this.trap(e);
      return new Promise<ArrayBuffer>(() => undefined);
    });
  }

  private checked(start: number, buf: ArrayBuffer): ArrayBuffer {
    const problem = this.checks ? checkRead(this.checks, start, new Uint8Array(buf)) : null;
    if (problem) throw new ChecksumMismatch(problem);
    return buf;
  }

  /** A byte read failed, or the decoder trapped while this file was being read. */
  trap(e: unknown): void {
    if (!this.broken) leftBroken++;
    this.broken = true;
    this.failed?.(e);
  }

  /** `work`, unless a byte read fails or the decoder traps first: then an error naming the file. */
  async race<T>(work: Promise<T>, what: string): Promise<T> {
    hearTraps();
    inFlight.add(this);
    try {
      return await Promise.race([work, this.failure]);
    } catch (e) {
      if (!this.broken) throw e;
      // A read's errno never says permission: ask the file whether it is refused now; a permission is not damage (@ref LLP 0033).
      const denied = e instanceof WebAssembly.RuntimeError ? undefined : accessError(await whyUnreadable(this.path), ownerHint(`data file ${this.path}: ${what} failed`));
      if (denied) throw denied;
      const why =
        e instanceof WebAssembly.RuntimeError
          ? `the Parquet decoder stopped on it (${e.message}): damaged pages`
          : e instanceof ChecksumMismatch
            ? `${e.message}; restore the file from a backup`
            : `the file cannot be read (${(e as NodeJS.ErrnoException)?.code ?? (e as Error)?.message ?? String(e)})`;
      throw new HypsinkError('HYPSINK_ERR_CORRUPT', `data file ${this.path}: ${what} failed: ${why}`, { cause: e });
    } finally {
      inFlight.delete(this);
      if (inFlight.size === 0 && leftBroken === 0) process.off('uncaughtException', onUncaught);
    }
  }
}

/**
 * A data file's bytes in the shape parquet-wasm's async reader takes (a Blob:
 * `size`, `slice`, `arrayBuffer`), read through one open handle, a positional
 * read per slice. A Blob from `openAsBlob` opens, stats and closes the file
 * for every slice it reads (four trips to the thread pool per column chunk, of
 * which a 1M-row unit's digest and body read about 1,000), and the kernel's
 * thread waited on them. @ref LLP 0091
 */
class FileBytes {
  readonly type = '';

  constructor(
    private readonly fh: fsp.FileHandle,
    private readonly file: { readonly bytes: ByteReads; readonly counters: ReadCounters },
    private readonly start: number,
    private readonly end: number,
  ) {}

  get size(): number {
    return this.end - this.start;
  }

  slice(start = 0, end = this.size): FileBytes {
    const s = this.start + Math.min(Math.max(0, start), this.size);
    const e = this.start + Math.min(Math.max(0, end), this.size);
    this.file.counters.bytesRead += Math.max(0, e - s);
    return new FileBytes(this.fh, this.file, s, Math.max(s, e));
  }

  arrayBuffer(): Promise<ArrayBuffer> {
    return this.file.bytes.read(this.start, async () => {
      const buf = Buffer.allocUnsafeSlow(this.size);
      for (let at = 0; at < buf.length; ) {
        const { bytesRead } = await this.fh.read(buf, at, buf.length - at, this.start + at);
        // Fewer bytes than the file had when opened: it was cut behind the reader's back.
        if (bytesRead === 0) throw Object.assign(new Error(`the file ended at byte ${this.start + at}, before ${this.end}: it was cut while being read`), { code: 'ESHORT' });
        at += bytesRead;
      }
      return buf.buffer as ArrayBuffer;
    });
  }
}

/**
 * The error opening `path` gives now, if any: a read on an open handle fails
 * with EIO or a short read, never for a permission, so a refusal shows only here.
 */
async function whyUnreadable(path: string): Promise<unknown> {
  try {
    await (await fsp.open(path, 'r')).close();
    return undefined;
  } catch (e) {
    return e;
  }
}

/** A cache file is not a path to choose: its way out is the cache's owner. */
const ownerHint = (context: string) => ({ context, elsewhere: 'run hypsink as the user that owns the cache' });

/** An open data file; free it when done (wasm memory is not garbage-collected). */
export class ParquetReader {
  private expect: ExpectedFile | undefined;

  /** The file's column names: a projection asks only for columns the file has. */
  private readonly columns: ReadonlySet<string>;

  private constructor(
    readonly path: string,
    private readonly file: PW.ParquetFile,
    private readonly bytes: ByteReads,
    private readonly fh: fsp.FileHandle,
  ) {
    this.columns = new Set(tableFromIPC(file.schema().intoIPCStream()).schema.fields.map((f) => f.name));
  }

  static async open(path: string, counters: ReadCounters, expect?: ExpectedFile): Promise<ParquetReader> {
    let fh: fsp.FileHandle;
    let size: number;
    try {
      fh = await fsp.open(path, 'r');
    } catch (e) {
      throw accessError(e, ownerHint(`data file ${path}`)) ?? new HypsinkError('HYPSINK_ERR_CORRUPT', `data file ${path} listed in the manifest cannot be opened: ${(e as Error).message}`, { cause: e });
    }
    try {
      size = (await fh.stat()).size;
    } catch (e) {
      await fh.close().catch(() => undefined);
      throw new HypsinkError('HYPSINK_ERR_CORRUPT', `data file ${path} listed in the manifest cannot be read: ${(e as Error).message}`, { cause: e });
    }
    counters.filesOpened += 1;
    // HYPSINK_FAULT_READ: the footer (at the end) reads fine, data pages in the first half fail.
    const bytes = new ByteReads(path, readFaulted(path) ? size / 2 : -1, expect?.chunks);
    const whole = new FileBytes(fh, { bytes, counters }, 0, size);
    let reader: ParquetReader;
    try {
      reader = new ParquetReader(path, await bytes.race(parquetWasm().ParquetFile.fromFile(whole as unknown as Blob), 'reading its footer'), bytes, fh);
    } catch (e) {
      await fh.close().catch(() => undefined);
      if (isHypsinkError(e)) throw e;
      throw new HypsinkError('HYPSINK_ERR_CORRUPT', `data file ${path} is not a readable Parquet file (${String(e)})`, { cause: e });
    }
    if (expect) {
      const problem = reader.layoutProblem(expect);
      if (problem) {
        reader.close();
        throw new HypsinkError('HYPSINK_ERR_CORRUPT', `data file ${path} does not match its manifest entry: ${problem}`);
      }
      reader.expect = expect;
    }
    return reader;
  }

  private layoutProblem(expect: ExpectedFile): string | null {
    const md = this.file.metadata();
    try {
      const n = md.numRowGroups();
      if (n !== expect.rowGroups.length) return `${n} row groups, the manifest lists ${expect.rowGroups.length}`;
      let total = 0;
      for (let i = 0; i < n; i++) {
        const rg = md.rowGroup(i);
        const rows = rg.numRows();
        rg.free();
        total += rows;
        if (rows !== expect.rowGroups[i]!.rows) return `row group ${i} holds ${rows} rows, the manifest says ${expect.rowGroups[i]!.rows}`;
      }
      return total === expect.rows ? null : `${total} rows, the manifest says ${expect.rows}`;
    } finally {
      md.free();
    }
  }

  /** Whether the file has this column (files written before a column was added lack it). */
  has(column: string): boolean {
    const schema = this.file.schema();
    try {
      return schema.indexOf(column) >= 0;
    } catch {
      return false;
    } finally {
      schema.free();
    }
  }

  private groups: number | undefined;

  /** Read once: callers ask it at every row group, and each read copies the footer into wasm memory. */
  get numRowGroups(): number {
    if (this.groups === undefined) {
      // The copy is freed here, not whenever the collector runs. @ref LLP 0102
      const md = this.file.metadata();
      try {
        this.groups = md.numRowGroups();
      } finally {
        md.free();
      }
    }
    return this.groups;
  }

  /**
   * Read one row group as Arrow batches. Requested columns the file lacks (a legacy
   * file's `_hyp_*`, a column added later) are left out: callers read them as null.
   */
  async readRowGroup(index: number, columns?: readonly string[]): Promise<RecordBatch[]> {
    let batches: RecordBatch[];
    let wanted = columns?.filter((c) => this.columns.has(c));
    // Nothing requested exists: read one column anyway, for the row count.
    if (wanted && wanted.length === 0) wanted = [...this.columns].slice(0, 1);
    try {
      const wasmTable = await this.bytes.race(this.file.read({ rowGroups: [index], concurrency: 1, batchSize: ROW_GROUP_BATCH, ...(wanted ? { columns: wanted } : {}) }), `reading row group ${index}`);
      batches = tableFromIPC(wasmTable.intoIPCStream()).batches;
    } catch (e) {
      if (isHypsinkError(e)) throw e;
      throw new HypsinkError('HYPSINK_ERR_CORRUPT', `data file ${this.path}: row group ${index} cannot be decoded (${String(e)})`, { cause: e });
    }
    this.checkSeqs(index, batches, wanted === undefined || wanted.includes(SEQ_COLUMN));
    return batches;
  }

  /** The first and last seq of a row group as read must be the manifest's min and max. */
  private checkSeqs(index: number, batches: readonly RecordBatch[], seqRead: boolean): void {
    const want = this.expect?.rowGroups[index];
    if (!want || !seqRead) return;
    const first = batches.find((b) => b.numRows > 0);
    const last = [...batches].reverse().find((b) => b.numRows > 0);
    const seqAt = (b: RecordBatch | undefined, i: number) => {
      const v = b?.getChild(SEQ_COLUMN)?.get(i) as bigint | null | undefined;
      return v === null || v === undefined ? null : v.toString();
    };
    const min = seqAt(first, 0);
    const max = seqAt(last, (last?.numRows ?? 1) - 1);
    if (min !== want.minSeq || max !== want.maxSeq) {
      throw new HypsinkError(
        'HYPSINK_ERR_CORRUPT',
        `data file ${this.path}: row group ${index} holds seqs ${min}..${max}, the manifest says ${want.minSeq}..${want.maxSeq}`,
      );
    }
  }

  close(): void {
    // A read that failed left a wasm task waiting on this file: freeing it under that task is unsafe.
    if (!this.bytes.broken) this.file.free();
    // That task waits on a promise that never settles, not on the handle: closing it is safe either way.
    this.fh.close().catch(() => undefined);
  }
}
