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
 * Two rules hold for every sink kind: a unit advances only when the rows
 * shipped equal the rows planned (unit.ts), and a unit read back from disk
 * keeps its identity forever: only a unit planned in this run, and refused
 * before anything of it was sent, may be re-planned smaller.
 * @ref LLP 0005: write-ahead intent
 * @ref LLP 0006: ack-coupled retention and gaps
 * @ref LLP 0014: the next intent
 * @ref LLP 0018: the two kernel rules
 */
import { HypsinkError } from '../../types/errors.js';
import type { LifecycleHooks } from '../../types/hooks.js';
import type { Logger } from '../../types/plugins.js';
import type { DatasetSchema } from '../../types/schema.js';
import type { ShipResult, UnitLimits, UnitShipper } from '../../types/sinks.js';
import type { Continuation, PartitionRef } from '../../types/storage.js';
import type { Cache } from '../cache.js';
import { forcedAbove, planUnit, type UnitPlan } from '../store/planner.js';
import { fault } from '../fault.js';
import { suspectedCopy } from '../identity.js';
import type { BoundChain, TransformChain } from '../transform/index.js';
import type { GuardedShipper } from './blob.js';
import { keepRefused } from './rejected.js';
import type { SinkState } from './states.js';
import { unitDigest } from './digest.js';
import { buildUnit, type Prefetch, rangeText, readBatches, readNdjson, type Refused, type SeqRuns, UnitReads, type UnitSource } from './unit.js';
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
  /** The sink's state dir: its watermarks, its lock, the destination they belong to. */
  readonly state: SinkState;
  readonly watermarks: WatermarkStore;
  readonly policy: ExportPolicy;
  /** A blob sink's root location (its destination's `describe` of a key, less the key), when known. */
  readonly root?: string;
  /** Where its units go (no secrets), checked against the one its watermarks belong to; null: unknown. */
  readonly destination: string | null;
  /** What it does to rows before they ship (length 0: nothing). @ref LLP 0046 */
  readonly transforms: TransformChain;
  /**
   * The shape of what it delivers beyond where (its transforms' identity, its
   * key layout), checked like the destination; '' for rows as cached, in the
   * default layout. @ref LLP 0049
   */
  readonly delivers: string;
}

export interface PartitionOutcome {
  rows: number;
  bytes: number;
  units: number;
  gapRows: number;
  /** Rows the destination refused one by one, kept in the sink's dead letter. @ref LLP 0042 */
  rejectedRows: number;
  /** The small-file policy held rows back this tick. */
  waiting: boolean;
}

export interface ExportEnv {
  readonly cache: Cache;
  readonly hooks: LifecycleHooks;
  readonly log: Logger;
  /** Aborts running units (the kernel closing). */
  readonly signal: AbortSignal;
  /** A drain began: no new unit is planned; the ones under way finish. */
  readonly draining?: AbortSignal;
}

/** A shipped unit's advance, held in memory until the next durable write carries it. */
interface Advance {
  readonly rec: WatermarkRecord;
  readonly from: Continuation | null;
  readonly unit: string;
}

const cont = (seq: string): Continuation => ({ v: 1, seq });
const seqOf = (c: Continuation | null) => (c ? BigInt(c.seq) : -1n);
const sinceOf = (i: Intent) => (i.since === null ? null : cont(i.since));

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

