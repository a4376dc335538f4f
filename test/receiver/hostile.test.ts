/**
 * Hostile clients against the real receiver over loopback (issue 18): clients
 * without a token, clients with a token that misbehave, and one client against
 * another. Every case is bounded in count and time; none asserts a latency,
 * only what was answered, in which order, and what was stored.
 */
import assert from 'node:assert/strict';
import { chmod, readFile, writeFile } from 'node:fs/promises';
import * as http from 'node:http';
import * as net from 'node:net';
import * as path from 'node:path';
import { test } from 'node:test';
import { type Receiver, type ReceiverOptions, readStored, startReceiver, storedRows } from '../../fixtures/receiver/server.js';
import { ingest, ndjson, type Reply, refusesOptions, spawnReceiver, tempDir } from './helpers.js';

const A = 'client-a-token-0123456789abcdef';
const B = 'client-b-token-fedcba9876543210';
const C = 'client-c-token-aaaabbbbccccdddd';

async function tokensFile(dir: string, text: string, name = 'tokens'): Promise<string> {
  const file = path.join(dir, name);
  await writeFile(file, text);
  await chmod(file, 0o600);
  return file;
}

/** A receiver with clients alice (A) and bob (B), torn down after `fn`. */
async function withReceiver(opts: Partial<ReceiverOptions>, fn: (r: Receiver, dir: string) => Promise<void>): Promise<void> {
  const { dir, cleanup } = await tempDir('rcv-hostile');
  const file = await tokensFile(dir, `# the test's clients\nalice ${A}\nbob\t${B}\n`);
  const data = path.join(dir, 'data');
  const r = await startReceiver({ port: 0, dataDir: data, tokensFile: file, unauthorizedDelayMs: 0, ...opts });
  try {
    await fn(r, data);
  } finally {
    await r.close();
    await cleanup();
  }
}

const health = (url: string) => fetch(`${url}/v1/health`).then((res) => res.status);

/** A raw request: headers (and `body`) written on a socket, what comes back read until it closes or `ms` pass. */
function raw(port: number, head: string, body: Buffer | string = '', ms = 5000): Promise<{ text: string; closed: boolean }> {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    let text = '';
    const timer = setTimeout(() => {
      s.destroy();
      resolve({ text, closed: false });
    }, ms);
    s.setEncoding('latin1');
    s.on('data', (d: string) => {
      text += d;
    });
    s.on('error', () => {});
    s.on('close', () => {
      clearTimeout(timer);
      resolve({ text, closed: true });
    });
    s.write(head);
    if (body.length > 0) s.write(body);
  });
}

const postHead = (token: string | null, extra = '') =>
  'POST /v1/ingest/ds HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-ndjson\r\nX-Hyp-Partition: source=s\r\nX-Hyp-Batch-Id: raw-1\r\n' +
  (token === null ? '' : `Authorization: Bearer ${token}\r\n`) +
  extra;

test('a quadratic Authorization header is answered 401 at once and the server stays responsive', async () => {
  await withReceiver({ unauthorizedDelayMs: 200 }, async (r) => {
    const header = `Bearer x${' '.repeat(16_000)}y`;
    const order: string[] = [];
    const floods = Array.from({ length: 50 }, (_, i) =>
      ingest(r.url, { id: `q-${i}`, headers: { authorization: header } }).then((x) => {
        order.push('401');
        return x;
      }),
    );
    // Sent after all 50: with a linear check it is answered while they are still held.
    const probe = health(r.url).then((s) => {
      order.push('health');
      return s;
    });
    const replies = await Promise.all(floods);
    assert.equal(await probe, 200);
    for (const x of replies) assert.equal(x.status, 401);
    assert.ok(order.indexOf('health') < 50, `health was answered after every 401: ${order.indexOf('health')}`);
    const ok = await ingest(r.url, { id: 'q-ok', token: A, body: ndjson(1) });
    assert.deepEqual(ok.json, { stored: 1 });
  });
});

