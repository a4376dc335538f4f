/**
 * The exactly-once export of one partition for one sink instance:
 *   1. an open intent is finished first, under the same unit identity;
 *   2. the next unit is planned from the watermark and recorded as the intent —
 *      that one atomic write also carries the previous unit's advance;
 *   3. the unit is shipped idempotently (create-if-absent / batch-id ledger);
 *   4. the watermark advances to `until`, the intent clears.
 * A request sink records the next unit as `next` while the current one is in
 * flight, and sends it as soon as the current one is acknowledged.
 * Rows pruned by the hard cap before this sink had them are counted as a gap.
 * @ref LLP 0005: write-ahead intent
 * @ref LLP 0006: ack-coupled retention and gaps
 * @ref LLP 0014: the next intent
 */
import type { RecordBatch } from 'apache-arrow';
import { HypsinkError } from '../../types/errors.js';
import type { LifecycleHooks } from '../../types/hooks.js';
import type { Logger } from '../../types/plugins.js';
import type { DatasetSchema, Row } from '../../types/schema.js';
import type { NdjsonChunk, ShipResult, Unit, UnitLimits, UnitShipper } from '../../types/sinks.js';
import type { Continuation, PartitionRef } from '../../types/storage.js';
import type { Cache } from '../cache/cache.js';
import { NdjsonWriter } from '../cache/ndjson.js';
import { forcedAbove, planUnit, type UnitPlan } from '../cache/planner.js';
import { fault } from '../fault.js';
import type { Intent, WatermarkRecord, WatermarkStore } from './watermarks.js';

export interface ExportPolicy {
  readonly minRows: number;
  readonly maxDelayMs: number;
  readonly limits: UnitLimits;
}

export interface SinkRuntime {
  readonly name: string;
  readonly kind: 'blob' | 'request';
  readonly datasets: readonly string[];
  readonly shipper: UnitShipper;
  readonly watermarks: WatermarkStore;
  readonly policy: ExportPolicy;
  /** A blob sink's root location (its destination's `describe` of a key, less the key), when known. */
  readonly root?: string;
}

export interface PartitionOutcome {
  rows: number;
  bytes: number;
  units: number;
  gapRows: number;
  /** The small-file policy held rows back this tick. */
  waiting: boolean;
}

export interface ExportEnv {
  readonly cache: Cache;
  readonly hooks: LifecycleHooks;
  readonly log: Logger;
  readonly signal: AbortSignal;
}

/** A shipped unit's advance, held in memory until the next durable write carries it. */
interface Advance {
  readonly rec: WatermarkRecord;
  readonly from: Continuation | null;
  readonly unit: string;
}

const cont = (seq: string): Continuation => ({ v: 1, seq });
const seqOf = (c: Continuation | null) => (c ? BigInt(c.seq) : -1n);

/** Rows in consecutive-seq ranges that fall in (lo, hi]. */
function countIn(ranges: readonly [bigint, bigint][], lo: bigint, hi: bigint): number {
  let n = 0n;
  for (const [a, b] of ranges) {
    const from = a > lo ? a : lo + 1n;
    const to = b < hi ? b : hi;
    if (to >= from) n += to - from + 1n;
  }
  return Number(n);
}

