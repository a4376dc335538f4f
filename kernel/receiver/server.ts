/**
 * The reference central receiver: what the forward sink ships to.
 *
 *   POST /v1/ingest/<dataset>          (dataset percent-encoded, one path segment)
 *   Content-Type: application/x-ndjson
 *   Authorization: Bearer <token>      (a client's token: --token or a line of --tokens-file)
 *   X-Hyp-Partition: source=<encodeURIComponent(source)>   (a lone UTF-16 surrogate as %uXXXX; exactly one)
 *   X-Hyp-Batch-Id: <id>               (scoped to the client: one client never sees another's ids)
 *   X-Hyp-Unit-Digest: <digest>        (optional, at most once: the content the id names, kept in the ledger)
 *   → 200 {"stored":N} | 200 {"duplicate":true}  (the same id, partition, unit digest and body bytes as stored)
 *   → 400 bad request (names the NDJSON line) | 401 | 408 body too slow
 *   → 409 {"error","conflict":"partition"|"unit"|"body","unitDigest":<the id's stored unit digest>|null}:
 *     the id was stored for another partition, as another unit (before the body is read) or with another body
 *   → 413 body too large | 415 | 429 / 503 with Retry-After (load shedding, per client)
 *   GET /v1/health → 200 {"ok":true}
 *   GET /v1/whoami (Authorization: Bearer <token>) → 200 {"client":"<client>"} | 401 | 429 / 503, as ingest's
 *   GET /v1/ledger?dataset=<enc>&source=<enc>[&after=<n>]   (Authorization as above)
 *   → 200 {"entries":[{"id","dataset","source","rows","at","unitDigest"}],"next":<n>|null}: the calling
 *     client's ledger entries of that partition in commit order, at most 10 000 a page
 *     (ask again with after=<next>) | 400 | 401 | 405 | 429 / 503   (what `hypsink verify` reads; LLP 0038)
 *
 * Order of checks, cheapest and least trusting first: the connection (the
 * caps below), the route, then the token (before any limit is spent, before
 * any byte of the body is read), then shutdown, the client's own in-flight
 * count and rate (every authenticated route), content type and headers, then
 * the ledger, then the body.
 *
 * Connections are a budget only a token earns (@ref LLP 0065): one is
 * authenticated once a request on it carried a valid token. One that is not
 * is never kept alive, and gives way to a newer connection when its address,
 * the share of the cap not reserved for authenticated ones, or the cap is
 * full; after those, the authenticated connection idle longest gives way.
 * A new connection is closed at once only when none can.
 *
 * @ref LLP 0009: the durable batch-id ledger is written before the 200.
 * @ref LLP 0027: the ledger is keyed by (client, id) and keeps each body's digest.
 * @ref LLP 0060: and the unit digest its sender named, compared first.
 */
import { isUtf8 } from 'node:buffer';
import { createHash, type Hash } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setImmediate as yieldNow } from 'node:timers/promises';
import { HypsinkError, isHypsinkError, type Logger } from '../../types/index.js';
import { wireObject } from '../ingest/wire.js';
import { clientFor, loadTokens, singleToken, type TokenTable } from './auth.js';
import { ConnectionBudget } from './connections.js';
import { LIMIT_FLAGS } from './flags.js';
import { type BatchWriter, type CommitResult, DEFAULT_CLIENT, LedgerStore, type LedgerEntry, type Mismatch, type RecoveryReport, UNIT_DIGEST, WriteRefused } from './store.js';

type LedgeredResult = Exclude<CommitResult, { kind: 'stored' }>;

export interface ReceiverChaos {
  /** The first `count` ingest requests answer `status` (default 429) with this raw Retry-After (none when null). */
  readonly throttleFirst?: { readonly count: number; readonly status?: 429 | 503; readonly retryAfter?: string | null };
  /** The first `count` ingest requests are held `ms` after their body arrived, before storing. */
  readonly delayFirst?: { readonly count: number; readonly ms: number };
}

/**
 * A hypsink cache the receiver ingests into instead of its data files
 * (`hypsink receiver --config`, kernel/receiver/aggregate.ts). @ref LLP 0074
 */
export interface ReceiverCache {
  /** The column every row is given the authenticated client's name in; a value the client sent there is overwritten. */
  readonly clientColumn: string;
  /** The datasets the cache's config has: a batch of another is refused (400) before its body is read. */
  hasDataset(dataset: string): boolean;
  /** Ingest a batch (its rows already stamped) durably and idempotently by (client, id). */
  readonly write: BatchWriter;
  /** null while there is room; else the answer (429: the cache is over its size, 503: a sink is failing) and why. */
  pressure(): Promise<{ readonly status: 429 | 503; readonly reason: string } | null>;
  /** What the listening log line says of it. */
  readonly describe: string;
}

