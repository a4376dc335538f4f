/**
 * A blob sink is an encoder and a destination put together by the kernel. Its
 * unit identity is the blob key, `<dataset>/source=<src>/<dataset>.<since>-<until>.<ext>`
 * (a destination prefixes its own root), so a retried unit lands on the same key
 * and create-if-absent tells whether it already committed.
 * @ref LLP 0005: write-ahead intent
 */
import type { BlobDestination, Encoder, ShipResult, Unit, UnitLimits, UnitShipper } from '../../types/sinks.js';
import type { Continuation, PartitionRef } from '../../types/storage.js';
import { encodeSegment } from '../cache/segments.js';

export function blobKey(p: PartitionRef, since: Continuation | null, until: Continuation, ext: string): string {
  const ds = encodeSegment(p.dataset);
  return `${p.key}/${ds}.${since?.seq ?? '0'}-${until.seq}.${ext}`;
}

export function blobShipper(encoder: Encoder, destination: BlobDestination, limits: UnitLimits): UnitShipper {
  return {
    limits,
    unitId: (p, since, until) => blobKey(p, since, until, encoder.extension),
    async ship(unit: Unit): Promise<ShipResult> {
      let rows = 0;
      const counted: Unit = {
        ...unit,
        rows: async function* () {
          for await (const r of unit.rows()) {
            rows++;
            yield r;
          }
        },
        batches: async function* () {
          for await (const b of unit.batches()) {
            rows += b.numRows;
            yield b;
          }
        },
      };
      const put = await destination.putIfAbsent(unit.id, encoder.encode(counted), {
        contentType: encoder.contentType,
        signal: unit.signal,
      });
      return { rows, bytes: put.bytes, duplicate: !put.created };
    },
    close: () => destination.close(),
  };
}
