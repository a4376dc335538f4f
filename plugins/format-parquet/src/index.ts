/**
 * `@hypsink/format-parquet`: a unit's Arrow batches → one Parquet file (zstd),
 * streamed batch by batch through parquet-wasm's stream writer, so a large
 * unit never sits in memory whole. Any Parquet reader decodes the result, with
 * the types engines expect: timestamps as UTC-adjusted µs, NOT NULL columns
 * REQUIRED, JSON columns with the JSON logical type (set in the footer).
 * @ref LLP 0069
 */
import { type RecordBatch, Table, tableToIPC } from 'apache-arrow';
import * as pw from 'parquet-wasm/node';
import { z } from 'zod';
import { columnEncodings, engineBatch, parseSinkConfig, type PluginContext } from 'hypsink/plugin';
import { withJsonColumns } from './footer.js';
import type { BlobBody, Encoder, PluginOptionsSpec, StoredBlob, Unit } from 'hypsink/plugin';

const configSchema = z.object({
  compression: z.enum(['zstd', 'snappy', 'gzip', 'uncompressed']).default('zstd'),
  rowGroupRows: z.number().int().positive().default(65_536),
});

/** The sink's `writerConfig`, declared so the host checks it before `create`. @ref LLP 0032 */
export const PARQUET_OPTIONS: PluginOptionsSpec = { keys: Object.keys(configSchema.shape), validate: configSchema['~standard'].validate };

const CODECS = {
  zstd: pw.Compression.ZSTD,
  snappy: pw.Compression.SNAPPY,
  gzip: pw.Compression.GZIP,
  uncompressed: pw.Compression.UNCOMPRESSED,
} as const;

async function* encode(unit: Unit, compression: pw.Compression, rowGroupRows: number): BlobBody {
  const columns = unit.schema.columns;
  const json = new Set(columns.filter((c) => c.type === 'JSON').map((c) => c.name));
  yield* withJsonColumns(encodeBatches(unit, compression, rowGroupRows), json);
}

async function* encodeBatches(unit: Unit, compression: pw.Compression, rowGroupRows: number): BlobBody {
  const columns = unit.schema.columns;
  const batches = unit.batches()[Symbol.asyncIterator]();
  // An error of the rows' source (a damaged cache file: HYPSINK_ERR_CORRUPT naming it) reaches
  // the wasm writer only as an opaque "Dyn casting error": keep it and rethrow it as it was.
  let sourceError: { error: unknown } | undefined;
  const input = new ReadableStream({
    async pull(ctl) {
      let next: IteratorResult<RecordBatch>;
      try {
        next = await batches.next();
      } catch (e) {
        sourceError ??= { error: e };
        throw e;
      }
      if (next.done) {
        ctl.close();
        return;
      }
      const rows = engineBatch(next.value, columns, { json: true });
      for (const rb of pw.Table.fromIPCStream(tableToIPC(new Table(rows), 'stream')).recordBatches()) ctl.enqueue(rb);
    },
    async cancel() {
      await batches.return?.();
    },
  });
  let builder = new pw.WriterPropertiesBuilder().setCompression(compression).setMaxRowGroupSize(rowGroupRows);
  for (const e of columnEncodings(columns)) builder = builder.setColumnDictionaryEnabled(e.column, e.dictionary).setColumnEncoding(e.column, pw.Encoding[e.encoding]);
  const props = builder.build();
  try {
    const output = await pw.transformParquetStream(input, props);
    yield* output as unknown as AsyncIterable<Uint8Array>;
  } catch (e) {
    throw sourceError ? sourceError.error : e;
  }
  // The wasm writer may end its output normally after its input failed: a file of the rows
  // before the failure. Never let that pass as the unit (the kernel checks the count too).
  if (sourceError) throw sourceError.error;
}

/**
 * A blob's rows from its footer's num_rows, through parquet-wasm's metadata
 * reader over ranged reads: only the footer (and the page index before it) is
 * read. A failed read reaches the wasm reader as no bytes (a rejection there
 * would trap) and is thrown as it was. @ref LLP 0037
 */
async function countRows(blob: StoredBlob): Promise<number> {
  if (blob.bytes < 12) throw new Error(`${blob.bytes} bytes is too short for a Parquet file`);
  let readError: { error: unknown } | undefined;
  const part = (start: number, end: number): Blob =>
    new Proxy(new Blob([]), {
      get(target, prop) {
        if (prop === 'size') return end - start;
        if (prop === 'slice') return (a = 0, b = end - start) => part(start + a, start + Math.min(b, end - start));
        if (prop === 'arrayBuffer') {
          return async () => {
            try {
              const u = await blob.read(start, end - start);
              return u.buffer.slice(u.byteOffset, u.byteOffset + u.byteLength);
            } catch (e) {
              readError ??= { error: e };
              return new ArrayBuffer(0);
            }
          };
        }
        const v = Reflect.get(target, prop);
        return typeof v === 'function' ? v.bind(target) : v;
      },
    });
  let file: pw.ParquetFile;
  try {
    file = await pw.ParquetFile.fromFile(part(0, blob.bytes));
  } catch (e) {
    if (readError) throw readError.error;
    throw new Error(`not a readable Parquet file (${String(e).replace(/^Error: /, '')})`);
  }
  const md = file.metadata();
  const fm = md.fileMetadata();
  try {
    return fm.numRows();
  } finally {
    fm.free();
    md.free();
    file.free();
  }
}

export default function activate(ctx: PluginContext): void {
  ctx.registerEncoder({
    name: ctx.manifest.name,
    options: PARQUET_OPTIONS,
    create(config, build): Encoder {
      // The writer's options live in the sink's `writerConfig`; `config` is the destination's.
      const { compression, rowGroupRows } = parseSinkConfig(configSchema, config, build.sink, 'writerConfig');
      return {
        extension: 'parquet',
        contentType: 'application/vnd.apache.parquet',
        encode: (unit) => encode(unit, CODECS[compression], rowGroupRows),
        countRows,
      };
    },
  });
}