export interface ReceiverOptions {
  /** 0 picks a free port. */
  readonly port: number;
  /** Default 127.0.0.1 (loopback); pass 0.0.0.0 to serve other hosts. */
  readonly host?: string;
  readonly dataDir: string;
  /** One bearer token: client `default`. Exclusive with `tokensFile`. */
  readonly token?: string;
  /** A file of `<client-name> <token>` lines (fixtures/receiver/auth.ts); `reload()` (SIGHUP) re-reads it. */
  readonly tokensFile?: string;
  /** Accept every request as client `default`. Without a token, tokens file or this, the receiver refuses to start. */
  readonly insecureNoAuth?: boolean;
  /** Default 16 MiB. Enforced while the body streams in. */
  readonly maxBodyBytes?: number;
  /** Per client: requests processed at once before answering 503. Default 64. */
  readonly maxInflight?: number;
  /** Per client: requests per second (token bucket) before answering 429. Default: unlimited. */
  readonly rate?: number;
  /** Token-bucket size. Default max(1, rate). */
  readonly burst?: number;
  /** Retry-After seconds sent with 429 and 503. Default 1. */
  readonly retryAfterSeconds?: number;
  /** One NDJSON line at most this many bytes (400 past it). Default 1 MiB. */
  readonly maxLineBytes?: number;
  /** JSON nesting depth at most this (400 past it). Default 64. */
  readonly maxDepth?: number;
  /** Open connections at most, over all clients. Default 512. @ref LLP 0065 */
  readonly maxConnections?: number;
  /**
   * Of maxConnections, this many only for authenticated connections: a new connection past
   * (maxConnections - this) unauthenticated ones takes the oldest one's place. Default a quarter.
   */
  readonly reservedConnections?: number;
  /** Open connections at most from one remote address. Default 64. */
  readonly maxConnectionsPerAddress?: number;
  /** An authenticated connection idle this long between requests is closed (node's keepAliveTimeout). Default 5 s. */
  readonly keepAliveTimeoutMs?: number;
  /** The request line and headers must arrive within this. Default 10 s. */
  readonly headersTimeoutMs?: number;
  /** The body must arrive within this once its headers have (else 408). Default 60 s. */
  readonly bodyTimeoutMs?: number;
  /** A connection silent this long mid-request is cut. Default 30 s. */
  readonly idleTimeoutMs?: number;
  /** A whole request must arrive within this (node's own 408). Default 120 s. */
  readonly requestTimeoutMs?: number;
  /** A 401 is held this long, then sent with Connection: close, so a client without a token cannot spin. Default 200 ms. */
  readonly unauthorizedDelayMs?: number;
  /** How long close() waits for in-flight requests before cutting connections. Default 10 s. */
  readonly closeTimeoutMs?: number;
  readonly log?: Logger;
  /** Ingest into this hypsink cache instead of appending to data files under `dataDir` (which then holds the ledger alone). */
  readonly cache?: ReceiverCache;
  /** Test knobs: scripted throttling and slowness. */
  readonly chaos?: ReceiverChaos;
}

export interface ReceiverStats {
  readonly requests: number;
  /** Requests in flight, over all clients. */
  readonly inflight: number;
  /** Open connections. */
  readonly connections: number;
  /** Connections closed to make room for another, or refused at once (none could make room). */
  readonly connectionsShed: number;
  readonly batchesStored: number;
  readonly rowsStored: number;
  readonly duplicates: number;
  /** Responses by HTTP status. */
  readonly byStatus: Readonly<Record<string, number>>;
  /** Ledger entries (batches ever committed, this run and before). */
  readonly ledgerSize: number;
  /** Clients that can authenticate now (0 with auth off). */
  readonly clients: number;
  readonly recovery: RecoveryReport;
}

export type ReloadReport = { readonly ok: true; readonly clients: number } | { readonly ok: false; readonly error: string };

export interface Receiver {
  readonly port: number;
  readonly url: string;
  /** Stop accepting, finish in-flight requests, close the ledger. Idempotent. */
  close(): Promise<void>;
  stats(): ReceiverStats;
  /** Re-read the tokens file (SIGHUP). A bad file keeps the old tokens; the report (and the log) names the line. */
  reload(): Promise<ReloadReport>;
}

const DEFAULTS = {
  maxBodyBytes: 16 * 1024 * 1024,
  maxInflight: 64,
  retryAfterSeconds: 1,
  maxLineBytes: 1024 * 1024,
  maxDepth: 64,
  maxConnections: 512,
  maxConnectionsPerAddress: 64,
  keepAliveTimeoutMs: 5_000,
  headersTimeoutMs: 10_000,
  bodyTimeoutMs: 60_000,
  idleTimeoutMs: 30_000,
  requestTimeoutMs: 120_000,
  unauthorizedDelayMs: 200,
  closeTimeoutMs: 10_000,
} as const;

/** What is read and thrown away of a refused body before the connection is cut. */
const DRAIN_UNAUTHENTICATED = 4 * 1024;
const DRAIN_AUTHENTICATED = 64 * 1024;
/** Parsing yields to the event loop after this much work, so one body never holds it long. */
const SLICE_MS = 2;
const BATCH_ID = /^[\x21-\x7e]{1,256}$/;
const INGEST_PREFIX = '/v1/ingest/';
/** Ledger entries per page of GET /v1/ledger. @ref LLP 0038 */
const LEDGER_PAGE = 10_000;
/** Shed connections are logged at most this often, so a flood does not flood the log too. */
const SHED_LOG_MS = 10_000;

class TokenBucket {
  private tokens: number;
  private last = performance.now();
  constructor(
    private readonly rate: number,
    private readonly capacity: number,
  ) {
    this.tokens = capacity;
  }
  take(): boolean {
    const now = performance.now();
    this.tokens = Math.min(this.capacity, this.tokens + ((now - this.last) / 1000) * this.rate);
    this.last = now;
    if (this.tokens < 1) return false;
    this.tokens -= 1;
    return true;
  }
}

function configError(what: string): HypsinkError {
  return new HypsinkError('HYPSINK_ERR_CONFIG', `receiver: ${what}`, { hint: 'Fix the named receiver option (its flag or API field), then start the receiver again.' });
}

