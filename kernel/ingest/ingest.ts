/**
 * NDJSON ingest: validate each line against the dataset schema, append valid
 * rows to the spool of this batch, flush. A bad line (malformed JSON, wrong
 * type, missing required field, over the size limit) goes to the dead-letter
 * file with its line number and reason, whole; valid lines still commit.
 *
 * Every ingest is a batch, named by the host (`batchId`) or here. The first
 * hop is exactly once: a batch already committed or spooled whole is
 * acknowledged again without adding rows; a batch an earlier try left half
 * durable (it failed, or its process was killed) goes on after the last line
 * that was durable, once the input is checked to be the same. Each block of
 * lines is one frame, appended whole, marked with how far the input is durable.
 *
 * The work runs as a pipeline over two cores. The input is cut into blocks of
 * whole lines, parsed and validated into spool frames (ingest/parse.ts) by a
 * parse worker once the input is large enough to pay for its start, and here
 * while the worker is busy (ingest/blocks.ts). This thread takes the frames in
 * input order, appends them, and seals a segment every FLUSH_ROWS rows, whose
 * flush the flush worker has started building meanwhile (LLP 0013, LLP 0016).
 * @ref LLP 0021: idempotent ingest
 */
import { createHash, type Hash, randomBytes } from 'node:crypto';
import { promises as fsp } from 'node:fs';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { accessError } from '../../types/access.js';
import { HypsinkError, isHypsinkError } from '../../types/errors.js';
import type { BatchRecord } from '../cache.js';
import { type BatchMark, encodeFrameLine, markFrameLine } from '../spool/frames.js';
import { encodeSegment } from '../store/segments.js';
import type { SpoolRef } from '../spool/spool.js';
import { BlockParsing } from './blocks.js';
import type { FrameLine, ParseOutput, Rejection } from './parse.js';
import { byteChunks, type LineBlock, LineBlocks } from '../io/lines.js';
import type { Hypsink } from '../runtime.js';
import type { WireRows } from './wire.js';

export interface IngestResult {
  accepted: number;
  rejected: number;
  /** The dead-letter file, when any line was rejected. */
  deadLetter: string | null;
  /** The first few rejections, for the summary line. */
  samples: { line: number; reason: string }[];
  /** The batch id: the host's, or the one made for this ingest. */
  batchId: string;
  /** The batch was committed or spooled whole before: acknowledged, nothing added. */
  duplicate: boolean;
  /** An earlier try of the batch had made lines 1..n durable: this one went on after them. */
  resumedAfterLine: number;
}

export interface IngestOptions {
  /**
   * The host's name for this batch of rows: retrying a failed or interrupted
   * ingest with the same id never adds a row twice. Without it a fresh id is
   * made, and said in the error when something fails.
   */
  readonly batchId?: string;
  /** Called with the lines read so far, every PROGRESS_LINES and at the end. */
  readonly onProgress?: (lines: number) => void;
  /**
   * Called as each block of lines (≈ 1 MiB) is taken: how far into the input
   * this try is, for a progress bar. Once a block, never per row. @ref LLP 0035
   */
  readonly onRead?: (p: IngestProgress) => void;
  /**
   * Hold the batch: its spool is marked held (durably, before its first frame),
   * so no flush commits it until the host releases or drops it
   * (Cache.releaseBatch / dropBatch); the value is the host's key for it. A
   * batch committed before stays committed. @internal @ref LLP 0080
   */
  readonly hold?: string;
  /** Parse in the parse worker once this many bytes were read (default 4 MiB); Infinity: never. */
  readonly parseWorkerAfterBytes?: number;
  /**
   * Rows a receiver took from a client: every line must be one JSON object
   * (else the ingest fails with `RowRefused` and nothing of the batch is
   * durable), and the client column is set on each. Every block is parsed
   * before the first is appended, so keep such inputs to a request body's
   * size. @internal @ref LLP 0087
   */
  readonly wire?: WireRows;
}

