/**
 * `@hypsink/format-parquet`: a unit's Arrow batches → one Parquet file (zstd),
 * streamed batch by batch through parquet-wasm's stream writer, so a large
 * unit never sits in memory whole. Any Parquet reader decodes the result, with
 * the types engines expect: timestamps as UTC-adjusted µs, NOT NULL columns
 * REQUIRED, JSON columns with the JSON logical type (set in the footer).
 * @ref LLP 0069
 */
import type * as PW from 'parquet-wasm/node';
import { z } from 'zod';
import { engineBatch, parquetBody, parseSinkConfig, type PluginContext } from 'hypsink/plugin';
import { withJsonColumns } from './footer.js';
import type { BlobBody, Encoder, ParquetPlan, PluginOptionsSpec, StoredBlob, Unit } from 'hypsink/plugin';

type Compression = ParquetPlan['compression'];

const configSchema = z.object({
  compression: z.enum(['zstd', 'snappy', 'gzip', 'uncompressed']).default('zstd'),
  rowGroupRows: z.number().int().positive().default(65_536),
});

/** The sink's `writerConfig`, declared so the host checks it before `create`. @ref LLP 0032 */
export const PARQUET_OPTIONS: PluginOptionsSpec = { keys: Object.keys(configSchema.shape), validate: configSchema['~standard'].validate };

function encode(unit: Unit, compression: Compression, rowGroupRows: number): BlobBody {
  const columns = unit.schema.columns;
  const json = new Set(columns.filter((c) => c.type === 'JSON').map((c) => c.name));
  const batches = (async function* () {
    for await (const b of unit.batches()) yield engineBatch(b, columns, { json: true });
  })();
  // Encoded on the SDK's Parquet writer thread for a large unit, when it is turned on. @ref LLP 0079
  return withJsonColumns(parquetBody(batches, { columns, compression, rowGroupRows }, unit.plannedRows), json);
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
  // Imported here, not with the plugin: a command that loads sinks without reading a blob
  // (`validate`) does not compile parquet-wasm. @ref LLP 0089
  const pw = await import('parquet-wasm/node');
  let file: PW.ParquetFile;
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
        encode: (unit) => encode(unit, compression, rowGroupRows),
        countRows,
      };
    },
  });
}
