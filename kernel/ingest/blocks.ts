/**
 * Which thread parses a block: the parse worker while it has room, this thread
 * otherwise, so neither waits on the other. A block parsed here is parsed a
 * slice at a time, with an event-loop turn between slices, so appends and
 * commits keep moving. If the worker stops, its blocks (still held here) and
 * every later one are parsed here.
 * @ref LLP 0016: ingest parses in a worker
 */
import { setImmediate } from 'node:timers/promises';
import type { Logger } from '../../types/plugins.js';
import type { LineBlock } from '../io/lines.js';
import { WorkerStopped } from '../io/worker.js';
import { type ParseOptions, type ParseOutput, parseBlockSlices } from './parse.js';
import type { ParseWorker } from './parsers.js';

/** Blocks at the worker and not yet answered, at most: one it parses, one waiting; the next is parsed here. */
const WORKER_BLOCKS = 2;
/** A block parsed here is parsed a slice at a time. */
const SLICE_BYTES = 128 * 1024;

export class BlockParsing {
  private workerUp = false;
  private starting: Promise<void> | null = null;
  private atWorker = 0;
  /** Blocks parsed here go one at a time. */
  private here: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly worker: ParseWorker,
    private readonly opts: Omit<ParseOptions, 'firstLine'>,
    private readonly log: Logger,
  ) {}

  /** Start the worker in the background; blocks go to it once it answers. */
  startWorker(): Promise<void> {
    this.starting ??= this.worker.ready().then(
      () => {
        this.workerUp = true;
      },
      (e: unknown) => this.log.warn({ err: e }, 'ingest: the parse worker did not start; parsing in this thread'),
    );
    return this.starting;
  }

  parse(block: LineBlock): Promise<ParseOutput> {
    return this.workerUp && this.atWorker < WORKER_BLOCKS ? this.parseThere(block) : this.parseHere(block);
  }

  private async parseThere(block: LineBlock): Promise<ParseOutput> {
    this.atWorker++;
    try {
      return await this.worker.parse({ ...this.opts, firstLine: block.firstLine }, block.bytes);
    } catch (e) {
      if (!(e instanceof WorkerStopped)) throw e;
      this.workerUp = false;
      this.log.warn({ err: e }, 'ingest: the parse worker stopped; parsing in this thread');
      return this.parseHere(block);
    } finally {
      this.atWorker--;
    }
  }

  private parseHere(block: LineBlock): Promise<ParseOutput> {
    const run = this.here.then(async () => {
      const slices = parseBlockSlices({ ...this.opts, firstLine: block.firstLine }, block.bytes, SLICE_BYTES);
      for (;;) {
        const r = slices.next();
        if (r.done) return r.value;
        await setImmediate();
      }
    });
    this.here = run.catch(() => undefined);
    return run;
  }
}
