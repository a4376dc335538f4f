/**
 * The simulation's world: one s3rver and one reference receiver over loopback,
 * each behind a fault proxy whose rule a seed sets (5xx, slow answers, 429/503
 * bursts, a body limit answering 413). Shared by the seeds of one driver
 * process; seeds keep apart by prefix and partition names, and each lane has
 * its own pair of proxies (`lane(i)`), so one lane's rules never reach
 * another lane's requests.
 */
import { promises as fsp } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { LEDGER_FILE, type LedgerEntry, startReceiver, type Receiver } from '../../fixtures/receiver/server.js';
import { type FaultProxy, type FaultRule, startFaultProxy } from '../support/fault-proxy.js';
import { startS3Server, type TestS3Server, useS3rverCredentials } from '../support/s3server.js';

export interface World {
  readonly s3: TestS3Server;
  readonly s3Proxy: FaultProxy;
  readonly receiver: Receiver;
  readonly receiverProxy: FaultProxy;
  readonly receiverDir: string;
  readonly token: string;
  setS3Rule(rule: FaultRule | undefined): void;
  setReceiverRule(rule: FaultRule | undefined): void;
  /** A proxy in front of the receiver whose limit was lowered: bodies over `bytes` get 413 (undefined lifts it). */
  setReceiverLimit(bytes: number | undefined): void;
  readonly receiverLimit: number | undefined;
  /** Content-Length of the last ingest POST this world's receiver proxy saw (0 before any). */
  readonly lastPostBytes: number;
  /** Rows the world's receiver stored for a partition, in arrival order (read incrementally from its ledger). */
  receiverRows(dataset: string, source: string): Promise<readonly Record<string, unknown>[]>;
  /** A view with its own proxies (and rules) over the same s3rver and receiver. */
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
}

async function view(shared: Shared, lanes: Map<number, Promise<World>>, owned: FaultProxy[]): Promise<World> {
  let s3Rule: FaultRule | undefined;
  let recvRule: FaultRule | undefined;
  let limit: number | undefined;
  let lastPost = 0;
  const s3Proxy = await startFaultProxy({ target: shared.s3.endpoint, rule: (r) => s3Rule?.(r) });
  const receiverProxy = await startFaultProxy({
    target: shared.receiver.url,
    rule: (r) => {
      if (r.method === 'POST') {
        const bytes = Number(r.headers['content-length'] ?? 0);
        lastPost = bytes;
        if (limit !== undefined && bytes > limit) {
          return { kind: 'respond', status: 413, headers: { 'content-type': 'text/plain' }, body: `proxy: body of ${bytes} bytes over the limit of ${limit}` };
        }
      }
      return recvRule?.(r);
    },
  });
  owned.push(s3Proxy, receiverProxy);
  const w: World = {
    s3: shared.s3,
    s3Proxy,
    receiver: shared.receiver,
    receiverProxy,
    receiverDir: shared.receiverDir,
    token: shared.token,
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
  return view({ s3, receiver, receiverDir, token, tail: new ReceiverTail(receiverDir) }, new Map(), []);
}
