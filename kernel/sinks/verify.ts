/**
 * `hypsink verify`: read back what a sink's destination holds of each
 * partition (its plugin's `inventory`) and check it against the watermark and
 * the cache. Per partition, the units `(since, until]` chain from the first to
 * the watermark with no hole and no overlap; each unit holds the rows the cache
 * holds for its range, where the cache still holds all of them; and no unit
 * lies beyond the watermark but an open intent's. A hole whose rows the cache
 * recorded as forcibly pruned is the sink's gap, counted in status, not a
 * finding. Nothing is written anywhere.
 * @ref LLP 0037: what verify checks, and the reader contract
 * @ref LLP 0005: write-ahead intent (the one unit allowed beyond the watermark)
 */
import { refusedCount } from './rejected.js';
import { HypsinkError, isHypsinkError } from '../../types/errors.js';
import type { HeldUnit } from '../../types/sinks.js';
import { type Continuation, continuation, type PartitionRef } from '../../types/storage.js';
import type { Cache } from '../cache.js';
import { forcedAbove } from '../store/planner.js';
import { unitDigest } from './digest.js';
import type { SinkRuntime } from './exporter.js';
import type { Intent } from './watermarks.js';

export type FindingProblem = 'hole' | 'overlap' | 'beyond-watermark' | 'row-count' | 'content' | 'unreadable' | 'bad-range' | 'no-reader' | 'destination';

export interface VerifyFinding {
  readonly problem: FindingProblem;
  readonly dataset: string | null;
  readonly source: string | null;
  /** The partition's key (`<dataset>/source=<source>`), null for a finding about the whole sink. */
  readonly partition: string | null;
  /** What is wrong: a unit's id (blob key, batch id), a partition key, or the sink's name. */
  readonly object: string;
  readonly message: string;
}

export interface PartitionVerify {
  readonly dataset: string;
  readonly source: string;
  readonly partition: string;
  readonly watermark: string | null;
  /** Units the destination holds of the partition. */
  units: number;
  /** Units whose row count matched the cache's. */
  rowsChecked: number;
  /** Units whose recorded digest matched the cache's rows for their range. @ref LLP 0054 */
  contentChecked: number;
  /** Units not checked: rows pruned from the cache; no row count known; no digest recorded with them. */
  notChecked: { pruned: number; uncounted: number; undigested: number };
  /** Units held that are an open intent's (beyond the watermark, allowed). */
  intents: number;
  /** Holes that are the sink's recorded gap (rows pruned before it had them). */
  gaps: number;
}

export interface SinkVerify {
  readonly name: string;
  readonly kind: 'blob' | 'request';
  /** false: the sink could not be read back at all (see its finding). */
  verified: boolean;
  units: number;
  readonly partitions: PartitionVerify[];
  readonly findings: VerifyFinding[];
}

export interface VerifyReport {
  readonly ok: boolean;
  readonly sinks: SinkVerify[];
  /** The evidence that this cache is a copy of another, in words; null when it is where it was made. @ref LLP 0055 */
  readonly copy?: string | null;
}

const DECIMAL = /^(0|[1-9]\d*)$/;
const seqOf = (s: string | null) => (s === null ? -1n : BigInt(s));
const cont = (s: bigint): Continuation | null => (s < 0n ? null : continuation(s));
const range = (lo: bigint, hi: bigint) => `(${lo < 0n ? 'start' : lo}, ${hi}]`;

interface Placed {
  readonly u: HeldUnit;
  readonly lo: bigint;
  readonly hi: bigint;
}