test('the bearer parse: any case, spaces and tabs around the token; nothing else', async () => {
  await withReceiver({}, async (r) => {
    for (const h of [`Bearer ${A}`, `bearer\t${A}`, `BEARER  ${A} \t`]) {
      assert.equal((await ingest(r.url, { id: `p-${h.length}-${h[0]}`, headers: { authorization: h }, body: ndjson(1) })).status, 200, h);
    }
    for (const h of [`Bearer${A}`, `Basic ${A}`, `Bearer ${A}x`, `Bearer ${A} ${A}`, 'Bearer ', `Bearer ${'x'.repeat(5000)}`]) {
      assert.equal((await ingest(r.url, { id: 'p-bad', headers: { authorization: h } })).status, 401, h.slice(0, 40));
    }
  });
});

test('requests without a token spend no limit: an authenticated client is served while 50 unauthenticated ones flood', async () => {
  await withReceiver({ rate: 2, burst: 2, maxInflight: 1 }, async (r) => {
    let stop = false;
    let refused = 0;
    const flood = async () => {
      while (!stop) {
        const x = await ingest(r.url, { id: 'flood', body: ndjson(5) });
        assert.equal(x.status, 401, 'never 429 or 503: the token comes first');
        refused++;
      }
    };
    const floods = Array.from({ length: 50 }, flood);
    while (refused < 100) await new Promise((res) => setTimeout(res, 5));
    const ok = await ingest(r.url, { id: 'real-1', token: A, body: ndjson(2) });
    stop = true;
    await Promise.all(floods);
    assert.deepEqual(ok.json, { stored: 2 });
  });
});

test('401 comes before 503 and 429, and one client\'s load never sheds another client', async () => {
  await withReceiver({ rate: 1, burst: 1, maxInflight: 1 }, async (r) => {
    let release!: () => void;
    const held = new Promise<void>((res) => {
      release = res;
    });
    const slow = ingest(r.url, { id: 'slow-a', token: A, body: ndjson(3), hold: () => held });
    while (r.stats().inflight === 0) await new Promise((res) => setTimeout(res, 5));
    assert.equal((await ingest(r.url, { id: 'x' })).status, 401, 'no token: 401, not 503');
    const busy = await ingest(r.url, { id: 'a-2', token: A, body: ndjson(1) });
    assert.equal(busy.status, 503, "alice's own in-flight limit");
    const bob = await ingest(r.url, { id: 'b-1', token: B, body: ndjson(1) });
    assert.deepEqual(bob.json, { stored: 1 }, "bob is not shed by alice's slow body");
    const bobAgain = await ingest(r.url, { id: 'b-2', token: B, body: ndjson(1) });
    assert.equal(bobAgain.status, 429, "bob's own bucket of 1 is spent");
    assert.equal((await ingest(r.url, { id: 'x' })).status, 401, 'no token: 401, not 429');
    release();
    assert.deepEqual((await slow).json, { stored: 3 });
  });
});

test('a slow body is answered 408 within the body timeout; a silent connection is cut', async () => {
  await withReceiver({ bodyTimeoutMs: 300, idleTimeoutMs: 60_000 }, async (r, data) => {
    const res = await raw(r.port, `${postHead(A)}Content-Length: 100\r\n\r\n`, '{"a":', 8000);
    assert.match(res.text, /^HTTP\/1\.1 408 /, res.text);
    assert.match(res.text, /did not arrive within 300 ms/);
    assert.ok(res.closed, 'the connection is closed after a 408');
    assert.equal((await readStored(data)).rowCount, 0);
  });
  await withReceiver({ idleTimeoutMs: 300 }, async (r) => {
    const res = await raw(r.port, `${postHead(A)}Content-Length: 100\r\n\r\n`, '{"a":', 8000);
    assert.ok(res.closed, 'a connection silent mid-body is cut at the idle timeout');
  });
  await withReceiver({ headersTimeoutMs: 300 }, async (r) => {
    const res = await raw(r.port, 'POST /v1/ingest/ds HTTP/1.1\r\nHost: x\r\n', '', 8000);
    assert.ok(res.closed, 'headers that never end are cut at the header timeout');
    assert.equal(await health(r.url), 200);
  });
});

