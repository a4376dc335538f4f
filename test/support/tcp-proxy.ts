/**
 * A loopback TCP proxy in front of a real server (the test PostgreSQL): a real
 * net.Server whose connections are piped to the target port, byte for byte,
 * under a rule the test sets at any time. It knows nothing of the protocol; a
 * rule can wait for a text the client sends (a COPY statement, a COMMIT) and
 * drop there, so a test says "the connection is lost mid-COPY" or "COMMIT
 * reached the server, its answer never came back" without timing anything.
 *
 * Rules (one at a time; the one-shot ones fall back to `pass` once they fired):
 * - pass: forward both ways.
 * - refuse: new connections are accepted and reset at once (open ones pass).
 * - delay: every chunk, each way, waits `ms` first (order kept).
 * - drop: once the clients sent `afterBytes` more bytes, every open connection
 *   is destroyed, both sides, and nothing past that byte is forwarded. With
 *   `at`, counting starts on a connection that sent each text of `at` in order,
 *   at the first byte of the last one (0: none of that text reaches the server).
 * - loseAnswer: the client's bytes through the last text of `at` reach the
 *   server; the first answer the server sends after them does not: every open
 *   connection is destroyed instead (the server did the work, the client never
 *   hears of it).
 * `dropAll()` destroys every open connection now.
 */
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';

export type TcpRule =
  | { readonly kind: 'pass' }
  | { readonly kind: 'refuse' }
  | { readonly kind: 'delay'; readonly ms: number }
  | { readonly kind: 'drop'; readonly afterBytes: number; readonly at?: readonly string[] }
  | { readonly kind: 'loseAnswer'; readonly at: readonly string[] };

export interface TcpProxyStats {
  /** Connections accepted (refused ones included). */
  connections: number;
  refused: number;
  /** Times the rule (or dropAll) destroyed the open connections. */
  drops: number;
  /** Bytes the clients sent that were forwarded to the target. */
  bytesFromClients: number;
}

export interface TcpProxy {
  readonly host: string;
  readonly port: number;
  readonly stats: Readonly<TcpProxyStats>;
  /** The rule in force (a one-shot rule that fired is `pass` again). */
  readonly rule: TcpRule;
  setRule(rule: TcpRule | undefined): void;
  /** Destroy every open connection now; returns how many there were. */
  dropAll(): number;
  /** Open connections. */
  readonly open: number;
  stop(): Promise<void>;
}

interface Conn {
  readonly client: Socket;
  readonly upstream: Socket;
  /** Bytes of the client forwarded so far. */
  sent: number;
  /** The rule (by epoch) the match state below belongs to. */
  epoch: number;
  /** Index into the rule's `at` this connection waits for next. */
  stage: number;
  /** The client's last bytes, for a text split over two chunks. */
  tail: Buffer;
  /** Client byte offset past which nothing is forwarded (drop with `at`, once its text was seen). */
  dropAt: number | undefined;
  /** The next answer from the server is lost (loseAnswer fired on this connection). */
  loseNext: boolean;
  /** Delivery chains, one per direction, so a delay keeps the order. */
  up: Promise<void>;
  down: Promise<void>;
  dead: boolean;
}

