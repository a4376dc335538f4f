/**
 * The Parquet writer thread: one parquet-wasm stream writer per job, fed the
 * batches the calling thread sends as Arrow IPC. A batch's reply waits until
 * the writer takes it (it has encoded the ones before), which is the sender's
 * backpressure, and carries the file's bytes written so far.
 * @ref LLP 0079: Parquet encoded off the kernel's thread
 */
import { parentPort } from 'node:worker_threads';
import type * as pw from 'parquet-wasm/node';
import { encodeStream, wasmBatches } from './parquet-encode.js';
import type { ParquetJobReply, ParquetJobRequest } from './parquet-writer.js';
import { serve } from './worker.js';

interface Job {
  /** Batches sent and not yet taken by the writer, each with its reply. */
  readonly queue: { batches: pw.RecordBatch[]; taken: () => void }[];
  /** The writer waiting for a batch. */
  wake: (() => void) | undefined;
  ended: boolean;
  aborted: boolean;
  /** The file's bytes written and not yet sent. */
  chunks: Uint8Array[];
  /** Settles when the writer's output ends. */
  done: Promise<void>;
  failure: { error: unknown } | undefined;
  /** Replies waiting on this job, failed with it. */
  readonly waiting: Set<(e: unknown) => void>;
}

const jobs = new Map<number, Job>();

function take(job: Job): ParquetJobReply & { transfer: ArrayBuffer[] } {
  const chunks = job.chunks;
  job.chunks = [];
  return { chunks, transfer: chunks.map((c) => c.buffer as ArrayBuffer) };
}

function fail(job: Job, e: unknown): void {
  job.failure ??= { error: e };
  for (const reject of job.waiting) reject(e);
  job.waiting.clear();
}

function open(id: number, plan: Parameters<typeof encodeStream>[1]): void {
  const job: Job = { queue: [], wake: undefined, ended: false, aborted: false, chunks: [], done: Promise.resolve(), failure: undefined, waiting: new Set() };
  jobs.set(id, job);
  const input = new ReadableStream<pw.RecordBatch>(
    {
      async pull(ctl) {
        while (job.queue.length === 0 && !job.ended && !job.aborted) await new Promise<void>((resolve) => (job.wake = resolve));
        if (job.aborted) throw new Error('the file was abandoned by its sender');
        const next = job.queue.shift();
        if (!next) {
          ctl.close();
          return;
        }
        for (const rb of next.batches) ctl.enqueue(rb);
        next.taken();
      },
    },
    { highWaterMark: 0 },
  );
  // Not awaited here: the writer starts only once it has its first batch (it takes the schema from it).
  job.done = (async () => {
    for await (const c of await encodeStream(input, plan)) job.chunks.push(c);
  })();
  job.done.catch((e: unknown) => fail(job, e));
}

/** A reply that waits for `ready` unless the job fails first. */
function whenReady<T>(job: Job, ready: (resolve: (v: T) => void) => void): Promise<T> {
  if (job.failure) return Promise.reject(job.failure.error);
  return new Promise<T>((resolve, reject) => {
    job.waiting.add(reject);
    ready((v) => {
      job.waiting.delete(reject);
      resolve(v);
    });
  });
}

function jobOf(id: number): Job {
  const job = jobs.get(id);
  if (!job) throw new Error(`no Parquet writer job ${id} (dropped after a failure)`);
  return job;
}

serve<ParquetJobRequest & { call: number }, ParquetJobReply>(parentPort!, async (m) => {
  switch (m.op) {
    case 'open':
      open(m.job, m.plan);
      return { reply: { chunks: [] } };
    case 'batch': {
      const job = jobOf(m.job);
      const batches = wasmBatches(m.ipc);
      await whenReady<void>(job, (taken) => {
        job.queue.push({ batches, taken: () => taken() });
        job.wake?.();
      });
      const { transfer, ...reply } = take(job);
      return { reply, transfer };
    }
    case 'end': {
      const job = jobOf(m.job);
      job.ended = true;
      job.wake?.();
      try {
        await job.done;
        if (job.failure) throw job.failure.error;
      } finally {
        jobs.delete(m.job);
      }
      const { transfer, ...reply } = take(job);
      return { reply, transfer };
    }
    case 'abort': {
      const job = jobs.get(m.job);
      jobs.delete(m.job);
      if (job) {
        job.aborted = true;
        job.wake?.();
        fail(job, new Error('the file was abandoned by its sender'));
        await job.done.catch(() => undefined);
      }
      return { reply: { chunks: [] } };
    }
  }
});