test('after a 401 the body is drained a few KiB at most, then the connection is cut', async () => {
  await withReceiver({}, async (r) => {
    const total = 48 * 1024 * 1024;
    const result = await new Promise<{ written: number; head: string }>((resolve) => {
      const s = net.connect(r.port, '127.0.0.1');
      let written = 0;
      let head = '';
      let done = false;
      const finish = () => {
        if (done) return;
        done = true;
        s.destroy();
        resolve({ written, head });
      };
      s.setEncoding('latin1').on('data', (d: string) => {
        head += d;
      });
      s.on('error', finish);
      s.on('close', finish);
      const chunk = Buffer.alloc(64 * 1024, 0x20);
      const pump = () => {
        while (!done && written < total) {
          written += chunk.length;
          if (!s.write(chunk)) return void s.once('drain', pump);
        }
        if (written >= total) setTimeout(finish, 2000);
      };
      s.write(`${postHead(null)}Content-Length: ${total}\r\n\r\n`);
      pump();
    });
    assert.match(result.head, /^HTTP\/1\.1 401 /);
    assert.match(result.head, /connection: close/i);
    assert.ok(result.written < total, `the server read all ${result.written} bytes of an unauthenticated body`);
    assert.equal(await health(r.url), 200);
  });
});

test('NDJSON limits: line size, nesting depth and repeated keys are 400 naming the line; whitespace is cut', async () => {
  await withReceiver({ maxLineBytes: 1024 }, async (r, data) => {
    const deep = `{"a":${'['.repeat(100)}${']'.repeat(100)}}`;
    const cases: [string, RegExp][] = [
      [`{"a":1}\n${deep}\n`, /^line 2: nested deeper than the limit of 64/],
      [`{"a":1}\n{"b":"${'x'.repeat(2000)}"}\n`, /^line 2: longer than the limit of 1024 bytes/],
      ['{"a":1}\n{"a":1,"b":2,"a":3}\n', /^line 2: an object repeats a key/],
      ['{"a":{"k":1,"k":2}}\n', /^line 1: an object repeats a key/],
      ['{"a":[{"k":1},{"k":2,"k":3}]}\n', /^line 1: an object repeats a key/],
    ];
    for (const [body, re] of cases) {
      const res = await ingest(r.url, { id: 'lim-1', token: A, body });
      assert.equal(res.status, 400, body.slice(0, 60));
      assert.match(String(res.json?.error), re);
    }
    const fine = `{"a":${'['.repeat(63)}${']'.repeat(63)}}\n{"s":"a:b{[\\"","k":"\\\\"}\n{"__proto__":1,"x":{}}\n`;
    assert.deepEqual((await ingest(r.url, { id: 'lim-ok', token: A, body: fine })).json, { stored: 3 });
    const ws = await ingest(r.url, { id: 'ws-1', token: A, dataset: 'ws', body: ' \t{"a":1} \r\n\r\n  {"b":2}\t' });
    assert.deepEqual(ws.json, { stored: 2 });
    const stored = await readStored(data);
    const entry = stored.ledger.find((e) => e.id === 'ws-1')!;
    assert.equal(await readFile(path.join(data, entry.file), 'utf8'), '{"a":1}\n{"b":2}\n');
  });
});

test('a batch id names one body: the same id with another body is 409; an empty body is 400 and claims nothing', async () => {
  await withReceiver({}, async (r, data) => {
    for (const body of ['', '\n', ' \r\n\t\n']) {
      const empty = await ingest(r.url, { id: 'e-1', token: A, body });
      assert.equal(empty.status, 400, JSON.stringify(body));
      assert.match(String(empty.json?.error), /no rows/);
    }
    assert.deepEqual((await ingest(r.url, { id: 'e-1', token: A, body: ndjson(2) })).json, { stored: 2 }, 'the id was not spent');
    const replay = await ingest(r.url, { id: 'e-1', token: A, body: ndjson(2, 50) });
    assert.equal(replay.status, 409);
    assert.equal(replay.json?.error, 'batch id e-1 was stored with another body; a batch id names one body: re-send the stored batch byte for byte, or send other rows under a new id');
    assert.deepEqual((await ingest(r.url, { id: 'e-1', token: A, body: ndjson(2) })).json, { duplicate: true });
    assert.deepEqual(storedRows(await readStored(data), 'activity', 'src'), [{ n: 0 }, { n: 1 }]);
    const entry = (await readStored(data)).ledger.find((e) => e.id === 'e-1')!;
    assert.equal(entry.client, 'alice');
    assert.match(String(entry.digest), /^[0-9a-f]{64}$/);
  });
});

