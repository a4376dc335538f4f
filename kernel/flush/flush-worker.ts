/**
 * The flush worker: builds a segment's partitions (segmentRows) and encodes each
 * once the flushing thread has allocated its seqs. It holds no lock and writes
 * nothing; every durable step stays with the flushing thread.
 * @ref LLP 0013: flush work off the main thread
 */
import { parentPort } from 'node:worker_threads';
import type { DatasetSchema } from '../../types/schema.js';
import type { PreparedRows } from './decorate.js';
import { serve } from '../io/worker.js';
import type { DataFileLayout } from '../store/parquet.js';
import type { FlushJob, FlushReply } from './flush-encoder.js';
import { encodeRows, segmentRows } from './segment-rows.js';

const port = parentPort;
if (!port) throw new Error('flush-worker.ts runs as a worker thread (see flush-encoder.ts)');

/** Prepared partitions of each segment in progress, by job id. */
const jobs = new Map<number, { schema: DatasetSchema; layout: DataFileLayout; parts: Map<string, PreparedRows> }>();

serve<FlushJob & { call: number }, FlushReply>(port, async (m) => {
  switch (m.op) {
    case 'prepare': {
      const parts = await segmentRows(m.path, m.dataset, m.schema);
      jobs.set(m.job, { schema: m.schema, layout: m.layout, parts });
      return { reply: { groups: [...parts].map(([source, p]) => ({ source, rows: p.rows })) } };
    }
    case 'encode': {
      const job = jobs.get(m.job);
      const rows = job?.parts.get(m.source);
      if (!job || !rows) throw new Error(`no prepared rows for job ${m.job} source ${JSON.stringify(m.source)}`);
      job.parts.delete(m.source);
      const file = encodeRows(job.schema, rows, BigInt(m.firstSeq), m.batchId, job.layout);
      // Transferred, not copied: the bytes must own their whole buffer.
      const own = file.bytes.byteLength === file.bytes.buffer.byteLength ? file.bytes : file.bytes.slice();
      return { reply: { file: { ...file, bytes: own } }, transfer: [own.buffer as ArrayBuffer] };
    }
    case 'release':
      jobs.delete(m.job);
      return { reply: {} };
  }
});
