/**
 * A seam for the conformance kit (`hypsink/testing`) and nothing else: the
 * kit's child process sets a wrapper here to see every shipper the kernel
 * builds, so it can kill the process the instant a ship resolves, or in the
 * middle of one, and ask a shipper for a unit's id again. Unset (always,
 * outside the kit), the kernel uses each shipper as built.
 * @ref LLP 0059: the kit proves durability, crash order, pure ids and content
 */
import type { UnitShipper } from '../../types/sinks.js';

let wrap: ((shipper: UnitShipper, sink: string) => UnitShipper) | undefined;

/** Wrap every shipper built from now on (undefined: stop). */
export function setShipProbe(w: ((shipper: UnitShipper, sink: string) => UnitShipper) | undefined): void {
  wrap = w;
}

/** The shipper the kernel uses: as built, unless the kit is probing. */
export const probed = (shipper: UnitShipper, sink: string): UnitShipper => (wrap ? wrap(shipper, sink) : shipper);