export async function exportPartition(env: ExportEnv, sink: SinkRuntime, p: PartitionRef): Promise<PartitionOutcome> {
  const out: PartitionOutcome = { rows: 0, bytes: 0, units: 0, gapRows: 0, waiting: false };
  const store = env.cache.store(p);
  const schema = env.cache.schema(p.dataset);
  let rec = await sink.watermarks.read(p);
  let open: Intent | null = rec.intent;
  /** The unit recorded durably as `next`: it ships once `open` is acknowledged, with no write of its own. */
  let queued: Intent | null = rec.next ?? null;
  /** Advances not yet durable, in order; the next write carries the last one's record. */
  let pending: Advance[] = [];
  /** The record as of every acknowledgment so far: what the next write starts from. */
  const logical = (): WatermarkRecord => pending[pending.length - 1]?.rec ?? rec;
  let limits = sink.policy.limits;
  let halved = false;

  /** Durably write `next`, which carries every pending advance, and announce them. */
  const write = async (next: WatermarkRecord) => {
    const carried = pending;
    rec = await sink.watermarks.write(p, rec, next);
    pending = pending.slice(carried.length);
    for (const a of carried) {
      if (a.rec.continuation) {
        env.hooks.watermarkAdvanced.call({ sink: sink.name, partition: p, from: a.from, to: a.rec.continuation, unit: a.unit });
      }
    }
  };

  /**
   * While `cur` is in flight (request sinks): plan the unit after it, record it
   * durably as `next` (the same write carries any pending advance), and read its
   * body. A unit already recorded as `next` by an earlier run is read as it is.
   * @ref LLP 0014: the next intent is written while the current unit is in flight
   */
  const lookAhead = async (cur: Intent, recorded: Intent | null): Promise<{ intent: Intent; pre: Prefetch } | null> => {
    const since = BigInt(cur.until);
    const plan = await planAhead(env, p, schema, since, limits, recorded?.until);
    if (!plan) return null;
    if (recorded) return { intent: recorded, pre: await readAhead(env, p, schema, since, plan) };
    const until = cont(plan.until);
    const intent: Intent = { since: cur.until, until: until.seq, unit: sink.shipper.unitId(p, cont(cur.until), until) };
    // The intent needs only the plan: its durable write and the body's read run together.
    const writing = write({ ...logical(), intent: cur, next: intent });
    writing.catch(() => undefined); // awaited below
    const pre = await readAhead(env, p, schema, since, plan);
    await writing;
    fault('export.afterIntent');
    return { intent, pre };
  };

  let ahead: Prefetch | null = null;
  while (!env.signal.aborted) {
    if (!open && queued) {
      open = queued;
      queued = null;
    }
    if (!open) {
      const base = logical();
      const facts = await planUnit(store, seqOf(base.continuation), limits, env.cache.storage, schema.columns.map((c) => c.name));
      if (!facts.plan) {
        const g = gapAdvance(base, facts.forcedAbove);
        if (g) {
          pending.push({ rec: g.rec, from: base.continuation, unit: '(gap)' });
          out.gapRows += g.rows;
        }
        break;
      }
      if (out.units === 0 && facts.plan.rows < sink.policy.minRows) {
        // The plan is cut at the unit bounds: count every pending row before holding them back.
        const waiting = await env.cache.storage.countRowsSince(p, { since: base.continuation });
        if (waitForMore(sink.policy, waiting, facts.plan.oldestCommittedAt)) {
          out.waiting = true;
          break;
        }
      }
      const until = cont(facts.plan.until);
      open = { since: base.continuation?.seq ?? null, until: until.seq, unit: sink.shipper.unitId(p, base.continuation, until) };
      const writing = write({ ...base, intent: open, next: null });
      if (sink.kind === 'request') {
        // As in the look-ahead: the body is read while its intent is written.
        writing.catch(() => undefined); // awaited below
        ahead = await readAhead(env, p, schema, seqOf(base.continuation), facts.plan);
      }
      await writing;
      fault('export.afterIntent');
    }

    let shipped: { result: ShipResult; seen: [bigint, bigint][] };
    const pre = ahead;
    ahead = null;
    // A request sink waits on the network: record and read the next unit meanwhile. Not
    // while a halved unit ships: the next one is planned afresh at the full size.
    const look = sink.kind === 'request' && !halved ? lookAhead(open, queued) : null;
    look?.catch(() => undefined); // awaited below, on every path
    try {
      shipped = await shipUnit(env, sink, p, schema, open, pre ?? undefined);
    } catch (e) {
      await look?.catch(() => undefined);
      if ((e as { tooLarge?: boolean }).tooLarge && !halved) {
        // The destination refused the size and stored nothing under this id (nor under the
        // next unit's, not sent yet): re-plan half as big, once.
        halved = true;
        const since = open.since === null ? null : cont(open.since);
        const rows = await env.cache.storage.countRowsSince(p, { since, until: cont(open.until) });
        limits = { maxRows: Math.max(1, Math.floor(rows / 2)), maxBytes: Math.max(1, Math.floor(limits.maxBytes / 2)) };
        await write({ ...logical(), intent: null, next: null });
        open = null;
        queued = null;
        continue;
      }
      // Keep what was acknowledged before this unit: a retry then starts at this unit, not before it.
      if (pending.length > 0) await write(logical()).catch(() => undefined);
      throw e;
    }
    // The record the look-ahead wrote is the one this unit's advance builds on.
    const following = look ? await look : null;
    fault('export.afterShip');
    const nextUp = following?.intent ?? queued;
    const since = open.since === null ? null : cont(open.since);
    const forced = await forcedAbove(store, seqOf(since));
    const forcedSeen = shipped.seen.reduce((n, [a, b]) => n + countIn(forced, a - 1n, b), 0);
    const gap = Math.max(0, countIn(forced, seqOf(since), BigInt(open.until)) - forcedSeen);
    // A unit the destination already had was shipped before a crash and never counted.
    const rows = shipped.result.duplicate
      ? await env.cache.storage.countRowsSince(p, { since, until: cont(open.until) })
      : shipped.result.rows;
    out.rows += rows;
    out.bytes += shipped.result.bytes;
    out.units += 1;
    out.gapRows += gap;
    const before = logical();
    pending.push({
      rec: {
        ...before,
        continuation: cont(open.until),
        exportedRowCount: before.exportedRowCount + rows,
        gapRows: before.gapRows + gap,
        // The next unit, if recorded, is the intent now: it may ship before this advance is written.
        intent: nextUp,
        next: null,
        lastExportAt: new Date().toISOString(),
        lastError: null,
      },
      from: before.continuation,
      unit: open.unit,
    });
    open = null;
    queued = nextUp;
    ahead = following?.pre ?? null;
    halved = false;
    limits = sink.policy.limits;
  }
  if (pending.length > 0) {
    await write(logical());
    fault('export.afterAdvance');
  }
  if (out.gapRows > 0) {
    env.log.warn(
      { sink: sink.name, dataset: p.dataset, source: p.source, gapRows: out.gapRows },
      'rows were pruned by the hard size cap before this sink exported them (gap)',
    );
    await env.hooks.gapDetected.promise({ sink: sink.name, partition: p, rows: out.gapRows });
  }
  return out;
}

