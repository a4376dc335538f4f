/**
 * One request to the receiver and what its answer means. No retries here: the
 * shipper decides what to do with each outcome. node:http rather than fetch so
 * the shipper owns its keep-alive pool (close() releases it) and never follows
 * a redirect (which would carry the bearer token to another address).
 */
import * as http from 'node:http';
import * as https from 'node:https';
import type { BatchRequest } from './request-builder.js';

export type Outcome =
  | { readonly kind: 'ok'; readonly status: number; readonly duplicate: boolean }
  /** 429/503: the receiver is alive and asks us to slow down. */
  | { readonly kind: 'backpressure'; readonly status: number; readonly retryAfter: string | undefined }
  | { readonly kind: 'tooLarge'; readonly status: number; readonly message: string }
  | { readonly kind: 'auth'; readonly status: number; readonly message: string }
  /**
   * 409: the batch id is stored with something else. `conflict` is the
   * receiver's reason (`partition`, `unit`, `body`; undefined from a receiver
   * that gives none) and `unitDigest` the unit digest stored with the id (null:
   * none; undefined: not said). @ref LLP 0060
   */
  | { readonly kind: 'conflict'; readonly status: number; readonly message: string; readonly conflict: string | undefined; readonly unitDigest: string | null | undefined }
  /** Any other 4xx (and 3xx): resending the same bytes cannot help. */
  | { readonly kind: 'rejected'; readonly status: number; readonly message: string }
  /** Refused, reset, timed out, 408, 5xx: may pass on its own. */
  | {
      readonly kind: 'transient';
      readonly status?: number;
      readonly code?: string;
      readonly message: string;
      /** A reset on a pooled keep-alive socket: the receiver closed it while idle. */
      readonly staleSocket: boolean;
    }
  | { readonly kind: 'aborted' };

/** What one GET of the connection check came to. */
export type GetOutcome =
  /** `cut`: the body was longer than asked for, and `text` is its start. */
  | { readonly kind: 'answer'; readonly status: number; readonly text: string; readonly message: string; readonly cut: boolean }
  | { readonly kind: 'failed'; readonly message: string }
  | { readonly kind: 'aborted' };

/** One request's end, before it means anything. */
type Exchange =
  | { readonly kind: 'answer'; readonly status: number; readonly headers: http.IncomingHttpHeaders; readonly text: string; readonly cut: boolean }
  | { readonly kind: 'failed'; readonly code: string; readonly message: string; readonly reused: boolean; readonly timedOut: boolean }
  | { readonly kind: 'aborted' };

/** Error bodies are for messages only: never read more than this of one. */
const MAX_ERROR_BODY = 64 * 1024;

function serverMessage(text: string): string {
  let msg = text;
  try {
    const j = JSON.parse(text) as { error?: unknown; message?: unknown };
    if (typeof j.error === 'string') msg = j.error;
    else if (typeof j.message === 'string') msg = j.message;
  } catch {}
  // biome-ignore lint/suspicious/noControlCharactersInRegex: stripping control characters is the point
  msg = msg.replace(/[\u0000-\u001f\u007f]+/g, ' ').trim();
  return msg.length > 300 ? `${msg.slice(0, 300)}…` : msg || '(no message)';
}

function classify(status: number, headers: http.IncomingHttpHeaders, text: string): Outcome {
  if (status >= 200 && status < 300) {
    let duplicate = false;
    try {
      duplicate = (JSON.parse(text) as { duplicate?: unknown }).duplicate === true;
    } catch {}
    return { kind: 'ok', status, duplicate };
  }
  if (status === 429 || status === 503) {
    const ra = headers['retry-after'];
    return { kind: 'backpressure', status, retryAfter: Array.isArray(ra) ? ra[0] : ra };
  }
  if (status === 413) return { kind: 'tooLarge', status, message: serverMessage(text) };
  if (status === 401 || status === 403) return { kind: 'auth', status, message: serverMessage(text) };
  if (status === 409) {
    let conflict: string | undefined;
    let unitDigest: string | null | undefined;
    try {
      const j = JSON.parse(text) as { conflict?: unknown; unitDigest?: unknown };
      if (typeof j.conflict === 'string') conflict = j.conflict;
      if (typeof j.unitDigest === 'string' || j.unitDigest === null) unitDigest = j.unitDigest;
    } catch {}
    return { kind: 'conflict', status, message: serverMessage(text), conflict, unitDigest };
  }
  if (status === 408 || status >= 500) {
    return { kind: 'transient', status, message: `HTTP ${status}: ${serverMessage(text)}`, staleSocket: false };
  }
  if (status >= 300 && status < 400) {
    return { kind: 'rejected', status, message: 'the receiver answered with a redirect; set config.url to the final address' };
  }
  return { kind: 'rejected', status, message: serverMessage(text) };
}