/** Every numeric option checked like a config value: NaN, negative or fractional never switches a limit off. */
function checkOptions(o: ReceiverOptions): void {
  // The limits of the flags' table, with their minimums, plus what only the API sets.
  const ints: [keyof ReceiverOptions, number][] = [
    ...LIMIT_FLAGS.filter((f) => f.kind === 'int').map((f): [keyof ReceiverOptions, number] => [f.key, f.min]),
    ['closeTimeoutMs', 0],
  ];
  for (const [k, min] of ints) {
    const v = o[k];
    if (v !== undefined && !(Number.isSafeInteger(v) && (v as number) >= min)) {
      throw configError(`${k} must be a whole number >= ${min}, not ${String(v)}`);
    }
  }
  if (!(Number.isSafeInteger(o.port) && o.port >= 0 && o.port <= 65535)) throw configError(`port must be 0-65535, not ${String(o.port)}`);
  if (o.rate !== undefined && !(Number.isFinite(o.rate) && o.rate > 0)) {
    throw configError(`rate must be a number of requests per second > 0, not ${String(o.rate)}`);
  }
  const cap = o.maxConnections ?? DEFAULTS.maxConnections;
  if (o.reservedConnections !== undefined && o.reservedConnections >= cap) {
    throw configError(`reservedConnections must be less than maxConnections (${cap}): a new connection has no token yet, so it needs a place outside the reserve`);
  }
  if ((o.requestTimeoutMs ?? DEFAULTS.requestTimeoutMs) < (o.headersTimeoutMs ?? DEFAULTS.headersTimeoutMs)) {
    throw configError('requestTimeoutMs must not be shorter than headersTimeoutMs (the headers are part of the request)');
  }
  const ways = [o.token !== undefined, o.tokensFile !== undefined, o.insecureNoAuth === true].filter(Boolean).length;
  if (ways === 0) {
    throw configError(
      'no auth configured: pass a token (--token, or HYPSINK_TOKEN in the environment) or a tokens file (--tokens-file), or --insecure-no-auth to accept anyone who can connect',
    );
  }
  if (ways > 1) throw configError('pass one of a token, a tokens file or --insecure-no-auth, not several');
}

type BodyResult =
  | { kind: 'ok'; body: Buffer; digest: string }
  | { kind: 'tooLarge' }
  | { kind: 'aborted' }
  | { kind: 'timeout' };

/**
 * Read the body, hashing every byte as it arrives (no big hash at the end), and
 * give up as soon as it passes `limit`; `keep` false hashes without buffering.
 * `timeoutMs` bounds the whole body (a slow drip is a 408, not a held slot).
 */
function readBody(req: IncomingMessage, limit: number, keep: boolean, timeoutMs: number): Promise<BodyResult> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    const hash: Hash = createHash('sha256');
    let size = 0;
    let done = false;
    const timer = setTimeout(() => finish({ kind: 'timeout' }), timeoutMs);
    const finish = (r: BodyResult) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('close', onClose);
      resolve(r);
    };
    const onData = (c: Buffer) => {
      size += c.length;
      if (size > limit) {
        chunks.length = 0;
        return finish({ kind: 'tooLarge' });
      }
      hash.update(c);
      if (keep) chunks.push(c);
    };
    const onEnd = () => finish({ kind: 'ok', body: keep ? Buffer.concat(chunks, size) : Buffer.alloc(0), digest: hash.digest('hex') });
    const onClose = () => finish({ kind: 'aborted' });
    req.on('data', onData);
    req.on('end', onEnd);
    req.on('close', onClose);
    req.on('error', () => finish({ kind: 'aborted' }));
  });
}

/**
 * Throw away at most `cap` more bytes of a refused request's body so the client
 * can read our answer; past the cap the connection is cut (the answer already
 * said Connection: close).
 */
function discardRest(req: IncomingMessage, cap: number): void {
  if (req.complete || req.destroyed) return;
  let n = 0;
  req.on('data', (c: Buffer) => {
    n += c.length;
    if (n > cap) req.socket.destroy();
  });
  req.on('error', () => {});
  req.resume();
}

type Normalized = { ok: true; data: Buffer; rows: number } | { ok: false; error: string };

const isBlank = (b: number) => b === 0x20 || b === 0x09 || b === 0x0d || b === 0x0a;

/** A growing output buffer: lines copied in, no string per line. */
class Out {
  buf: Buffer;
  pos = 0;
  constructor(size: number) {
    this.buf = Buffer.allocUnsafe(size);
  }
  room(n: number): void {
    if (this.pos + n <= this.buf.length) return;
    const next = Buffer.allocUnsafe(Math.max(this.buf.length * 2, this.pos + n));
    this.buf.copy(next, 0, 0, this.pos);
    this.buf = next;
  }
  bytes(b: Uint8Array, from = 0, to = b.length): void {
    this.room(to - from);
    this.pos += Buffer.prototype.copy.call(b, this.buf, this.pos, from, to);
  }
  byte(c: number): void {
    this.room(1);
    this.buf[this.pos++] = c;
  }
}

/** The line's bytes hold `needle` (a subarray: a search never runs past the line). */
const holds = (body: Buffer, s: number, e: number, needle: Buffer) => body.subarray(s, e).indexOf(needle) >= 0;
const UNICODE_ESCAPE = Buffer.from('\\u');

