/**
 * The receiver's connections are a budget clients without a token cannot
 * spend (issue 26): sockets that hold a connection without a token, slow
 * headers, and tokenless requests every so often, each as many as the cap,
 * never keep a client with a token out; and every authenticated route spends
 * the client's rate and in-flight limits. Real sockets over loopback; an
 * attacker on 127.0.0.2 is another address of this host. A client's timeout
 * here is a bound on correctness (it was served at all), not a speed figure.
 * @ref LLP 0065
 */
import assert from 'node:assert/strict';
import { chmod, writeFile } from 'node:fs/promises';
import * as net from 'node:net';
import * as path from 'node:path';
import { test } from 'node:test';
import { type Receiver, type ReceiverOptions, startReceiver } from '../../fixtures/receiver/server.js';
import { ingest, ndjson, refusesOptions, tempDir } from './helpers.js';

const A = 'client-a-token-0123456789abcdef';
const B = 'client-b-token-fedcba9876543210';
const CAP = 20;
/** What a client with a token is given to be served: a bound on correctness only. */
const SERVED_WITHIN_MS = 2000;

async function withReceiver(opts: Partial<ReceiverOptions>, fn: (r: Receiver) => Promise<void>): Promise<void> {
  const { dir, cleanup } = await tempDir('rcv-conn');
  const file = path.join(dir, 'tokens');
  await writeFile(file, `alice ${A}\nbob ${B}\n`);
  await chmod(file, 0o600);
  const r = await startReceiver({ port: 0, dataDir: path.join(dir, 'data'), tokensFile: file, unauthorizedDelayMs: 0, ...opts });
  try {
    await fn(r);
  } finally {
    await r.close();
    await cleanup();
  }
}

interface Held {
  readonly socket: net.Socket;
  /** Everything received so far. */
  text(): string;
  closed(): boolean;
  readonly whenClosed: Promise<void>;
  /** Resolves at the first byte received or at close. */
  readonly firstAnswer: Promise<void>;
}

/** A connected socket, from `localAddress` when given (another address of this host). */
function hold(port: number, localAddress?: string): Promise<Held> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ port, host: '127.0.0.1', ...(localAddress ? { localAddress } : {}) });
    let text = '';
    let closed = false;
    let answered!: () => void;
    const firstAnswer = new Promise<void>((r) => {
      answered = r;
    });
    const whenClosed = new Promise<void>((r) => {
      socket.on('close', () => {
        closed = true;
        answered();
        r();
      });
    });
    socket.setEncoding('latin1').on('data', (d: string) => {
      text += d;
      answered();
    });
    socket.on('error', () => {});
    socket.once('connect', () => resolve({ socket, text: () => text, closed: () => closed, whenClosed, firstAnswer }));
    socket.once('error', reject);
  });
}

const HEALTH = 'GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n';
const whoamiWith = (token: string) => `GET /v1/whoami HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${token}\r\n\r\n`;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** One turn of the in-process server's loop past every connection already made: it has accepted them. */
const accepted = () => sleep(50);

/** Poll `cond` until it holds; a bound on correctness (fails naming `what`), not a speed figure. */
async function until(cond: () => boolean, what: string, ms = 5000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) assert.fail(`never happened: ${what}`);
    await sleep(10);
  }
}

async function servedWithToken(r: Receiver, id: string): Promise<void> {
  const ok = await ingest(r.url, { id, token: A, body: ndjson(1), timeoutMs: SERVED_WITHIN_MS });
  assert.deepEqual(ok.json, { stored: 1 }, ok.text);
}

test('as many tokenless keep-alive connections as the cap do not keep a client with a token out', async () => {
  await withReceiver({ maxConnections: CAP }, async (r) => {
    const held: Held[] = [];
    for (let i = 0; i < CAP; i++) {
      const h = await hold(r.port);
      h.socket.write(HEALTH);
      held.push(h);
    }
    // Each was answered (and may keep its connection) before the client with a token comes.
    await Promise.all(held.map((h) => h.firstAnswer));
    try {
      await servedWithToken(r, 'ka-1');
      for (const h of held.filter((x) => x.text() !== '')) {
        assert.match(h.text(), /^HTTP\/1\.1 200 /);
        assert.match(h.text(), /\r\nconnection: close\r\n/i, 'no connection without a token is kept alive');
      }
    } finally {
      for (const h of held) h.socket.destroy();
    }
  });
});

