/**
 * What a PostgreSQL failure means for the sink, by SQLSTATE class (and by
 * node's socket codes before the server answered):
 * - the login or a privilege is refused: the sink stops, naming role and table;
 * - the connection is lost, refused or reset, a serialization failure, a
 *   deadlock, a cancelled statement, a server shutting down or full: retried;
 * - a value the server refuses during COPY (data exception 22, integrity
 *   constraint 23), with the line it names: that row goes to the dead letter;
 * - anything else: the sink stops with the server's message.
 * Every message is redacted of the password before it leaves.
 */
import { HypsinkError } from 'hypsink/plugin';

export interface PgFault {
  readonly code?: string;
  readonly message?: string;
  readonly where?: string;
  readonly column?: string;
  readonly table?: string;
  readonly detail?: string;
}

export type FaultKind = 'auth' | 'privilege' | 'retry' | 'row' | 'stop';

const RETRY_SOCKET = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'EHOSTUNREACH', 'ENETUNREACH', 'EAI_AGAIN', 'ENOTFOUND', 'ECONNABORTED']);

export function classify(e: unknown): FaultKind {
  const f = (e ?? {}) as PgFault;
  const code = f.code ?? '';
  if (code === '28P01' || code === '28000') return 'auth';
  if (code === '42501') return 'privilege';
  if (code === '40001' || code === '40P01' || code === '57014' || code.startsWith('08') || code.startsWith('53') || code.startsWith('57P')) return 'retry';
  if ((code.startsWith('22') || code.startsWith('23')) && copyLine(f) !== null) return 'row';
  if (RETRY_SOCKET.has(code)) return 'retry';
  const m = f.message ?? '';
  // node-postgres's own words for a connection that went away or never came.
  if (code === '' && /Connection terminated|connection timeout|timeout exceeded when trying to connect|Client has encountered a connection error|Client was closed|read ECONNRESET|socket hang up/i.test(m)) return 'retry';
  return 'stop';
}

/** The 1-based line of the COPY input the server refused, from its error context. */
export function copyLine(f: PgFault): number | null {
  const m = /\bCOPY [^,]+, line (\d+)/.exec(f.where ?? '');
  return m ? Number(m[1]) : null;
}

/** The refusal of one row, for the dead letter: the server's message, code and column, never the value. */
export function rowReason(f: PgFault): string {
  const col = f.column ?? /column ([^:]+):/.exec(f.where ?? '')?.[1];
  return `${f.message ?? 'refused'} (SQLSTATE ${f.code ?? '?'}${col ? `, column ${col}` : ''})`;
}

export class Redactor {
  constructor(private readonly secret: string | undefined) {}
  text(s: string): string {
    const p = this.secret;
    return p === undefined || p === '' ? s : s.split(p).join('[redacted]');
  }
  /** A plain cause (code and redacted message), never the driver's error object with its connection. */
  cause(e: unknown): Error {
    const f = (e ?? {}) as PgFault;
    return Object.assign(new Error(this.text(f.message ?? String(e))), { code: f.code });
  }
}

export interface FaultScope {
  readonly sink: string;
  readonly user: string;
  readonly shown: string;
  readonly table: string;
  /** The schema of the sink's tables, and the privileges it needs on each (by table name). */
  readonly schema?: string;
  readonly needs?: Readonly<Record<string, string>>;
  /** The sslmode in force, and where it was read, for what a TLS failure says to do. */
  readonly sslMode?: string;
  readonly sslFrom?: string;
  readonly redact: Redactor;
}

/**
 * A TLS failure (no TLS at the server, a certificate not accepted): what it
 * is and what to change, or null for any other fault. It is not a refused
 * write, and node's codes are no SQLSTATE. @ref LLP 0045
 */
function tlsFailure(f: PgFault, msg: string, s: FaultScope): string | null {
  const code = f.code ?? '';
  if (/does not support SSL connections/i.test(msg)) {
    const from = s.sslFrom === undefined || s.sslFrom === 'the default' ? 'config.ssl.mode' : s.sslFrom;
    return `TLS: the server does not support SSL connections; ${from} is "${s.sslMode ?? 'require'}": turn ssl on at the server, or set config.ssl.mode to "disable" for a plain connection`;
  }
  if (code === 'ERR_TLS_CERT_ALTNAME_INVALID') {
    return `TLS: the server's certificate was not accepted: ${msg} (${code}); the host in config.url is not a name on the certificate: use one that is, or set config.ssl.mode to "verify-ca" to check the signature only`;
  }
  if (/CERT|SELF_SIGNED|UNABLE_TO_VERIFY|UNABLE_TO_GET_ISSUER/.test(code)) {
    return `TLS: the server's certificate was not accepted: ${msg} (${code}); set config.ssl.ca to the PEM file of the CA that signed it (without ssl.ca, only the system's CAs are trusted), or config.ssl.mode to "require" to take any certificate`;
  }
  if (/^ERR_(SSL|TLS)_/.test(code) || /^EPROTO$/.test(code)) return `TLS: ${msg} (${code}); check config.ssl and the server's ssl settings`;
  return null;
}

/** An identifier as SQL takes it: bare when it may be, quoted otherwise. */
const ident = (name: string) => (/^[a-z_][a-z0-9_$]*$/.test(name) ? name : `"${name.replace(/"/g, '""')}"`);