/**
 * Every non-empty line with its surrounding whitespace cut, each ending in
 * '\n', checked within the line limit and as UTF-8, and errors naming the
 * 1-based line; the loop yields every couple of ms.
 *
 * Without a cache each line is also checked as one JSON object a client may
 * send (wire.ts). With one (`stamp`), that check is the cache's ingest's own
 * parse, done once there (LLP 0087); here the client's name is only put first
 * in the line's text, as bytes, so the ingest's batch hash stays what it was.
 * A line that may name the client column itself (its name, or a \u escape,
 * in its text) is parsed here and written again with the column set, as
 * before. @ref LLP 0074
 */
async function normalizeNdjson(body: Buffer, maxLine: number, maxDepth: number, stamp?: { readonly column: string; readonly value: string }): Promise<Normalized> {
  const utf8 = isUtf8(body);
  const out = new Out(body.length + 1);
  const head = stamp ? Buffer.from(`{${JSON.stringify(stamp.column)}:${JSON.stringify(stamp.value)}`) : null;
  const named = stamp ? Buffer.from(stamp.column) : null;
  // Most bodies hold neither anywhere: then no line is searched for them.
  const mayName = named !== null && (body.indexOf(named) >= 0 || body.indexOf(UNICODE_ESCAPE) >= 0);
  /** The client's name first, then the line's own text after its '{': numbers keep the digits they were sent with. */
  const stampLine = (s: number, e: number) => {
    let r = s + 1;
    while (r < e && isBlank(body[r]!)) r++;
    out.bytes(head!);
    if (body[r] !== 0x7d) out.byte(0x2c);
    out.bytes(body, r, e);
  };
  let rows = 0;
  let line = 0;
  let start = 0;
  let slice = performance.now();
  while (start <= body.length) {
    line++;
    let end = body.indexOf(0x0a, start);
    if (end < 0) end = body.length;
    const next = end + 1;
    if (end - start > maxLine) return { ok: false, error: `line ${line}: longer than the limit of ${maxLine} bytes` };
    let s = start;
    let e = end;
    while (s < e && isBlank(body[s]!)) s++;
    while (e > s && isBlank(body[e - 1]!)) e--;
    start = next;
    if (s === e) continue;
    if (!utf8 && !isUtf8(body.subarray(s, e))) return { ok: false, error: `line ${line}: not valid UTF-8` };
    if (stamp && body[s] === 0x7b && !(mayName && (holds(body, s, e, named!) || holds(body, s, e, UNICODE_ESCAPE)))) stampLine(s, e);
    else {
      const v = wireObject(body.toString('utf8', s, e), maxDepth);
      if (!v.ok) return { ok: false, error: `line ${line}: ${v.error}` };
      if (!stamp) out.bytes(body, s, e);
      else if (Object.hasOwn(v.row, stamp.column)) {
        // The receiver says who sent the row, never the row: a value the client put there is overwritten.
        v.row[stamp.column] = stamp.value;
        out.bytes(Buffer.from(JSON.stringify(v.row)));
      } else stampLine(s, e);
    }
    out.byte(0x0a);
    rows++;
    if ((rows & 63) === 0 || e - s > 65_536) {
      if (performance.now() - slice > SLICE_MS) {
        await yieldNow();
        slice = performance.now();
      }
    }
  }
  if (rows === 0) return { ok: false, error: 'the body holds no rows; send at least one NDJSON line (an empty batch would spend its id)' };
  return { ok: true, data: out.buf.subarray(0, out.pos), rows };
}

/** The body's line (1-based, blank lines counted) that is the n-th line of its normalized rows. */
function bodyLine(body: Buffer, n: number): number {
  let line = 0;
  let start = 0;
  while (start <= body.length) {
    line++;
    let end = body.indexOf(0x0a, start);
    if (end < 0) end = body.length;
    let s = start;
    while (s < end && isBlank(body[s]!)) s++;
    start = end + 1;
    if (s < end && --n === 0) return line;
  }
  return line;
}

/**
 * Percent-decoding: UTF-8 `%XX` escapes, plus `%uXXXX` for a lone UTF-16
 * surrogate, which a partition value may hold but UTF-8 cannot express.
 */
function decodeComponent(s: string): string | null {
  try {
    return s
      .split(/(%u[dD][89a-fA-F][0-9a-fA-F]{2})/)
      .map((part, i) => (i % 2 === 1 ? String.fromCharCode(Number.parseInt(part.slice(2), 16)) : decodeURIComponent(part)))
      .join('');
  } catch {
    return null;
  }
}

interface ClientState {
  inflight: number;
  readonly bucket: TokenBucket | null;
}