test('as many slow-header connections as the cap do not keep a client with a token out', async () => {
  await withReceiver({ maxConnections: CAP }, async (r) => {
    const held: Held[] = [];
    for (let i = 0; i < CAP; i++) {
      const h = await hold(r.port);
      h.socket.write('POST /v1/ingest/ds HT');
      held.push(h);
    }
    await accepted();
    try {
      await servedWithToken(r, 'slow-1');
    } finally {
      for (const h of held) h.socket.destroy();
    }
  });
});

test('as many connections as the cap, each sending a tokenless request every so often and back when closed, do not keep a client with a token out', async () => {
  await withReceiver({ maxConnections: CAP }, async (r) => {
    let stop = false;
    let answers = 0;
    const open = new Set<net.Socket>();
    const attacker = async () => {
      while (!stop) {
        const h = await hold(r.port, '127.0.0.2').catch(() => null);
        if (h === null) continue;
        open.add(h.socket);
        h.socket.on('data', () => answers++);
        // A request at once, then every so often: a connection displaced within its first
        // 20 ms (the cap is full of attackers taking each other's places) still asked once.
        h.socket.write(HEALTH);
        const every = setInterval(() => h.socket.write(HEALTH), 20);
        await h.whenClosed;
        clearInterval(every);
        open.delete(h.socket);
      }
    };
    const attackers = Array.from({ length: CAP }, attacker);
    try {
      // Inside the try: a failure here must stop the attackers too, or the file never ends.
      await until(() => answers >= 2 * CAP, 'the attackers were answered twice over');
      await servedWithToken(r, 'every-1');
    } finally {
      stop = true;
      for (const s of open) s.destroy();
      await Promise.all(attackers);
    }
  });
});

test('a share of the cap is kept for clients with a token: past (cap - reserve) a tokenless connection takes the oldest one\'s place', async () => {
  await withReceiver({ maxConnections: CAP, reservedConnections: 5, maxConnectionsPerAddress: CAP }, async (r) => {
    const held: Held[] = [];
    for (let i = 0; i < CAP; i++) held.push(await hold(r.port, '127.0.0.2'));
    try {
      await until(() => held.filter((h) => h.closed()).length === 5, 'five tokenless connections closed');
      assert.deepEqual(
        held.map((h) => h.closed()),
        held.map((_, i) => i < 5),
        'the oldest five gave way',
      );
      assert.equal(r.stats().connections, CAP - 5);
      await servedWithToken(r, 'reserve-1');
    } finally {
      for (const h of held) h.socket.destroy();
    }
  });
});

test('connections per address: past the cap one address\'s newest takes its own oldest one\'s place; other addresses are untouched', async () => {
  await withReceiver({ maxConnections: CAP, maxConnectionsPerAddress: 4 }, async (r) => {
    const mine = await hold(r.port);
    mine.socket.write(whoamiWith(A));
    await mine.firstAnswer;
    assert.match(mine.text(), /^HTTP\/1\.1 200 /);
    const held: Held[] = [];
    for (let i = 0; i < 10; i++) held.push(await hold(r.port, '127.0.0.2'));
    try {
      await until(() => held.filter((h) => h.closed()).length === 6, 'six of ten connections of one address closed');
      assert.deepEqual(
        held.map((h) => h.closed()),
        held.map((_, i) => i < 6),
      );
      assert.ok(!mine.closed(), 'a connection of another address stays');
      await servedWithToken(r, 'addr-1');
    } finally {
      mine.socket.destroy();
      for (const h of held) h.socket.destroy();
    }
  });
});