/** A wire line no client may send (LLP 0087): the batch is refused whole, nothing of it durable. */
export class RowRefused extends HypsinkError {
  constructor(
    /** 1-based, over the input as given. */
    readonly line: number,
    readonly reason: string,
  ) {
    super('HYPSINK_ERR_INPUT', `line ${line}: ${reason}`);
    this.name = 'RowRefused';
  }
}

/** How far an ingest has come. */
export interface IngestProgress {
  /** Bytes of the input behind us: taken (parsed, appended or rejected), or skipped as durable from an earlier try. */
  readonly bytes: number;
  /** Rows this try accepted so far. */
  readonly rows: number;
}

/**
 * Seal a segment every this many accepted rows while the input is still being
 * read, and flush it: the flush worker builds and encodes one segment while the
 * next is parsed (LLP 0013). Rows are durable in the spool from their frame on either way.
 */
const FLUSH_ROWS = 50_000;
const PROGRESS_LINES = 50_000;
/** Below this much input the parse worker's start (≈ 0.2 s) costs more than it saves. */
const PARSE_WORKER_AFTER_BYTES = 4 * 1024 * 1024;
/** Blocks of whole lines: the unit of parsing work, here or in the worker (≈ 6k demo rows), and one frame each. */
const BLOCK_BYTES = 1024 * 1024;
/** Blocks parsed or being parsed and not yet taken, at most. */
const QUEUED = 4;

/** A batch id for an ingest the host did not name. */
export function newBatchId(): string {
  return `auto-${Date.now().toString(36)}-${process.pid}-${randomBytes(6).toString('hex')}`;
}

/** Where a batch stood when this try started. */
type Found = { kind: 'committed'; record: BatchRecord } | { kind: 'spooled'; mark: BatchMark } | { kind: 'partial'; mark: BatchMark | null };

export async function ingestNdjson(
  k: Hypsink,
  dataset: string,
  source: string,
  input: Readable,
  label: string,
  opts: IngestOptions = {},
): Promise<IngestResult> {
  k.cache.schema(dataset);
  const batchId = opts.batchId ?? newBatchId();
  const spool = k.cache.batchSpool(dataset, batchId);
  const result: IngestResult = { accepted: 0, rejected: 0, deadLetter: null, samples: [], batchId, duplicate: false, resumedAfterLine: 0 };
  let durable: Durable = 'none';
  try {
    await k.cache.withBatch(spool, async (progress) => {
      const record = await k.cache.batchRecord(spool);
      if (!record && opts.hold !== undefined) await k.cache.holdBatch(spool, opts.hold);
      const mark = record ? null : await progress();
      const found: Found = record ? { kind: 'committed', record } : mark?.end ? { kind: 'spooled', mark } : { kind: 'partial', mark };
      durable = found.kind !== 'partial' ? 'all' : found.mark ? 'some' : 'none';
      if (found.kind === 'partial') {
        await ingestRest(k, dataset, source, input, label, spool, batchId, found.mark, result, opts, (end) => {
          durable = end ? 'all' : 'some';
        });
        return;
      }
      // Committed or spooled whole before: the same input, acknowledged again, nothing added.
      const want = found.kind === 'committed' ? found.record : found.mark;
      await checkSame(input, source, want.lines, want.hash, batchId, label, opts.onRead);
      Object.assign(result, { accepted: want.accepted ?? 0, rejected: want.rejected ?? 0, duplicate: true });
      if (found.kind === 'spooled') await flush(k, spool, true);
    });
  } catch (e) {
    // Nothing of the batch durable: no empty spool stays behind. @ref LLP 0087
    if (durable === 'none') await k.cache.abandonBatch(spool);
    throw failedIngest(e, result, durable, opts.batchId !== undefined);
  }
  // Committed: its record answers a retry, its spool is of no more use. @ref LLP 0085
  await k.cache.retireBatch(spool);
  return result;
}

