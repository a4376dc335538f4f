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
import type { BlobDestination, ConnectionCheckOptions, Encoder, ShipResult, Unit, UnitLimits, UnitShipper } from '../../types/sinks.js';
import type { Continuation, PartitionRef } from '../../types/storage.js';
import { encodeSegment } from '../store/segments.js';
import type { UnitReads } from './unit.js';

export function blobKey(p: PartitionRef, since: Continuation | null, until: Continuation, ext: string): string {
  const ds = encodeSegment(p.dataset);
  return `${p.key}/${ds}.${since?.seq ?? '0'}-${until.seq}.${ext}`;
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
  };
}
