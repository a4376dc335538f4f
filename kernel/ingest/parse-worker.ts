/**
 * The ingest parse worker: runs RowParsers (parse.ts) for the ingesting thread,
 * one per ingest, and hands back their frames and rejections. It holds no lock
 * and writes nothing; appending, flushing and the dead letter stay with the
 * ingesting thread.
 * @ref LLP 0016: ingest parses in a worker
 */
import { parentPort } from 'node:worker_threads';
import { serve } from '../io/worker.js';
import { RowParser } from './parse.js';
import type { ParseJob, ParseReply } from './parsers.js';

const port = parentPort;
if (!port) throw new Error('parse-worker.ts runs as a worker thread (see parsers.ts)');

const parsers = new Map<number, RowParser>();

serve<ParseJob & { call: number }, ParseReply>(port, async (m) => {
  if (m.op === 'ping') return { reply: {} };
  if (m.op === 'open') {
    parsers.set(m.id, new RowParser(m.opts));
    return { reply: {} };
  }
  const parser = parsers.get(m.id);
  if (!parser) throw new Error(`no parser ${m.id} open`);
  if (m.op === 'drop') {
    parsers.delete(m.id);
    return { reply: {} };
  }
  const out = m.op === 'push' ? parser.push(m.bytes) : parser.end();
  if (m.op === 'end') parsers.delete(m.id);
  // Frame bytes own their buffers (encodeFrameLine): transferred, not copied.
  return { reply: { out }, transfer: out.frames.map((f) => f.bytes.buffer as ArrayBuffer) };
});
