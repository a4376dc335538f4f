/**
 * A loopback HTTP proxy that injects faults in front of a real server (s3rver,
 * the reference receiver, ...). It is a real HTTP server, not a client mock: the
 * code under test talks to it over a socket.
 *
 * Each request is shown to a rule function, which says what to do with it:
 * forward it, answer it (503 + Retry-After, 500, 403, 412 ...), answer slowly,
 * drop the connection mid-request, or forward it and then lose the answer
 * (the commit happened, the client never hears of it). Rules are plain
 * functions, so crash-matrix and simulation tests can compose their own.
 */
import { type IncomingMessage, type OutgoingHttpHeaders, type ServerResponse, createServer, request } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';

export interface ProxiedRequest {
  /** 0-based index over all requests this proxy has seen. */
  readonly index: number;
  readonly method: string;
  /** Raw request target, e.g. `/lake/hyp/a.parquet?uploadId=...&partNumber=2`. */
  readonly url: string;
  /** Decoded path segments after the first: for path-style S3, the bucket. */
  readonly bucket: string;
  /** Decoded object key (path-style S3), "" for bucket-level requests. */
  readonly key: string;
  readonly query: URLSearchParams;
  readonly headers: IncomingMessage['headers'];
  /**
   * Run `fn` once the proxy is done with this request (answered, forwarded and
   * answered, or dropped), also on error. Lets a rule hold a lock across the
   * forward it lets through.
   */
  onSettled(fn: () => void): void;
}

export type FaultAction =
  /** Pass the request to the target and its answer back. */
  | { readonly kind: 'forward' }
  /** Answer without contacting the target (the request body is read first). */
  | {
      readonly kind: 'respond';
      readonly status: number;
      readonly headers?: OutgoingHttpHeaders;
      readonly body?: string;
    }
  /** Wait, then do `then` (default forward): a slow store. */
  | { readonly kind: 'delay'; readonly ms: number; readonly then?: FaultAction }
  /** Destroy the client connection after `afterBytes` of the request body (default: at once). */
  | { readonly kind: 'drop'; readonly afterBytes?: number }
  /** Forward (the target commits), then answer the client this instead: a lost acknowledgement. */
  | { readonly kind: 'forwardThenRespond'; readonly status: number; readonly headers?: OutgoingHttpHeaders; readonly body?: string }
  /** Forward, then destroy the client connection instead of answering. */
  | { readonly kind: 'forwardThenDrop' };

export type FaultRule = (req: ProxiedRequest) => FaultAction | undefined | Promise<FaultAction | undefined>;

export interface FaultProxy {
  /** `http://127.0.0.1:<port>` */
  readonly endpoint: string;
  /** Every request seen, in arrival order, with what was done with it. */
  readonly log: { req: ProxiedRequest; action: FaultAction['kind'] }[];
  setRule(rule: FaultRule | undefined): void;
  stop(): Promise<void>;
}

/** An S3-style XML error answer. */
export function s3ErrorResponse(
  status: number,
  code: string,
  message: string,
  headers: OutgoingHttpHeaders = {},
): FaultAction {
  return {
    kind: 'respond',
    status,
    headers: { 'content-type': 'application/xml', ...headers },
    body: `<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>${code}</Code><Message>${message}</Message><RequestId>fault-proxy</RequestId></Error>`,
  };
}

/** The first `n` requests matching `match` get `action`; later ones fall through (undefined). */
export function firstN(n: number, match: (r: ProxiedRequest) => boolean, action: FaultAction): FaultRule {
  let hits = 0;
  return (r) => {
    if (!match(r) || hits >= n) return undefined;
    hits++;
    return action;
  };
}

/** Rules in order; the first one with an answer wins. */
export function anyOf(...rules: FaultRule[]): FaultRule {
  return async (r) => {
    for (const rule of rules) {
      const a = await rule(r);
      if (a) return a;
    }
    return undefined;
  };
}

/**
 * Emulates S3's conditional writes for a store that ignores them: a PutObject or
 * CompleteMultipartUpload carrying `If-None-Match: *` gets 412 PreconditionFailed
 * when the object already exists. `exists` reads the store (e.g. TestS3Server.objectExists).
 *
 * Atomic per key: conditional writes of one bucket/key wait for each other, and
 * each holds its turn from the existence check until the proxy has finished with
 * it (the store answered), so of N concurrent create-if-absent writes of one key
 * exactly one reaches the store. Writes of other keys, and unconditional writes,
 * are not held.
 */
export function enforceIfNoneMatch(exists: (bucket: string, key: string) => Promise<boolean>): FaultRule {
  // Tail of each key's queue; removed when the last holder leaves.
  const tails = new Map<string, Promise<void>>();
  return async (r) => {
    if (r.headers['if-none-match'] !== '*' || !r.key) return undefined;
    const isPut = r.method === 'PUT' && !r.query.has('uploadId');
    const isComplete = r.method === 'POST' && r.query.has('uploadId');
    if (!isPut && !isComplete) return undefined;
    const id = `${r.bucket}/${r.key}`;
    const before = tails.get(id) ?? Promise.resolve();
    let release!: () => void;
    const mine = new Promise<void>((resolve) => {
      release = resolve;
    });
    const tail = before.then(() => mine);
    tails.set(id, tail);
    const leave = () => {
      release();
      if (tails.get(id) === tail) tails.delete(id);
    };
    await before;
    let found: boolean;
    try {
      found = await exists(r.bucket, r.key);
    } catch (e) {
      leave();
      throw e;
    }
    if (found) {
      leave();
      return s3ErrorResponse(412, 'PreconditionFailed', 'At least one of the pre-conditions you specified did not hold', {});
    }
    // Absent: hold the key until this write has gone through (or failed).
    r.onSettled(leave);
    return undefined;
  };
}

