/**
 * The daemon's HTTP API (`hypsink run --api`), what `hypsink ctl` talks to.
 * JSON in and out; an error is `{code, message, hint}` with an HTTP status.
 *
 *   GET  /v1/health/live               200 while the process serves
 *   GET  /v1/health/ready              200 running with no sink failed, else 503
 *   GET  /v1/status                    `status --json` with each sink's run state
 *   GET  /v1/sinks/<name>              one sink of it
 *   POST /v1/sinks/<name>/pause        ?wait=false: answer before its tick in flight ends
 *   POST /v1/sinks/<name>/resume
 *   POST /v1/sinks/<name>/restart
 *   POST /v1/sinks/<name>/replay?dataset=&source=&until=[&since=]
 *                                      send one exported range again, exactly once (`hypsink replay`, LLP 0061)
 *   POST /v1/reload                    (also SIGHUP)
 *
 * Loopback by default. A token, when set, is required on every route but
 * health; anywhere but loopback one is required to start at all.
 * @ref LLP 0067
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { isIP } from 'node:net';
import { HypsinkError, isHypsinkError } from '../../types/errors.js';
import { replayRangeArgs } from '../sinks/replay-args.js';
import { errorBody, type Supervisor } from './state.js';

/** Where `--api` with no address listens, and where `hypsink ctl` looks by default. */
export const DEFAULT_API_PORT = 4977;
export const DEFAULT_API = `127.0.0.1:${DEFAULT_API_PORT}`;
/** A token shorter than this is refused: the API can pause, restart and reload every sink. */
export const MIN_TOKEN_LENGTH = 16;

export interface ApiAddress {
  readonly host: string;
  readonly port: number;
}

