/**
 * A unit as a sink sees it, and what the kernel learns while the sink reads it.
 * The kernel's first rule: a unit advances only when the rows shipped equal the
 * rows planned for `(since, until]`, counted before the ship. Every read of a
 * unit (rows, batches, NDJSON) goes through `UnitReads`, which counts what it
 * handed out and keeps the first read error; a blob's body ends only once the
 * last read was whole (`guardBody`), so a destination never commits a blob
 * short of rows, whatever the encoder did with the error.
 * @ref LLP 0018: the two kernel rules
 */
import type { RecordBatch } from 'apache-arrow';
import { HypsinkError, isHypsinkError } from '../../types/errors.js';
import type { DatasetSchema, Row } from '../../types/schema.js';
import type { BlobBody, NdjsonChunk, Unit } from '../../types/sinks.js';
import type { Continuation, PartitionRef } from '../../types/storage.js';
import type { Cache } from '../cache.js';
import { NdjsonWriter } from './ndjson.js';
import type { Intent } from './watermarks.js';

/** Seqs read, as runs of consecutive seqs: tells delivered rows from pruned ones without a seq per row. */
export type SeqRuns = [bigint, bigint][];

/** Note a seq read into runs of consecutive seqs. */
export function note(runs: SeqRuns, s: bigint): void {
  const last = runs[runs.length - 1];
  if (last && s === last[1]) return; // legacy rows share seq 0
  if (last && last[1] + 1n === s) last[1] = s;
  else runs.push([s, s]);
}

const cont = (seq: string): Continuation => ({ v: 1, seq });

/** `(since, until]` of a partition, as messages name it. */
export function rangeText(p: PartitionRef, since: string | null, until: string): string {
  return `unit (${since ?? 'start'}, ${until}] of ${p.dataset}/source=${p.source}`;
}

/**
 * The reads of one unit. Each iteration (a call of rows(), batches() or
 * ndjson()) is counted; the last one to start is the one that counts, and it
 * must run to its end without an error and hand out exactly `planned` rows.
 */
export class UnitReads {
  private iteration = 0;
  private whole: { iteration: number; rows: number; seen: SeqRuns } | null = null;
  private error: unknown;

  constructor(
    readonly planned: number,
    private readonly sink: string,
    private readonly where: string,
  ) {}

  /** Run one read, counting its rows; `each` hands out items and notes their seqs. */
  async *read<T>(source: (seen: SeqRuns) => AsyncIterable<T>, rowsOf: (x: T) => number): AsyncIterable<T> {
    const iteration = ++this.iteration;
    const seen: SeqRuns = [];
    let rows = 0;
    try {
      for await (const x of source(seen)) {
        rows += rowsOf(x);
        yield x;
      }
    } catch (e) {
      this.error ??= e;
      throw e;
    }
    this.whole = { iteration, rows, seen };
  }

  /** The seqs of the last whole read (for gap accounting). */
  get seen(): SeqRuns {
    return this.whole?.seen ?? [];
  }

  /** Throw unless the last read was whole and handed out exactly the planned rows. */
  check(): void {
    const w = this.whole;
    if (this.error !== undefined && (w === null || w.iteration !== this.iteration)) {
      const cause = this.error;
      const code = isHypsinkError(cause) ? cause.code : 'HYPSINK_ERR_CORRUPT';
      throw new HypsinkError(code, `sink "${this.sink}": ${this.where}: ${(cause as Error)?.message ?? String(cause)}; nothing of it was advanced`, {
        cause,
        retryable: isHypsinkError(cause) ? cause.retryable : false,
        hint: isHypsinkError(cause) ? cause.hint : undefined,
      });
    }
    if (w === null || w.iteration !== this.iteration || w.rows !== this.planned) {
      const got = w === null || w.iteration !== this.iteration ? 'stopped before the end of its rows' : `read ${w.rows} rows`;
      throw new HypsinkError(
        'HYPSINK_ERR_INVARIANT',
        `sink "${this.sink}": ${this.where}: ${this.planned} rows were planned, the sink ${got}; nothing of it was advanced (an encoder that stops early, or a cache file that holds other rows than its manifest says)`,
      );
    }
  }

