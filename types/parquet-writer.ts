/**
 * A Parquet file of a unit's Arrow batches, for every plugin that writes one
 * (format-parquet's blob, format-iceberg's data files). For a unit of at
 * least `OFF_THREAD_ROWS` rows the encoder, about two thirds of an export's
 * CPU (LLP 0068), runs on a worker thread of its own: the calling thread (the
 * kernel's) reads, hashes and converts the next batches while the worker
 * encodes the ones before, a few batches apart. `HYPSINK_PARQUET_THREAD=0`
 * keeps it on the calling thread (about 50 MB less at peak, a 1M-row export
 * some 12% slower). A smaller unit is always encoded on the calling thread: it
 * would gain nothing from the overlap.
 * Either way a source error (a damaged cache file: HYPSINK_ERR_CORRUPT naming
 * it) is thrown as it was, and a body whose source failed never ends normally.
 * @ref LLP 0079: Parquet encoded off the kernel's thread
 * @ref LLP 0105: the Parquet writer thread is on by default
 */
import { type RecordBatch, Table, tableToIPC } from 'apache-arrow';
import type { ColumnSpec } from './schema.js';
import type { BlobBody } from './sinks.js';
import { WorkerThread, workerEntry } from './worker.js';

/** How a Parquet file is written: plain data, so it crosses to the writer thread as it is. */
export interface ParquetPlan {
  /** The columns as written (each one's encoding is `columnEncodings`'s). */
  readonly columns: readonly ColumnSpec[];
  readonly compression: 'zstd' | 'snappy' | 'gzip' | 'uncompressed';
  readonly rowGroupRows: number;
  /** Key-value metadata of the footer. */
  readonly keyValueMetadata?: Readonly<Record<string, string>>;
}

/**
 * From this many rows on a file is encoded on the writer thread: one row
 * group of the default size. Below it, the thread's start (compiling
 * parquet-wasm once more, some 250 ms of a core) costs more than the overlap gains.
 */
export const OFF_THREAD_ROWS = 65_536;

/** Batches sent ahead of the one the writer is encoding: enough to keep it busy, never the unit in memory. */
const AHEAD = 2;

/** A message to the writer thread; `job` tells concurrent files apart. @internal */
export type ParquetJobRequest =
  | { readonly op: 'open'; readonly job: number; readonly plan: ParquetPlan }
  | { readonly op: 'batch'; readonly job: number; readonly ipc: Uint8Array }
  | { readonly op: 'end'; readonly job: number }
  | { readonly op: 'abort'; readonly job: number };

/** The file's bytes the writer produced since its last reply (the buffers are transferred). @internal */
export interface ParquetJobReply {
  readonly chunks: Uint8Array[];
}

let writer: WorkerThread<ParquetJobRequest, ParquetJobReply> | undefined;
let jobs = 0;

function writerThread(): WorkerThread<ParquetJobRequest, ParquetJobReply> {
  writer ??= new WorkerThread(workerEntry('parquet-worker', import.meta.url), {
    what: 'the Parquet writer thread',
    onStop: 'the unit is not advanced and is written again by the next export',
    idleMs: 5_000,
  });
  return writer;
}

/**
 * The Parquet file of `batches` under `plan`. `rows`: the rows the caller
 * expects (a unit's planned rows), which picks the thread the encoder runs on.
 */
export function parquetBody(batches: AsyncIterable<RecordBatch>, plan: ParquetPlan, rows: number): BlobBody {
  return onWriterThread(rows) ? offThread(batches, plan) : onThisThread(batches, plan);
}

/**
 * Whether a file of `rows` rows is encoded on the writer thread (read per
 * file, so a test can turn it off). On by default since LLP 0105.
 * @ref LLP 0105: the Parquet writer thread is on by default
 */
export function onWriterThread(rows: number): boolean {
  return process.env.HYPSINK_PARQUET_THREAD !== '0' && rows >= OFF_THREAD_ROWS;
}

async function* onThisThread(batches: AsyncIterable<RecordBatch>, plan: ParquetPlan): BlobBody {
  const { encodeStream, wasmBatches } = await import('./parquet-encode.js');
  const it = batches[Symbol.asyncIterator]();
  // An error of the rows' source reaches the wasm writer only as an opaque "Dyn casting
  // error": keep it and rethrow it as it was.
  let sourceError: { error: unknown } | undefined;
  const input = new ReadableStream({
    async pull(ctl) {
      let next: IteratorResult<RecordBatch>;
      try {
        next = await it.next();
      } catch (e) {
        sourceError ??= { error: e };
        throw e;
      }
      if (next.done) {
        ctl.close();
        return;
      }
      for (const rb of wasmBatches(ipcOf(next.value))) ctl.enqueue(rb);
    },
    async cancel() {
      await it.return?.();
    },
  });
  try {
    yield* await encodeStream(input, plan);
  } catch (e) {
    throw sourceError ? sourceError.error : e;
  }
  // The wasm writer may end its output normally after its input failed: a file of the rows
  // before the failure. Never let that pass as the file (the kernel checks the count too).
  if (sourceError) throw sourceError.error;
}

function ipcOf(b: RecordBatch): Uint8Array {
  return tableToIPC(new Table(b), 'stream');
}

/**
 * The file encoded on the writer thread: each batch goes over as Arrow IPC
 * (its buffer transferred, not copied), up to AHEAD of them before the one the
 * writer is encoding; each reply brings the bytes written so far. A source
 * error stops the loop here and is thrown as it was; the writer's job is
 * dropped, its bytes never handed out.
 */
async function* offThread(batches: AsyncIterable<RecordBatch>, plan: ParquetPlan): BlobBody {
  const w = writerThread();
  const job = ++jobs;
  await w.call({ op: 'open', job, plan });
  const inFlight: Promise<ParquetJobReply>[] = [];
  let ended = false;
  try {
    for await (const b of batches) {
      const ipc = ipcOf(b);
      // The IPC bytes are a fresh buffer of their own: transferred, not copied.
      const own = ipc.byteOffset === 0 && ipc.byteLength === ipc.buffer.byteLength ? ipc : ipc.slice();
      const reply = w.call({ op: 'batch', job, ipc: own }, [own.buffer as ArrayBuffer]);
      reply.catch(() => undefined); // awaited below in order; a rejection while another is awaited is not unhandled
      inFlight.push(reply);
      while (inFlight.length > AHEAD) yield* (await inFlight.shift()!).chunks;
    }
    while (inFlight.length > 0) yield* (await inFlight.shift()!).chunks;
    ended = true;
    yield* (await w.call({ op: 'end', job })).chunks;
  } finally {
    // Stopped early (a source error, the reader gone, the writer failed): drop the job.
    // A writer thread that stopped holds no job: none is started again to drop it.
    if (!ended && w.running) w.call({ op: 'abort', job }).catch(() => undefined);
  }
}
