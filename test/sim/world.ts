/**
 * The simulation's world: one s3rver and one reference receiver over loopback,
 * each behind a fault proxy whose rule a seed sets (5xx, slow answers, 429/503
 * bursts, a body limit answering 413), and one embedded PostgreSQL behind a TCP
 * proxy (refused connections, drops mid-COPY and around COMMIT, delays). Shared
 * by the seeds of one driver process; seeds keep apart by prefix and partition
 * (source) names, in one database of the driver's own, and each lane has its
 * own proxies (`lane(i)`), so one lane's rules never reach another lane's
 * requests or connections.
 */
import { promises as fsp } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { LEDGER_FILE, type LedgerEntry, startReceiver, type Receiver } from '../../fixtures/receiver/server.js';
import pg from 'pg';
import { type FaultProxy, type FaultRule, startFaultProxy } from '../support/fault-proxy.js';
import { freePort, type TestPg, testPg } from '../support/pg.js';
import { startS3Server, type TestS3Server, useS3rverCredentials } from '../support/s3server.js';
import { startTcpProxy, type TcpProxy, type TcpRule } from '../support/tcp-proxy.js';
import { PG_TABLE_DDL } from './pg.js';

export interface World {
  readonly s3: TestS3Server;
  readonly s3Proxy: FaultProxy;
  readonly receiver: Receiver;
  readonly receiverProxy: FaultProxy;
  readonly receiverDir: string;
  readonly token: string;
  /**
   * The port this lane's aggregator (`hypsink receiver --config`, in a worker
   * process of the lane) listens on: the same one across its restarts, so the
   * agents' config names it once. @ref LLP 0074, LLP 0082
   */
  readonly aggPort: number;
  /** A proxy in front of that port with the receiver proxy's rule and limit: the agents' forward sinks post here. */
  readonly aggProxy: FaultProxy;
  setS3Rule(rule: FaultRule | undefined): void;
  setReceiverRule(rule: FaultRule | undefined): void;
  /** A proxy in front of the receiver whose limit was lowered: bodies over `bytes` get 413 (undefined lifts it). */
  setReceiverLimit(bytes: number | undefined): void;
  readonly receiverLimit: number | undefined;
  /** Content-Length of the last ingest POST this world's receiver proxy saw (0 before any). */
  readonly lastPostBytes: number;
  /** Rows the world's receiver stored for a partition, in arrival order (read incrementally from its ledger). */
  receiverRows(dataset: string, source: string): Promise<readonly Record<string, unknown>[]>;
  /** The driver's database on the embedded PostgreSQL, direct (no proxy): the warm-up's, and for reading back. */
  readonly pgDirectUrl: string;
  /** The same database through this view's TCP proxy: what scenario configs name. */
  readonly pgUrl: string;
  readonly pgProxy: TcpProxy;
  setPgRule(rule: TcpRule | undefined): void;
  /** One statement on the driver's database, direct, as plain SQL (never through the sink). */
  pgQuery<R extends pg.QueryResultRow = pg.QueryResultRow>(sql: string, values?: unknown[]): Promise<R[]>;
  /** A view with its own proxies (and rules) over the same s3rver, receiver and PostgreSQL. */
  lane(i: number): Promise<World>;
  stop(): Promise<void>;
}

/** Tails the receiver's ledger: each step reads only the batches committed since the last read. */
class ReceiverTail {
  private offset = 0;
  private readonly rows = new Map<string, Record<string, unknown>[]>();
  private chain: Promise<void> = Promise.resolve();

  constructor(private readonly dir: string) {}

  read(dataset: string, source: string): Promise<readonly Record<string, unknown>[]> {
    const next = this.chain.then(() => this.refresh());
    this.chain = next.catch(() => undefined);
    return next.then(() => this.rows.get(`${dataset}\0${source}`) ?? []);
  }

  private async refresh(): Promise<void> {
    let fh: fsp.FileHandle;
    try {
      fh = await fsp.open(join(this.dir, LEDGER_FILE), 'r');
    } catch {
      return;
    }
    let text: Buffer;
    try {
      const { size } = await fh.stat();
      if (size <= this.offset) return;
      text = Buffer.alloc(size - this.offset);
      await fh.read(text, 0, text.length, this.offset);
    } finally {
      await fh.close();
    }
    // Only whole lines: the other lane's batch may be mid-append.
    const end = text.lastIndexOf(0x0a) + 1;
    if (end === 0) return;
    this.offset += end;
    for (const line of text.subarray(0, end).toString('utf8').split('\n')) {
      if (line === '') continue;
      const e = JSON.parse(line) as LedgerEntry;
      if (e.bytes === 0) continue;
      const data = Buffer.alloc(e.bytes);
      const df = await fsp.open(join(this.dir, e.file), 'r');
      try {
        await df.read(data, 0, e.bytes, e.offset);
      } finally {
        await df.close();
      }
      const key = `${e.dataset}\0${e.source}`;
      let list = this.rows.get(key);
      if (!list) {
        list = [];
        this.rows.set(key, list);
      }
      for (const l of data.toString('utf8').split('\n')) if (l.trim() !== '') list.push(JSON.parse(l) as Record<string, unknown>);
    }
  }
}

