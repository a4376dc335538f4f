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
import { toRowValue } from '../store/columns.js';
import type { BoundChain } from '../transform/index.js';
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

/**
 * Note a batch's seqs, as `note` of each in turn would. Each seq is compared
 * with the one before by its 32-bit halves, and a BigInt is made only where a
 * stretch of equal or consecutive seqs ends: a BigInt per row (reading the
 * element, then adding 1n) cost a 1M-row export ~90 ms of its main thread.
 * After `note(x)` the last run ends at x, so "the seq before" is the run's end.
 * @ref LLP 0112
 */
export function noteAll(runs: SeqRuns, seqs: BigInt64Array): void {
  const n = seqs.length;
  if (n === 0) return;
  const lo = new Uint32Array(seqs.buffer, seqs.byteOffset, n * 2);
  const hi = new Int32Array(seqs.buffer, seqs.byteOffset, n * 2);
  note(runs, seqs[0]!);
  let i = 1;
  while (i < n) {
    let j = i;
    for (; j < n; j++) {
      const l0 = lo[2 * j - 2]!;
      const l1 = lo[2 * j]!;
      const h0 = hi[2 * j - 1]!;
      const h1 = hi[2 * j + 1]!;
      // The same seq, or the next one (its low half carried into the high one, or not).
      const follows = (h1 === h0 && (l1 === l0 || l1 === l0 + 1)) || (l0 === 0xffffffff && l1 === 0 && h1 === h0 + 1);
      if (!follows) break;
    }
    if (j > i) runs[runs.length - 1]![1] = seqs[j - 1]!;
    if (j < n) note(runs, seqs[j]!);
    i = j + 1;
  }
}

const cont = (seq: string): Continuation => ({ v: 1, seq });

/** `(since, until]` of a partition, as messages name it. */
export function rangeText(p: PartitionRef, since: string | null, until: string): string {
  return `unit (${since ?? 'start'}, ${until}] of ${p.dataset}/source=${p.source}`;
}

/**
 * A row the sink's transforms refused in a read of a unit: its seq and the
 * reason, never its values (they are what could not be made safe to ship).
 * @ref LLP 0049
 */
export interface Refused {
  readonly seq: string;
  readonly reason: string;
}

/**
 * The reads of one unit. Each iteration (a call of rows(), batches() or
 * ndjson()) is counted; the last one to start is the one that counts, and it
 * must run to its end without an error and account for exactly `planned`
 * rows: those handed out and those the sink's transforms refused.
 */
export class UnitReads {
  private iteration = 0;
  private whole: { iteration: number; rows: number; seen: SeqRuns; refused: Refused[] } | null = null;
  private error: unknown;

  constructor(
    readonly planned: number,
    private readonly sink: string,
    private readonly where: string,
    /** Told once, when a read first reaches the end of the unit's rows. */
    private onWhole?: () => void,
  ) {}

  /** Run one read, counting its rows; `source` hands out items, notes their seqs and the rows it refused. */
  async *read<T>(source: (seen: SeqRuns, refused: Refused[]) => AsyncIterable<T>, rowsOf: (x: T) => number): AsyncIterable<T> {
    const iteration = ++this.iteration;
    const seen: SeqRuns = [];
    const refused: Refused[] = [];
    let rows = 0;
    try {
      for await (const x of source(seen, refused)) {
        rows += rowsOf(x);
        yield x;
      }
    } catch (e) {
      this.error ??= e;
      throw e;
    }
    this.whole = { iteration, rows: rows + refused.length, seen, refused };
    this.onWhole?.();
    this.onWhole = undefined;
  }

  /** The seqs of the last whole read (for gap accounting). */
  get seen(): SeqRuns {
    return this.whole?.seen ?? [];
  }