function waitForMore(policy: ExportPolicy, pendingRows: number, oldestCommittedAt: number): boolean {
  if (pendingRows >= policy.minRows) return false;
  return Date.now() - oldestCommittedAt < policy.maxDelayMs;
}

/** No rows above the watermark but pruned ranges: step over them, counting the gap. */
function gapAdvance(base: WatermarkRecord, forced: readonly [bigint, bigint][]): { rec: WatermarkRecord; rows: number } | null {
  const since = seqOf(base.continuation);
  // biome-ignore lint/complexity/useMathMinMax: bigints, which Math.max does not take
  const top = forced.reduce((m, [, b]) => (b > m ? b : m), since);
  if (top <= since) return null;
  const rows = countIn(forced, since, top);
  return { rec: { ...base, continuation: cont(top.toString()), gapRows: base.gapRows + rows, intent: null }, rows };
}

/** Note a seq read into runs of consecutive seqs. */
function note(runs: [bigint, bigint][], s: bigint): void {
  const last = runs[runs.length - 1];
  if (last && s === last[1]) return; // legacy rows share seq 0
  if (last && last[1] + 1n === s) last[1] = s;
  else runs.push([s, s]);
}

/** The next unit, planned and its NDJSON read while the current unit's request is in flight. */
interface Prefetch {
  readonly since: bigint;
  readonly plan: UnitPlan;
  readonly chunks: NdjsonChunk[];
  readonly seen: [bigint, bigint][];
}

/**
 * Plan the unit after `since`, to read its NDJSON now (readAhead). Request sinks
 * wait on the network for each unit; reading the next one meanwhile hides that
 * read. The rows cannot change before it ships: the tick holds the sink's lock,
 * and a forced prune waits for it (LLP 0006); other prunes stay below the watermark.
 * @ref LLP 0011: performance bounds
 */