export async function startReceiver(opts: ReceiverOptions): Promise<Receiver> {
  checkOptions(opts);
  const log = opts.log;
  const o = { ...DEFAULTS, ...Object.fromEntries(Object.entries(opts).filter(([, v]) => v !== undefined)) } as typeof DEFAULTS &
    ReceiverOptions;
  const maxBody = o.maxBodyBytes;
  const retryAfter = String(o.retryAfterSeconds);
  let tokens: TokenTable | null =
    opts.insecureNoAuth === true ? null : opts.tokensFile !== undefined ? await loadTokens(opts.tokensFile, log) : singleToken(opts.token!);
  const store = await LedgerStore.open(opts.dataDir, log, opts.cache?.write);
  const budget = new ConnectionBudget({
    max: o.maxConnections,
    reserved: opts.reservedConnections ?? Math.floor(o.maxConnections / 4),
    perAddress: o.maxConnectionsPerAddress,
  });

  let requests = 0;
  let inflight = 0;
  let batchesStored = 0;
  let rowsStored = 0;
  let duplicates = 0;
  let throttled = 0;
  let delayed = 0;
  let closing = false;
  const byStatus: Record<string, number> = {};
  const idleWaiters = new Set<() => void>();
  const clients = new Map<string, ClientState>();
  const stateOf = (client: string): ClientState => {
    let s = clients.get(client);
    if (!s) {
      s = { inflight: 0, bucket: o.rate !== undefined ? new TokenBucket(o.rate, o.burst ?? Math.max(1, o.rate)) : null };
      clients.set(client, s);
    }
    return s;
  };

  const send = (res: ServerResponse, status: number, body: object, headers: Record<string, string> = {}) => {
    byStatus[status] = (byStatus[status] ?? 0) + 1;
    const payload = JSON.stringify(body);
    // While shutting down, do not invite the client to reuse the connection; nor without a token (LLP 0065).
    if (closing || !budget.isAuthenticated(res.req.socket)) headers.Connection = 'close';
    res.writeHead(status, {
      'Content-Type': 'application/json',
      'Content-Length': String(Buffer.byteLength(payload)),
      ...headers,
    });
    res.end(payload);
  };
  /** Refuse a request; a body not read yet is drained up to `drain` bytes, and the connection then closes. */
  const reject = (req: IncomingMessage, res: ServerResponse, status: number, error: string, headers: Record<string, string> = {}, drain = DRAIN_AUTHENTICATED) => {
    if (!req.complete) headers.Connection = 'close';
    send(res, status, { error }, headers);
    discardRest(req, drain);
  };

  /** Only the caller's own id is named: never another batch's dataset or source. @ref LLP 0027 */
  const answerLedgered = (res: ServerResponse, known: LedgeredResult, id: string, dataset: string, headers: Record<string, string> = {}) => {
    if (known.kind === 'duplicate') {
      duplicates++;
      log?.debug({ id, dataset }, 'duplicate');
      return send(res, 200, { duplicate: true }, headers);
    }
    // What the id holds is the caller's own: the unit digest it named then (LLP 0060), never a partition.
    return send(res, 409, { error: conflictText(known.why, id, known.entry.unitDigest), conflict: known.why, unitDigest: known.entry.unitDigest ?? null }, headers);
  };
  const conflictText = (why: Mismatch, id: string, unitDigest: string | undefined) =>
    why === 'partition'
      ? `batch id ${id} was already stored for another dataset or source; a batch id names one partition, so send this batch under a new id`
      : why === 'unit'
        ? `batch id ${id} was stored as another unit (unit digest ${unitDigest}); a batch id names one unit's content: the sender's rows under this id are not the stored ones (a copied or restored cache?), so send them under a new id`
        : `batch id ${id} was stored with another body; a batch id names one body: re-send the stored batch byte for byte, or send other rows under a new id`;

  /**
   * The client a request's token authenticates, or null once a 401 is on its way:
   * the one token check of every authenticated route.
   */
  const authenticate = (req: IncomingMessage, res: ServerResponse): string | null => {
    const client = tokens === null ? DEFAULT_CLIENT : clientFor(tokens, req.headers.authorization);
    if (client !== null) {
      budget.authenticated(req.socket);
      return client;
    }
    const answer = () => {
      if (res.destroyed) return;
      reject(req, res, 401, 'missing or invalid bearer token', { 'WWW-Authenticate': 'Bearer', Connection: 'close' }, DRAIN_UNAUTHENTICATED);
    };
    // Held a moment: an abuser looping on 401s gets a few answers a second, not thousands.
    if (o.unauthorizedDelayMs > 0 && !closing) setTimeout(answer, o.unauthorizedDelayMs).unref();
    else answer();
    return null;
  };

  /**
   * Shutdown, then the client's own in-flight count and rate: what every
   * authenticated route spends once its token passed. The client's state, or
   * null once a 503/429 is on its way. @ref LLP 0065
   */
  const admit = (req: IncomingMessage, res: ServerResponse, client: string): ClientState | null => {
    if (closing) {
      reject(req, res, 503, 'shutting down', { 'Retry-After': retryAfter });
      return null;
    }
    const cs = stateOf(client);
    if (cs.inflight >= o.maxInflight) {
      reject(req, res, 503, `busy: ${cs.inflight} requests of this client in flight`, { 'Retry-After': retryAfter });
      return null;
    }
    if (cs.bucket && !cs.bucket.take()) {
      reject(req, res, 429, 'rate limited', { 'Retry-After': retryAfter });
      return null;
    }
    return cs;
  };
  const enter = (cs: ClientState) => {
    cs.inflight++;
    inflight++;
  };
  const leave = (cs: ClientState) => {
    cs.inflight--;
    inflight--;
    if (inflight === 0) for (const w of idleWaiters) w();
  };
  /** A read answered at once is in flight until its answer is sent (or cut): a slow reader holds its slot, not more. */
  const answerRead = (res: ServerResponse, cs: ClientState, body: object) => {
    enter(cs);
    res.once('close', () => leave(cs));
    send(res, 200, body);
  };

  /** GET /v1/whoami: the client the token authenticates; it spends the client's limits, reads no ledger. @ref LLP 0036, LLP 0065 */
  const handleWhoami = (req: IncomingMessage, res: ServerResponse) => {
    const client = authenticate(req, res);
    if (client === null) return;
    const cs = admit(req, res, client);
    if (cs === null) return;
    answerRead(res, cs, { client });
    discardRest(req, DRAIN_UNAUTHENTICATED);
  };

  const handleIngest = async (req: IncomingMessage, res: ServerResponse, rawDataset: string) => {
    // The token first: a client without one spends no limit and has no byte of its body read.
    const client = authenticate(req, res);
    if (client === null) return;
    const cs = admit(req, res, client);
    if (cs === null) return;
    const tf = opts.chaos?.throttleFirst;
    if (tf && throttled < tf.count) {
      throttled++;
      const h: Record<string, string> = {};
      if (tf.retryAfter !== null) h['Retry-After'] = tf.retryAfter ?? retryAfter;
      return reject(req, res, tf.status ?? 429, 'throttled (chaos)', h);
    }
    const ctype = (req.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
    if (ctype !== 'application/x-ndjson') {
      return reject(req, res, 415, 'Content-Type must be application/x-ndjson');
    }
    const dataset = rawDataset.includes('/') ? null : decodeComponent(rawDataset);
    if (!dataset) return reject(req, res, 400, 'the path must be /v1/ingest/<dataset> (one percent-encoded segment)');
    const partitions = req.headersDistinct['x-hyp-partition'] ?? [];
    if (partitions.length > 1) return reject(req, res, 400, 'X-Hyp-Partition was sent more than once; send it once');
    const pm = partitions.length === 1 ? /^source=(.*)$/.exec(partitions[0]!) : null;
    const source = pm ? decodeComponent(pm[1]!) : null;
    if (source === null) {
      return reject(req, res, 400, 'X-Hyp-Partition must be source=<percent-encoded source>');
    }
    const ids = req.headersDistinct['x-hyp-batch-id'] ?? [];
    const id = ids[0];
    if (ids.length !== 1 || id === undefined || id === '') return reject(req, res, 400, 'X-Hyp-Batch-Id is required, once');
    if (!BATCH_ID.test(id)) {
      return reject(req, res, 400, 'X-Hyp-Batch-Id must be 1-256 visible ASCII characters');
    }
    const unitDigests = req.headersDistinct['x-hyp-unit-digest'] ?? [];
    const unitDigest = unitDigests[0];
    if (unitDigests.length > 1 || (unitDigest !== undefined && !UNIT_DIGEST.test(unitDigest))) {
      return reject(req, res, 400, 'X-Hyp-Unit-Digest must be sent at most once, as 1-128 visible ASCII characters');
    }
    const declared = Number(req.headers['content-length'] ?? Number.NaN);

    enter(cs);
    /** The body as it came, once read: a refused line is named by its line there. */
    let sent: Buffer | undefined;
    try {
      // The ledger before the size limit: a client re-sending a stored batch learns it was stored,
      // whatever the limit is now (a 413 would be a wall it can never get past).
      const known = store.lookup(client, id);
      if (known) return await answerKnown(req, res, client, known, { id, dataset, source, declared, unitDigest });
      if (declared > maxBody) return reject(req, res, 413, `body of ${declared} bytes exceeds the limit of ${maxBody}`);
      if (opts.cache) {
        if (!opts.cache.hasDataset(dataset)) {
          return reject(req, res, 400, `dataset ${JSON.stringify(dataset)} is not in this receiver's config; add it there (with a ${opts.cache.clientColumn} column) or send another dataset`);
        }
        // After the ledger (a re-sent stored batch adds nothing, so it is answered even when full), before the body. @ref LLP 0074
        const full = await opts.cache.pressure();
        if (full) return reject(req, res, full.status, full.reason, { 'Retry-After': retryAfter });
      }

      const body = await readBody(req, maxBody, true, o.bodyTimeoutMs);
      if (body.kind === 'aborted') return;
      if (body.kind === 'timeout') return reject(req, res, 408, `the body did not arrive within ${o.bodyTimeoutMs} ms`, {}, 0);
      if (body.kind === 'tooLarge') {
        // Ledgered while this body streamed in, by a request with a body within the limit: not this body.
        const now = store.check(client, id, dataset, source, undefined, unitDigest);
        if (now) {
          answerLedgered(res, now.kind === 'conflict' ? now : { kind: 'conflict', entry: now.entry, why: 'body' }, id, dataset, { Connection: 'close' });
          return discardRest(req, DRAIN_AUTHENTICATED);
        }
        return reject(req, res, 413, `body exceeds the limit of ${maxBody} bytes`);
      }
      sent = body.body;
      const stamp = opts.cache ? { column: opts.cache.clientColumn, value: client } : undefined;
      const v = await normalizeNdjson(body.body, o.maxLineBytes, o.maxDepth, stamp);
      if (!v.ok) return send(res, 400, { error: v.error });
      const df = opts.chaos?.delayFirst;
      if (df && delayed < df.count) {
        delayed++;
        await new Promise((r) => setTimeout(r, df.ms));
      }
      const result = await store.commit({
        client,
        id,
        dataset,
        source,
        data: v.data,
        rows: v.rows,
        digest: body.digest,
        bodyBytes: body.body.length,
        maxDepth: o.maxDepth,
        ...(unitDigest !== undefined ? { unitDigest } : {}),
      });
      if (result.kind === 'stored') {
        batchesStored++;
        rowsStored += result.rows;
        log?.debug({ client, id, dataset, rows: result.rows }, 'stored');
        return send(res, 200, { stored: result.rows });
      }
      return answerLedgered(res, result, id, dataset);
    } catch (e) {
      if (e instanceof WriteRefused) {
        // The shared claim's answer (LLP 0080): the id stored elsewhere with another body, or not now.
        log?.warn({ err: e.message, client, id, dataset, status: e.status }, 'refused by the claim');
        if (e.status === 400) return send(res, 400, { error: e.line === undefined || !sent ? e.message : `line ${bodyLine(sent, e.line)}: ${e.message}` });
        if (e.status === 409) {
          const why = e.conflict ?? 'body';
          return send(res, 409, { error: conflictText(why, id, undefined), conflict: why, unitDigest: null });
        }
        return send(res, 503, { error: e.message }, { 'Retry-After': retryAfter });
      }
      if (opts.cache && isHypsinkError(e) && e.code === 'HYPSINK_ERR_INPUT') {
        // The cache holds other rows under this id (durable, not yet ledgered when the receiver died): another body.
        log?.warn({ err: e.message, client, id, dataset }, 'refused: other rows under a batch id the cache holds');
        return send(res, 409, { error: `batch id ${id} was stored with another body; re-send the stored batch byte for byte, or send other rows under a new id`, conflict: 'body', unitDigest: null });
      }
      log?.error({ err: (e as Error).message, client, id, dataset }, 'store failed');
      return send(res, 500, { error: 'the receiver could not store the batch; retry' });
    } finally {
      leave(cs);
    }
  };

  /**
   * A (client, id) the ledger holds. Another partition, or another unit digest
   * (both sides naming one), is a 409 at once (@ref LLP 0060). A legacy entry
   * (no digest) is a duplicate on its partition alone. Otherwise the body is
   * hashed as it streams in, never buffered, and never past the stored body's
   * length, whatever the size limit is now. @ref LLP 0027
   */
  const answerKnown = async (
    req: IncomingMessage,
    res: ServerResponse,
    client: string,
    known: LedgerEntry,
    r: { id: string; dataset: string; source: string; declared: number; unitDigest: string | undefined },
  ) => {
    const fromLedger = store.check(client, r.id, r.dataset, r.source, undefined, r.unitDigest)!;
    const unread: Record<string, string> = req.complete ? {} : { Connection: 'close' };
    if (fromLedger.kind === 'conflict' || known.digest === undefined || known.bodyBytes === undefined) {
      answerLedgered(res, fromLedger, r.id, r.dataset, unread);
      return discardRest(req, DRAIN_AUTHENTICATED);
    }
    const otherBody: LedgeredResult = { kind: 'conflict', entry: known, why: 'body' };
    // A declared length other than the stored body's cannot be the same body: no need to read it.
    if (!Number.isNaN(r.declared) && r.declared !== known.bodyBytes) {
      answerLedgered(res, otherBody, r.id, r.dataset, unread);
      return discardRest(req, DRAIN_AUTHENTICATED);
    }
    const body = await readBody(req, known.bodyBytes, false, o.bodyTimeoutMs);
    if (body.kind === 'aborted') return;
    if (body.kind === 'timeout') return reject(req, res, 408, `the body did not arrive within ${o.bodyTimeoutMs} ms`, {}, 0);
    if (body.kind === 'tooLarge') {
      answerLedgered(res, otherBody, r.id, r.dataset, { Connection: 'close' });
      return discardRest(req, DRAIN_AUTHENTICATED);
    }
    return answerLedgered(res, body.digest === known.digest ? fromLedger : otherBody, r.id, r.dataset);
  };

  /**
   * GET /v1/ledger: the calling client's entries of one partition, a page at a
   * time; authenticated and limited like an ingest, and never another
   * client's. @ref LLP 0038, LLP 0065
   */
  const handleLedger = (req: IncomingMessage, res: ServerResponse) => {
    if (req.method !== 'GET') return reject(req, res, 405, 'GET only', { Allow: 'GET' }, DRAIN_UNAUTHENTICATED);
    const client = authenticate(req, res);
    if (client === null) return;
    const cs = admit(req, res, client);
    if (cs === null) return;
    const query = new URLSearchParams((req.url ?? '').split('?').slice(1).join('?'));
    const dataset = query.get('dataset');
    const source = query.get('source');
    if (!dataset || source === null) {
      return reject(req, res, 400, 'GET /v1/ledger needs dataset=<percent-encoded dataset>&source=<percent-encoded source>');
    }
    const after = query.get('after') ?? '0';
    if (!/^(0|[1-9]\d{0,15})$/.test(after)) return reject(req, res, 400, 'after must be a whole number (the "next" of the page before)');
    const all = store.entriesOf(client, dataset, source);
    const from = Number(after);
    const page = all.slice(from, from + LEDGER_PAGE);
    const next = from + page.length < all.length ? from + page.length : null;
    // The unit digest the client named with each batch (null: none), for verify to compare with its cache (LLP 0060).
    const entries = page.map((e) => ({ id: e.id, dataset: e.dataset, source: e.source, rows: e.rows, at: e.at, unitDigest: e.unitDigest ?? null }));
    return answerRead(res, cs, { entries, next });
  };

  const server = createServer({ connectionsCheckingInterval: Math.min(1000, o.headersTimeoutMs, o.requestTimeoutMs) }, (req, res) => {
    requests++;
    res.once('close', budget.busy(req.socket));
    // Re-armed per request: node turns a kept-alive socket's timeout off when its next request starts.
    req.socket.setTimeout(o.idleTimeoutMs);
    const pathname = (req.url ?? '/').split('?')[0]!;
    if (pathname === '/v1/health') {
      return send(res, req.method === 'GET' ? 200 : 405, req.method === 'GET' ? { ok: true } : { error: 'GET only' });
    }
    if (pathname === '/v1/whoami') {
      if (req.method !== 'GET') return reject(req, res, 405, 'GET only', { Allow: 'GET' }, DRAIN_UNAUTHENTICATED);
      return handleWhoami(req, res);
    }
    if (pathname === '/v1/ledger') return handleLedger(req, res);
    if (!pathname.startsWith(INGEST_PREFIX)) return reject(req, res, 404, 'not found', {}, DRAIN_UNAUTHENTICATED);
    if (req.method !== 'POST') return reject(req, res, 405, 'POST only', { Allow: 'POST' }, DRAIN_UNAUTHENTICATED);
    handleIngest(req, res, pathname.slice(INGEST_PREFIX.length)).catch((e: Error) => {
      log?.error({ err: e.message }, 'request failed');
      if (!res.headersSent) send(res, 500, { error: 'internal error' });
      else res.destroy();
    });
  });
  // Between requests (announced in Keep-Alive: timeout=); only authenticated connections are kept alive
  // at all. A client reusing a socket just as it closes sees a reset and retries (the forward sink at once). @ref LLP 0065
  server.keepAliveTimeout = o.keepAliveTimeoutMs;
  // Also cuts a connection that sends no complete request line and headers in time, the first or a later one.
  server.headersTimeout = o.headersTimeoutMs;
  server.requestTimeout = o.requestTimeoutMs;
  server.setTimeout(o.idleTimeoutMs, (socket) => socket.destroy());
  // Not server.maxConnections: at the cap node closes the new connection before anyone sees it, and the
  // budget must see it to close an idle one in its place. @ref LLP 0065
  let shedLogged = 0;
  let shedLoggedAt = 0;
  server.on('connection', (socket) => {
    budget.admit(socket);
    if (budget.shed > shedLogged && performance.now() - shedLoggedAt >= SHED_LOG_MS) {
      log?.warn(
        { connections: budget.size, shed: budget.shed - shedLogged, cap: o.maxConnections },
        'connections shed: the connection caps are full (idle or tokenless connections closed for newer ones)',
      );
      shedLogged = budget.shed;
      shedLoggedAt = performance.now();
    }
  });

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port, opts.host ?? '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  const addr = server.address() as AddressInfo;
  const host = addr.family === 'IPv6' ? `[${addr.address}]` : addr.address;
  const url = `http://${host === '0.0.0.0' ? '127.0.0.1' : host}:${addr.port}`;
  const start = { port: addr.port, url, dataDir: opts.dataDir, ledger: store.size, ...(opts.cache ? { cache: opts.cache.describe } : {}) };
  if (tokens === null) {
    // Said on every start, at warn: nobody should run this way by accident.
    log?.warn(
      { ...start, auth: 'OFF (--insecure-no-auth): anyone who can connect can store batches, as client "default"' },
      'listening',
    );
  } else {
    log?.info({ ...start, auth: opts.tokensFile !== undefined ? `tokens file ${opts.tokensFile}` : 'token', clients: tokens.size }, 'listening');
  }

  let reloading: Promise<ReloadReport> = Promise.resolve({ ok: true, clients: tokens?.size ?? 0 });
  const reload = (): Promise<ReloadReport> => {
    reloading = reloading.then(async (): Promise<ReloadReport> => {
      if (opts.tokensFile === undefined) return { ok: true, clients: tokens?.size ?? 0 };
      try {
        tokens = await loadTokens(opts.tokensFile, log);
        log?.info({ file: opts.tokensFile, clients: tokens.size }, 'tokens reloaded');
        return { ok: true, clients: tokens.size };
      } catch (e) {
        const error = (e as Error).message;
        log?.error({ file: opts.tokensFile, err: error }, 'tokens file not reloaded; the old tokens stay in force');
        return { ok: false, error };
      }
    });
    return reloading;
  };

  let closed: Promise<void> | null = null;
  const close = (): Promise<void> => {
    closed ??= (async () => {
      closing = true;
      const serverClosed = new Promise<void>((r) => server.close(() => r()));
      server.closeIdleConnections();
      const drained = new Promise<void>((r) => {
        if (inflight === 0) r();
        else idleWaiters.add(r);
      });
      let timer: NodeJS.Timeout | undefined;
      const timeout = new Promise<'timeout'>((r) => {
        timer = setTimeout(() => r('timeout'), o.closeTimeoutMs);
      });
      // Answers sent while closing carry Connection: close, so every socket ends on its own once drained.
      if ((await Promise.race([Promise.all([drained, serverClosed]), timeout])) === 'timeout') {
        log?.warn({ inflight }, 'close: in-flight requests did not finish in time; cutting connections');
        server.closeAllConnections();
      }
      clearTimeout(timer);
      await serverClosed;
      await store.close();
    })();
    return closed;
  };

  return {
    port: addr.port,
    url,
    close,
    reload,
    stats: () => ({
      requests,
      inflight,
      connections: budget.size,
      connectionsShed: budget.shed,
      batchesStored,
      rowsStored,
      duplicates,
      byStatus: { ...byStatus },
      ledgerSize: store.size,
      clients: tokens?.size ?? 0,
      recovery: store.recovery,
    }),
  };
}

export { bearerToken, parseTokens } from './auth.js';
export { LEDGER_FILE, DEFAULT_CLIENT, type LedgerEntry, readStored, type Stored, storedRows } from './store.js';