  /** The rows the transforms refused in the last whole read; null before any whole read. */
  get refused(): readonly Refused[] | null {
    return this.whole?.refused ?? null;
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
 * sinks): its NDJSON, or its batches for a shipper that reads batches; both
 * after the sink's transforms.
 * @ref LLP 0047
 */
export interface Prefetch {
  readonly since: bigint;
  readonly until: string;
  readonly chunks?: NdjsonChunk[];
  readonly batches?: RecordBatch[];
  readonly seen: SeqRuns;
  readonly refused: Refused[];
}

/** What a unit is read as: its range, the columns it was planned with, and the sink's transforms bound to them. */
export interface UnitSource {
  readonly cache: Cache;
  readonly p: PartitionRef;
  /** The columns the unit was planned with (its intent's): what the cache is read as. */
  readonly schema: DatasetSchema;
  /** The sink's transforms bound to those columns; null without transforms. */
  readonly chain: BoundChain | null;
}

const rangeOf = (since: bigint, until: string) => ({ since: since < 0n ? null : cont(since.toString()), until: cont(until) });

/** The columns a sink ships a unit with: its planned columns, through the sink's transforms. */
export function shippedSchema(u: UnitSource): DatasetSchema {
  if (!u.chain) return u.schema;
  const columns = u.chain.columns;
  const ts = u.schema.timestampColumn;
  // The timestamp column is still the dataset's if it came through by its name as a TIMESTAMP.
  const keepsTs = ts !== undefined && columns.some((c) => c.name === ts && c.type === 'TIMESTAMP');
  return { columns, ...(keepsTs ? { timestampColumn: ts } : {}) };
}

/**
 * `(since, until]` as the sink ships it: the cache's batches, through the
 * sink's transforms. Seqs are noted as read (before any refusal: a refused row
 * is accounted for, not a gap); each refused row goes to `refused` by its seq.
 * @ref LLP 0049
 */
async function* shippedBatches(u: UnitSource, since: bigint, until: string, seen: SeqRuns, refused: Refused[]): AsyncIterable<RecordBatch> {
  // Decoded row groups are reused: the planner has just decoded the one the unit ends in.
  for await (const b of u.cache.storage.scan(u.cache.store(u.p), rangeOf(since, until), u.schema.columns, true)) {
    noteAll(seen, b.seqs);
    if (!u.chain) {
      yield b.batch as RecordBatch;
      continue;
    }
    const out = u.chain.apply(b.batch as RecordBatch);
    for (const r of out.refused) refused.push({ seq: (b.seqs[r.row] ?? 0n).toString(), reason: r.reason });
    if (out.batch.numRows > 0) yield out.batch;
  }
}

/** Read `(since, until]` as one NDJSON body, noting the seqs read. */
export async function readNdjson(u: UnitSource, since: bigint, until: string, rows: number, seen: SeqRuns, refused: Refused[]): Promise<NdjsonChunk[]> {
  // The unit's batches into one buffer: the request body as is, no concatenation.
  const out = new NdjsonWriter(shippedSchema(u).columns, rows);
  for await (const b of shippedBatches(u, since, until, seen, refused)) out.append(b);
  return out.rows > 0 ? [{ bytes: out.bytes(), rows: out.rows }] : [];
}

/** Read `(since, until]` as its decoded batches, noting the seqs read. */
export async function readBatches(u: UnitSource, since: bigint, until: string, seen: SeqRuns, refused: Refused[]): Promise<RecordBatch[]> {
  const out: RecordBatch[] = [];
  for await (const b of shippedBatches(u, since, until, seen, refused)) out.push(b);
  return out;
}

/** The Unit a shipper is handed for `intent`, every read of it counted by `reads`. */
export function buildUnit(u: UnitSource, sink: string, intent: Intent, digest: string, reads: UnitReads, signal: AbortSignal, pre?: Prefetch): Unit {
  const since = intent.since === null ? null : cont(intent.since);
  const until = cont(intent.until);
  const lo = since ? BigInt(since.seq) : -1n;
  const schema = shippedSchema(u);
  /** The read-ahead, if it is of this unit: its seqs and refusals are this read's too. */
  const ahead = (seen: SeqRuns, refused: Refused[]): Prefetch | null => {
    if (!pre || pre.until !== intent.until || pre.since !== lo) return null;
    seen.push(...pre.seen.map(([a, b]) => [a, b] as [bigint, bigint]));
    refused.push(...pre.refused);
    return pre;
  };
  return {
    sink,
    partition: u.p,
    schema,
    since,
    until,
    id: intent.unit,
    digest,
    plannedRows: reads.planned,
    prior: intent.prior !== undefined ? (intent.prior === null ? null : cont(intent.prior)) : since,
    signal,
    rows: () =>
      reads.read(async function* (seen, refused) {
        const cols = schema.columns;
        for await (const batch of shippedBatches(u, lo, intent.until, seen, refused)) {
          const vectors = cols.map((c) => batch.getChild(c.name));
          for (let i = 0; i < batch.numRows; i++) {
            const row: Row = {};
            for (let c = 0; c < cols.length; c++) row[cols[c]!.name] = toRowValue(cols[c]!.type, vectors[c]?.get(i));
            yield row;
          }
        }
      }, () => 1),
    batches: () =>
      reads.read(async function* (seen, refused) {
        // Read while the previous unit shipped; every pass (a shipper may read twice) hands out the same batches.
        const got = pre?.batches ? ahead(seen, refused) : null;
        if (got?.batches) {
          yield* got.batches;
          return;
        }
        yield* shippedBatches(u, lo, intent.until, seen, refused);
      }, (b) => b.numRows),
    ndjson: () =>
      reads.read(async function* (seen, refused) {
        const got = pre?.chunks ? ahead(seen, refused) : null;
        if (got?.chunks) {
          yield* got.chunks;
          return;
        }
        yield* await readNdjson(u, lo, intent.until, reads.planned, seen, refused);
      }, (c) => c.rows),
  };
}