export class ForwardService {
  private readonly agent: http.Agent;
  private readonly mod: typeof http | typeof https;
  private readonly hostname: string;
  private readonly port: number;
  private readonly basePath: string;

  constructor(
    baseUrl: string,
    private readonly timeoutMs: number,
  ) {
    const u = new URL(baseUrl);
    const secure = u.protocol === 'https:';
    this.mod = secure ? https : http;
    this.agent = secure ? new https.Agent({ keepAlive: true }) : new http.Agent({ keepAlive: true });
    this.hostname = u.hostname.replace(/^\[(.*)\]$/, '$1');
    this.port = Number(u.port || (secure ? 443 : 80));
    this.basePath = u.pathname.replace(/\/+$/, '');
  }

  /** Human-readable target for messages (the config URL never carries credentials). */
  describe(path: string): string {
    return `${this.mod === https ? 'https' : 'http'}://${this.hostname}:${this.port}${this.basePath}${path}`;
  }

  /** POST once. Never throws: every failure is an Outcome. */
  async post(req: BatchRequest, signal: AbortSignal): Promise<Outcome> {
    const x = await this.exchange('POST', req.path, req.headers, req.body, signal, MAX_ERROR_BODY);
    if (x.kind === 'answer') return classify(x.status, x.headers, x.text);
    if (x.kind === 'aborted') return x;
    if (x.timedOut) return { kind: 'transient', code: 'ETIMEDOUT', message: `no answer within ${this.timeoutMs} ms`, staleSocket: false };
    return { kind: 'transient', code: x.code, message: `${x.code}: ${x.message}`, staleSocket: x.reused && x.code === 'ECONNRESET' };
  }

  /**
   * GET once (the connection check, the ledger read): the status and up to
   * `maxBytes` of the body, or why no answer came. Never throws, never follows
   * a redirect.
   */
  async get(path: string, headers: Record<string, string>, signal: AbortSignal, maxBytes = MAX_ERROR_BODY): Promise<GetOutcome> {
    const x = await this.exchange('GET', path, headers, undefined, signal, maxBytes);
    if (x.kind === 'answer') return { kind: 'answer', status: x.status, text: x.text, message: serverMessage(x.text), cut: x.cut };
    if (x.kind === 'aborted') return x;
    return { kind: 'failed', message: x.timedOut ? `no answer within ${this.timeoutMs} ms (config.timeoutMs)` : `${x.code}: ${x.message}` };
  }

  /**
   * One request on the pool, bounded by `timeoutMs` and the caller's signal,
   * settled once: the answer (its first `maxBytes`), the failure, or the abort.
   */
  private exchange(method: 'GET' | 'POST', path: string, headers: http.OutgoingHttpHeaders, body: Uint8Array | undefined, signal: AbortSignal, maxBytes: number): Promise<Exchange> {
    if (signal.aborted) return Promise.resolve({ kind: 'aborted' });
    return new Promise<Exchange>((resolve) => {
      const attempt = new AbortController();
      let timedOut = false;
      const timer = setTimeout(() => {
        timedOut = true;
        attempt.abort();
      }, this.timeoutMs);
      const onAbort = () => attempt.abort();
      signal.addEventListener('abort', onAbort, { once: true });
      let settled = false;
      const settle = (x: Exchange) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        signal.removeEventListener('abort', onAbort);
        resolve(x);
      };
      const failed = (err: NodeJS.ErrnoException, reused: boolean) => {
        if (signal.aborted) return settle({ kind: 'aborted' });
        settle({ kind: 'failed', code: err.code ?? err.name, message: err.message, reused, timedOut });
      };
      const cr = this.mod.request(
        // An explicit path: URL parsing would resolve '.'/'..' dataset segments away.
        { hostname: this.hostname, port: this.port, path: this.basePath + path, method, headers, agent: this.agent, signal: attempt.signal },
        (res) => {
          const chunks: Buffer[] = [];
          let size = 0;
          res.on('data', (c: Buffer) => {
            if (size < maxBytes) chunks.push(c);
            size += c.length;
          });
          res.on('end', () => {
            const text = Buffer.concat(chunks).subarray(0, maxBytes).toString('utf8');
            settle({ kind: 'answer', status: res.statusCode ?? 0, headers: res.headers, text, cut: size > maxBytes });
          });
          res.on('error', (e) => failed(e, false));
          res.on('aborted', () => failed(new Error('the response was cut off'), false));
        },
      );
      cr.on('error', (e) => failed(e, cr.reusedSocket));
      cr.end(body);
    });
  }

  /** Drop pooled connections (in-flight requests are aborted through their signal). */
  close(): void {
    this.agent.destroy();
  }
}