test('batch ids are scoped to their client: bob can neither claim nor learn alice\'s ids', async () => {
  await withReceiver({}, async (r, data) => {
    assert.deepEqual((await ingest(r.url, { id: 'shared-1', token: A, dataset: 'secret', source: 'hr', body: ndjson(2) })).json, { stored: 2 });
    // bob under alice's id, her partition and body: his own batch, not a "duplicate" that tells him it exists.
    assert.deepEqual((await ingest(r.url, { id: 'shared-1', token: B, dataset: 'secret', source: 'hr', body: ndjson(2) })).json, { stored: 2 });
    // bob under alice's id elsewhere: stored, no 409 naming her dataset.
    const elsewhere = await ingest(r.url, { id: 'shared-2', token: A, dataset: 'secret', source: 'hr', body: ndjson(1, 9) });
    assert.equal(elsewhere.status, 200);
    const probe = await ingest(r.url, { id: 'shared-2', token: B, dataset: 'other', source: 'x', body: ndjson(1) });
    assert.deepEqual(probe.json, { stored: 1 });
    assert.ok(!probe.text.includes('secret') && !probe.text.includes('hr'));
    // bob claims an id first: alice's batch under it is still hers to store.
    assert.equal((await ingest(r.url, { id: 'future-1', token: B, body: '{"junk":1}\n' })).status, 200);
    assert.deepEqual((await ingest(r.url, { id: 'future-1', token: A, body: ndjson(3) })).json, { stored: 3 });
    assert.deepEqual((await ingest(r.url, { id: 'shared-1', token: A, dataset: 'secret', source: 'hr', body: ndjson(2) })).json, { duplicate: true });
    const own = await ingest(r.url, { id: 'shared-1', token: A, dataset: 'secret', source: 'other', body: ndjson(2) });
    assert.equal(own.status, 409);
    assert.ok(!own.text.includes('secret') && !own.text.includes('"hr"'), 'a 409 names no partition');
    const ledger = (await readStored(data)).ledger;
    assert.deepEqual(
      ledger.map((e) => `${e.client}:${e.id}`),
      ['alice:shared-1', 'bob:shared-1', 'alice:shared-2', 'bob:shared-2', 'bob:future-1', 'alice:future-1'],
    );
  });
});

test('a legacy ledger line (no client, no digest) belongs to client default and is a duplicate on its partition', async () => {
  const { dir, cleanup } = await tempDir('rcv-legacy');
  try {
    const legacy = { id: 'old-1', dataset: 'activity', source: 'src', rows: 1, at: new Date().toISOString(), file: 'activity/source=src.ndjson', offset: 0, bytes: 8 };
    await import('node:fs/promises').then(async (f) => {
      await f.mkdir(path.join(dir, 'activity'));
      await f.writeFile(path.join(dir, 'activity/source=src.ndjson'), '{"n":0}\n');
      await f.writeFile(path.join(dir, '_ledger.ndjson'), `${JSON.stringify(legacy)}\n`);
    });
    const r = await startReceiver({ port: 0, dataDir: dir, token: A });
    try {
      assert.deepEqual((await ingest(r.url, { id: 'old-1', token: A, body: ndjson(5) })).json, { duplicate: true });
      assert.equal((await ingest(r.url, { id: 'old-1', token: A, source: 'elsewhere', body: ndjson(1) })).status, 409);
      assert.deepEqual((await ingest(r.url, { id: 'new-1', token: A, body: ndjson(1, 1) })).json, { stored: 1 });
    } finally {
      await r.close();
    }
    const ledger = (await readStored(dir)).ledger;
    assert.deepEqual(ledger.map((e) => [e.client, e.id]), [[undefined, 'old-1'], ['default', 'new-1']]);
  } finally {
    await cleanup();
  }
});