/** Verify one sink: its state, its destination's inventory, the cache. The caller holds the sink's export lock. */
export async function verifySink(cache: Cache, sink: SinkRuntime, signal: AbortSignal): Promise<SinkVerify> {
  const out: SinkVerify = { name: sink.name, kind: sink.kind, verified: false, units: 0, partitions: [], findings: [] };
  const whole = (problem: FindingProblem, message: string) => out.findings.push({ problem, dataset: null, source: null, partition: null, object: sink.name, message });
  const inventory = sink.shipper.inventory?.bind(sink.shipper);
  if (!inventory) {
    whole('no-reader', `not verified: its plugin cannot read back what its destination holds (no inventory${sink.kind === 'blob' ? ': the destination has no list' : ''})`);
    return out;
  }
  // The watermarks say what the destination they belong to holds, not any other (LLP 0022).
  const known = (await sink.state.read())?.destination ?? null;
  if (known !== null && sink.destination !== null && known !== sink.destination) {
    whole('destination', `not verified: its watermarks belong to ${known}, but the config points it at ${sink.destination}`);
    return out;
  }
  out.verified = true;
  for (const p of await partitionsOf(cache, sink)) {
    const v = await verifyPartition(cache, sink, p, inventory, signal, out.findings);
    out.partitions.push(v);
    out.units += v.units;
  }
  return out;
}

/** The partitions to verify: the cache's of the sink's datasets, and those its watermarks name. */
async function partitionsOf(cache: Cache, sink: SinkRuntime): Promise<PartitionRef[]> {
  const byKey = new Map<string, PartitionRef>();
  for (const ds of sink.datasets) for (const p of await cache.listPartitions(ds)) byKey.set(p.key, p);
  for (const { record } of await sink.watermarks.list()) {
    if (!sink.datasets.includes(record.dataset)) continue;
    const p = cache.partition(record.dataset, record.source);
    if (!byKey.has(p.key)) byKey.set(p.key, p);
  }
  return [...byKey.values()].sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
}

