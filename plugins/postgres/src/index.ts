/**
 * `@hypsink/postgres`: a request sink that writes each unit into a PostgreSQL
 * table in one transaction with the sink's own watermark row, so the rows and
 * the watermark are never durable one without the other.
 *
 * Roles, one file each: config.ts (validate, the URL's parts), table.ts (the
 * tables: create, check, evolve), copy.ts (Arrow batches → COPY text),
 * errors.ts (what a failure means), shipper.ts (the transaction, recovery,
 * retries). @ref LLP 0041, LLP 0042
 */
import type { PluginContext, SinkBuildContext, UnitShipper } from 'hypsink/plugin';
import { parsePostgresConfig, POSTGRES_OPTIONS } from './config.js';
import { PostgresShipper } from './shipper.js';

export { connection, POSTGRES_OPTIONS, type PostgresConfig, PostgresConfigSchema, parsePostgresConfig } from './config.js';
export { PostgresShipper, verdict } from './shipper.js';

export function activate(ctx: PluginContext): void {
  ctx.registerSink({
    name: ctx.manifest.name,
    options: POSTGRES_OPTIONS,
    create(config: Record<string, unknown>, build: SinkBuildContext): UnitShipper {
      return new PostgresShipper(parsePostgresConfig(config, build.sink), build);
    },
  });
}

export default activate;
