/**
 * Shipping a planned unit: what it is read as (the columns its intent recorded,
 * through the sink's transforms), its body read ahead while the unit before it
 * is in flight (request sinks), and the ship itself, idempotent by the unit's
 * identity (create-if-absent / batch-id ledger), whose rows must be the rows
 * planned before it counts.
 * @ref LLP 0018: the two kernel rules
 * @ref LLP 0047: the next unit's body read while the current one ships
 * @ref LLP 0054: a unit's digest
 */
import { HypsinkError } from '../../types/errors.js';
import { linkSignals } from '../../types/signals.js';
import type { DatasetSchema } from '../../types/schema.js';
import type { ShipResult } from '../../types/sinks.js';
import type { PartitionRef } from '../../types/storage.js';
import type { BoundChain } from '../transform/index.js';
import type { GuardedShipper } from './blob.js';
import type { ExportEnv, SinkRuntime } from './exporter.js';
import { seqOf, sinceOf, type UnitPlanner } from './plan.js';
import { buildUnit, type Prefetch, rangeText, readBatches, readNdjson, type Refused, type SeqRuns, UnitReads, type UnitSource } from './unit.js';
import type { Intent } from './watermarks.js';

/** A unit the destination acknowledged: what it says of it, the seqs read (for gap accounting), the rows the transforms refused. */
export interface Shipped {
  readonly result: ShipResult;
  readonly seen: SeqRuns;
  readonly refused: readonly Refused[];
}

/** One sink's shipping of one partition's units in one export. */
export class UnitShipping {
  /** The sink's transforms bound to a unit's columns: once per column set this tick. */
  private readonly bound = new Map<string, BoundChain | null>();
  /** A request sink gets its next unit's body (NDJSON, or batches) read while the current one ships. @ref LLP 0047 */
  readonly prefetch: boolean;

  constructor(
    private readonly env: ExportEnv,
    private readonly sink: SinkRuntime,
    private readonly plan: UnitPlanner,
  ) {
    this.prefetch = sink.kind === 'request';
  }

  /** What a unit is read as: the columns its intent recorded, through the transforms it was recorded with. */
  source(i: Intent): UnitSource {
    const { sink, plan } = this;
    const p = plan.p;
    const planned = unitSchema(plan.schema, i);
    if ((i.transforms ?? '') !== sink.transforms.identity) throw otherTransforms(sink, p, i);
    const key = JSON.stringify(planned.columns);
    let chain = this.bound.get(key);
    if (chain === undefined) {
      chain = sink.transforms.length > 0 ? sink.transforms.bind(planned.columns, p.dataset) : null;
      this.bound.set(key, chain);
    }
    return { cache: this.env.cache, p, schema: planned, chain };
  }

  /** A request sink's unit body, read ahead of its ship; null for a blob sink, which reads while it ships. */
  read(i: Intent, rows: number): Promise<Prefetch | null> {
    return this.prefetch ? readAhead(this.source(i), i, rows, this.sink.shipper.reads ?? 'ndjson') : Promise.resolve(null);
  }

  /** Ship `i`; `recovered`: its intent was read back from disk. */
  ship(i: Intent, recovered: boolean, pre?: Prefetch, read?: () => void): Promise<Shipped> {
    return shipUnit(this.env, this.sink, this.plan, this.source(i), i, recovered, pre, read);
  }
}

/**
 * The schema a unit is read with: the columns recorded with its intent, so a retry
 * rebuilds the unit as it was planned, whatever was added to the dataset since.
 * @ref LLP 0030
 */
function unitSchema(schema: DatasetSchema, i: Intent): DatasetSchema {
  return i.columns ? { ...schema, columns: i.columns } : schema;
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
    { hint: `Put the sink's transforms back as recorded, export until "hypsink status" shows no intent for ${p.dataset}/source=${p.source}, then change them.` },
  );
}

/** A recovered unit the destination now refuses as too large: it may have been stored, so it is never re-planned. */
export function recoveredTooLarge(sink: SinkRuntime, p: PartitionRef, i: Intent, e: Error): HypsinkError {
  return new HypsinkError(
    'HYPSINK_ERR_DESTINATION',
    `sink "${sink.name}": ${rangeText(p, i.since, i.until)} (id ${i.unit}) was recorded before this run and may already be stored, so it keeps its identity and is not re-planned smaller; the destination refuses it as too large: ${e.message}. Raise the destination's size limit above this unit's size (restore the limit it had when the unit was planned), then export again`,
    { cause: e },
  );
}

/** Ship one unit: its rows read through `u`, counted against the rows planned for it. */
export async function shipUnit(
  env: ExportEnv,
  sink: SinkRuntime,
  plan: UnitPlanner,
  u: UnitSource,
  intent: Intent,
  /** Read back from disk: its digest is computed again from the cache and must be the recorded one. */
  recovered: boolean,
  pre?: Prefetch,
  /** Told when the shipper has read the unit's rows to their end (not when it reads none). */
  read?: () => void,
): Promise<Shipped> {
  const p = u.p;
  const since = sinceOf(intent);
  if (BigInt(intent.until) <= seqOf(since)) {
    throw new HypsinkError('HYPSINK_ERR_INVARIANT', `sink ${sink.name}: intent for ${p.key} has until ${intent.until} ≤ since`);
  }
  const planned = await plan.rows(intent);
  // An intent recorded before intents were held from the hard cap may have lost every row:
  // nothing to ship, no empty blob; the advance counts them as a gap.
  if (planned === 0) return { result: { rows: 0, bytes: 0, duplicate: false }, seen: [], refused: [] };
  const digest = await recordedDigest(sink, plan, intent, recovered);
  const reads = new UnitReads(planned, sink.name, rangeText(p, intent.since, intent.until), read);
  // The unit's own signal: what a shipper leaves on it goes with the unit, not onto the kernel's. @ref LLP 0069
  const link = linkSignals(env.signal);
  try {
    const unit = buildUnit(u, sink.name, intent, digest, reads, link.signal, pre);
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
  } finally {
    link.dispose();
  }
}

/**
 * The digest a unit ships under: the one recorded with its intent, checked
 * against the cache's rows when the intent was read back from disk (a cache
 * restored under its state dir reads other rows for the range); computed now
 * for an intent recorded before digests existed.
 * @ref LLP 0054
 */
async function recordedDigest(sink: SinkRuntime, plan: UnitPlanner, intent: Intent, recovered: boolean): Promise<string> {
  if (intent.digest !== undefined && !recovered) return intent.digest;
  const now = await plan.digest(seqOf(sinceOf(intent)), intent.until);
  if (intent.digest === undefined || intent.digest === now) return now;
  throw new HypsinkError(
    'HYPSINK_ERR_CONFLICT',
    `sink "${sink.name}": ${rangeText(plan.p, intent.since, intent.until)} (id ${intent.unit}) was recorded with digest ${intent.digest}, but the cache now holds other rows for it (digest ${now}): ` +
      `the cache's data was replaced under its sink state (a restored backup, a copied folder) after the unit was recorded, and the unit may already be delivered with the recorded rows. Nothing was shipped. ` +
      `Run "hypsink status" for the evidence; "hypsink identity --copy" gives this cache its own identity, so that its rows export under it`,
  );
}