function parse(index: number, req: IncomingMessage, settled: (() => void)[]): ProxiedRequest {
  const u = new URL(req.url ?? '/', 'http://proxy.invalid');
  const segs = u.pathname.split('/').slice(1);
  return {
    onSettled: (fn) => {
      settled.push(fn);
    },
    index,
    method: req.method ?? 'GET',
    url: req.url ?? '/',
    bucket: decodeURIComponent(segs[0] ?? ''),
    key: segs.slice(1).map(decodeURIComponent).join('/'),
    query: u.searchParams,
    headers: req.headers,
  };
}

const bodies = new WeakMap<IncomingMessage, Promise<Buffer>>();
const closed = new WeakSet<ServerResponse>();

/** The whole request body, read once (later calls get the same buffer). */
function readBody(req: IncomingMessage): Promise<Buffer> {
  let p = bodies.get(req);
  if (!p) {
    p = new Promise<Buffer>((resolve, reject) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => resolve(Buffer.concat(chunks)));
      req.on('error', reject);
      req.on('aborted', () => reject(new Error('client aborted')));
    });
    bodies.set(req, p);
  }
  return p;
}

function gone(res: ServerResponse): boolean {
  return closed.has(res);
}

export async function startFaultProxy(opts: { target: string; rule?: FaultRule }): Promise<FaultProxy> {
  const target = new URL(opts.target);
  let rule = opts.rule;
  let count = 0;
  const log: FaultProxy['log'] = [];
  const sockets = new Set<Socket>();

  /** Forward `body`; resolves with the target's answer fully buffered (so it can be dropped or replaced). */
  const forward = (
    req: IncomingMessage,
    body: Buffer,
  ): Promise<{ status: number; headers: IncomingMessage['headers']; body: Buffer }> =>
    new Promise((resolve, reject) => {
      const up = request(
        {
          host: target.hostname,
          port: target.port,
          method: req.method,
          path: req.url,
          // Host stays the proxy's: the client signed for it.
          headers: req.headers,
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () => resolve({ status: res.statusCode ?? 502, headers: res.headers, body: Buffer.concat(chunks) }));
          res.on('error', reject);
        },
      );
      up.on('error', reject);
      up.end(body);
    });

  const act = async (action: FaultAction, req: IncomingMessage, res: ServerResponse): Promise<void> => {
    switch (action.kind) {
      case 'forward': {
        const r = await forward(req, await readBody(req));
        const headers = { ...r.headers };
        delete headers['transfer-encoding'];
        headers['content-length'] = String(r.body.length);
        res.writeHead(r.status, headers);
        res.end(r.body);
        return;
      }
      case 'respond':
      case 'forwardThenRespond': {
        const body = await readBody(req);
        if (action.kind === 'forwardThenRespond') await forward(req, body);
        const answer = Buffer.from(action.body ?? '');
        res.writeHead(action.status, { ...action.headers, 'content-length': String(answer.length) });
        res.end(req.method === 'HEAD' ? undefined : answer);
        return;
      }
      case 'delay': {
        // Read the request meanwhile, as a slow store does; that is also how a client leaving is noticed.
        await readBody(req);
        await new Promise((r) => setTimeout(r, action.ms));
        // The client gave up meanwhile (timeout, abort): its request goes no further.
        if (gone(res)) return;
        return act(action.then ?? { kind: 'forward' }, req, res);
      }
      case 'drop': {
        const limit = action.afterBytes ?? 0;
        let seen = 0;
        // After a delay the body was already read: drop at once.
        if (limit <= 0 || bodies.has(req)) {
          req.socket.destroy();
          return;
        }
        await new Promise<void>((resolve) => {
          req.on('data', (c: Buffer) => {
            seen += c.length;
            if (seen >= limit) {
              req.socket.destroy();
              resolve();
            }
          });
          req.on('end', () => {
            req.socket.destroy();
            resolve();
          });
          req.on('close', () => resolve());
        });
        return;
      }
      case 'forwardThenDrop': {
        await forward(req, await readBody(req));
        req.socket.destroy();
        return;
      }
    }
  };

  const server = createServer((req, res) => {
    const settled: (() => void)[] = [];
    const info = parse(count++, req, settled);
    res.on('close', () => {
      if (!res.writableFinished) closed.add(res);
    });
    void (async () => {
      try {
        const action = (rule ? await rule(info) : undefined) ?? { kind: 'forward' as const };
        log.push({ req: info, action: action.kind });
        await act(action, req, res);
      } catch {
        if (!res.headersSent) {
          res.writeHead(502, { 'content-type': 'text/plain' });
          res.end('fault-proxy: target unreachable');
        } else {
          res.destroy();
        }
      } finally {
        for (const fn of settled) fn();
      }
    })();
  });
  server.on('connection', (s: Socket) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    endpoint: `http://127.0.0.1:${port}`,
    log,
    setRule(r) {
      rule = r;
    },
    async stop() {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
