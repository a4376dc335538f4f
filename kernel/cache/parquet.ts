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

export const DEFAULT_ROW_GROUP_ROWS = 65_536;

/** Counters for maintenance reads, which are not part of the storage service's figures. */
export const scratchCounters = (): ReadCounters => ({ filesOpened: 0, rowGroupsRead: 0, bytesRead: 0, rowsRead: 0 });

export function encodeParquet(table: Table, rowGroupRows = DEFAULT_ROW_GROUP_ROWS): Uint8Array {
  const props = new pw.WriterPropertiesBuilder()
    .setCompression(pw.Compression.ZSTD)
    .setMaxRowGroupSize(rowGroupRows)
    .build();
  return pw.writeParquet(pw.Table.fromIPCStream(tableToIPC(table, 'stream')), props);
}

/** An open data file; free it when done (wasm memory is not garbage-collected). */
export class ParquetReader {
  private constructor(
    readonly path: string,
    private readonly file: pw.ParquetFile,
  ) {}

  static async open(path: string, counters: ReadCounters): Promise<ParquetReader> {
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
    try {
      return new ParquetReader(path, await pw.ParquetFile.fromFile(counting));
    } catch (e) {
      throw new HypsinkError('HYPSINK_ERR_CORRUPT', `data file ${path} is not a readable Parquet file (${String(e)})`, { cause: e });
    }
  }

  get numRowGroups(): number {
    return this.file.metadata().numRowGroups();
  }

  /** Read one row group as Arrow batches. */
  async readRowGroup(index: number, columns?: readonly string[]): Promise<RecordBatch[]> {
    try {
      const wasmTable = await this.file.read({ rowGroups: [index], ...(columns ? { columns: [...columns] } : {}) });
      return tableFromIPC(wasmTable.intoIPCStream()).batches;
    } catch (e) {
      throw new HypsinkError('HYPSINK_ERR_CORRUPT', `data file ${this.path}: row group ${index} cannot be decoded (${String(e)})`, { cause: e });
    }
  }

  close(): void {
    this.file.free();
  }
}
