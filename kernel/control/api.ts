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
 *
 * The HTTP server runs on a thread of its own. While the kernel is busy (a
 * flush, export or maintenance), the read routes (ready, status, one sink) are
 * answered there at once from the last status reading, with the run state as it
 * is now and `readAt` saying when the figures were read; otherwise, and for
 * every control route, the request is answered on the kernel's thread.
 * @ref LLP 0067
 * @ref LLP 0076
 */
import { createHash } from 'node:crypto';
import { isIP } from 'node:net';
import { Worker } from 'node:worker_threads';
import { HypsinkError, isHypsinkError } from '../../types/errors.js';
import type { Busy } from '../runtime.js';
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

/** A request as the API's thread hands it over: the token was checked there. */
interface ApiRequest {
  readonly id: number;
  readonly method: string;
  readonly url: string;
  readonly authorized: boolean;
}

interface ApiAnswer {
  readonly status: number;
  readonly body: unknown;
  /** Close the connection after it (a 401). */
  readonly close?: boolean;
}

function failed(e: unknown): ApiAnswer {
  const status = (e as { httpStatus?: number }).httpStatus ?? (isHypsinkError(e) ? (STATUS_BY_CODE[e.code] ?? 500) : 500);
  return { status, body: errorBody(e), close: status === 401 };
}

const usage = (message: string) => new HypsinkError('HYPSINK_ERR_USAGE', message, { hint: 'See README "Operating hypsink" for the routes of the API.' });

/** Answer one request on the kernel's thread. */
async function route(sup: Supervisor, req: ApiRequest): Promise<ApiAnswer> {
  const url = new URL(req.url, 'http://api');
  const path = url.pathname.replace(/\/+$/, '');
  const method = req.method;
  const only = (m: string) => {
    if (method !== m) throw Object.assign(usage(`${method} ${path}: this route takes ${m}`), { httpStatus: 405 });
  };
  if (path === '/v1/health/live') {
    only('GET');
    return { status: 200, body: { live: true } };
  }
  if (path === '/v1/health/ready') {
    only('GET');
    const r = sup.ready();
    return { status: r.ready ? 200 : 503, body: r };
  }
  if (!req.authorized) {
    throw new HypsinkError('HYPSINK_ERR_AUTH', `${method} ${path}: this request carries no valid API token`, {
      hint: 'Send the token hypsink run was given (HYPSINK_API_TOKEN or --api-token-file) as "Authorization: Bearer <token>"; hypsink ctl reads the same variable or --token-file.',
    });
  }
  if (path === '/v1/status') {
    only('GET');
    return { status: 200, body: await sup.status() };
  }
  if (path === '/v1/reload') {
    only('POST');
    return { status: 200, body: await sup.reload() };
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
      return { status: 200, body: await sup.sink(name) };
    }
    only('POST');
    if (verb === 'pause') return { status: 200, body: await sup.pause(name, url.searchParams.get('wait') !== 'false') };
    if (verb === 'resume') return { status: 200, body: await sup.resume(name) };
    if (verb === 'replay') {
      const q = url.searchParams;
      const a = replayRangeArgs({ dataset: q.get('dataset'), source: q.get('source'), since: q.get('since'), until: q.get('until') }, (f) => `the query parameter "${f}"`);
      return { status: 200, body: await sup.kernel.replay(name, a.dataset, a.source, a.since, a.until) };
    }
    return { status: 200, body: await sup.restart(name) };
  }
  throw Object.assign(usage(`${method} ${path}: no such route`), { httpStatus: 404 });
}

/**
 * The API's thread: the HTTP server, no kernel code. It checks the token
 * (constant time over sha256 digests, so its length does not leak either) and
 * answers live itself. While the kernel is busy it answers ready, status and a
 * known sink from the last snapshot the kernel's thread posted, and asks for a
 * new reading for the next request; a read still waiting when work begins is
 * answered then. Everything else is answered by the kernel's thread.
 * @ref LLP 0076
 */