/** Ingest the input after the lines an earlier try made durable (none for a new batch). */
async function ingestRest(
  k: Hypsink,
  dataset: string,
  source: string,
  input: Readable,
  label: string,
  spool: SpoolRef,
  batchId: string,
  from: BatchMark | null,
  result: IngestResult,
  opts: IngestOptions,
  /** A frame is durable (`end`: the batch's last). */
  onDurable: (end: boolean) => void,
): Promise<void> {
  const schema = k.cache.schema(dataset);
  const maxRowBytes = k.loaded.config.datasets[dataset]?.maxRowBytes ?? 1024 * 1024;
  let dead: fsp.FileHandle | undefined;
  let deadUnsynced = false;
  const reject = async ({ line, reason, raw }: Rejection) => {
    result.rejected++;
    if (result.samples.length < 5) result.samples.push({ line, reason });
    if (!dead) {
      result.deadLetter = join(await k.deadLetterDir(), `${encodeSegment(dataset)}.ndjson`);
      dead = await fsp.open(result.deadLetter, 'a');
    }
    const rec = { at: new Date().toISOString(), dataset, source, file: label, line, reason, raw, batch: batchId };
    await dead.write(JSON.stringify(rec) + '\n');
    deadUnsynced = true;
  };

  // At most one append in flight: its write and fsync run while the next frame is parsed.
  // Appends stay in order, and a failed one surfaces at the next.
  let appending: Promise<void> = Promise.resolve();
  const append = async (frame: FrameLine, seal: boolean, end = false) => {
    await appending;
    appending = k.cache.appendFrame(spool, frame, { seal }).then(() => onDurable(end));
    appending.catch(() => undefined);
  };
  // At most one flush in flight; it runs while the next rows are read.
  let flushing = null as Promise<void> | null;
  let sinceFlush = 0;
  let lines = from?.lines ?? 0;
  const hash = inputHash(source);

  /** Take one block's parse output, in input order: dead-letter its rejections, append its frame. */
  const take = async (out: ParseOutput, mark: BatchMark) => {
    for (const r of out.rejects) await reject(r);
    // The rejections a frame's mark covers are durable before it: a resumed try skips their lines.
    if (deadUnsynced && out.frames.length > 0) {
      await dead!.sync();
      deadUnsynced = false;
    }
    if (out.frames.length > 1) throw new HypsinkError('HYPSINK_ERR_INVARIANT', `ingest: a block of lines gave ${out.frames.length} frames, not one`);
    for (const frame of out.frames) {
      result.accepted += frame.rows;
      sinceFlush += frame.rows;
      const seal = sinceFlush >= FLUSH_ROWS;
      await append(markFrameLine(frame, mark), seal);
      if (seal) {
        sinceFlush = 0;
        await flushing;
        // The flush commits the segment the append seals, once it has.
        flushing = appending.then(() => flush(k, spool, false));
        // A failed flush surfaces at the next await; its rows stay spooled for the next flush.
        flushing.catch(() => undefined);
      }
    }
    if (Math.floor(out.lines / PROGRESS_LINES) > Math.floor(lines / PROGRESS_LINES)) opts.onProgress?.(out.lines);
    lines = out.lines;
  };

  const workerAfter = opts.parseWorkerAfterBytes ?? PARSE_WORKER_AFTER_BYTES;
  // One frame per block: a block's rows are durable together, under one mark.
  const parsing = new BlockParsing(k.parsers, { schema, source, maxRowBytes, frameRows: Number.MAX_SAFE_INTEGER, ...(opts.wire ? { wire: opts.wire } : {}) }, k.log);
  // Blocks in input order, parsed there or here; their outputs are taken in the same order.
  const queue: { out: Promise<ParseOutput>; hash: string; bytes: number }[] = [];
  const dispatch = async (block: LineBlock) => {
    const out = parsing.parse(block);
    out.catch(() => undefined); // taken in order below
    hash.update(block.bytes);
    queue.push({ out, hash: hash.copy().digest('hex'), bytes: block.bytes.byteLength });
    // Wire rows: every block parsed before the first is taken, so a refused line leaves nothing durable.
    while (!opts.wire && queue.length > QUEUED) await takeNext();
  };
  const takeNext = async () => {
    const q = queue.shift()!;
    const out = await q.out;
    // Totals of the whole batch so far, earlier tries included: what its record will say.
    const totals = { accepted: (from?.accepted ?? 0) + result.accepted + out.frames.reduce((n, f) => n + f.rows, 0), rejected: (from?.rejected ?? 0) + result.rejected + out.rejects.length };
    await take(out, { id: batchId, lines: out.lines, hash: q.hash, ...totals });
    behind += q.bytes;
    opts.onRead?.({ bytes: behind, rows: result.accepted });
  };

  const blocks = new LineBlocks(BLOCK_BYTES, lines);
  let read = 0;
  /** Input bytes behind us: skipped as durable, then taken block by block. */
  let behind = 0;
  try {
    const skipped = (n: number) => {
      behind += n;
    };
    const chunks = from ? skipDurable(byteChunks(input), from, hash, batchId, label, skipped) : byteChunks(input);
    result.resumedAfterLine = from?.lines ?? 0;
    // A worker already running (a previous ingest's, not yet idle) parses from the first block.
    if (workerAfter <= 0 || (workerAfter < Number.POSITIVE_INFINITY && k.parsers.running)) await parsing.startWorker();
    for await (const bytes of chunks) {
      read += bytes.byteLength;
      if (read >= workerAfter) void parsing.startWorker();
      for (const block of blocks.push(bytes)) await dispatch(block);
    }
    for (const block of blocks.end()) await dispatch(block);
    if (opts.wire) {
      for (const q of queue) {
        const { refused } = await q.out;
        if (refused) throw new RowRefused(refused.line, refused.reason);
      }
    }
    while (queue.length > 0) await takeNext();
    await appending;
    // The end mark: the batch is whole in the spool, certain to commit, acknowledged from here on.
    const totals = { accepted: (from?.accepted ?? 0) + result.accepted, rejected: (from?.rejected ?? 0) + result.rejected };
    await append(endFrame(k, dataset, { id: batchId, lines, hash: hash.digest('hex'), end: true, ...totals }), false, true);
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
  await flush(k, spool, true);
}

/** The last frame of a batch: no rows, its end mark. */
function endFrame(k: Hypsink, dataset: string, mark: BatchMark): FrameLine {
  return encodeFrameLine(k.cache.schema(dataset).columns, [], mark);
}

async function flush(k: Hypsink, spool: SpoolRef, sealCurrent: boolean): Promise<void> {
  const r = await k.cache.flushTable(spool, { sealCurrent });
  if (r.partitions.length > 0) await k.hooks.cacheFlushed.promise({ partitions: r.partitions });
}

/**
 * The input less its first `from.lines` lines, which an earlier try made
 * durable: their bytes are hashed and must be what that try read.
 */
async function* skipDurable(
  chunks: AsyncIterable<Uint8Array>,
  from: BatchMark,
  hash: Hash,
  batchId: string,
  label: string,
  skipped: (bytes: number) => void,
): AsyncIterable<Uint8Array> {
  let left = from.lines;
  const check = () => {
    if (hash.copy().digest('hex') !== from.hash) throw changedInput(batchId, label, from.lines);
  };
  if (left === 0) check();
  for await (const chunk of chunks) {
    if (left === 0) {
      yield chunk;
      continue;
    }
    let at = 0;
    while (left > 0) {
      const nl = chunk.indexOf(0x0a, at);
      if (nl < 0) break;
      at = nl + 1;
      left--;
    }
    const durable = left > 0 ? chunk : chunk.subarray(0, at);
    hash.update(durable);
    skipped(durable.byteLength);
    if (left > 0) continue;
    check();
    if (at < chunk.length) yield chunk.subarray(at);
  }
  // The durable lines may end with the input's last line, one without a newline: then it is all there.
  if (left > 1) throw changedInput(batchId, label, from.lines);
  if (left === 1) check();
}

/** What a batch's marks hash: its partition value, then its input bytes (a retry must send both the same). */
function inputHash(source: string): Hash {
  return createHash('sha256').update(`${JSON.stringify(['hypsink.batch.v1', source])}\n`);
}

/** Hash the whole input: a retry of a batch acknowledged whole must carry the same lines. */
async function checkSame(
  input: Readable,
  source: string,
  lines: number,
  want: string,
  batchId: string,
  label: string,
  onRead?: (p: IngestProgress) => void,
): Promise<void> {
  const hash = inputHash(source);
  let bytes = 0;
  let told = 0;
  for await (const chunk of byteChunks(input)) {
    hash.update(chunk);
    bytes += chunk.byteLength;
    if (bytes - told >= BLOCK_BYTES) {
      told = bytes;
      onRead?.({ bytes, rows: 0 });
    }
  }
  onRead?.({ bytes, rows: 0 });
  if (hash.digest('hex') !== want) throw changedInput(batchId, label, lines);
}

function changedInput(batchId: string, label: string, lines: number): HypsinkError {
  return new HypsinkError(
    'HYPSINK_ERR_INPUT',
    `${label}: batch ${batchId} was ingested before with other content (its first ${lines} line(s) differ); nothing was added. A retry must send the same rows; new rows need a new batch id`,
  );
}

/** How much of a failed ingest's batch is durable: none, some rows, or all of it (certain to commit). */
export type Durable = 'none' | 'some' | 'all';

/** An ingest that failed, saying what of its batch is durable; a retry with its batch id is always safe. */
export class IngestError extends HypsinkError {
  constructor(
    cause: HypsinkError,
    readonly batchId: string,
    readonly durable: Durable,
    named: boolean,
    /** What this try had done when it failed. */
    readonly result: IngestResult,
  ) {
    const retry = named ? `retrying with the same --batch-id ${batchId} is safe` : `retry with --batch-id ${batchId} (safe: it adds no row twice), never without it`;
    const what =
      durable === 'all'
        ? `every row of batch ${batchId} is durable in its spool and commits with the next flush; do not send it again, or ${retry}: it adds nothing`
        : durable === 'some'
          ? `some rows of batch ${batchId} are durable and commit with the next flush; ${retry}: it adds only the rest`
          : `no row of batch ${batchId} is durable; ${retry}`;
    super(cause.code, `${cause.message} (${what})`, { cause, retryable: cause.retryable, retryAfterMs: cause.retryAfterMs, hint: cause.hint });
    this.name = 'IngestError';
  }
}

function failedIngest(e: unknown, result: IngestResult, durable: Durable, named: boolean): unknown {
  if (e instanceof IngestError || e instanceof RowRefused || (isHypsinkError(e) && e.code === 'HYPSINK_ERR_INPUT' && /ingested before with other content/.test(e.message))) return e;
  const cause = isHypsinkError(e)
    ? e
    : (accessError(e) ?? new HypsinkError('HYPSINK_ERR_RETRYABLE', (e as Error)?.message ?? String(e), { cause: e, retryable: true }));
  return new IngestError(cause, result.batchId, durable, named, result);
}

export function rejectedError(r: IngestResult, dataset: string, label: string): HypsinkError {
  const first = r.samples.map((s) => `line ${s.line}: ${s.reason}`).join('; ');
  return new HypsinkError(
    'HYPSINK_ERR_INPUT',
    `${label}: ${r.rejected} row(s) of dataset "${dataset}" rejected (${first}${r.rejected > r.samples.length ? '; …' : ''}); kept in ${r.deadLetter}; the valid rows of batch ${r.batchId} are committed`,
  );
}