export async function startTcpProxy(opts: { target: { host: string; port: number }; rule?: TcpRule }): Promise<TcpProxy> {
  let rule: TcpRule = opts.rule ?? { kind: 'pass' };
  /** Client bytes counted for a `drop` without `at`, since the rule was set. */
  let counted = 0;
  /** Bumped at every setRule: a connection's match state belongs to one rule. */
  let epoch = 0;
  const conns = new Set<Conn>();
  const stats: TcpProxyStats = { connections: 0, refused: 0, drops: 0, bytesFromClients: 0 };

  const kill = (c: Conn) => {
    if (c.dead) return;
    c.dead = true;
    conns.delete(c);
    c.client.destroy();
    c.upstream.destroy();
  };
  const dropAll = () => {
    const n = conns.size;
    for (const c of [...conns]) kill(c);
    stats.drops++;
    return n;
  };
  const fired = () => {
    rule = { kind: 'pass' };
    dropAll();
  };

  const toServer = (c: Conn, chunk: Buffer) => {
    if (c.dead) return;
    c.upstream.write(chunk);
    c.sent += chunk.length;
    stats.bytesFromClients += chunk.length;
  };

  /** How many bytes of `chunk` may go to the server, and whether the rule fires after them. */
  const admit = (c: Conn, chunk: Buffer): { forward: number; fire: boolean } => {
    const r = rule;
    if (r.kind === 'drop' && r.at === undefined) {
      const room = r.afterBytes - counted;
      if (room > chunk.length) {
        counted += chunk.length;
        return { forward: chunk.length, fire: false };
      }
      return { forward: Math.max(0, room), fire: true };
    }
    if (r.kind !== 'drop' && r.kind !== 'loseAnswer') return { forward: chunk.length, fire: false };
    const at: readonly string[] = r.at ?? [];
    if (c.epoch !== epoch) {
      // A new rule: it looks at what the client sends from now on.
      c.epoch = epoch;
      c.stage = 0;
      c.dropAt = undefined;
      c.tail = Buffer.alloc(0);
    }
    if (c.dropAt === undefined) {
      // Find the texts of `at` in order, in the tail and this chunk.
      const buf = Buffer.concat([c.tail, chunk]);
      const base = c.sent - c.tail.length;
      let from = 0;
      while (c.stage < at.length) {
        const text = Buffer.from(at[c.stage]!, 'utf8');
        const i = buf.indexOf(text, from);
        if (i < 0) break;
        c.stage++;
        from = i + text.length;
        if (c.stage === at.length) {
          if (r.kind === 'loseAnswer') {
            c.loseNext = true;
            rule = { kind: 'pass' };
            return { forward: chunk.length, fire: false };
          }
          c.dropAt = base + i + r.afterBytes;
        }
      }
      const keep = Math.max(...at.map((t) => Buffer.byteLength(t, 'utf8'))) - 1;
      c.tail = buf.subarray(Math.max(0, buf.length - keep));
      if (c.dropAt === undefined) return { forward: chunk.length, fire: false };
    }
    const room = c.dropAt - c.sent;
    if (room > chunk.length) return { forward: chunk.length, fire: false };
    return { forward: Math.max(0, room), fire: true };
  };

  // Half-open allowed: an end travels through the delivery chain after the data before it.
  const server: Server = createServer({ allowHalfOpen: true }, (client) => {
    stats.connections++;
    if (rule.kind === 'refuse') {
      stats.refused++;
      client.on('error', () => undefined);
      client.resetAndDestroy();
      return;
    }
    const upstream = createConnection({ host: opts.target.host, port: opts.target.port, allowHalfOpen: true, noDelay: true });
    // As the client's own socket (pg sets no delay): the proxy adds no Nagle wait of its own.
    client.setNoDelay(true);
    const c: Conn = {
      client,
      upstream,
      sent: 0,
      epoch,
      stage: 0,
      tail: Buffer.alloc(0),
      dropAt: undefined,
      loseNext: false,
      up: Promise.resolve(),
      down: Promise.resolve(),
      dead: false,
    };
    conns.add(c);
    for (const s of [client, upstream]) {
      s.on('error', () => kill(c));
      s.on('close', () => kill(c));
    }
    const delay = () => (rule.kind === 'delay' ? rule.ms : 0);
    client.on('data', (chunk: Buffer) => {
      const wait = delay();
      c.up = c.up.then(async () => {
        if (wait > 0) await sleep(wait);
        if (c.dead) return;
        const { forward, fire } = admit(c, chunk);
        if (forward > 0) toServer(c, forward === chunk.length ? chunk : chunk.subarray(0, forward));
        if (fire) fired();
      });
    });
    client.on('end', () => {
      c.up = c.up.then(() => {
        if (!c.dead) upstream.end();
      });
    });
    upstream.on('data', (chunk: Buffer) => {
      const wait = delay();
      c.down = c.down.then(async () => {
        if (wait > 0) await sleep(wait);
        if (c.dead) return;
        if (c.loseNext) {
          // The server answered what the rule let through: that answer is lost.
          dropAll();
          return;
        }
        client.write(chunk);
      });
    });
    upstream.on('end', () => {
      c.down = c.down.then(() => {
        if (!c.dead) client.end();
      });
    });
  });
  await new Promise<void>((ok, fail) => server.once('error', fail).listen(0, '127.0.0.1', ok));
  const port = (server.address() as { port: number }).port;
  return {
    host: '127.0.0.1',
    port,
    stats,
    get rule() {
      return rule;
    },
    get open() {
      return conns.size;
    },
    setRule(r) {
      rule = r ?? { kind: 'pass' };
      counted = 0;
      epoch++;
    },
    dropAll,
    async stop() {
      for (const c of [...conns]) kill(c);
      await new Promise<void>((ok) => server.close(() => ok()));
    },
  };
}
