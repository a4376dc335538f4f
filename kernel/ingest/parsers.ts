/**
 * The parse worker of a kernel: parses blocks of lines (parse.ts) off the
 * ingesting thread, which parses blocks too while the worker is busy. Started
 * on first use, stopped when idle.
 * @ref LLP 0016: ingest parses in a worker
 */
import { HypsinkError } from '../../types/errors.js';
import { WorkerThread, workerEntry } from '../io/worker.js';
import type { ParseOptions, ParseOutput } from './parse.js';

/** What the ingesting thread asks of the parse worker. */
export type ParseJob = { op: 'ping' } | { op: 'block'; opts: ParseOptions; bytes: Uint8Array };

export interface ParseReply {
  out?: ParseOutput;
}

const IDLE_MS = 5_000;

export class ParseWorker {
  private readonly worker = new WorkerThread<ParseJob, ParseReply>(workerEntry('parse-worker', import.meta.url), {
    what: 'ingest parse worker',
    idleMs: IDLE_MS,
  });

  /** Start the worker (≈ 0.2 s: the loader, Arrow); resolves once it answers. */
  async ready(): Promise<void> {
    await this.worker.call({ op: 'ping' });
  }

  /** Blocks the worker has parsed since the kernel opened (it may have stopped idle since). */
  parsedBlocks = 0;

  /** Parse one block. Its bytes are copied, not transferred: the caller keeps them to parse itself if the worker stops. */
  async parse(opts: ParseOptions, bytes: Uint8Array): Promise<ParseOutput> {
    const r = await this.worker.call({ op: 'block', opts, bytes });
    if (!r.out) throw new HypsinkError('HYPSINK_ERR_INVARIANT', 'ingest parse worker answered without its output');
    this.parsedBlocks++;
    return r.out;
  }

  /** Stop the worker `ms` after its last block from now on (IDLE_MS until then). @ref LLP 0088 */
  keepIdle(ms: number): void {
    this.worker.keepIdle(ms);
  }

  /** Whether the worker runs (it stops IDLE_MS, or as `keepIdle` says, after its last block). */
  get running(): boolean {
    return this.worker.running;
  }

  async close(): Promise<void> {
    await this.worker.close();
  }
}