/**
 * What a privilege error refused, from the server's words ("permission denied
 * for table x", "… for schema s", "must be owner of table x"), and the GRANT
 * that fixes it; null when the words are not those. @ref LLP 0045
 */
function refusedObject(msg: string, s: FaultScope): { what: string; grant: string } | null {
  const m = /(?:permission denied for|must be owner of) (table|relation|schema) "?([^"\s]+)"?/.exec(msg);
  if (!m || s.schema === undefined) return null;
  const role = `"${s.user.replace(/"/g, '""')}"`;
  if (m[1] === 'schema') {
    return {
      what: `schema ${m[2]}`,
      grant: `GRANT USAGE, CREATE ON SCHEMA ${ident(m[2]!)} TO ${role} (CREATE only while the sink must make its tables; or make them beforehand)`,
    };
  }
  const name = `${ident(s.schema)}.${ident(m[2]!)}`;
  if (msg.startsWith('must be owner')) return { what: `${s.schema}.${m[2]}`, grant: `ALTER TABLE ${name} OWNER TO ${role}, or set config.createTable to false and change the table yourself` };
  return { what: `${s.schema}.${m[2]}`, grant: `GRANT ${s.needs?.[m[2]!] ?? 'SELECT, INSERT'} ON ${name} TO ${role}` };
}

/**
 * The error the sink throws for a fault that is not retried (or no longer). A
 * second connection's fault (sslmode allow, prefer) says why the first failed. @ref LLP 0064
 */
export function toHypsinkError(e: unknown, s: FaultScope, kind: FaultKind, attempts?: number, unsent = false): HypsinkError {
  const made = fromFault(e, s, kind, attempts);
  const earlier = (e as { earlier?: unknown } | null)?.earlier;
  if (made === e || (typeof earlier !== 'string' && !unsent)) return made;
  const message = typeof earlier === 'string' ? `${made.message} (${s.redact.text(earlier)})` : made.message;
  // `unsent`: every try failed before a connection existed, so the unit may be withdrawn. @ref LLP 0070
  return new HypsinkError(made.code, message, { cause: made.cause, hint: made.hint, retryable: made.retryable, retryAfterMs: made.retryAfterMs, unsent });
}

function fromFault(e: unknown, s: FaultScope, kind: FaultKind, attempts?: number): HypsinkError {
  if (e instanceof HypsinkError) return e;
  const f = (e ?? {}) as PgFault;
  const msg = s.redact.text(f.message ?? String(e));
  const cause = s.redact.cause(e);
  switch (kind) {
    case 'auth':
      return new HypsinkError(
        'HYPSINK_ERR_AUTH',
        /no encryption/.test(msg)
          ? `sink "${s.sink}": ${s.shown} refused the login of role "${s.user}": ${msg}; the server takes only TLS connections from here: set config.ssl.mode to "require", "verify-ca" or "verify-full"`
          : `sink "${s.sink}": ${s.shown} refused the login of role "${s.user}": ${msg}; check the user and password in config.url (or the variable it names)`,
        { cause },
      );
    case 'privilege': {
      const refused = refusedObject(msg, s);
      return new HypsinkError(
        'HYPSINK_ERR_AUTH',
        refused
          ? `sink "${s.sink}": role "${s.user}" lacks a privilege on ${refused.what} at ${s.shown}: ${msg}; ${refused.grant}`
          : `sink "${s.sink}": role "${s.user}" lacks a privilege on ${s.table} at ${s.shown}: ${msg}; grant it what the README's "Postgres sink" section lists (e.g. GRANT INSERT, SELECT ON ${s.table} TO "${s.user}")`,
        { cause },
      );
    }
    case 'retry':
      return new HypsinkError(
        'HYPSINK_ERR_RETRYABLE',
        `sink "${s.sink}": ${s.shown}: ${msg}${attempts ? ` (after ${attempts} ${attempts === 1 ? 'try' : 'tries'})` : ''}; the partition is retried on a later tick`,
        { retryable: true, cause, hint: socketHint(f.code, s.shown) },
      );
    default: {
      const tls = tlsFailure(f, msg, s);
      if (tls) return new HypsinkError('HYPSINK_ERR_DESTINATION', `sink "${s.sink}": ${s.shown}: ${tls}`, { cause });
      const code = f.code ? (/^[0-9A-Z]{5}$/.test(f.code) ? ` (SQLSTATE ${f.code})` : ` (${f.code})`) : '';
      if (f.code === '3F000' && s.schema !== undefined) {
        return new HypsinkError(
          'HYPSINK_ERR_DESTINATION',
          `sink "${s.sink}": ${s.shown}: ${msg}${code}; create it (CREATE SCHEMA ${ident(s.schema)}) or set config.schema to one that exists`,
          { cause },
        );
      }
      return new HypsinkError('HYPSINK_ERR_DESTINATION', `sink "${s.sink}": ${s.shown} refused the write to ${s.table}: ${msg}${code}`, { cause });
    }
  }
}

function socketHint(code: string | undefined, shown: string): string | undefined {
  switch (code) {
    case 'ECONNREFUSED':
      return `nothing answers at ${shown}: check that PostgreSQL is running and that config.url names its host and port; the partition is retried on a later tick meanwhile.`;
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
      return `the host of ${shown} is not known (${code}): check config.url and the DNS; the partition is retried on a later tick meanwhile.`;
    default:
      return undefined;
  }
}
