/**
 * NDJSON ingest: validate each line against the dataset schema, append valid
 * rows to a spool of this process, flush. A bad line (malformed JSON, wrong
 * type, missing required field, over the size limit) goes to the dead-letter
 * file with its line number and reason, whole; valid lines still commit.
 *
 * The work runs as a pipeline over two cores. The input is cut into blocks of
 * whole lines, parsed and validated into spool frames (ingest/parse.ts) by a
 * parse worker once the input is large enough to pay for its start, and here
 * while the worker is busy (ingest/blocks.ts). This thread takes the frames in
 * input order, appends them, and seals a segment every FLUSH_ROWS rows, whose
 * flush the flush worker has started building meanwhile (LLP 0013, LLP 0016).
 */
import { randomBytes } from 'node:crypto';
import { promises as fsp } from 'node:fs';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { HypsinkError } from '../types/errors.js';
import { encodeSegment } from './cache/segments.js';
import { BlockParsing } from './ingest/blocks.js';
import type { FrameLine, ParseOutput, Rejection } from './ingest/parse.js';
import { byteChunks, type LineBlock, LineBlocks } from './io/lines.js';
import type { Hypsink } from './runtime.js';

export interface IngestResult {
  accepted: number;
  rejected: number;
  /** The dead-letter file, when any line was rejected. */
  deadLetter: string | null;
  /** The first few rejections, for the summary line. */
  samples: { line: number; reason: string }[];
}

export interface IngestOptions {
  /** Called with the lines read so far, every PROGRESS_LINES and at the end. */
  readonly onProgress?: (lines: number) => void;
  /** Parse in the parse worker once this many bytes were read (default 4 MiB); Infinity: never. */
  readonly parseWorkerAfterBytes?: number;
}

const FRAME_ROWS = 10_000;
/**
 * Seal a segment every this many accepted rows while the input is still being
 * read, and flush it: the flush worker builds and encodes one segment while the
 * next is parsed (LLP 0013). Rows are durable in the spool from their frame on either way.
 */
const FLUSH_ROWS = 50_000;
const PROGRESS_LINES = 50_000;
/** Below this much input the parse worker's start (≈ 0.2 s) costs more than it saves. */
const PARSE_WORKER_AFTER_BYTES = 4 * 1024 * 1024;
/** Blocks of whole lines: the unit of parsing work, here or in the worker (≈ 6k demo rows). */
const BLOCK_BYTES = 1024 * 1024;
/** Blocks parsed or being parsed and not yet taken, at most. */
const QUEUED = 4;

export async function ingestNdjson(
  k: Hypsink,
  dataset: string,
  source: string,
  input: Readable,
  label: string,
  opts: IngestOptions = {},
): Promise<IngestResult> {
  const schema = k.cache.schema(dataset);
  const maxRowBytes = k.loaded.config.datasets[dataset]?.maxRowBytes ?? 1024 * 1024;
  const spool = { dataset, id: `ingest-${process.pid}-${randomBytes(4).toString('hex')}` };
  const result: IngestResult = { accepted: 0, rejected: 0, deadLetter: null, samples: [] };
  let dead: fsp.FileHandle | undefined;

  const reject = async ({ line, reason, raw }: Rejection) => {
    result.rejected++;
    if (result.samples.length < 5) result.samples.push({ line, reason });
    if (!dead) {
      result.deadLetter = join(await k.deadLetterDir(), `${encodeSegment(dataset)}.ndjson`);
      dead = await fsp.open(result.deadLetter, 'a');
    }
    const rec = { at: new Date().toISOString(), dataset, source, file: label, line, reason, raw };
    await dead.write(JSON.stringify(rec) + '\n');
  };

  const flush = async (sealCurrent: boolean) => {
    const r = await k.cache.flushTable(spool, { sealCurrent });
    if (r.partitions.length > 0) await k.hooks.cacheFlushed.promise({ partitions: r.partitions });
  };
  // At most one append in flight: its write and fsync run while the next frame is parsed.
  // Appends stay in order, and a failed one surfaces at the next.
  let appending: Promise<void> = Promise.resolve();
  const append = async (frame: FrameLine, seal: boolean) => {
    await appending;
    appending = k.cache.appendFrame(spool, frame, { seal });
    appending.catch(() => undefined);
  };
  // At most one flush in flight; it runs while the next rows are read.
  let flushing = null as Promise<void> | null;
  let sinceFlush = 0;
  let lines = 0;

  /** Take one parse output, in input order: dead-letter its rejections, append its frames. */
  const take = async (out: ParseOutput) => {
    for (const r of out.rejects) await reject(r);
    for (const frame of out.frames) {
      result.accepted += frame.rows;
      sinceFlush += frame.rows;
      const seal = sinceFlush >= FLUSH_ROWS;
      await append(frame, seal);
      if (seal) {
        sinceFlush = 0;
        await flushing;
        // The flush commits the segment the append seals, once it has.
        flushing = appending.then(() => flush(false));
        // A failed flush surfaces at the next await; its rows stay spooled for the next flush.
        flushing.catch(() => undefined);
      }
    }
    if (Math.floor(out.lines / PROGRESS_LINES) > Math.floor(lines / PROGRESS_LINES)) opts.onProgress?.(out.lines);
    lines = out.lines;
  };

  const workerAfter = opts.parseWorkerAfterBytes ?? PARSE_WORKER_AFTER_BYTES;
  const parsing = new BlockParsing(k.parsers, { schema, source, maxRowBytes, frameRows: FRAME_ROWS }, k.log);
  // Blocks in input order, parsed there or here; their outputs are taken in the same order.
  const queue: Promise<ParseOutput>[] = [];
  const dispatch = async (block: LineBlock) => {
    const p = parsing.parse(block);
    p.catch(() => undefined); // taken in order below
    queue.push(p);
    while (queue.length > QUEUED) await take(await queue.shift()!);
  };

  const blocks = new LineBlocks(BLOCK_BYTES);
  let read = 0;
  try {
    // A worker already running (a previous ingest's, not yet idle) parses from the first block.
    if (workerAfter <= 0 || (workerAfter < Number.POSITIVE_INFINITY && k.parsers.running)) await parsing.startWorker();
    for await (const bytes of byteChunks(input)) {
      read += bytes.byteLength;
      if (read >= workerAfter) void parsing.startWorker();
      for (const block of blocks.push(bytes)) await dispatch(block);
    }
    for (const block of blocks.end()) await dispatch(block);
    while (queue.length > 0) await take(await queue.shift()!);
    await appending;
    opts.onProgress?.(lines);
  } finally {
    if (dead) {
      await dead.sync();
      await dead.close();
    }
    await appending.catch(() => undefined);
    await flushing?.catch(() => undefined);
  }
  await flushing;
  await flush(true);
  // The spool dir of this process is empty now; leave no trace of it.
  await fsp.rm(k.cache.spool(spool).dir, { recursive: true, force: true });
  return result;
}

export function rejectedError(r: IngestResult, dataset: string, label: string): HypsinkError {
  const first = r.samples.map((s) => `line ${s.line}: ${s.reason}`).join('; ');
  return new HypsinkError(
    'HYPSINK_ERR_INPUT',
    `${label}: ${r.rejected} row(s) of dataset "${dataset}" rejected (${first}${r.rejected > r.samples.length ? '; …' : ''}); kept in ${r.deadLetter}`,
  );
}
