/**
 * The ingest parse worker: parses blocks of lines (parse.ts) for the ingesting
 * thread and hands back their frames and rejections. It holds no state between
 * blocks, no lock, and writes nothing; appending, flushing and the dead letter
 * stay with the ingesting thread.
 * @ref LLP 0016: ingest parses in a worker
 */
import { parentPort } from 'node:worker_threads';
import { serve } from '../io/worker.js';
import { parseBlock } from './parse.js';
import type { ParseJob, ParseReply } from './parsers.js';

const port = parentPort;
if (!port) throw new Error('parse-worker.ts runs as a worker thread (see parsers.ts)');

serve<ParseJob & { call: number }, ParseReply>(port, async (m) => {
  if (m.op === 'ping') return { reply: {} };
  const out = parseBlock(m.opts, m.bytes);
  // Frame bytes own their buffers (encodeFrameLine): transferred, not copied.
  return { reply: { out }, transfer: out.frames.map((f) => f.bytes.buffer as ArrayBuffer) };
});