async function verifyPartition(
  cache: Cache,
  sink: SinkRuntime,
  p: PartitionRef,
  inventory: NonNullable<SinkRuntime['shipper']['inventory']>,
  signal: AbortSignal,
  findings: VerifyFinding[],
): Promise<PartitionVerify> {
  const rec = (await sink.watermarks.find(p)) ?? sink.watermarks.empty(p);
  const w = rec.continuation ? BigInt(rec.continuation.seq) : -1n;
  const out: PartitionVerify = {
    dataset: p.dataset,
    source: p.source,
    partition: p.key,
    watermark: rec.continuation?.seq ?? null,
    units: 0,
    rowsChecked: 0,
    contentChecked: 0,
    notChecked: { pruned: 0, uncounted: 0, undigested: 0 },
    intents: 0,
    gaps: 0,
  };
  const find = (problem: FindingProblem, object: string, message: string) =>
    findings.push({ problem, dataset: p.dataset, source: p.source, partition: p.key, object, message });
  const inFlight = new Set([rec.intent, rec.next].filter((i): i is Intent => i !== null && i !== undefined).map((i) => i.unit));

  const chain: Placed[] = [];
  const counted: { at: Placed; first: boolean; open?: true }[] = [];
  for await (const u of inventory(p, { signal })) {
    out.units++;
    // A reader's bounds are decimal seqs; anything else cannot be placed in the chain.
    if (!DECIMAL.test(u.until) || (u.since !== null && !DECIMAL.test(u.since))) {
      find('bad-range', u.id, `its reader gives no seq range (since ${JSON.stringify(u.since)}, until ${JSON.stringify(u.until)})`);
      continue;
    }
    const lo = seqOf(u.since);
    const hi = BigInt(u.until);
    if (hi <= lo) {
      find('bad-range', u.id, `its range ${range(lo, hi)} is empty or reversed: no unit of this sink has that name`);
      continue;
    }
    const at = { u, lo, hi };
    if (inFlight.has(u.id)) {
      out.intents++;
      counted.push({ at, first: w < 0n, open: true });
    } else if (hi > w) {
      find('beyond-watermark', u.id, `beyond the watermark ${rec.continuation?.seq ?? '(none: nothing exported yet)'}: it holds ${range(lo, hi)}, which this sink has not exported and no open intent names`);
    } else chain.push(at);
  }
  chain.sort((a, b) => (a.lo < b.lo ? -1 : a.lo > b.lo ? 1 : a.hi < b.hi ? -1 : a.hi > b.hi ? 1 : 0));

  // The chain from the start to the watermark. "0" as a first unit's since reads as the start:
  // a blob key writes the start as 0, and no row has seq 0. A copy given its own identity starts
  // at its fork: the units below are the original's, under its identity. @ref LLP 0055
  const start = rec.handedOver !== undefined ? BigInt(rec.handedOver) : -1n;
  let pos = start;
  let prev: Placed | null = null;
  for (const at of chain) {
    const first = pos < 0n && at.lo === 0n && start < 0n;
    const lo = first ? -1n : at.lo;
    if (lo > pos) await hole(pos, lo, prev, at);
    else if (lo < pos && prev) {
      find('overlap', at.u.id, `overlaps ${prev.u.id} on ${range(lo, at.hi < pos ? at.hi : pos)}: those rows are held twice`);
    }
    counted.push({ at, first: first || at.lo < 0n });
    if (at.hi > pos) {
      pos = at.hi;
      prev = at;
    }
  }
  if (pos < w) await hole(pos, w, prev, null);

  for (const { at, first, open } of counted) await countCheck(at, first, open === true);
  return out;

  async function hole(lo: bigint, hi: bigint, before: Placed | null, after: Placed | null): Promise<void> {
    const rows = await cache.storage.countRowsSince(p, { since: cont(lo), until: continuation(hi) });
    const stats = await cache.storage.stats(p);
    const pruned = stats.prunedThroughSeq === null ? -1n : BigInt(stats.prunedThroughSeq);
    const where = before && after ? `between ${before.u.id} and ${after.u.id}` : after ? `before ${after.u.id}` : before ? `after ${before.u.id}, up to the watermark` : 'the destination holds no unit of this partition';
    if (rows > 0) {
      find('hole', p.key, `hole ${range(lo, hi)}: no unit holds these seqs (${where}); the cache holds ${rows} row(s) there that the watermark says were exported`);
      return;
    }
    const forced = (await forcedAbove(cache.store(p), lo)).some(([a, b]) => a <= hi && b > lo);
    if (forced) {
      out.gaps++; // pruned before this sink had them: its gap, counted in status
      return;
    }
    if (pruned > lo) find('hole', p.key, `hole ${range(lo, hi)}: no unit holds these seqs (${where}), and the cache has pruned them, so what they held cannot be told or exported again`);
    // Otherwise the range never held a row of this partition: nothing to hold.
  }

  /**
   * The digest recorded with a held unit against the cache's rows for its
   * range: another one is other rows under this unit's name (a copied or
   * restored cache wrote it). False when it is a finding. @ref LLP 0054
   */
  async function contentCheck(at: Placed, since: Continuation | null, until: Continuation): Promise<boolean> {
    let recorded = at.u.digest;
    if (recorded === undefined && at.u.readDigest) {
      try {
        recorded = await at.u.readDigest();
      } catch (e) {
        if (isHypsinkError(e) && (e.code === 'HYPSINK_ERR_AUTH' || e.retryable)) throw e;
        find('unreadable', at.u.id, `cannot be read back for the digest recorded with it: ${(e as Error).message}`);
        return false;
      }
    }
    if (recorded === undefined || recorded === null) {
      out.notChecked.undigested++;
      return true;
    }
    const cached = await unitDigest(cache, p, since ? BigInt(since.seq) : -1n, until.seq);
    if (recorded === cached) {
      out.contentChecked++;
      return true;
    }
    find(
      'content',
      at.u.id,
      `holds other rows than the cache holds for its range ${range(since ? BigInt(since.seq) : -1n, at.hi)}: recorded digest ${recorded}, the cache's ${cached}${at.u.where ? ` (${at.u.where})` : ''}; ` +
        'this cache or a copy of it (same id) wrote other rows under these seqs: see "hypsink identity --help"',
    );
    return false;
  }

  async function countCheck(at: Placed, first: boolean, open: boolean): Promise<void> {
    const since = first ? null : cont(at.lo);
    const until = continuation(at.hi);
    const prunedThrough = async () => {
      const s = (await cache.storage.stats(p)).prunedThroughSeq;
      return s === null ? -1n : BigInt(s);
    };
    const before = await prunedThrough();
    // A seq of its range at or below what retention pruned: some of its rows may be gone from the cache.
    if (before > at.lo) {
      out.notChecked.pruned++;
      return;
    }
    if (!(await contentCheck(at, since, until))) return;
    // Rows the sink's transforms refused are in the cache and, by design, not at the destination. @ref LLP 0049
    const refused = await refusedCount(sink.state.dir, p, { since: first ? null : at.lo.toString(), until: at.hi.toString() });
    const cached = (await cache.storage.countRowsSince(p, { since, until })) - refused;
    let held = at.u.rows;
    if (held === undefined && at.u.countRows) {
      try {
        held = await at.u.countRows();
      } catch (e) {
        if (isHypsinkError(e) && (e.code === 'HYPSINK_ERR_AUTH' || e.retryable)) throw e;
        find('unreadable', at.u.id, `cannot be read back to count its rows: ${(e as Error).message}`);
        return;
      }
    }
    if (held === undefined) {
      out.notChecked.uncounted++;
      return;
    }
    if ((await prunedThrough()) !== before) {
      out.notChecked.pruned++; // retention ran meanwhile
      return;
    }
    // An open intent's unit of several blobs (time keys) may be stored in part: the export finishes it. @ref LLP 0048
    if (open && held < cached) return;
    if (held !== cached) {
      find('row-count', at.u.id, `holds ${held} rows, the cache holds ${cached}${refused ? ` (less ${refused} its transforms refused)` : ''} for its range ${range(since ? at.lo : -1n, at.hi)}${at.u.where ? ` (${at.u.where})` : ''}`);
    } else out.rowsChecked++;
  }
}