const API_THREAD = `
const { parentPort, workerData } = require('node:worker_threads');
const { createServer } = require('node:http');
const { createHash, timingSafeEqual } = require('node:crypto');
const want = workerData.tokenDigest === null ? null : Buffer.from(workerData.tokenDigest, 'hex');
let busy = false;
let snapshot = { status: null, ready: null };
let next = 0;
const waiting = new Map();
const send = (res, status, text, close) => {
  const headers = { 'Content-Type': 'application/json; charset=utf-8', 'Content-Length': Buffer.byteLength(text), 'Cache-Control': 'no-store' };
  if (close) headers.Connection = 'close';
  res.writeHead(status, headers).end(text);
};
const json = (res, status, body) => send(res, status, JSON.stringify(body) + '\\n', false);
const authorized = (req) => {
  if (want === null) return true;
  const h = req.headers.authorization ?? '';
  if (h.length > 4096 || !h.startsWith('Bearer ')) return false;
  return timingSafeEqual(createHash('sha256').update(h.slice(7).trim()).digest(), want);
};
const readRoute = (method, path, ok) => {
  if (method !== 'GET') return null;
  if (path === '/v1/health/ready') return { route: 'ready' };
  if (!ok) return null;
  if (path === '/v1/status') return { route: 'status' };
  const m = /^\\/v1\\/sinks\\/([^/]+)$/.exec(path);
  if (!m) return null;
  try {
    return { route: 'sink', sink: decodeURIComponent(m[1]) };
  } catch {
    return null;
  }
};
const fromSnapshot = (read) => {
  if (read === null) return null;
  if (read.route === 'ready') return snapshot.ready && { status: snapshot.ready.ready ? 200 : 503, body: snapshot.ready };
  if (snapshot.status === null) return null;
  if (read.route === 'status') return { status: 200, body: snapshot.status };
  const sink = snapshot.status.sinks.find((s) => s.name === read.sink);
  return sink ? { status: 200, body: sink } : null;
};
parentPort.on('message', (m) => {
  if (m.type === 'answer') {
    const w = waiting.get(m.id);
    waiting.delete(m.id);
    if (w) send(w.res, m.status, m.text, m.close);
  } else if (m.type === 'snapshot') {
    snapshot = m.snapshot;
  } else if (m.type === 'busy') {
    busy = m.busy;
    if (!busy) return;
    for (const [id, w] of waiting) {
      const a = fromSnapshot(w.read);
      if (a === null) continue;
      waiting.delete(id);
      json(w.res, a.status, a.body);
    }
  }
});
const server = createServer((req, res) => {
  req.resume(); // no route reads a body: whatever was sent is discarded
  const method = req.method ?? 'GET';
  let path = '';
  try {
    path = new URL(req.url ?? '/', 'http://api').pathname.replace(/\\/+$/, '');
  } catch {}
  if (path === '/v1/health/live' && method === 'GET') return json(res, 200, { live: true });
  const ok = authorized(req);
  const read = readRoute(method, path, ok);
  if (busy) {
    const a = fromSnapshot(read);
    if (a !== null) {
      json(res, a.status, a.body);
      parentPort.postMessage({ type: 'read' });
      return;
    }
  }
  const id = ++next;
  waiting.set(id, { res, read });
  res.on('close', () => waiting.delete(id));
  parentPort.postMessage({ type: 'request', id, method, url: req.url ?? '/', authorized: ok });
});
server.headersTimeout = 10000;
server.requestTimeout = 0; // a pause waits for its tick's unit, a reload for every sink's
server.once('error', (e) => parentPort.postMessage({ type: 'listenError', code: e.code, message: e.message }));
server.listen(workerData.port, workerData.host, () => parentPort.postMessage({ type: 'listening', port: server.address().port }));
`;

/** Serve the API; resolves once it listens. */
export async function serveApi(sup: Supervisor, opts: ApiOptions): Promise<ApiServer> {
  // The first reading, so that a tick at start is answered from it.
  await sup.status();
  const worker = new Worker(API_THREAD, {
    eval: true,
    workerData: { port: opts.port, host: opts.host, tokenDigest: opts.token === undefined ? null : digest(opts.token).toString('hex') },
  });
  const post = () => worker.postMessage({ type: 'snapshot', snapshot: { status: sup.snapshot(), ready: sup.ready() } });
  const follow = (busy: Busy) => {
    worker.postMessage({ type: 'busy', busy: busy.active });
    return busy.listen((b) => worker.postMessage({ type: 'busy', busy: b }));
  };
  post();
  const unchange = sup.onChange(post);
  let unbusy = follow(sup.kernel.busy);
  const unswap = sup.onSwap((k) => {
    unbusy();
    unbusy = follow(k.busy);
  });
  const answer = async (req: ApiRequest) => {
    const a = await route(sup, req).catch(failed);
    worker.postMessage({ type: 'answer', id: req.id, status: a.status, text: `${JSON.stringify(a.body)}\n`, close: a.close === true });
  };
  const stop = async () => {
    unchange();
    unswap();
    unbusy();
    await worker.terminate();
  };
  try {
    const port = await new Promise<number>((ok, bad) => {
      worker.on('message', (m: ApiRequest & { type: string; port: number; code?: string; message: string }) => {
        if (m.type === 'request') void answer(m);
        else if (m.type === 'read') sup.refresh().catch((e: unknown) => sup.kernel.log.warn({ err: e }, 'reading the status for the API failed'));
        else if (m.type === 'listening') ok(m.port);
        else if (m.type === 'listenError') bad(listenError(Object.assign(new Error(m.message), { code: m.code }), opts));
      });
      worker.once('error', bad);
    });
    worker.on('error', (e) => sup.kernel.log.error({ err: e }, 'the control API thread failed'));
    const host = opts.host.includes(':') ? `[${opts.host}]` : opts.host;
    // Called once the daemon has stopped: nothing it could still answer is worth waiting for.
    return { url: `http://${host}:${port}`, close: stop };
  } catch (e) {
    await stop();
    throw e;
  }
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
