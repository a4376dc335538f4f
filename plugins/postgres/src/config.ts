/**
 * The Postgres sink's config, validated once when the sink is built. The kernel
 * has already interpolated `${ENV}` references, so `url` (with its password) is
 * plain text here: no message quotes a value.
 */
import { notAPgSslMode as notAMode, PG_SSL_MODES as SSL_MODES, type PluginOptionsSpec, parseSinkConfig } from 'hypsink/plugin';
import { z } from 'zod';

const RetrySchema = z
  .object({
    /** Tries per unit for passing faults (connection lost, serialization failure, deadlock), the first one included. */
    attempts: z.number().int().min(1).max(50).default(5),
    /** First backoff; doubles per retry, with jitter. */
    baseMs: z.number().int().min(0).default(200),
    /** Cap on one backoff wait. */
    maxMs: z.number().int().min(0).default(10_000),
  })
  .strict();

// The URL and sslmode rules are the plugin SDK's, shared with the Iceberg writer's JDBC catalog. @ref LLP 0064, LLP 0077
export { PG_SSL_MODES as SSL_MODES, type PgConnection as Connection, type PgSslMode as SslMode, type PgTlsCheck as TlsCheck, type PgTlsOptions as TlsOptions, pgConnection as connection } from 'hypsink/plugin';

const SslSchema = z
  .object({
    /**
     * libpq's sslmode, with libpq's meaning: `disable` (plain), `allow` (plain, TLS
     * if the server refuses the plain login), `prefer` (TLS, plain if the server
     * refuses TLS), `require` (TLS, any certificate; with `ca`, as verify-ca),
     * `verify-ca` (TLS, certificate signed by `ca`), `verify-full` (verify-ca and the
     * host name matches). Default: what `url` says, else `disable`. @ref LLP 0064
     */
    mode: z.enum(SSL_MODES, { error: (iss) => (typeof iss.input === 'string' ? `sslmode ${notAMode(iss.input)}` : `must be one of libpq's sslmodes: ${SSL_MODES.join(', ')}`) }).optional(),
    /** A PEM file of the CA(s) to trust, relative to the config file. */
    ca: z.string().min(1).optional(),
  })
  .strict();

const ident = z
  .string()
  .min(1)
  .max(63, 'is longer than PostgreSQL allows (63 bytes)')
  .refine((s) => !s.includes('\0'), 'must not hold a NUL byte');

const positiveInt = z.number().int().min(1);

export const PostgresConfigSchema = z
  .object({
    /** `postgres://user:password@host:port/database`; usually "${HYPSINK_PG_URL}". */
    url: z
      .string({ error: (iss) => (iss.input === undefined ? 'required: the database URL (postgres://user:password@host/db)' : 'must be a string') })
      .refine((u) => /^postgres(ql)?:\/\//.test(u), 'must be a postgres:// URL'),
    /** The table rows go to; default the dataset's name. With several datasets, each goes to the table of its name. */
    table: ident.optional(),
    /** The schema of the table and of the sink's own tables; default "public". */
    schema: ident.default('public'),
    /** Create the table from the dataset schema when it is missing, and add nullable columns the dataset gained. */
    createTable: z.boolean().default(true),
    /** The sink's watermark table: one row per (writer, sink, dataset, source). */
    watermarkTable: ident.default('hypsink_watermarks'),
    /** The sink's dead letter: rows PostgreSQL refused, with the reason. */
    rejectTable: ident.default('hypsink_rejected'),
    /**
     * The sink's unit records: one row per unit it committed (its range, digest and row counts),
     * written in the unit's transaction. "Already there" is decided by them, and verify reads them. @ref LLP 0056
     */
    unitTable: ident.default('hypsink_units'),
    /** A unit refused more rows than this one by one: the sink stops instead (the table is likely wrong, not the rows). */
    maxRejectedRows: z.number().int().min(0).default(100),
    /** Cut a unit at this many rows: one transaction, so large enough that its commit is a few percent. @ref LLP 0047 */
    maxRows: positiveInt.default(100_000),
    /** Cut a unit near this many bytes (estimated from the cache's file sizes). */
    maxBytes: positiveInt.default(16 * 1024 * 1024),
    /** Connections at most in the pool. */
    poolSize: z.number().int().min(1).max(100).default(2),
    /** Bound on opening one connection. */
    connectTimeoutMs: positiveInt.default(10_000),
    /** statement_timeout of the sink's sessions: a statement that runs longer is cancelled and retried. */
    statementTimeoutMs: positiveInt.default(120_000),
    /** application_name, as pg_stat_activity shows it. */
    applicationName: z.string().min(1).max(63).default('hypsink'),
    ssl: SslSchema.optional(),
    retry: RetrySchema.default({ attempts: 5, baseMs: 200, maxMs: 10_000 }),
  })
  .strict();

/** The sink's `config`, declared so the host checks its keys before `create`. @ref LLP 0032 */
export const POSTGRES_OPTIONS: PluginOptionsSpec = {
  keys: [
    ...Object.keys(PostgresConfigSchema.shape),
    ...Object.keys(RetrySchema.shape).map((k) => `retry.${k}`),
    ...Object.keys(SslSchema.shape).map((k) => `ssl.${k}`),
  ],
  validate: PostgresConfigSchema['~standard'].validate,
};

export type PostgresConfig = z.infer<typeof PostgresConfigSchema>;
export type RetryBudget = PostgresConfig['retry'];

export function parsePostgresConfig(raw: unknown, sink: string): PostgresConfig {
  return parseSinkConfig(PostgresConfigSchema, raw, sink);
}
