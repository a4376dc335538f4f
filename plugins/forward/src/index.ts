/**
 * `@hypsink/forward`: ships each unit as one NDJSON POST to a central receiver
 * (fixtures/receiver is the reference one), keyed by `X-Hyp-Batch-Id` so the
 * receiver's ledger makes every retry harmless.
 *
 * Roles, one file each: config.ts (validate), request-builder.ts (unit → body
 * and headers), service.ts (one POST, the answer classified), shipper.ts (the
 * UnitShipper: retries, backpressure, ids), backoff.ts (how long to wait).
 * @ref LLP 0008: batch id derivation; LLP 0009: the receiver's ledger
 */
import type { PluginContext, SinkBuildContext, UnitShipper } from 'hypsink/plugin';
import { parseForwardConfig } from './config.js';
import { ForwardShipper } from './shipper.js';

export { type ForwardConfig, ForwardConfigSchema, parseForwardConfig } from './config.js';
export { ForwardError, isTooLarge } from './errors.js';
export { ForwardShipper } from './shipper.js';

export function activate(ctx: PluginContext): void {
  const live = new Set<ForwardShipper>();
  // Shutdown (a drain) ends parked backpressure waits at once; a POST on the wire may finish.
  // The kernel closes every shipper after the drain.
  ctx.hooks.shutdown.tapPromise(ctx.manifest.name, async () => {
    for (const s of live) s.stopWaiting();
  });
  ctx.registerSink({
    name: ctx.manifest.name,
    create(config: Record<string, unknown>, build: SinkBuildContext): UnitShipper {
      const shipper = new ForwardShipper(parseForwardConfig(config, build.sink), build);
      live.add(shipper);
      shipper.whenClosed(() => live.delete(shipper));
      return shipper;
    },
  });
}

export default activate;
