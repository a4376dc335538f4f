/**
 * A PostgreSQL connection as libpq's URL and sslmode mean it, shared by the
 * plugins that talk to PostgreSQL (the Postgres sink; the Iceberg writer's
 * JDBC catalog): the URL taken apart with its password kept apart, libpq's
 * six sslmodes checked before anything connects, and one connection opened as
 * libpq's sslmode opens it. `pg` is loaded on the first connection only, so a
 * plugin that never connects never loads it. @ref LLP 0064, LLP 0077
 *
 * One connection opened as libpq's sslmode opens it. node-postgres knows only
 * "TLS or not": given `ssl` it sends an SSLRequest and fails when the server
 * answers 'N'; without it, it logs in plain. libpq's prefer and allow try a
 * second connection when the first fails in the ways libpq falls back on:
 * - prefer (TLS first): the server refused TLS ('N'), the handshake failed,
 *   or the server refused the login over TLS; then one plain connection.
 * - allow (plain first): the server refused the login; then one TLS connection.
 * A fault before the server answered (refused, unreachable, a timeout before
 * TLS began) is no reason to fall back: libpq does not either. libpq goes on
 * in plain on the connection the server answered 'N' on; node-postgres ends
 * it, so prefer opens a second one there (the server sees two). @ref LLP 0064
 */
import { readFileSync } from 'node:fs';
import { isAbsolute, resolve } from 'node:path';
import { TLSSocket } from 'node:tls';
import type pg from 'pg';
import { HypsinkError } from './errors.js';

/** libpq's sslmode values, weakest first. @ref LLP 0064 */
export const PG_SSL_MODES = ['disable', 'allow', 'prefer', 'require', 'verify-ca', 'verify-full'] as const;
export type PgSslMode = (typeof PG_SSL_MODES)[number];

export const isPgSslMode = (v: unknown): v is PgSslMode => typeof v === 'string' && (PG_SSL_MODES as readonly string[]).includes(v);

/** A value as a message shows it: quoted, escaped, cut short. */
const shownValue = (v: string) => JSON.stringify(v.length > 40 ? `${v.slice(0, 40)}…` : v);

/** Why a value is no sslmode: the value, the accepted ones, and node-postgres's own word when it is one. */
export function notAPgSslMode(v: string): string {
  const own = v === 'no-verify' ? `; node-postgres's "no-verify" is libpq's "require"` : '';
  return `${shownValue(v)} is not one of libpq's: ${PG_SSL_MODES.join(', ')} (exactly so: lower case, no spaces)${own}`;
}

/** What a connection is made from: a `postgres://` URL and the TLS settings beside it. */
export interface PgTarget {
  readonly url: string;
  readonly ssl?: { readonly mode?: PgSslMode | undefined; readonly ca?: string | undefined } | undefined;
}

/** What a TLS connection checks of the server: nothing, its certificate's signature, or that and its host name. */
export type PgTlsCheck = 'none' | 'ca' | 'full';

/** node-postgres's `ssl` option for one TLS attempt. */
export type PgTlsOptions = { rejectUnauthorized: boolean; ca?: string; checkServerIdentity?: () => undefined };

export interface PgConnection {
  readonly host: string;
  readonly port: number;
  readonly database: string;
  readonly user: string;
  readonly password: string | undefined;
  /** The sslmode in force (${field}.ssl.mode, else the URL's, else disable). */
  readonly sslMode: PgSslMode;
  /** Where it was read, for messages: `${field}.ssl.mode`, `sslmode in ${field}.url`, or `the default`. */
  readonly sslFrom: string;
  /** What a TLS connection checks (require with `ssl.ca` checks as verify-ca does, as libpq's). */
  readonly tlsCheck: PgTlsCheck;
  /**
   * The connections to try, in order, as node-postgres's `ssl` option: false is
   * plain. One for every mode but allow (plain, then TLS) and prefer (TLS, then plain).
   */
  readonly tries: readonly (false | PgTlsOptions)[];
  /** Where the rows go, without the password: `postgres://user@host:port/db`. */
  readonly shown: string;
}

/**
 * What a URL parameter other than sslmode is, for the error that refuses it. The sink reads
 * no other: a parameter libpq knows would silently mean less here than there. @ref LLP 0064
 */