test('a repeated X-Hyp-Partition or X-Hyp-Batch-Id header is 400', async () => {
  await withReceiver({}, async (r, data) => {
    const res = await new Promise<Reply>((resolve, reject) => {
      const req = http.request(
        `${r.url}/v1/ingest/ds`,
        {
          method: 'POST',
          agent: false,
          headers: { 'content-type': 'application/x-ndjson', authorization: `Bearer ${A}`, 'x-hyp-partition': ['source=a', 'source=b'], 'x-hyp-batch-id': 'rep-1' },
        },
        (res) => {
          let text = '';
          res.setEncoding('utf8').on('data', (d: string) => {
            text += d;
          });
          res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, text, json: JSON.parse(text) }));
        },
      );
      req.on('error', reject);
      req.end('{"a":1}\n');
    });
    assert.equal(res.status, 400, res.text);
    assert.match(String(res.json?.error), /X-Hyp-Partition was sent more than once/);
    assert.equal((await readStored(data)).rowCount, 0);
  });
});

// The connection caps (and when a connection past them is closed at once) are test/receiver/connections.test.ts's (LLP 0065).

test('no auth configured refuses to start; bad option values are config errors naming the option', async () => {
  const { dir, cleanup } = await tempDir('rcv-config');
  try {
    await assert.rejects(startReceiver({ port: 0, dataDir: dir }), (e: Error & { code?: string }) => {
      assert.equal(e.code, 'HYPSINK_ERR_CONFIG');
      assert.match(e.message, /no auth configured: pass a token .*tokens file.*--insecure-no-auth/);
      return true;
    });
    await assert.rejects(startReceiver({ port: 0, dataDir: dir, token: '' }), /the token must be 16-1024 visible ASCII/);
    await assert.rejects(startReceiver({ port: 0, dataDir: dir, token: A, insecureNoAuth: true }), /not several/);
    const bad: [Partial<ReceiverOptions>, RegExp][] = [
      [{ maxInflight: Number.NaN }, /maxInflight must be a whole number >= 1, not NaN/],
      [{ rate: Number.NaN }, /rate must be a number of requests per second > 0, not NaN/],
      [{ maxBodyBytes: -1 }, /maxBodyBytes must be a whole number >= 1, not -1/],
      [{ bodyTimeoutMs: 1.5 }, /bodyTimeoutMs must be a whole number >= 1, not 1.5/],
      [{ maxDepth: 0 }, /maxDepth must be a whole number >= 1, not 0/],
    ];
    await refusesOptions(dir, bad);
  } finally {
    await cleanup();
  }
});

test('tokens file errors name the file and line; duplicate names and tokens are refused', async () => {
  const { dir, cleanup } = await tempDir('rcv-tokens');
  try {
    const cases: [string, RegExp][] = [
      [`alice ${A}\nbob\n`, /tokens: line 2: expected "<client-name> <token>"/],
      [`alice ${A}\nalice ${B}\n`, /tokens: line 2: client alice is already named on line 1/],
      [`alice ${A}\n# c\nbob ${A}\n`, /tokens: line 3: this token is already the token of line 1/],
      ['alice short\n', /tokens: line 1: a token is 16-1024 visible ASCII/],
      [`al ice ${A}\n`, /line 1: expected/],
      [`a/b ${A}\n`, /line 1: a client name is/],
      ['# nothing\n', /no clients/],
    ];
    for (const [text, re] of cases) {
      const file = await tokensFile(dir, text);
      await assert.rejects(startReceiver({ port: 0, dataDir: path.join(dir, 'd'), tokensFile: file }), (e: Error & { code?: string }) => {
        assert.equal(e.code, 'HYPSINK_ERR_CONFIG');
        assert.ok(e.message.includes(file), e.message);
        assert.match(e.message, re);
        return true;
      });
    }
  } finally {
    await cleanup();
  }
});

