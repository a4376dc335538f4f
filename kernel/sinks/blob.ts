/**
 * A blob sink is an encoder and a destination put together by the kernel. Its
 * unit identity is the blob key, `<dataset>/source=<src>/<dataset>.<since>-<until>.<ext>`
 * (a destination prefixes its own root), so a retried unit lands on the same key
 * and create-if-absent tells whether it already committed. The body the
 * destination stores ends only once the unit's reads were whole (UnitReads):
 * a damaged cache file fails the put, it never commits a short blob.
 * @ref LLP 0005: write-ahead intent
 * @ref LLP 0018: the two kernel rules
 */
import { HypsinkError } from '../../types/errors.js';
import type { BlobDestination, ConnectionCheckOptions, Encoder, HeldUnit, ShipResult, Unit, UnitLimits, UnitShipper } from '../../types/sinks.js';
import type { Continuation, PartitionRef } from '../../types/storage.js';
import { encodeSegment } from '../store/segments.js';
import type { UnitReads } from './unit.js';

export function blobKey(p: PartitionRef, since: Continuation | null, until: Continuation, ext: string): string {
  const ds = encodeSegment(p.dataset);
  return `${p.key}/${ds}.${since?.seq ?? '0'}-${until.seq}.${ext}`;
}

/**
 * The unit a blob key names, if it is one of `p`'s: `<p.key>/<dataset>.<since>-<until>.<ext>`
 * (any one-word extension: a sink whose writer changed still holds its older units).
 * @ref LLP 0037
 */
export function parseBlobKey(p: PartitionRef, key: string): { since: string; until: string; ext: string } | null {
  const prefix = `${p.key}/${encodeSegment(p.dataset)}.`;
  if (!key.startsWith(prefix)) return null;
  const m = /^(0|[1-9]\d*)-(0|[1-9]\d*)\.([a-z0-9]+)$/.exec(key.slice(prefix.length));
  return m ? { since: m[1]!, until: m[2]!, ext: m[3]! } : null;
}

/** What a blob sink holds of a partition, from its destination's listing; rows counted by the encoder on demand. */
async function* blobInventory(encoder: Encoder, destination: BlobDestination, p: PartitionRef, signal: AbortSignal): AsyncIterable<HeldUnit> {
  for await (const b of destination.list!(`${p.key}/`, { signal })) {
    const k = parseBlobKey(p, b.key);
    if (!k) continue; // not a unit's name: nothing this sink wrote
    const count =
      encoder.countRows && destination.read && k.ext === encoder.extension
        ? () => encoder.countRows!({ bytes: b.bytes, read: (offset, length) => destination.read!(b.key, { offset, length }, { signal }) })
        : undefined;
    yield { id: b.key, since: k.since, until: k.until, where: destination.describe(b.key), ...(count ? { countRows: count } : {}) };
  }
}

/** A shipper whose every ship is checked against the unit's reads: the kernel's own blob sinks. */
export interface GuardedShipper extends UnitShipper {
  shipGuarded(unit: Unit, reads: UnitReads): Promise<ShipResult>;
}

export function blobShipper(encoder: Encoder, destination: BlobDestination, limits: UnitLimits): GuardedShipper {
  return {
    limits,
    unitId: (p, since, until) => blobKey(p, since, until, encoder.extension),
    ship(unit: Unit): Promise<ShipResult> {
      return Promise.reject(new HypsinkError('HYPSINK_ERR_INVARIANT', `blob unit ${unit.id}: shipped without the kernel's read guard`));
    },
    async shipGuarded(unit: Unit, reads: UnitReads): Promise<ShipResult> {
      const put = await destination.putIfAbsent(unit.id, reads.guard(encoder.encode(unit)), {
        contentType: encoder.contentType,
        signal: unit.signal,
      });
      return { rows: reads.planned, bytes: put.bytes, duplicate: !put.created };
    },
    close: () => destination.close(),
    // The blob sink's connection check is its destination's (an encoder reaches nothing). @ref LLP 0036
    ...(destination.check ? { check: (opts: ConnectionCheckOptions) => destination.check!(opts) } : {}),
    ...(destination.list ? { inventory: (p: PartitionRef, opts: { signal: AbortSignal }) => blobInventory(encoder, destination, p, opts.signal) } : {}),
  };
}
