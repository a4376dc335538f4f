/**
 * What the kit's child does to the shippers the kernel builds (set through the
 * kernel's probe seam): it kills the process, as a power cut would (SIGKILL,
 * no cleanup), at a moment a plugin cannot see coming, and writes what it saw
 * to a log file first, synchronously, so the kit knows what was acknowledged.
 * @ref LLP 0059: the kit proves durability, crash order, pure ids and content
 */
import { AsyncLocalStorage, createHook } from 'node:async_hooks';
import { appendFileSync } from 'node:fs';
import type { ShipResult, Unit, UnitShipper } from '../types/sinks.js';

export type Probe =
  /** Kill the instant the `at`-th ship resolves: before any I/O callback can run (a write the ship did not await never starts). */
  | { readonly mode: 'resolved'; readonly at: number; readonly log: string }
  /** Kill just before the `at`-th I/O callback (a file operation done, a socket read, a timer) of work a ship (or `warm`) started. */
  | { readonly mode: 'inShip'; readonly at: number; readonly log: string }
  /** At the first ship: log its id and what `unitId` says for its range now, then kill before it ships. */
  | { readonly mode: 'ids'; readonly log: string }
  /** At every ship: log its id and what `unitId` says for its range now; ship as usual. */
  | { readonly mode: 'compare'; readonly log: string };

/** One line of a probe's log. */
export interface ProbeEntry {
  readonly unit: string;
  /** Rows planned for the unit. */
  readonly rows?: number;
  readonly duplicate?: boolean;
  /** `unitId` asked again for the unit's range. */
  readonly again?: string;
  /** The I/O callback the process was killed before (inShip). */
  readonly at?: number;
}

const kill = (): never => {
  process.kill(process.pid, 'SIGKILL');
  throw new Error('unreachable: killed');
};

const note = (log: string, e: ProbeEntry) => appendFileSync(log, `${JSON.stringify(e)}\n`);

/**
 * `shipper` with its ship wrapped by `ship` (given the unit and the call to
 * make), every other member its own (getters and `this` kept). The kernel's
 * blob shipper ships through `shipGuarded` (the unit's read guard with it).
 */
function around(
  shipper: UnitShipper,
  ship: (unit: Unit, call: (unit: Unit) => Promise<ShipResult>) => Promise<ShipResult>,
  /** How `warm` runs (as it is, by default). */
  warm: (call: () => void) => void = (call) => call(),
): UnitShipper {
  return new Proxy(shipper, {
    get(target, key) {
      const v = Reflect.get(target, key, target) as unknown;
      if (typeof v !== 'function') return v;
      const f = (v as (...a: unknown[]) => Promise<ShipResult>).bind(target);
      if (key === 'ship' || key === 'shipGuarded') return (unit: Unit, ...rest: unknown[]) => ship(unit, (u) => f(u, ...rest));
      if (key === 'warm') return (...a: unknown[]) => warm(() => void f(...a));
      return f;
    },
  });
}

const againOf = (s: UnitShipper, u: Unit) => s.unitId(u.partition, u.since, u.until);

/** The wrapper to set with the kernel's `setShipProbe` for `probe`. */
export function shipProbe(probe: Probe): (shipper: UnitShipper) => UnitShipper {
  switch (probe.mode) {
    case 'resolved': {
      let resolved = 0;
      return (s) =>
        around(s, async (unit, call) => {
          const r = await call(unit);
          // Still in the microtask that follows the ship's promise: nothing the plugin left running has had a turn.
          note(probe.log, { unit: unit.id, rows: unit.plannedRows, duplicate: r.duplicate });
          resolved += 1;
          if (resolved === probe.at) kill();
          return r;
        });
    }
    case 'inShip': {
      // The unit whose ship started the work (its async context), so the kernel's own work between ships is not counted.
      const inShip = new AsyncLocalStorage<string>();
      const ours = new Map<number, string>();
      let seen = 0;
      createHook({
        init(id, type) {
          if (type === 'PROMISE' || type === 'TickObject' || type === 'Microtask') return;
          const unit = inShip.getStore();
          if (unit !== undefined) ours.set(id, unit);
        },
        before(id) {
          const unit = ours.get(id);
          if (unit === undefined) return;
          seen += 1;
          if (seen < probe.at) return;
          note(probe.log, { unit, at: seen });
          kill();
        },
        destroy(id) {
          ours.delete(id);
        },
      }).enable();
      // The kernel's reads of the unit's rows (from the cache) are its own work, not the sink's: outside.
      const outside = <T>(rows: AsyncIterable<T>): AsyncIterable<T> => ({
        [Symbol.asyncIterator]() {
          const it = inShip.exit(() => rows[Symbol.asyncIterator]());
          return {
            next: () => inShip.exit(() => it.next()),
            return: async (v?: unknown) => inShip.exit(async () => (it.return ? await it.return(v) : { done: true as const, value: v as T })),
          };
        },
      });
      const reads = new Set<PropertyKey>(['rows', 'batches', 'ndjson']);
      const unitOf = (unit: Unit): Unit =>
        new Proxy(unit, {
          get(target, key) {
            const v = Reflect.get(target, key, target) as unknown;
            if (typeof v !== 'function') return v;
            const f = (v as (...a: unknown[]) => unknown).bind(target);
            return reads.has(key) ? () => outside(f() as AsyncIterable<unknown>) : f;
          },
        });
      // What `warm` opens ahead of the first ship (a connection, LLP 0096) is the ships' work too: its
      // callbacks (a connection's reads, during the ships as well) count, as they did when the first
      // ship opened it. Killed there, the unit may not even be recorded yet: a moment like any other.
      return (s) =>
        around(
          s,
          (unit, call) => inShip.run(unit.id, () => call(unitOf(unit))),
          (call) => inShip.run('(warm, before the first ship)', call),
        );
    }
    case 'ids':
      return (s) =>
        around(s, async (unit) => {
          note(probe.log, { unit: unit.id, again: againOf(s, unit) });
          return kill();
        });
    case 'compare':
      return (s) =>
        around(s, (unit, call) => {
          note(probe.log, { unit: unit.id, again: againOf(s, unit) });
          return call(unit);
        });
  }
}