interface Shared {
  readonly s3: TestS3Server;
  readonly receiver: Receiver;
  readonly receiverDir: string;
  readonly token: string;
  readonly tail: ReceiverTail;
  readonly pg: TestPg;
  readonly pgDirectUrl: string;
  readonly pgRead: pg.Pool;
}

async function view(shared: Shared, lanes: Map<number, Promise<World>>, owned: { stop(): Promise<void> }[]): Promise<World> {
  let s3Rule: FaultRule | undefined;
  let recvRule: FaultRule | undefined;
  let limit: number | undefined;
  let lastPost = 0;
  const s3Proxy = await startFaultProxy({ target: shared.s3.endpoint, rule: (r) => s3Rule?.(r) });
  // One rule for the receiver and the aggregator: a seed forwards to one of them.
  const forwardRule: FaultRule = (r) => {
    if (r.method === 'POST') {
      const bytes = Number(r.headers['content-length'] ?? 0);
      lastPost = bytes;
      if (limit !== undefined && bytes > limit) {
        return { kind: 'respond', status: 413, headers: { 'content-type': 'text/plain' }, body: `proxy: body of ${bytes} bytes over the limit of ${limit}` };
      }
    }
    return recvRule?.(r);
  };
  const receiverProxy = await startFaultProxy({ target: shared.receiver.url, rule: forwardRule });
  const aggPort = await freePort();
  const aggProxy = await startFaultProxy({ target: `http://127.0.0.1:${aggPort}`, rule: forwardRule });
  const direct = new URL(shared.pgDirectUrl);
  const pgProxy = await startTcpProxy({ target: { host: direct.hostname, port: Number(direct.port) } });
  const proxied = new URL(shared.pgDirectUrl);
  proxied.host = `${pgProxy.host}:${pgProxy.port}`;
  owned.push(s3Proxy, receiverProxy, aggProxy, pgProxy);
  const w: World = {
    s3: shared.s3,
    s3Proxy,
    receiver: shared.receiver,
    receiverProxy,
    receiverDir: shared.receiverDir,
    token: shared.token,
    aggPort,
    aggProxy,
    setS3Rule: (r) => {
      s3Rule = r;
    },
    setReceiverRule: (r) => {
      recvRule = r;
    },
    setReceiverLimit: (b) => {
      limit = b;
    },
    get receiverLimit() {
      return limit;
    },
    get lastPostBytes() {
      return lastPost;
    },
    receiverRows: (d, s) => shared.tail.read(d, s),
    pgDirectUrl: shared.pgDirectUrl,
    pgUrl: proxied.toString(),
    pgProxy,
    setPgRule: (r) => pgProxy.setRule(r),
    pgQuery: async (sql, values) => (await shared.pgRead.query(sql, values)).rows,
    lane: (i) => {
      let l = lanes.get(i);
      if (!l) {
        l = view(shared, lanes, owned);
        lanes.set(i, l);
      }
      return l;
    },
    async stop() {
      for (const p of owned.splice(0)) await p.stop();
      await shared.pgRead.end();
      await shared.pg.stop();
      await shared.receiver.close();
      await shared.s3.stop();
      await rm(shared.receiverDir, { recursive: true, force: true });
    },
  };
  return w;
}

export async function startWorld(): Promise<World> {
  useS3rverCredentials();
  const s3 = await startS3Server({ buckets: ['simlake'] });
  const receiverDir = await mkdtemp(join(tmpdir(), 'hypsink-sim-recv-'));
  const token = 'sim-token-4f1c-9e2d7a';
  const receiver = await startReceiver({ port: 0, dataDir: receiverDir, token, maxInflight: 64 });
  const server = await testPg();
  const pgDirectUrl = await server.database('sim');
  for (const sql of PG_TABLE_DDL) await server.query(sql, [], pgDirectUrl);
  const pgRead = new pg.Pool({ connectionString: pgDirectUrl, max: 2 });
  pgRead.on('error', () => undefined);
  return view({ s3, receiver, receiverDir, token, tail: new ReceiverTail(receiverDir), pg: server, pgDirectUrl, pgRead }, new Map(), []);
}