  /** A blob body that ends only after `check()` passed: a short read fails the put instead of committing it. */
  guard(body: BlobBody): BlobBody {
    const reads = this;
    return (async function* () {
      yield* body;
      reads.check();
    })();
  }
}

/**
 * The unit's body, already read while the previous unit was in flight (request
 * sinks): its NDJSON, or its batches for a shipper that reads batches.
 * @ref LLP 0047
 */
export interface Prefetch {
  readonly since: bigint;
  readonly until: string;
  readonly chunks?: NdjsonChunk[];
  readonly batches?: RecordBatch[];
  readonly rows: number;
  readonly seen: SeqRuns;
}

const rangeOf = (since: bigint, until: string) => ({ since: since < 0n ? null : cont(since.toString()), until: cont(until) });

/** Read `(since, until]` as one NDJSON body, noting the seqs read. */
export async function readNdjson(cache: Cache, p: PartitionRef, schema: DatasetSchema, since: bigint, until: string, rows: number, seen: SeqRuns): Promise<NdjsonChunk[]> {
  // The unit's batches into one buffer: the request body as is, no concatenation.
  const out = new NdjsonWriter(schema.columns, rows);
  for await (const b of cache.storage.scan(cache.store(p), rangeOf(since, until), schema.columns, true)) {
    for (const x of b.seqs) note(seen, x);
    out.append(b.batch);
  }
  return out.rows > 0 ? [{ bytes: out.bytes(), rows: out.rows }] : [];
}

/** Read `(since, until]` as its decoded batches, noting the seqs read. */
export async function readBatches(cache: Cache, p: PartitionRef, schema: DatasetSchema, since: bigint, until: string, seen: SeqRuns): Promise<RecordBatch[]> {
  const out: RecordBatch[] = [];
  for await (const b of cache.storage.scan(cache.store(p), rangeOf(since, until), schema.columns, true)) {
    for (const x of b.seqs) note(seen, x);
    out.push(b.batch as RecordBatch);
  }
  return out;
}

/** The Unit a shipper is handed for `intent`, every read of it counted by `reads`. */
export function buildUnit(
  cache: Cache,
  sink: string,
  p: PartitionRef,
  schema: DatasetSchema,
  intent: Intent,
  reads: UnitReads,
  signal: AbortSignal,
  pre?: Prefetch,
): Unit {
  const since = intent.since === null ? null : cont(intent.since);
  const until = cont(intent.until);
  const lo = since ? BigInt(since.seq) : -1n;
  const store = cache.store(p);
  const storage = cache.storage;
  return {
    sink,
    partition: p,
    schema,
    since,
    until,
    id: intent.unit,
    plannedRows: reads.planned,
    prior: intent.prior !== undefined ? (intent.prior === null ? null : cont(intent.prior)) : since,
    signal,
    rows: () =>
      reads.read(async function* (seen) {
        for await (const r of storage.readRowsSince(p, { since, until })) {
          note(seen, BigInt(r.after.seq));
          yield r.row as Row;
        }
      }, () => 1),
    batches: () =>
      reads.read(async function* (seen) {
        // Read while the previous unit shipped; every pass (a shipper may read twice) hands out the same batches.
        if (pre?.batches && pre.until === intent.until && pre.since === lo) {
          seen.push(...pre.seen.map(([a, b]) => [a, b] as [bigint, bigint]));
          yield* pre.batches;
          return;
        }
        // Decoded row groups are reused: the planner has just decoded the one the unit ends in.
        for await (const b of storage.scan(store, { since, until }, schema.columns, true)) {
          for (const x of b.seqs) note(seen, x);
          yield b.batch as RecordBatch;
        }
      }, (b) => b.numRows),
    ndjson: () =>
      reads.read(async function* (seen) {
        if (pre?.chunks && pre.until === intent.until && pre.since === lo) {
          seen.push(...pre.seen.map(([a, b]) => [a, b] as [bigint, bigint]));
          yield* pre.chunks;
          return;
        }
        yield* await readNdjson(cache, p, schema, lo, intent.until, reads.planned, seen);
      }, (c) => c.rows),
  };
}
