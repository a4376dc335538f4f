/**
 * Where an ingest parses: in the ingesting thread, or in a parse worker that
 * runs the same RowParser while the ingesting thread appends, seals and flushes
 * what it sends back. Both give the same frames and rejections, in input order.
 * @ref LLP 0016: ingest parses in a worker
 */
import { WorkerThread } from '../io/worker.js';
import { HypsinkError } from '../../types/errors.js';
import type { ParseOptions, ParseOutput } from './parse.js';

/** What the ingesting thread asks of the parse worker. */
export type ParseJob =
  | { op: 'ping' }
  | { op: 'open'; id: number; opts: ParseOptions }
  | { op: 'push'; id: number; bytes: Uint8Array }
  | { op: 'end'; id: number }
  | { op: 'drop'; id: number };

export interface ParseReply {
  out?: ParseOutput;
}

/** A parser of one ingest. Calls are answered in order. */
export interface Parser {
  push(bytes: Uint8Array): Promise<ParseOutput>;
  end(): Promise<ParseOutput>;
  /** Forget the parser without its rest (the ingest failed). */
  drop(): Promise<void>;
}

const IDLE_MS = 5_000;

function outOf(r: ParseReply): ParseOutput {
  if (!r.out) throw new HypsinkError('HYPSINK_ERR_INVARIANT', 'ingest parse worker answered without its output');
  return r.out;
}

/** The parse worker of a kernel: started on first use, stopped when idle. */
export class ParseWorker {
  private nextId = 0;
  /** Parsers open in the worker: it holds their state. */
  private readonly open = new Set<number>();
  private readonly worker = new WorkerThread<ParseJob, ParseReply>(new URL('./parse-worker.ts', import.meta.url), {
    what: 'ingest parse worker',
    idleMs: IDLE_MS,
    holding: () => this.open.size > 0,
  });

  /** Start the worker (≈ 0.2 s: the loader, Arrow); resolves once it answers. */
  async ready(): Promise<void> {
    await this.worker.call({ op: 'ping' });
    this.worker.idleLater();
  }

  /** A parser in the worker. */
  async parser(opts: ParseOptions): Promise<Parser> {
    const id = ++this.nextId;
    this.open.add(id);
    const done = () => {
      this.open.delete(id);
      this.worker.idleLater();
    };
    try {
      await this.worker.call({ op: 'open', id, opts });
    } catch (e) {
      done();
      throw e;
    }
    return {
      push: async (bytes) => {
        // Transferred when the bytes own their buffer, else copied once.
        const own = bytes.byteOffset === 0 && bytes.byteLength === bytes.buffer.byteLength ? bytes : Uint8Array.prototype.slice.call(bytes);
        return outOf(await this.worker.call({ op: 'push', id, bytes: own }, [own.buffer as ArrayBuffer]));
      },
      end: async () => {
        try {
          return outOf(await this.worker.call({ op: 'end', id }));
        } finally {
          done();
        }
      },
      drop: async () => {
        if (this.worker.running) await this.worker.call({ op: 'drop', id }).catch(() => undefined);
        done();
      },
    };
  }

  /** Whether the worker runs (it stops IDLE_MS after its last parser ends). */
  get running(): boolean {
    return this.worker.running;
  }

  async close(): Promise<void> {
    await this.worker.close();
  }
}
