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
import { FORWARD_OPTIONS, type ForwardConfig, parseForwardConfig } from './config.js';
import { ForwardShipper } from './shipper.js';

export { FORWARD_OPTIONS, type ForwardConfig, ForwardConfigSchema, parseForwardConfig } from './config.js';
export { ForwardError, isTooLarge } from './errors.js';
export { ForwardShipper } from './shipper.js';

/** The host a token would travel to unencrypted: plain http to anything but this machine. @ref LLP 0031 */
export function tokenInTheClear(c: ForwardConfig): string | null {
  if (c.token === undefined) return null;
  const u = new URL(c.url);
  if (u.protocol !== 'http:') return null;
  const host = u.hostname.replace(/^\[|\]$/g, '');
  const loopback = host === 'localhost' || host === '::1' || /^127\.\d+\.\d+\.\d+$/.test(host);
  return loopback ? null : u.host;
}

export function activate(ctx: PluginContext): void {
  const live = new Set<ForwardShipper>();
  // Shutdown (a drain) ends parked backpressure waits at once; a POST on the wire may finish.
  // The kernel closes every shipper after the drain.
  ctx.hooks.shutdown.tapPromise(ctx.manifest.name, async () => {
    for (const s of live) s.stopWaiting();
  });
  ctx.registerSink({
    name: ctx.manifest.name,
    options: FORWARD_OPTIONS,
    create(config: Record<string, unknown>, build: SinkBuildContext): UnitShipper {
      const parsed = parseForwardConfig(config, build.sink);
      const exposed = tokenInTheClear(parsed);
      if (exposed) {
        build.log.warn(
          { sink: build.sink, host: exposed },
          `sink "${build.sink}" sends its bearer token over plain http:// to ${exposed}, where anyone on the path can read it; use an https:// url`,
        );
      }
      const shipper = new ForwardShipper(parsed, build);
      live.add(shipper);
      shipper.whenClosed(() => live.delete(shipper));
      return shipper;
    },
  });
}

export default activate;