test('at the cap, the longest idle connection with a token gives way; busy ones never do, and then a new connection is closed at once', async () => {
  await withReceiver({ maxConnections: 4, reservedConnections: 1, maxInflight: 8 }, async (r) => {
    const idle: Held[] = [];
    for (let i = 0; i < 4; i++) {
      const h = await hold(r.port);
      h.socket.write(whoamiWith(A));
      await h.firstAnswer;
      assert.match(h.text(), /^HTTP\/1\.1 200 /);
      idle.push(h);
    }
    const fifth = await hold(r.port);
    fifth.socket.write(HEALTH);
    await fifth.firstAnswer;
    assert.match(fifth.text(), /^HTTP\/1\.1 200 /, 'a fifth connection was served');
    await idle[0]!.whenClosed;
    assert.deepEqual(
      idle.map((h) => h.closed()),
      [true, false, false, false],
      'the least recently used idle connection gave way',
    );
    for (const h of idle) h.socket.destroy();
    await until(() => r.stats().connections === 0, 'every connection gone');

    // Four requests with a token in flight: nothing can give way.
    let release!: () => void;
    const released = new Promise<void>((res) => {
      release = res;
    });
    const busy: Promise<unknown>[] = [];
    for (let i = 0; i < 4; i++) {
      busy.push(ingest(r.url, { id: `busy-${i}`, token: A, body: ndjson(2), hold: () => released }));
      await until(() => r.stats().inflight === i + 1, `request ${i} in flight`);
    }
    const over = await hold(r.port);
    over.socket.write(HEALTH);
    await over.whenClosed;
    assert.equal(over.text(), '', 'a connection past the cap was served while every one was busy');
    release();
    for (const x of await Promise.all(busy)) assert.deepEqual((x as { json: unknown }).json, { stored: 2 });
  });
});

test('between requests a connection with a token is closed after the keep-alive timeout; one without a token at once', async () => {
  await withReceiver({ keepAliveTimeoutMs: 200 }, async (r) => {
    const h = await hold(r.port);
    h.socket.write(whoamiWith(A));
    await h.firstAnswer;
    assert.match(h.text(), /^HTTP\/1\.1 200 /);
    await h.whenClosed;
    const t = await hold(r.port);
    t.socket.write(HEALTH);
    await t.whenClosed;
    assert.match(t.text(), /^HTTP\/1\.1 200 [\s\S]*\r\nconnection: close\r\n/i);
  });
});

test('/v1/whoami and /v1/ledger spend the client\'s rate and in-flight limits like an ingest', async () => {
  const get = async (url: string, route: string) => {
    const res = await fetch(`${url}${route}`, { headers: { authorization: `Bearer ${A}` } });
    await res.arrayBuffer();
    return { status: res.status, retryAfter: res.headers.get('retry-after') };
  };
  const ledger = '/v1/ledger?dataset=activity&source=src';
  await withReceiver({ rate: 1, burst: 1, retryAfterSeconds: 7 }, async (r) => {
    assert.equal((await get(r.url, '/v1/whoami')).status, 200);
    assert.deepEqual(await get(r.url, '/v1/whoami'), { status: 429, retryAfter: '7' });
    assert.deepEqual(await get(r.url, ledger), { status: 429, retryAfter: '7' });
  });
  await withReceiver({ rate: 1, burst: 1 }, async (r) => {
    assert.equal((await get(r.url, ledger)).status, 200);
    assert.equal((await get(r.url, ledger)).status, 429);
    assert.equal((await ingest(r.url, { id: 'l-1', token: A, body: ndjson(1) })).status, 429, 'the ledger spent the bucket ingest spends');
    assert.equal((await ingest(r.url, { id: 'l-1', token: B, body: ndjson(1) })).status, 200, "another client's bucket is its own");
  });
  await withReceiver({ maxInflight: 1 }, async (r) => {
    let release!: () => void;
    const released = new Promise<void>((res) => {
      release = res;
    });
    const slow = ingest(r.url, { id: 'f-1', token: A, body: ndjson(1), hold: () => released });
    await until(() => r.stats().inflight === 1, 'the slow ingest in flight');
    assert.equal((await get(r.url, '/v1/whoami')).status, 503);
    assert.equal((await get(r.url, ledger)).status, 503);
    release();
    assert.deepEqual((await slow).json, { stored: 1 });
    assert.equal((await get(r.url, ledger)).status, 200);
  });
});

test('connection limits are checked like config values', async () => {
  const { dir, cleanup } = await tempDir('rcv-conn-config');
  try {
    const bad: [Partial<ReceiverOptions>, RegExp][] = [
      [{ maxConnections: 20, reservedConnections: 20 }, /reservedConnections must be less than maxConnections \(20\)/],
      [{ reservedConnections: -1 }, /reservedConnections must be a whole number >= 0, not -1/],
      [{ maxConnectionsPerAddress: 0 }, /maxConnectionsPerAddress must be a whole number >= 1, not 0/],
      [{ keepAliveTimeoutMs: 1.5 }, /keepAliveTimeoutMs must be a whole number >= 1, not 1.5/],
    ];
    await refusesOptions(dir, bad);
  } finally {
    await cleanup();
  }
});
