/**
 * Where a flush builds and encodes its rows. A segment of at least
 * `workerMinBytes` goes to a worker thread, so an ingest keeps reading while the
 * previous segment is hashed and compressed on another core; smaller segments
 * are done in place, where a worker's start (≈ 0.2 s to load the loader, Arrow
 * and Parquet) would cost more than it saves. A segment sealed by its append is
 * built ahead, before its flush asks (`warm`). Both paths run the same
 * functions (segment-rows.ts).
 * @ref LLP 0013: flush work off the main thread
 * @ref LLP 0016: segments built ahead
 */
import { promises as fsp } from 'node:fs';
import { HypsinkError } from '../../types/errors.js';
import type { DatasetSchema } from '../../types/schema.js';
import type { CommitRows, EncodedFile } from './commit.js';
import { WorkerStopped, WorkerThread, workerEntry } from '../io/worker.js';
import type { DataFileLayout } from '../store/parquet.js';
import { encodeRows, segmentRows } from './segment-rows.js';

/** What the flush thread asks of the worker. */
export type FlushJob =
  | { op: 'prepare'; job: number; path: string; dataset: string; schema: DatasetSchema; layout: DataFileLayout }
  | { op: 'encode'; job: number; source: string; firstSeq: string; batchId: string }
  | { op: 'release'; job: number };

export interface FlushReply {
  groups?: { source: string; rows: number }[];
  file?: EncodedFile;
}

/** A segment's partitions, each ready to commit; `release` frees what was not committed. */
export interface SegmentCommit {
  readonly partitions: readonly { readonly source: string; readonly rows: CommitRows }[];
  release(): Promise<void>;
}

const IDLE_MS = 5_000;
/** Segments built ahead of their flush (warm) at most. */
const WARM_MAX = 2;

export class FlushEncoder {
  private nextJob = 0;
  /** Jobs prepared in the worker and not yet released: the worker holds their rows. */
  private readonly open = new Set<number>();
  private readonly worker = new WorkerThread<FlushJob, FlushReply>(workerEntry('flush-worker', import.meta.url), {
    what: 'flush worker',
    onStop: 'the segment stays in its spool and the next flush retries it',
    idleMs: IDLE_MS,
    holding: () => this.open.size > 0,
  });
  private readonly warmed = new Map<string, Promise<SegmentCommit | null>>();

  constructor(
    private readonly layout: DataFileLayout,
    private readonly workerMinBytes: number,
  ) {}

  async segment(path: string, dataset: string, schema: DatasetSchema): Promise<SegmentCommit> {
    const warm = this.warmed.get(path);
    this.warmed.delete(path);
    const built = await warm;
    if (built) return built;
    const { size } = await fsp.stat(path);
    return size >= this.workerMinBytes ? this.inWorker(path, dataset, schema) : this.inPlace(path, dataset, schema);
  }

  /**
   * Start building a segment just sealed, before a flush asks for it: the worker
   * prepares it while the previous segment commits. A sealed segment never
   * changes (its number is never reused), so the build stays valid until the
   * flush takes it. Only large segments, and only the last WARM_MAX: a build
   * no flush of this process takes (another process flushed the segment) is
   * released when it falls out.
   */
  warm(path: string, dataset: string, schema: DatasetSchema): void {
    if (this.warmed.has(path)) return;
    // Small segments are built by their flush, in place: nothing to gain ahead.
    const build = fsp.stat(path).then(({ size }) => (size >= this.workerMinBytes ? this.inWorker(path, dataset, schema) : null));
    build.catch(() => undefined); // the flush that takes it sees the error
    this.warmed.set(path, build);
    for (const [old, b] of this.warmed) {
      if (this.warmed.size <= WARM_MAX) break;
      this.warmed.delete(old);
      b.then((x) => x?.release(), () => undefined);
    }
  }

  private async inPlace(path: string, dataset: string, schema: DatasetSchema): Promise<SegmentCommit> {
    const parts = await segmentRows(path, dataset, schema);
    return {
      partitions: [...parts].map(([source, p]) => ({
        source,
        rows: { rows: p.rows, encode: async (firstSeq, batchId) => encodeRows(schema, p, firstSeq, batchId, this.layout) },
      })),
      release: async () => parts.clear(),
    };
  }

  private async inWorker(path: string, dataset: string, schema: DatasetSchema): Promise<SegmentCommit> {
    const job = ++this.nextJob;
    let groups: { source: string; rows: number }[];
    this.open.add(job);
    try {
      ({ groups = [] } = await this.worker.call({ op: 'prepare', job, path, dataset, schema, layout: this.layout }));
    } catch (e) {
      this.open.delete(job);
      // A worker that could not start or died is no reason to fail the flush: build it here.
      if (e instanceof WorkerStopped) return this.inPlace(path, dataset, schema);
      throw e;
    }
    return {
      partitions: groups.map(({ source, rows }) => ({
        source,
        rows: {
          rows,
          encode: async (firstSeq, batchId) => {
            const { file } = await this.worker.call({ op: 'encode', job, source, firstSeq: firstSeq.toString(), batchId });
            if (!file) throw new HypsinkError('HYPSINK_ERR_INVARIANT', `flush worker returned no file for ${path} (${source})`);
            return file;
          },
        },
      })),
      release: async () => {
        this.open.delete(job);
        // Freeing memory cannot fail a flush: a worker gone has freed it already.
        if (this.worker.running) await this.worker.call({ op: 'release', job }).catch(() => undefined);
        else this.worker.idleLater();
      },
    };
  }

  /** Stop the worker `ms` after it goes idle from now on (IDLE_MS until then). @ref LLP 0088 */
  keepIdle(ms: number): void {
    this.worker.keepIdle(ms);
  }

  /** Stop the worker, if one runs. */
  async close(): Promise<void> {
    this.warmed.clear();
    await this.worker.close();
  }
}