/** `[host:]port`, `[v6]:port` or `http://host:port`; null when it is none of them. */
export function parseAddress(value: string): ApiAddress | null {
  const v = value.trim().replace(/^http:\/\//, '').replace(/\/+$/, '');
  const m = /^(?:\[([0-9a-fA-F:.]+)\]|([^:[\]\s/]*)):(\d{1,5})$/.exec(v) ?? /^()()(\d{1,5})$/.exec(v);
  if (!m) return null;
  const port = Number(m[3]);
  if (port > 65535) return null;
  const host = m[1] || m[2] || '127.0.0.1';
  return { host, port };
}

/** Only this machine can connect: 127.0.0.0/8, ::1, localhost. */
export function isLoopback(host: string): boolean {
  const h = host.toLowerCase();
  if (h === 'localhost') return true;
  if (isIP(h) === 4) return h.startsWith('127.');
  if (isIP(h) === 6) return h === '::1' || /^::ffff:127\./.test(h) || /^(0{1,4}:){7}0{0,3}1$/.test(h);
  return false;
}

/** A token's rules: long enough, and nothing a header would mangle. */
export function checkToken(token: string, from: string): string {
  if (token.length < MIN_TOKEN_LENGTH || !/^[\x21-\x7e]+$/.test(token)) {
    throw new HypsinkError('HYPSINK_ERR_CONFIG', `the API token from ${from} must be at least ${MIN_TOKEN_LENGTH} visible ASCII characters without spaces`, {
      hint: 'Make one with "openssl rand -hex 24" and give hypsink run and hypsink ctl the same one (HYPSINK_API_TOKEN, or a file: --api-token-file / --token-file, chmod 600).',
    });
  }
  return token;
}

/**
 * The address `run --api <value>` listens on. Anywhere but loopback needs a
 * token: without one the API would let anyone who can reach it pause,
 * restart or reload every sink. @ref LLP 0067
 */
export function apiAddress(value: string, token: string | undefined): ApiAddress {
  const a = parseAddress(value);
  if (!a) {
    throw new HypsinkError('HYPSINK_ERR_USAGE', `--api ${JSON.stringify(value)} is not an address: give [host:]port, e.g. 127.0.0.1:${DEFAULT_API_PORT}`);
  }
  if (token !== undefined) checkToken(token, 'HYPSINK_API_TOKEN / --api-token-file');
  if (token === undefined && !isLoopback(a.host)) {
    throw new HypsinkError(
      'HYPSINK_ERR_CONFIG',
      `--api ${value}: ${a.host} is not a loopback address, and no API token is set: anyone who could reach it could pause, restart and reload every sink`,
      { hint: 'Set a token in HYPSINK_API_TOKEN or a file named by --api-token-file (16+ characters), or listen on 127.0.0.1; nothing was started.' },
    );
  }
  return a;
}

export interface ApiOptions extends ApiAddress {
  readonly token?: string | undefined;
}

export interface ApiServer {
  readonly url: string;
  readonly server: Server;
  close(): Promise<void>;
}

const STATUS_BY_CODE: Record<string, number> = {
  HYPSINK_ERR_CONFIG: 400,
  HYPSINK_ERR_PLUGIN: 400,
  HYPSINK_ERR_USAGE: 400,
  HYPSINK_ERR_AUTH: 401,
  HYPSINK_ERR_LOCKED: 409,
  HYPSINK_ERR_ABORTED: 503,
};

const digest = (s: string) => createHash('sha256').update(s).digest();

/** The bearer token of a request equals `want`, compared in constant time. */
function authorized(req: IncomingMessage, want: Buffer): boolean {
  const h = req.headers.authorization ?? '';
  if (h.length > 4096 || !h.startsWith('Bearer ')) return false;
  return timingSafeEqual(digest(h.slice(7).trim()), want);
}

function send(res: ServerResponse, status: number, body: unknown): void {
  const text = `${JSON.stringify(body)}\n`;
  res.writeHead(status, { 'Content-Type': 'application/json; charset=utf-8', 'Content-Length': Buffer.byteLength(text), 'Cache-Control': 'no-store' });
  res.end(text);
}

function fail(res: ServerResponse, e: unknown): void {
  const status = (e as { httpStatus?: number }).httpStatus ?? (isHypsinkError(e) ? (STATUS_BY_CODE[e.code] ?? 500) : 500);
  send(res, status, errorBody(e));
}

const usage = (message: string) => new HypsinkError('HYPSINK_ERR_USAGE', message, { hint: 'See README "Operating hypsink" for the routes of the API.' });

/** Serve the API; resolves once it listens. */
export async function serveApi(sup: Supervisor, opts: ApiOptions): Promise<ApiServer> {
  const want = opts.token === undefined ? null : digest(opts.token);
  const route = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const url = new URL(req.url ?? '/', 'http://api');
    const path = url.pathname.replace(/\/+$/, '');
    const method = req.method ?? 'GET';
    const only = (m: string) => {
      if (method !== m) throw Object.assign(usage(`${method} ${path}: this route takes ${m}`), { httpStatus: 405 });
    };
    if (path === '/v1/health/live') {
      only('GET');
      return send(res, 200, { live: true });
    }
    if (path === '/v1/health/ready') {
      only('GET');
      const r = sup.ready();
      return send(res, r.ready ? 200 : 503, r);
    }
    if (want && !authorized(req, want)) {
      res.setHeader('Connection', 'close');
      throw new HypsinkError('HYPSINK_ERR_AUTH', `${method} ${path}: this request carries no valid API token`, {
        hint: 'Send the token hypsink run was given (HYPSINK_API_TOKEN or --api-token-file) as "Authorization: Bearer <token>"; hypsink ctl reads the same variable or --token-file.',
      });
    }
    if (path === '/v1/status') {
      only('GET');
      return send(res, 200, await sup.status());
    }
    if (path === '/v1/reload') {
      only('POST');
      return send(res, 200, await sup.reload());
    }
    const m = /^\/v1\/sinks\/([^/]+)(?:\/(pause|resume|restart|replay))?$/.exec(path);
    if (m) {
      let name: string;
      try {
        name = decodeURIComponent(m[1]!);
      } catch {
        throw usage(`${path}: the sink name is not percent-encoded UTF-8`);
      }
      // An unknown sink keeps its config code (exit 2 in ctl); over HTTP it is a thing not found.
      if (!sup.kernel.sinks.has(name)) {
        try {
          sup.kernel.entry(name);
        } catch (e) {
          throw Object.assign(e as Error, { httpStatus: 404 });
        }
      }
      const verb = m[2];
      if (verb === undefined) {
        only('GET');
        return send(res, 200, await sup.sink(name));
      }
      only('POST');
      if (verb === 'pause') return send(res, 200, await sup.pause(name, url.searchParams.get('wait') !== 'false'));
      if (verb === 'resume') return send(res, 200, await sup.resume(name));
      if (verb === 'replay') {
        const q = url.searchParams;
        const a = replayRangeArgs({ dataset: q.get('dataset'), source: q.get('source'), since: q.get('since'), until: q.get('until') }, (f) => `the query parameter "${f}"`);
        return send(res, 200, await sup.kernel.replay(name, a.dataset, a.source, a.since, a.until));
      }
      return send(res, 200, await sup.restart(name));
    }
    throw Object.assign(usage(`${method} ${path}: no such route`), { httpStatus: 404 });
  };
  const server = createServer((req, res) => {
    // No route reads a body: whatever was sent is discarded.
    req.resume();
    route(req, res).catch((e: unknown) => {
      if (res.headersSent) return res.destroy();
      fail(res, e);
    });
  });
  server.headersTimeout = 10_000;
  server.requestTimeout = 0; // a pause waits for its tick's unit, a reload for every sink's
  await new Promise<void>((ok, bad) => {
    server.once('error', (e: NodeJS.ErrnoException) => bad(listenError(e, opts)));
    server.listen(opts.port, opts.host, ok);
  });
  const addr = server.address();
  const port = typeof addr === 'object' && addr ? addr.port : opts.port;
  const host = opts.host.includes(':') ? `[${opts.host}]` : opts.host;
  return {
    url: `http://${host}:${port}`,
    server,
    close: () =>
      new Promise<void>((done) => {
        server.close(() => done());
        // Called once the daemon has stopped: nothing it could still answer is worth waiting for.
        server.closeAllConnections();
      }),
  };
}

/** The address comes from the command line: taken or not ours to take is the operator's to change. */
function listenError(e: NodeJS.ErrnoException, a: ApiAddress): Error {
  const at = `${a.host}:${a.port}`;
  if (e.code === 'EADDRINUSE' || e.code === 'EACCES' || e.code === 'EADDRNOTAVAIL' || e.code === 'ENOTFOUND') {
    return new HypsinkError('HYPSINK_ERR_CONFIG', `--api ${at}: cannot listen there (${e.code})`, {
      cause: e,
      hint: 'Choose another --api address (a port of 1024 or above that no other process holds, on an address of this machine); nothing was started.',
    });
  }
  return e;
}
