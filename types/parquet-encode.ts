/**
 * parquet-wasm's stream writer under a ParquetPlan: what the Parquet writer
 * thread runs, and what the calling thread runs for a unit too small to be
 * worth the thread. Loaded on first use only (parquet-wasm takes a few hundred
 * ms to compile), never by merely importing the SDK.
 * @ref LLP 0079: Parquet encoded off the kernel's thread
 */
import * as pw from 'parquet-wasm/node';
import { columnEncodings } from './engine-types.js';
import type { ParquetPlan } from './parquet-writer.js';

const CODECS = {
  zstd: pw.Compression.ZSTD,
  snappy: pw.Compression.SNAPPY,
  gzip: pw.Compression.GZIP,
  uncompressed: pw.Compression.UNCOMPRESSED,
} as const;

export function writerProperties(plan: ParquetPlan): pw.WriterProperties {
  let builder = new pw.WriterPropertiesBuilder().setCompression(CODECS[plan.compression]).setMaxRowGroupSize(plan.rowGroupRows);
  if (plan.keyValueMetadata) builder = builder.setKeyValueMetadata(new Map(Object.entries(plan.keyValueMetadata)));
  for (const e of columnEncodings(plan.columns)) builder = builder.setColumnDictionaryEnabled(e.column, e.dictionary).setColumnEncoding(e.column, pw.Encoding[e.encoding]);
  return builder.build();
}

/**
 * Arrow IPC stream bytes as parquet-wasm's record batches (copied into wasm
 * memory). The table they came from is freed here: it shares their buffers, and
 * left to the garbage collector it kept every batch's memory past the writer's
 * use of it (wasm memory never shrinks). @ref LLP 0102
 */
export function wasmBatches(ipc: Uint8Array): pw.RecordBatch[] {
  const table = pw.Table.fromIPCStream(ipc);
  try {
    return table.recordBatches();
  } finally {
    table.free();
  }
}

/** The Parquet file of `input`'s batches, as parquet-wasm streams it out. */
export async function encodeStream(input: ReadableStream<pw.RecordBatch>, plan: ParquetPlan): Promise<AsyncIterable<Uint8Array>> {
  return (await pw.transformParquetStream(input, writerProperties(plan))) as unknown as AsyncIterable<Uint8Array>;
}