const plural = (n: number, one: string, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;

/** The human report: one line per finding, then one summary line per sink. */
export function verifyText(r: VerifyReport): string {
  const lines: string[] = r.copy ? [`${r.copy}; run "hypsink identity" to decide`] : [];
  for (const s of r.sinks) {
    for (const f of s.findings) lines.push(f.partition === null ? `sink "${s.name}": ${f.message}` : `sink "${s.name}": ${f.object}: ${f.message}`);
    if (!s.verified) continue;
    const pruned = s.partitions.reduce((n, p) => n + p.notChecked.pruned, 0);
    const uncounted = s.partitions.reduce((n, p) => n + p.notChecked.uncounted, 0);
    const undigested = s.partitions.reduce((n, p) => n + p.notChecked.undigested, 0);
    const content = s.partitions.reduce((n, p) => n + p.contentChecked, 0);
    const gaps = s.partitions.reduce((n, p) => n + p.gaps, 0);
    const head = `sink "${s.name}": ${plural(s.units, 'unit')} over ${plural(s.partitions.length, 'partition')}`;
    const notes = [
      ...(pruned ? [`${plural(pruned, 'unit')} not checked (rows pruned from the cache)`] : []),
      ...(uncounted ? [`${plural(uncounted, 'unit')} not counted (its writer cannot count what it wrote)`] : []),
      ...(content ? [`${plural(content, 'unit')} whose content matches the cache`] : []),
      ...(undigested ? [`${plural(undigested, 'unit')} without a recorded digest (content not checked)`] : []),
      ...(gaps ? [`${plural(gaps, 'gap')} where retention pruned rows before this sink had them (counted in status)`] : []),
    ];
    lines.push([`${head}, ${s.findings.length ? plural(s.findings.length, 'finding') : 'chain whole to the watermark'}`, ...notes].join('; '));
  }
  return lines.join('\n');
}

/** The error a report with findings ends the command with (exit 1). */
export function verifyFailed(r: VerifyReport): HypsinkError {
  const bad = r.sinks.filter((s) => s.findings.length > 0);
  const n = bad.reduce((m, s) => m + s.findings.length, 0);
  return new HypsinkError('HYPSINK_ERR_VERIFY', `verify found ${plural(n, 'finding')} in ${bad.map((s) => `sink "${s.name}"`).join(', ')}`);
}
