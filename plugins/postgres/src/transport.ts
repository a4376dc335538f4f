/**
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
import { TLSSocket } from 'node:tls';
import pg from 'pg';
import type { Connection, TlsOptions } from './config.js';

/** What one open connection runs over, as the socket says. */
export interface Transport {
  /** The `ssl` option it was opened with (false: plain). */
  readonly ssl: false | TlsOptions;
  readonly encrypted: boolean;
  /** The TLS version (TLSv1.3), or null. */
  readonly protocol: string | null;
  /** The chain was verified against the trusted CAs (whether or not that was asked). */
  readonly authorized: boolean;
  /** Why the first try failed (its error's message), when this is the second. */
  readonly after: string | null;
}

/** Fields every try shares; `ssl` is each try's own. */
export type ClientOptions = Omit<pg.ClientConfig, 'ssl'>;

/** How far one try got before it failed: libpq falls back on some of these only. */
type Stage = 'socket' | 'handshake' | 'login';

async function tryOnce(options: ClientOptions, ssl: false | TlsOptions, signal?: AbortSignal): Promise<{ client: pg.Client; transport: Omit<Transport, 'after'> } | { error: unknown; stage: Stage }> {
  // The SSLRequest handshake only: node-postgres would take "direct" from PGSSLNEGOTIATION.
  const client = new pg.Client({ ...options, ssl, sslnegotiation: 'postgres' });
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
    const refused = error instanceof pg.DatabaseError;
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
function fallsBack(mode: Connection['sslMode'], error: unknown, stage: Stage): boolean {
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
export async function openClient(conn: Connection, options: ClientOptions, signal?: AbortSignal): Promise<{ client: pg.Client; transport: Transport }> {
  const [first, second] = conn.tries;
  const a = await tryOnce(options, first!, signal);
  if ('client' in a) return { client: a.client, transport: { ...a.transport, after: null } };
  if (second === undefined || signal?.aborted || !fallsBack(conn.sslMode, a.error, a.stage)) throw a.error;
  const reason = (a.error as Error)?.message ?? String(a.error);
  const b = await tryOnce(options, second, signal);
  if ('client' in b) return { client: b.client, transport: { ...b.transport, after: reason } };
  throw Object.assign(b.error as object, { earlier: `sslmode ${conn.sslMode}: ${first === false ? 'a plain connection' : 'TLS'} was tried first: ${reason}` });
}