export async function exportPartition(
  env: ExportEnv,
  sink: SinkRuntime,
  p: PartitionRef,
  /** Throws unless the sink's lock is still ours: checked before each durable write. */
  held: (what: string) => Promise<void> = async () => undefined,
  /** A unit's destination acknowledged it (its rows), for a progress bar. */
  onUnit?: (rows: number) => void,
): Promise<PartitionOutcome> {
  const out: PartitionOutcome = { rows: 0, bytes: 0, units: 0, gapRows: 0, rejectedRows: 0, waiting: false };
  // A suspected copy exports nothing until the operator says what it is. @ref LLP 0055
  if (env.cache.copied) throw suspectedCopy(env.cache.copied, `sink "${sink.name}": ${p.dataset}/source=${p.source}`);
  const store = env.cache.store(p);
  const schema = env.cache.schema(p.dataset);
  // A sink's first record remembers the rows retention had pruned before it came: never its to deliver.
  let rec = (await sink.watermarks.find(p)) ?? { ...sink.watermarks.empty(p), baseRows: await prunedForAll(env.cache, p) };
  /**
   * Units read back from disk may have been shipped by an earlier run: they keep
   * their identity whatever the destination says of them now.
   * @ref LLP 0018: a recovered unit keeps its identity
   */
  const recovered = new Set([rec.intent?.unit, rec.next?.unit].filter((u): u is string => u !== undefined));
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
    await held(`writing watermark ${sink.watermarks.path(p)}`);
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
  /** The sink's transforms bound to a unit's columns: once per column set this tick. */
  const bound = new Map<string, BoundChain | null>();
  const sourceOf = (i: Intent): UnitSource => {
    const planned = unitSchema(schema, i);
    if ((i.transforms ?? '') !== sink.transforms.identity) throw otherTransforms(sink, p, i);
    const key = JSON.stringify(planned.columns);
    let chain = bound.get(key);
    if (chain === undefined) {
      chain = sink.transforms.length > 0 ? sink.transforms.bind(planned.columns, p.dataset) : null;
      bound.set(key, chain);
    }
    return { cache: env.cache, p, schema: planned, chain };
  };
  /** What an intent records of the transforms it is shipped through. */
  const shaped = sink.transforms.identity ? { transforms: sink.transforms.identity } : {};
  /** The digest of a unit planned now. @ref LLP 0054 */
  const digestOf = (since: bigint, until: string) => unitDigest(env.cache, p, since, until);

  /** A request sink gets its next unit's body (NDJSON, or batches) read while the current one ships. @ref LLP 0047 */
  const prefetch = sink.kind === 'request';
  const readFor = (i: Intent, rows: number) => (prefetch ? readAhead(sourceOf(i), i, rows, sink.shipper.reads ?? 'ndjson') : Promise.resolve(null));
  const lookAhead = async (cur: Intent, recorded: Intent | null): Promise<{ intent: Intent; pre: Prefetch | null } | null> => {
    const since = BigInt(cur.until);
    if (recorded) {
      if (env.signal.aborted) return null;
      return { intent: recorded, pre: prefetch ? await readFor(recorded, await plannedRows(env, p, recorded)) : null };
    }
    const plan = await planAhead(env, p, schema, since, limits);
    if (!plan) return null;
    const until = cont(plan.until);
    const digest = await digestOf(BigInt(cur.until), until.seq);
    const intent: Intent = { since: cur.until, until: until.seq, unit: sink.shipper.unitId(p, cont(cur.until), until), rows: plan.rows, columns: schema.columns, ...shaped, digest };
    // The intent needs only the plan: its durable write and the body's read run together.
    const writing = write({ ...logical(), intent: cur, next: intent });
    writing.catch(() => undefined); // awaited below
    const pre = await readFor(intent, plan.rows);
    await writing;
    fault('export.afterIntent');
    return { intent, pre };
  };

  const stopping = () => env.signal.aborted || env.draining?.aborted === true;
  let ahead: Prefetch | null = null;
  while (!env.signal.aborted) {
    if (!open && queued) {
      open = queued;
      queued = null;
    }
    if (!open) {
      // Draining: what is recorded is finished; nothing new is planned.
      if (stopping()) break;
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
      const digest = await digestOf(seqOf(base.continuation), until.seq);
      open = {
        since: base.continuation?.seq ?? null,
        until: until.seq,
        unit: sink.shipper.unitId(p, base.continuation, until),
        // Counted before the ship, and kept with the intent: what the unit must ship.
        rows: facts.plan.rows,
        columns: schema.columns,
        ...shaped,
        // What ships, fixed with the label: a retry that finds other rows here is refused. @ref LLP 0054
        digest,
        // The watermark stepped over a gap since the last unit shipped: say where that one ended.
        ...(base.shippedUntil !== undefined ? { prior: base.shippedUntil } : {}),
      };
      const writing = write({ ...base, intent: open, next: null });
      if (sink.kind === 'request') {
        // As in the look-ahead: the body is read while its intent is written.
        writing.catch(() => undefined); // awaited below
        ahead = await readFor(open, facts.plan.rows);
      }
      await writing;
      fault('export.afterIntent');
    }

    let shipped: { result: ShipResult; seen: SeqRuns; refused: readonly Refused[] };
    const pre = ahead;
    ahead = null;
    // A request sink waits on the network: record and read the next unit meanwhile. Not
    // while a halved unit ships: the next one is planned afresh at the full size.
    const look = sink.kind === 'request' && !halved && (queued !== null || !stopping()) ? lookAhead(open, queued) : null;
    look?.catch(() => undefined); // awaited below, on every path
    try {
      shipped = await shipUnit(env, sink, sourceOf(open), open, recovered.has(open.unit), pre ?? undefined);
    } catch (e) {
      await look?.catch(() => undefined);
      if ((e as { tooLarge?: boolean }).tooLarge) {
        if (recovered.has(open.unit)) throw recoveredTooLarge(sink, p, open, e as Error);
        if (!halved) {
          // Planned in this run and refused before anything of it was stored (nor anything of the
          // next unit, not sent yet): re-plan half as big, once.
          halved = true;
          const rows = await plannedRows(env, p, open);
          limits = { maxRows: Math.max(1, Math.floor(rows / 2)), maxBytes: Math.max(1, Math.floor(limits.maxBytes / 2)) };
          await write({ ...logical(), intent: null, next: null });
          open = null;
          queued = null;
          continue;
        }
      }
      // Keep what was acknowledged before this unit: a retry then starts at this unit, not before it.
      if (pending.length > 0) await write(logical()).catch(() => undefined);
      throw e;
    }
    // The record the look-ahead wrote is the one this unit's advance builds on.
    const following = look ? await look : null;
    fault('export.afterShip');
    const nextUp = following?.intent ?? queued;
    const since = sinceOf(open);
    const forced = await forcedAbove(store, seqOf(since));
    const forcedSeen = shipped.seen.reduce((n, [a, b]) => n + countIn(forced, a - 1n, b), 0);
    const gap = Math.max(0, countIn(forced, seqOf(since), BigInt(open.until)) - forcedSeen);
    const rows = shipped.result.rows;
    // Rows the transforms refused are kept (their seqs and reasons) before the advance that counts them.
    if (shipped.refused.length > 0) await keepRefused(env.log, sink, p, open, shipped.refused);
    const rejected = (shipped.result.rejected ?? 0) + shipped.refused.length;
    out.rows += rows;
    out.rejectedRows += rejected;
    out.bytes += shipped.result.bytes;
    out.units += 1;
    out.gapRows += gap;
    onUnit?.(rows);
    const { shippedUntil: _stepped, ...before } = logical();
    pending.push({
      rec: {
        ...before,
        ...(rejected > 0 || before.rejectedRows !== undefined ? { rejectedRows: (before.rejectedRows ?? 0) + rejected } : {}),
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
  } else if (rec.lastError !== null && !env.signal.aborted) {
    // A partition that failed before and has nothing to ship now is fine again: say so in status.
    await write({ ...rec, lastError: null });
  }
  if (out.gapRows > 0) {
    env.log.warn(
      { sink: sink.name, dataset: p.dataset, source: p.source, gapRows: out.gapRows },
      'rows were pruned by retention before this sink exported them (gap)',
    );
    await env.hooks.gapDetected.promise({ sink: sink.name, partition: p, rows: out.gapRows });
  }
  return out;
}

/**
 * Rows retention pruned from a partition that were nobody's gap (every sink had
 * them, or no sink held them): what a sink that comes later never owes.
 */
export async function prunedForAll(cache: Cache, p: PartitionRef): Promise<number> {
  const stats = await cache.storage.stats(p);
  const forced = (await forcedAbove(cache.store(p), -1n)).reduce((n, [a, b]) => n + Number(b - a + 1n), 0);
  return Math.max(0, stats.committedRows - stats.rows - forced);
}

/** A recovered unit the destination now refuses as too large: it may have been stored, so it is never re-planned. */
function recoveredTooLarge(sink: SinkRuntime, p: PartitionRef, i: Intent, e: Error): HypsinkError {
  return new HypsinkError(
    'HYPSINK_ERR_DESTINATION',
    `sink "${sink.name}": ${rangeText(p, i.since, i.until)} (id ${i.unit}) was recorded before this run and may already be stored, so it keeps its identity and is not re-planned smaller; the destination refuses it as too large: ${e.message}. Raise the destination's size limit above this unit's size (restore the limit it had when the unit was planned), then export again`,
    { cause: e },
  );
}

/**
 * The schema a unit is read with: the columns recorded with its intent, so a retry
 * rebuilds the unit as it was planned, whatever was added to the dataset since.
 * @ref LLP 0030
 */
function unitSchema(schema: DatasetSchema, i: Intent): DatasetSchema {
  return i.columns ? { ...schema, columns: i.columns } : schema;
}

/** The rows a unit must ship: recorded with its intent, or counted from the cache for intents written before that. */
async function plannedRows(env: ExportEnv, p: PartitionRef, i: Intent): Promise<number> {
  return i.rows ?? (await env.cache.storage.countRowsSince(p, { since: sinceOf(i), until: cont(i.until) }));
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
  // The last unit shipped ended where the watermark was (or earlier, if it stepped over a gap before). @ref LLP 0041
  const shippedUntil = base.shippedUntil !== undefined ? base.shippedUntil : (base.continuation?.seq ?? null);
  return { rec: { ...base, continuation: cont(top.toString()), gapRows: base.gapRows + rows, intent: null, shippedUntil }, rows };
}

/**
 * Plan the unit after `since`, to read its NDJSON now (readAhead). Request sinks
 * wait on the network for each unit; reading the next one meanwhile hides that
 * read. The rows cannot change before it ships: the tick holds the sink's lock,
 * and a prune of rows above a watermark waits for it (LLP 0006); other prunes stay below.
 * @ref LLP 0011: performance bounds
 */
async function planAhead(env: ExportEnv, p: PartitionRef, schema: DatasetSchema, since: bigint, limits: UnitLimits): Promise<UnitPlan | null> {
  const { plan } = await planUnit(env.cache.store(p), since, limits, env.cache.storage, schema.columns.map((c) => c.name));
  return plan && !env.signal.aborted ? plan : null;
}

/** Read a planned unit's rows as the shipper reads them: one NDJSON body, or its batches. */
async function readAhead(u: UnitSource, i: Intent, rows: number, reads: 'ndjson' | 'batches'): Promise<Prefetch> {
  const since = seqOf(sinceOf(i));
  const seen: SeqRuns = [];
  const refused: Refused[] = [];
  if (reads === 'batches') {
    const batches = await readBatches(u, since, i.until, seen, refused);
    return { since, until: i.until, batches, seen, refused };
  }
  const chunks = await readNdjson(u, since, i.until, rows, seen, refused);
  return { since, until: i.until, chunks, seen, refused };
}

/** A unit recorded under other transforms than the sink has now: it may be delivered in that shape already. */
function otherTransforms(sink: SinkRuntime, p: PartitionRef, i: Intent): HypsinkError {
  return new HypsinkError(
    'HYPSINK_ERR_CONFIG',
    `sink "${sink.name}": ${rangeText(p, i.since, i.until)} (id ${i.unit}) was recorded ${i.transforms ? 'under other transforms than the sink has now' : 'without the transforms the sink has now'}, and may already be delivered that way; ` +
      'finishing it with these would give one unit two shapes. Restore the transforms it was recorded with (sink.json and the intent show them) until it is exported, then change them',
  );
}

export async function shipUnit(
  env: ExportEnv,
  sink: SinkRuntime,
  u: UnitSource,
  intent: Intent,
  /** Read back from disk: its digest is computed again from the cache and must be the recorded one. */
  recovered: boolean,
  pre?: Prefetch,
): Promise<{ result: ShipResult; seen: SeqRuns; refused: readonly Refused[] }> {
  const p = u.p;
  const since = sinceOf(intent);
  if (BigInt(intent.until) <= seqOf(since)) {
    throw new HypsinkError('HYPSINK_ERR_INVARIANT', `sink ${sink.name}: intent for ${p.key} has until ${intent.until} ≤ since`);
  }
  const planned = await plannedRows(env, p, intent);
  // An intent recorded before intents were held from the hard cap may have lost every row:
  // nothing to ship, no empty blob; the advance counts them as a gap.
  if (planned === 0) return { result: { rows: 0, bytes: 0, duplicate: false }, seen: [], refused: [] };
  const digest = await recordedDigest(env, sink, u, intent, recovered);
  const reads = new UnitReads(planned, sink.name, rangeText(p, intent.since, intent.until));
  const unit = buildUnit(u, sink.name, intent, digest, reads, env.signal, pre);
  const result = sink.kind === 'blob' ? await (sink.shipper as GuardedShipper).shipGuarded(unit, reads) : await sink.shipper.ship(unit);
  // A unit the destination already had was shipped whole before (its reads were checked then).
  if (!result.duplicate) reads.check();
  else if (u.chain && reads.refused === null) {
    // …without being read now: read it once more, for the rows its transforms refused (the same, as they are pure).
    for await (const _ of unit.batches()) {
      // nothing to do with the rows: the read notes the refused ones
    }
    reads.check();
  }
  return { result: { ...result, rows: planned }, seen: reads.seen, refused: reads.refused ?? [] };
}

/**
 * The digest a unit ships under: the one recorded with its intent, checked
 * against the cache's rows when the intent was read back from disk (a cache
 * restored under its state dir reads other rows for the range); computed now
 * for an intent recorded before digests existed.
 * @ref LLP 0054
 */
async function recordedDigest(env: ExportEnv, sink: SinkRuntime, u: UnitSource, intent: Intent, recovered: boolean): Promise<string> {
  if (intent.digest !== undefined && !recovered) return intent.digest;
  const now = await unitDigest(env.cache, u.p, seqOf(sinceOf(intent)), intent.until);
  if (intent.digest === undefined || intent.digest === now) return now;
  throw new HypsinkError(
    'HYPSINK_ERR_CONFLICT',
    `sink "${sink.name}": ${rangeText(u.p, intent.since, intent.until)} (id ${intent.unit}) was recorded with digest ${intent.digest}, but the cache now holds other rows for it (digest ${now}): ` +
      `the cache's data was replaced under its sink state (a restored backup, a copied folder) after the unit was recorded, and the unit may already be delivered with the recorded rows. Nothing was shipped. ` +
      `Run "hypsink status" for the evidence; "hypsink identity --copy" gives this cache its own identity, so that its rows export under it`,
  );
}
