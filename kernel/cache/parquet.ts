/**
 * Parquet I/O for cache data files (parquet-wasm + apache-arrow). Writes fix
 * row-group boundaries so the manifest can keep per-row-group seq stats; reads
 * go through a byte-counting Blob so tests can assert what a read cost.
 * @ref LLP 0003: seq-stat pruning
 */
import { openAsBlob } from 'node:fs';
import { type RecordBatch, type Table, tableFromIPC, tableToIPC } from 'apache-arrow';
import * as pw from 'parquet-wasm/node';
import type { ReadCounters } from '../../types/storage.js';
import { HypsinkError } from '../../types/errors.js';
import { ROW_ID_COLUMN, SEQ_COLUMN } from './columns.js';

/**
 * Rows per row group of a cache file: a read decodes a whole group at once, and
 * 16k rows keeps that decode under one forward POST (LLP 0017).
 * @ref LLP 0017: cache row groups of 16k rows
 */
export const DEFAULT_ROW_GROUP_ROWS = 16_384;

/** Counters for maintenance reads, which are not part of the storage service's figures. */
export const scratchCounters = (): ReadCounters => ({ filesOpened: 0, rowGroupsRead: 0, bytesRead: 0, rowsRead: 0 });

export function encodeParquet(table: Table, rowGroupRows = DEFAULT_ROW_GROUP_ROWS): Uint8Array {
  // Row ids are random by nature: compressing or gathering stats on them costs a
  // third of the encode time and gains nothing. No column is dictionary-encoded:
  // on the demo rows zstd alone gives smaller files (2.15 vs 2.30 MB per 50k rows)
  // and encodes and decodes in half the time (LLP 0013).
  const props = new pw.WriterPropertiesBuilder()
    .setCompression(pw.Compression.ZSTD)
    .setDictionaryEnabled(false)
    .setColumnCompression(ROW_ID_COLUMN, pw.Compression.UNCOMPRESSED)
    .setColumnStatisticsEnabled(ROW_ID_COLUMN, pw.EnabledStatistics.None)
    .setMaxRowGroupSize(rowGroupRows)
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
}

/** An open data file; free it when done (wasm memory is not garbage-collected). */
export class ParquetReader {
  private expect: ExpectedFile | undefined;

  /** The file's column names: a projection asks only for columns the file has. */
  private readonly columns: ReadonlySet<string>;

  private constructor(
    readonly path: string,
    private readonly file: pw.ParquetFile,
  ) {
    this.columns = new Set(tableFromIPC(file.schema().intoIPCStream()).schema.fields.map((f) => f.name));
  }

  static async open(path: string, counters: ReadCounters, expect?: ExpectedFile): Promise<ParquetReader> {
    let blob: Blob;
    try {
      blob = await openAsBlob(path);
    } catch (e) {
      throw new HypsinkError('HYPSINK_ERR_CORRUPT', `data file ${path} listed in the manifest cannot be opened: ${(e as Error).message}`, { cause: e });
    }
    counters.filesOpened += 1;
    const counting = new Proxy(blob, {
      get(target, prop) {
        if (prop === 'slice') {
          return (start?: number, end?: number, type?: string) => {
            const s = start ?? 0;
            const e = end ?? target.size;
            counters.bytesRead += Math.max(0, e - s);
            return target.slice(start, end, type);
          };
        }
        const v = Reflect.get(target, prop);
        return typeof v === 'function' ? v.bind(target) : v;
      },
    });
    let reader: ParquetReader;
    try {
      reader = new ParquetReader(path, await pw.ParquetFile.fromFile(counting));
    } catch (e) {
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

  get numRowGroups(): number {
    return this.file.metadata().numRowGroups();
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
      const wasmTable = await this.file.read({ rowGroups: [index], ...(wanted ? { columns: wanted } : {}) });
      batches = tableFromIPC(wasmTable.intoIPCStream()).batches;
    } catch (e) {
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
    this.file.free();
  }
}
