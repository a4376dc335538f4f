/**
 * The Postgres sink's config, validated once when the sink is built. The kernel
 * has already interpolated `${ENV}` references, so `url` (with its password) is
 * plain text here: no message quotes a value.
 */
import { readFileSync } from 'node:fs';
import { isAbsolute, resolve } from 'node:path';
import { HypsinkError, type PluginOptionsSpec, parseSinkConfig } from 'hypsink/plugin';
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

/** libpq's sslmode values, weakest first. @ref LLP 0064 */
export const SSL_MODES = ['disable', 'allow', 'prefer', 'require', 'verify-ca', 'verify-full'] as const;
export type SslMode = (typeof SSL_MODES)[number];

const isSslMode = (v: unknown): v is SslMode => typeof v === 'string' && (SSL_MODES as readonly string[]).includes(v);

/** A value as a message shows it: quoted, escaped, cut short. */
const shownValue = (v: string) => JSON.stringify(v.length > 40 ? `${v.slice(0, 40)}…` : v);

/** Why a value is no sslmode: the value, the accepted ones, and node-postgres's own word when it is one. */
function notAMode(v: string): string {
  const own = v === 'no-verify' ? `; node-postgres's "no-verify" is libpq's "require"` : '';
  return `${shownValue(v)} is not one of libpq's: ${SSL_MODES.join(', ')} (exactly so: lower case, no spaces)${own}`;
}

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

/** What a TLS connection checks of the server: nothing, its certificate's signature, or that and its host name. */
export type TlsCheck = 'none' | 'ca' | 'full';

/** node-postgres's `ssl` option for one TLS attempt. */
export type TlsOptions = { rejectUnauthorized: boolean; ca?: string; checkServerIdentity?: () => undefined };

export interface Connection {
  readonly host: string;
  readonly port: number;
  readonly database: string;
  readonly user: string;
  readonly password: string | undefined;
  /** The sslmode in force (config.ssl.mode, else the URL's, else disable). */
  readonly sslMode: SslMode;
  /** Where it was read, for messages: `config.ssl.mode`, `sslmode in config.url`, or `the default`. */
  readonly sslFrom: string;
  /** What a TLS connection checks (require with `ssl.ca` checks as verify-ca does, as libpq's). */
  readonly tlsCheck: TlsCheck;
  /**
   * The connections to try, in order, as node-postgres's `ssl` option: false is
   * plain. One for every mode but allow (plain, then TLS) and prefer (TLS, then plain).
   */
  readonly tries: readonly (false | TlsOptions)[];
  /** Where the rows go, without the password: `postgres://user@host:port/db`. */
  readonly shown: string;
}

/**
 * What a URL parameter other than sslmode is, for the error that refuses it. The sink reads
 * no other: a parameter libpq knows would silently mean less here than there. @ref LLP 0064
 */
function notRead(name: string): string {
  switch (name) {
    case 'ssl':
    case 'uselibpqcompat':
      return `it is node-postgres's, not libpq's: use sslmode=require (or verify-ca, verify-full), or config.ssl.mode`;
    case 'sslrootcert':
      return 'set config.ssl.ca to the PEM file of the CA to trust (relative to the config file)';
    case 'sslcert':
    case 'sslkey':
    case 'sslpassword':
    case 'sslcertmode':
      return 'client certificates are not supported; log in with a password';
    case 'application_name':
      return 'set config.applicationName';
    case 'connect_timeout':
      return 'set config.connectTimeoutMs';
    default:
      return name.toLowerCase() === 'sslmode'
        ? 'libpq reads "sslmode" in lower case only'
        : 'the sink reads only sslmode from config.url; the other settings are fields of the sink\'s config (README, "Postgres sink")';
  }
}

/**
 * The URL's parts, its password kept apart so no message shows it, and the TLS
 * settings checked before anything connects: libpq's six sslmodes, exactly
 * spelt, given once; no other URL parameter. @ref LLP 0064
 */
