/**
 * @hypsink/s3 — a BlobDestination over S3 and S3-compatible stores.
 * Roles: config.ts (validation), destination.ts (the commit), parts.ts (body → parts),
 * retry.ts (the budget), errors.ts (classification, redaction).
 */
// @ref LLP 0007: commit = create-if-absent (If-None-Match: * and/or a HeadObject pre-check).
import type { BlobDestination, PluginContext, SinkBuildContext } from 'hypsink/plugin';
import { parseS3Config, S3_OPTIONS } from './config.js';
import { S3Destination } from './destination.js';

export type { CreateIfAbsentMode, RetryBudget, S3Config } from './config.js';
export { parseS3Config, S3_OPTIONS, S3ConfigSchema } from './config.js';
export { S3_FAULT_POINTS, S3Destination } from './destination.js';

/** Builds a destination from a sink's `config` (validated here; bad fields throw HYPSINK_ERR_CONFIG). */
export function createS3Destination(config: Record<string, unknown>, buildCtx: SinkBuildContext): BlobDestination {
  return new S3Destination({
    sink: buildCtx.sink,
    config: parseS3Config(config, buildCtx.sink),
    log: buildCtx.log,
    fault: buildCtx.fault?.bind(buildCtx),
  });
}

export default function activate(ctx: PluginContext): void {
  ctx.registerDestination({
    name: ctx.manifest.name,
    options: S3_OPTIONS,
    create(config, buildCtx) {
      return createS3Destination(config, buildCtx);
    },
  });
}