function notRead(name: string, field: string): string {
  switch (name) {
    case 'ssl':
    case 'uselibpqcompat':
      return `it is node-postgres's, not libpq's: use sslmode=require (or verify-ca, verify-full), or ${field}.ssl.mode`;
    case 'sslrootcert':
      return `set ${field}.ssl.ca to the PEM file of the CA to trust (relative to the config file)`;
    case 'sslcert':
    case 'sslkey':
    case 'sslpassword':
    case 'sslcertmode':
      return 'client certificates are not supported; log in with a password';
    case 'application_name':
      return `set ${field}.applicationName`;
    case 'connect_timeout':
      return `set ${field}.connectTimeoutMs`;
    default:
      return name.toLowerCase() === 'sslmode'
        ? 'libpq reads "sslmode" in lower case only'
        : `the sink reads only sslmode from ${field}.url; the other settings are fields of the sink's config (README, "Postgres sink")`;
  }
}

/**
 * The URL's parts, its password kept apart so no message shows it, and the TLS
 * settings checked before anything connects: libpq's six sslmodes, exactly
 * spelt, given once; no other URL parameter. @ref LLP 0064
 */
export function pgConnection(cfg: PgTarget, sink: string, baseDir: string, field = 'config'): PgConnection {
  const fail = (msg: string) => new HypsinkError('HYPSINK_ERR_CONFIG', `sink "${sink}": ${msg}`);
  let u: URL;
  try {
    u = new URL(cfg.url);
  } catch {
    throw fail(`${field}.url is not a valid URL (postgres://user:password@host:port/database)`);
  }
  // A URL parser stops at "#"; libpq does not know fragments: the two would read different parameters.
  if (cfg.url.includes('#')) throw fail(`${field}.url has a "#": a fragment is not read, and a "#" in the password must be written %23`);
  for (const name of new Set(u.searchParams.keys())) {
    if (name !== 'sslmode') throw fail(`${field}.url: parameter ${shownValue(name)} is not read by the Postgres sink (only sslmode is): ${notRead(name, field)}`);
  }
  const given = u.searchParams.getAll('sslmode');
  if (given.length > 1) {
    // libpq takes the last, node-postgres's parser the first: a repeated mode means two things.
    throw fail(`${field}.url: sslmode is given ${given.length} times (${given.map(shownValue).join(', ')}); give it once`);
  }
  const fromUrl = given[0];
  if (fromUrl !== undefined && !isPgSslMode(fromUrl)) throw fail(`${field}.url: sslmode ${notAPgSslMode(fromUrl)}`);
  const mode: PgSslMode = cfg.ssl?.mode ?? fromUrl ?? 'disable';
  const sslFrom = cfg.ssl?.mode !== undefined ? `${field}.ssl.mode` : fromUrl !== undefined ? `sslmode in ${field}.url` : 'the default';
  const database = decodeURIComponent(u.pathname.replace(/^\//, '')) || 'postgres';
  const user = decodeURIComponent(u.username) || 'postgres';
  const password = u.password === '' ? undefined : decodeURIComponent(u.password);
  const host = u.hostname.replace(/^\[|\]$/g, '') || 'localhost';
  const port = u.port === '' ? 5432 : Number(u.port);
  let ca: string | undefined;
  if (cfg.ssl?.ca !== undefined) {
    if (mode === 'disable') {
      throw fail(`${field}.ssl.ca is set but TLS is off; set ${field}.ssl.mode to "verify-ca" or "verify-full"`);
    }
    if (mode === 'allow' || mode === 'prefer') {
      // libpq would check the certificate of a TLS connection, yet take a plain one: a check a downgrade skips.
      throw fail(`${field}.ssl.ca is set but ssl mode "${mode}" (${sslFrom}) may connect without TLS, where no certificate is checked; set ${field}.ssl.mode to "verify-ca" or "verify-full"`);
    }
    const path = isAbsolute(cfg.ssl.ca) ? cfg.ssl.ca : resolve(baseDir, cfg.ssl.ca);
    try {
      ca = readFileSync(path, 'utf8');
    } catch (e) {
      throw fail(`${field}.ssl.ca: cannot read ${path} (${(e as NodeJS.ErrnoException).code ?? 'error'}); give the path of a PEM file of the CA to trust`);
    }
  }
  // libpq: require with a root certificate checks it as verify-ca does.
  const tlsCheck: PgTlsCheck = mode === 'verify-full' ? 'full' : mode === 'verify-ca' || (mode === 'require' && ca !== undefined) ? 'ca' : 'none';
  const tls: PgTlsOptions =
    tlsCheck === 'none'
      ? { rejectUnauthorized: false }
      : { rejectUnauthorized: true, ...(ca !== undefined ? { ca } : {}), ...(tlsCheck === 'ca' ? { checkServerIdentity: () => undefined } : {}) };
  const tries = mode === 'disable' ? [false as const] : mode === 'allow' ? [false as const, tls] : mode === 'prefer' ? [tls, false as const] : [tls];
  const shownHost = host.includes(':') ? `[${host}]` : host;
  return { host, port, database, user, password, sslMode: mode, sslFrom, tlsCheck, tries, shown: `postgres://${user}@${shownHost}:${port}/${database}` };
}

/** What one open connection runs over, as the socket says. */
export interface PgTransport {
  /** The `ssl` option it was opened with (false: plain). */
  readonly ssl: false | PgTlsOptions;
  readonly encrypted: boolean;
  /** The TLS version (TLSv1.3), or null. */
  readonly protocol: string | null;
  /** The chain was verified against the trusted CAs (whether or not that was asked). */
  readonly authorized: boolean;
  /** Why the first try failed (its error's message), when this is the second. */
  readonly after: string | null;
}

/** Fields every try shares; `ssl` is each try's own. */
export type PgClientOptions = Omit<pg.ClientConfig, 'ssl'>;

/** How far one try got before it failed: libpq falls back on some of these only. */
type Stage = 'socket' | 'handshake' | 'login';

async function tryOnce(options: PgClientOptions, ssl: false | PgTlsOptions, signal?: AbortSignal): Promise<{ client: pg.Client; transport: Omit<PgTransport, 'after'> } | { error: unknown; stage: Stage }> {
  // The SSLRequest handshake only: node-postgres would take "direct" from PGSSLNEGOTIATION.
  const { default: PgModule } = await import('pg');
  const client = new PgModule.Client({ ...options, ssl, sslnegotiation: 'postgres' });
  // A connection lost after login is emitted as 'error' besides failing the call: heard here, not by the process.
  client.on('error', () => undefined);
  let stage: Stage = 'socket';
  client.connection.once('sslconnect', () => {
    stage = 'handshake';
    (client.connection.stream as TLSSocket).once('secureConnect', () => {
      stage = 'login';
    });
  });
  const stop = () => client.end().catch(() => undefined);
  signal?.addEventListener('abort', stop, { once: true });
  try {
    await client.connect();
  } catch (error) {
    // A server's ErrorResponse before login completed is a refused login, whichever transport.
    const refused = error instanceof PgModule.DatabaseError;
    await client.end().catch(() => undefined);
    return { error, stage: refused ? 'login' : stage };
  } finally {
    signal?.removeEventListener('abort', stop);
  }
  const s = client.connection.stream;
  const tls = s instanceof TLSSocket;
  return { client, transport: { ssl, encrypted: tls, protocol: tls ? (s.getProtocol() ?? null) : null, authorized: tls && s.authorized } };
}

/** Does libpq try the second transport after the first failed so? */
function fallsBack(mode: PgConnection['sslMode'], error: unknown, stage: Stage): boolean {
  if (mode === 'allow') return stage === 'login';
  if (mode !== 'prefer') return false;
  // The server refused TLS: node-postgres's own words, before any handshake.
  if (/does not support SSL connections/.test((error as Error)?.message ?? '')) return true;
  return stage === 'handshake' || stage === 'login';
}

/**
 * A connected client over the transport libpq's sslmode picks, and what it runs over.
 * Fails with the last try's error; a second try's error says why the first failed (`earlier`).
 */
export async function openPgClient(conn: PgConnection, options: PgClientOptions, signal?: AbortSignal): Promise<{ client: pg.Client; transport: PgTransport }> {
  const [first, second] = conn.tries;
  const a = await tryOnce(options, first!, signal);
  if ('client' in a) return { client: a.client, transport: { ...a.transport, after: null } };
  if (second === undefined || signal?.aborted || !fallsBack(conn.sslMode, a.error, a.stage)) throw a.error;
  const reason = (a.error as Error)?.message ?? String(a.error);
  const b = await tryOnce(options, second, signal);
  if ('client' in b) return { client: b.client, transport: { ...b.transport, after: reason } };
  throw Object.assign(b.error as object, { earlier: `sslmode ${conn.sslMode}: ${first === false ? 'a plain connection' : 'TLS'} was tried first: ${reason}` });
}