export function connection(cfg: PostgresConfig, sink: string, baseDir: string): Connection {
  const fail = (msg: string) => new HypsinkError('HYPSINK_ERR_CONFIG', `sink "${sink}": ${msg}`);
  let u: URL;
  try {
    u = new URL(cfg.url);
  } catch {
    throw fail('config.url is not a valid URL (postgres://user:password@host:port/database)');
  }
  // A URL parser stops at "#"; libpq does not know fragments: the two would read different parameters.
  if (cfg.url.includes('#')) throw fail('config.url has a "#": a fragment is not read, and a "#" in the password must be written %23');
  for (const name of new Set(u.searchParams.keys())) {
    if (name !== 'sslmode') throw fail(`config.url: parameter ${shownValue(name)} is not read by the Postgres sink (only sslmode is): ${notRead(name)}`);
  }
  const given = u.searchParams.getAll('sslmode');
  if (given.length > 1) {
    // libpq takes the last, node-postgres's parser the first: a repeated mode means two things.
    throw fail(`config.url: sslmode is given ${given.length} times (${given.map(shownValue).join(', ')}); give it once`);
  }
  const fromUrl = given[0];
  if (fromUrl !== undefined && !isSslMode(fromUrl)) throw fail(`config.url: sslmode ${notAMode(fromUrl)}`);
  const mode: SslMode = cfg.ssl?.mode ?? fromUrl ?? 'disable';
  const sslFrom = cfg.ssl?.mode !== undefined ? 'config.ssl.mode' : fromUrl !== undefined ? 'sslmode in config.url' : 'the default';
  const database = decodeURIComponent(u.pathname.replace(/^\//, '')) || 'postgres';
  const user = decodeURIComponent(u.username) || 'postgres';
  const password = u.password === '' ? undefined : decodeURIComponent(u.password);
  const host = u.hostname.replace(/^\[|\]$/g, '') || 'localhost';
  const port = u.port === '' ? 5432 : Number(u.port);
  let ca: string | undefined;
  if (cfg.ssl?.ca !== undefined) {
    if (mode === 'disable') {
      throw fail('config.ssl.ca is set but TLS is off; set config.ssl.mode to "verify-ca" or "verify-full"');
    }
    if (mode === 'allow' || mode === 'prefer') {
      // libpq would check the certificate of a TLS connection, yet take a plain one: a check a downgrade skips.
      throw fail(`config.ssl.ca is set but ssl mode "${mode}" (${sslFrom}) may connect without TLS, where no certificate is checked; set config.ssl.mode to "verify-ca" or "verify-full"`);
    }
    const path = isAbsolute(cfg.ssl.ca) ? cfg.ssl.ca : resolve(baseDir, cfg.ssl.ca);
    try {
      ca = readFileSync(path, 'utf8');
    } catch (e) {
      throw fail(`config.ssl.ca: cannot read ${path} (${(e as NodeJS.ErrnoException).code ?? 'error'}); give the path of a PEM file of the CA to trust`);
    }
  }
  // libpq: require with a root certificate checks it as verify-ca does.
  const tlsCheck: TlsCheck = mode === 'verify-full' ? 'full' : mode === 'verify-ca' || (mode === 'require' && ca !== undefined) ? 'ca' : 'none';
  const tls: TlsOptions =
    tlsCheck === 'none'
      ? { rejectUnauthorized: false }
      : { rejectUnauthorized: true, ...(ca !== undefined ? { ca } : {}), ...(tlsCheck === 'ca' ? { checkServerIdentity: () => undefined } : {}) };
  const tries = mode === 'disable' ? [false as const] : mode === 'allow' ? [false as const, tls] : mode === 'prefer' ? [tls, false as const] : [tls];
  const shownHost = host.includes(':') ? `[${host}]` : host;
  return { host, port, database, user, password, sslMode: mode, sslFrom, tlsCheck, tries, shown: `postgres://${user}@${shownHost}:${port}/${database}` };
}

export function parsePostgresConfig(raw: unknown, sink: string): PostgresConfig {
  return parseSinkConfig(PostgresConfigSchema, raw, sink);
}