test('main.ts: SIGHUP reloads the tokens file without a restart; a bad file keeps the old tokens', async () => {
  const { dir, cleanup } = await tempDir('rcv-sighup');
  const file = await tokensFile(dir, `alice ${A}\n`);
  await chmod(file, 0o644);
  const r = await spawnReceiver(['--data', path.join(dir, 'data'), '--tokens-file', file, '--unauthorized-delay-ms', '0']);
  try {
    assert.ok(r.lines.some((l) => /readable by group or others/.test(l)), 'a tokens file others can read is warned about');
    assert.equal((await ingest(r.url, { id: 'h-1', token: A, body: ndjson(1) })).status, 200);
    assert.equal((await ingest(r.url, { id: 'h-2', token: B, body: ndjson(1) })).status, 401);
    // Rotation: alice gets a new token (C), bob is added.
    await tokensFile(dir, `alice ${C}\nbob ${B}\n`);
    r.child.kill('SIGHUP');
    const reloaded = await r.waitFor('tokens reloaded');
    assert.equal(reloaded.clients, 2);
    assert.equal((await ingest(r.url, { id: 'h-2', token: B, body: ndjson(1) })).status, 200);
    assert.equal((await ingest(r.url, { id: 'h-3', token: A, body: ndjson(1) })).status, 401, "alice's old token is gone");
    assert.deepEqual((await ingest(r.url, { id: 'h-1', token: C, body: ndjson(1) })).json, { duplicate: true }, 'alice keeps her ids');
    await tokensFile(dir, `alice ${C}\nbob\n`);
    r.child.kill('SIGHUP');
    const failed = await r.waitFor('tokens file not reloaded; the old tokens stay in force');
    assert.match(String(failed.err), /line 2: expected "<client-name> <token>"/);
    assert.ok(String(failed.err).includes(file));
    assert.equal((await ingest(r.url, { id: 'h-4', token: B, body: ndjson(1) })).status, 200, 'the old tokens stay');
  } finally {
    r.child.kill('SIGTERM');
    await r.exited;
    await cleanup();
  }
});

test('main.ts: no auth refuses to start (exit 2); --insecure-no-auth says so on the start line; bad flags exit 2', async () => {
  const { dir, cleanup } = await tempDir('rcv-main-auth');
  try {
    const { spawn } = await import('node:child_process');
    const { RECEIVER_MAIN, REPO } = await import('./helpers.js');
    const run = (args: string[]) =>
      new Promise<{ code: number | null; stderr: string }>((resolve) => {
        const c = spawn(process.execPath, ['--import', 'tsx', RECEIVER_MAIN, '--port', '0', '--data', dir, ...args], {
          cwd: REPO,
          env: { ...process.env, HYPSINK_TOKEN: '' },
          stdio: ['ignore', 'ignore', 'pipe'],
        });
        let stderr = '';
        c.stderr!.setEncoding('utf8').on('data', (s: string) => {
          stderr += s;
        });
        c.on('exit', (code) => resolve({ code, stderr }));
      });
    const none = await run([]);
    assert.equal(none.code, 2, none.stderr);
    assert.match(none.stderr, /no auth configured.*--insecure-no-auth/);
    for (const [flag, v] of [
      ['--max-inflight', 'abc'],
      ['--rate', 'abc'],
      ['--max-connections', '-1'],
      ['--header-timeout-ms', '1e3'],
      ['--reserved-connections', 'x'],
      ['--max-connections-per-address', '0'],
      ['--keep-alive-timeout-ms', '5s'],
    ]) {
      const x = await run(['--insecure-no-auth', `${flag}=${v}`]);
      assert.equal(x.code, 2, x.stderr);
      assert.ok(x.stderr.includes(`${flag} must be`), x.stderr);
    }
    const r = await spawnReceiver(['--data', dir, '--insecure-no-auth']);
    try {
      const line = JSON.parse(r.lines.find((l) => l.includes('"listening"'))!) as Record<string, unknown>;
      assert.equal(line.level, 40, 'a warning');
      assert.match(String(line.auth), /^OFF \(--insecure-no-auth\)/);
      assert.deepEqual((await ingest(r.url, { id: 'anon-1', body: ndjson(1) })).json, { stored: 1 });
    } finally {
      r.child.kill('SIGTERM');
      await r.exited;
    }
    assert.equal((await readStored(dir)).ledger[0]?.client, 'default');
  } finally {
    await cleanup();
  }
});

test('parsing a large body of tiny objects lets other requests through', async () => {
  await withReceiver({}, async (r) => {
    const body = Buffer.from('{}\n'.repeat(3_000_000));
    let answered = false;
    let probes = 0;
    const big = ingest(r.url, { id: 'tiny-1', token: A, body }).then((x) => {
      answered = true;
      return x;
    });
    while (!answered) {
      await health(r.url);
      if (!answered) probes++;
    }
    assert.deepEqual((await big).json, { stored: 3_000_000 });
    assert.ok(probes >= 1, 'a health probe was answered while the body was parsed');
  });
});