async function planAhead(
  env: ExportEnv,
  p: PartitionRef,
  schema: DatasetSchema,
  since: bigint,
  limits: UnitLimits,
  /** The unit's end when it is already recorded: read exactly it, plan nothing. */
  fixedUntil?: string,
): Promise<UnitPlan | null> {
  const plan =
    fixedUntil !== undefined
      ? { until: fixedUntil, rows: Number(BigInt(fixedUntil) - since), estBytes: 0, oldestCommittedAt: 0 }
      : (await planUnit(env.cache.store(p), since, limits, env.cache.storage, schema.columns.map((c) => c.name))).plan;
  return plan && !env.signal.aborted ? plan : null;
}

/** Read a planned unit's rows as one NDJSON body. */
async function readAhead(env: ExportEnv, p: PartitionRef, schema: DatasetSchema, since: bigint, plan: UnitPlan): Promise<Prefetch> {
  const seen: [bigint, bigint][] = [];
  const range = { since: since < 0n ? null : cont(since.toString()), until: cont(plan.until) };
  // The unit's batches into one buffer: the request body as is, no concatenation.
  const out = new NdjsonWriter(schema.columns, plan.rows);
  for await (const b of env.cache.storage.scan(env.cache.store(p), range, schema.columns, true)) {
    for (const x of b.seqs) note(seen, x);
    out.append(b.batch);
  }
  const chunks: NdjsonChunk[] = out.rows > 0 ? [{ bytes: out.bytes(), rows: out.rows }] : [];
  return { since, plan, chunks, seen };
}

async function shipUnit(
  env: ExportEnv,
  sink: SinkRuntime,
  p: PartitionRef,
  schema: DatasetSchema,
  intent: Intent,
  pre?: Prefetch,
): Promise<{ result: ShipResult; seen: [bigint, bigint][] }> {
  const since = intent.since === null ? null : cont(intent.since);
  const until = cont(intent.until);
  if (BigInt(intent.until) <= seqOf(since)) {
    throw new HypsinkError('HYPSINK_ERR_INVARIANT', `sink ${sink.name}: intent for ${p.key} has until ${intent.until} ≤ since`);
  }
  const storage = env.cache.storage;
  const store = env.cache.store(p);
  // Every row of the unit was pruned (hard cap) since it was planned: nothing to ship, no
  // empty blob; the advance counts them as a gap. Only a forced prune can empty a unit.
  const forced = await forcedAbove(store, seqOf(since));
  if (countIn(forced, seqOf(since), BigInt(intent.until)) > 0 && (await storage.countRowsSince(p, { since, until })) === 0) {
    return { result: { rows: 0, bytes: 0, duplicate: false }, seen: [] };
  }
  // Seqs of the last complete read of the unit, as runs of consecutive seqs: tells delivered
  // rows from rows pruned meanwhile without holding a seq per row.
  let seen: [bigint, bigint][] = [];
  /** The unit's batches from the cache, noting the seqs read (decoded row groups reused). */
  async function* scanUnit(): AsyncIterable<RecordBatch> {
    const s: [bigint, bigint][] = [];
    for await (const b of storage.scan(store, { since, until }, schema.columns, true)) {
      for (const x of b.seqs) note(s, x);
      yield b.batch;
    }
    seen = s;
  }
  const unit: Unit = {
    sink: sink.name,
    partition: p,
    schema,
    since,
    until,
    id: intent.unit,
    plannedRows: Number(BigInt(intent.until) - seqOf(since)),
    signal: env.signal,
    async *rows(): AsyncIterable<Row> {
      const s: [bigint, bigint][] = [];
      for await (const r of storage.readRowsSince(p, { since, until })) {
        note(s, BigInt(r.after.seq));
        yield r.row;
      }
      seen = s;
    },
    async *batches(): AsyncIterable<RecordBatch> {
      for await (const b of scanUnit()) yield b;
    },
    async *ndjson(): AsyncIterable<NdjsonChunk> {
      if (pre && pre.plan.until === intent.until && pre.since === seqOf(since)) {
        seen = pre.seen;
        yield* pre.chunks;
        return;
      }
      // One chunk for the unit, as readAhead builds it.
      const out = new NdjsonWriter(schema.columns, Number(BigInt(intent.until) - seqOf(since)));
      for await (const b of scanUnit()) out.append(b);
      if (out.rows > 0) yield { bytes: out.bytes(), rows: out.rows };
    },
  };
  const result = await sink.shipper.ship(unit);
  return { result, seen };
}
