/** Shared helpers for receiver and forward tests: a raw loopback client and a child-process receiver. */
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import * as http from 'node:http';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

import { type ReceiverOptions, startReceiver } from '../../fixtures/receiver/server.js';
import { BIN } from '../support/kernel.js';

export const REPO = fileURLToPath(new URL('../../', import.meta.url));
export const RECEIVER_MAIN = path.join(REPO, 'fixtures/receiver/main.ts');

/** A fresh temp dir, removed by the returned cleanup. */
export async function tempDir(prefix: string): Promise<{ dir: string; cleanup: () => Promise<void> }> {
  const dir = await mkdtemp(path.join(tmpdir(), `hypsink-${prefix}-`));
  return { dir, cleanup: () => rm(dir, { recursive: true, force: true }) };
}

export interface Reply {
  readonly status: number;
  readonly headers: http.IncomingHttpHeaders;
  readonly text: string;
  readonly json: Record<string, unknown> | null;
}

export interface IngestRequest {
  readonly dataset?: string;
  readonly source?: string | null;
  readonly id?: string | null;
  readonly token?: string;
  readonly body?: string | Buffer;
  readonly headers?: Record<string, string>;
  /** Write the body in pieces and call `hold()` before the last piece (for in-flight tests). */
  readonly hold?: () => Promise<void>;
  /** Give up (reject) when no answer came within this: a bound on correctness, not a speed figure. */
  readonly timeoutMs?: number;
}

/** POST one batch with node:http (no client retries, every header under the test's control). */
export function ingest(baseUrl: string, r: IngestRequest): Promise<Reply> {
  const headers: Record<string, string> = { 'content-type': 'application/x-ndjson' };
  if (r.token !== undefined) headers.authorization = `Bearer ${r.token}`;
  if (r.source !== null) headers['x-hyp-partition'] = `source=${encodeURIComponent(r.source ?? 'src')}`;
  if (r.id !== null) headers['x-hyp-batch-id'] = r.id ?? 'batch-1';
  Object.assign(headers, r.headers);
  const body = Buffer.from(r.body ?? '{"a":1}\n');
  const base = new URL(baseUrl);
  // An explicit path: a URL string would be normalized ('..' segments resolved) before it is sent.
  const reqPath = `/v1/ingest/${encodeURIComponent(r.dataset ?? 'activity')}`;
  return new Promise((resolve, reject) => {
    const opts = {
      host: base.hostname,
      port: base.port,
      path: reqPath,
      method: 'POST',
      headers,
      agent: false,
      ...(r.timeoutMs !== undefined ? { signal: AbortSignal.timeout(r.timeoutMs) } : {}),
    };
    const req = http.request(opts, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        let json: Record<string, unknown> | null = null;
        try {
          json = JSON.parse(text) as Record<string, unknown>;
        } catch {}
        resolve({ status: res.statusCode ?? 0, headers: res.headers, text, json });
      });
      res.on('error', reject);
    });
    req.on('error', reject);
    if (r.hold) {
      req.write(body.subarray(0, 1));
      r.hold().then(
        () => req.end(body.subarray(1)),
        (e: Error) => req.destroy(e),
      );
    } else req.end(body);
  });
}

/** NDJSON of n rows {n: start+i, ...extra}. */
export function ndjson(n: number, start = 0, extra: Record<string, unknown> = {}): string {
  let s = '';
  for (let i = 0; i < n; i++) s += `${JSON.stringify({ n: start + i, ...extra })}\n`;
  return s;
}

export interface ChildReceiver {
  readonly child: ChildProcess;
  readonly port: number;
  readonly url: string;
  /** Every stdout line so far (pino JSON). */
  readonly lines: string[];
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** stderr so far. */
  stderr(): string;
  /** Resolves when a stdout log line has this `msg`. */
  waitFor(msg: string, timeoutMs?: number): Promise<Record<string, unknown>>;
}

/**
 * Run fixtures/receiver/main.ts in a child process (port 0) and wait for its "listening" line.
 * With no --token, --tokens-file or HYPSINK_TOKEN it runs with --insecure-no-auth.
 */
export async function spawnReceiver(args: string[], env: Record<string, string> = {}): Promise<ChildReceiver> {
  const fullEnv: NodeJS.ProcessEnv = { ...process.env, HYPSINK_FAULT: '', ...env };
  const auth = ['--token', '--tokens-file', '--insecure-no-auth'].some((f) => args.includes(f)) || fullEnv.HYPSINK_TOKEN;
  const child = spawn(process.execPath, ['--import', 'tsx', RECEIVER_MAIN, '--port', '0', ...args, ...(auth ? [] : ['--insecure-no-auth'])], {
    cwd: REPO,
    env: fullEnv,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const lines: string[] = [];
  const listeners = new Set<() => void>();
  let buf = '';
  let stderr = '';
  child.stdout!.setEncoding('utf8').on('data', (s: string) => {
    buf += s;
    let i = buf.indexOf('\n');
    while (i >= 0) {
      lines.push(buf.slice(0, i));
      buf = buf.slice(i + 1);
      i = buf.indexOf('\n');
    }
    for (const l of listeners) l();
  });
  child.stderr!.setEncoding('utf8').on('data', (s: string) => {
    stderr += s;
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.on('exit', (code, signal) => {
      resolve({ code, signal });
      for (const l of listeners) l();
    });
  });
  const waitFor = (msg: string, timeoutMs = 15_000) =>
    new Promise<Record<string, unknown>>((resolve, reject) => {
      const check = () => {
        for (const l of lines) {
          try {
            const o = JSON.parse(l) as Record<string, unknown>;
            if (o.msg === msg) {
              cleanup();
              resolve(o);
              return;
            }
          } catch {}
        }
        if (child.exitCode !== null || child.signalCode !== null) {
          cleanup();
          reject(new Error(`receiver exited before "${msg}": ${stderr}`));
        }
      };
      const timer = setTimeout(() => {
        cleanup();
        reject(new Error(`timed out waiting for "${msg}": ${stderr}`));
      }, timeoutMs);
      const cleanup = () => {
        clearTimeout(timer);
        listeners.delete(check);
      };
      listeners.add(check);
      check();
    });
  const listening = await waitFor('listening');
  const port = Number(listening.port);
  return { child, port, url: `http://127.0.0.1:${port}`, lines, exited, waitFor, stderr: () => stderr };
}

/** Each option set is refused at start as HYPSINK_ERR_CONFIG with a message matching its pattern. */
export async function refusesOptions(dataDir: string, bad: [Partial<ReceiverOptions>, RegExp][]): Promise<void> {
  for (const [o, re] of bad) {
    await assert.rejects(startReceiver({ port: 0, dataDir, insecureNoAuth: true, ...o }), (e: Error & { code?: string }) => {
      assert.equal(e.code, 'HYPSINK_ERR_CONFIG');
      assert.match(e.message, re);
      return true;
    });
  }
}

export interface Aggregator {
  readonly child: ChildProcess;
  readonly url: string;
  /** The exit code; null when killed by a signal. */
  readonly exited: Promise<number | null>;
  stderr(): string;
}

/** `hypsink receiver --config …` (the product CLI) as a child process, resolved once it listens. */
export async function spawnAggregator(args: string[], env: Record<string, string> = {}): Promise<Aggregator> {
  const child = spawn(process.execPath, [BIN, 'receiver', ...args], {
    env: { ...process.env, HYPSINK_LOG_LEVEL: 'warn', HYPSINK_TOKEN: '', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let err = '';
  child.stderr!.on('data', (c: Buffer) => {
    err += c.toString();
  });
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  const url = await new Promise<string>((res, rej) => {
    createInterface({ input: child.stdout! }).on('line', (l) => {
      const m = /listening on (http:\/\/\S+)/.exec(l);
      if (m) res(m[1]!);
    });
    void exited.then((code) => rej(new Error(`the receiver exited (${code}) before listening:\n${err}`)));
  });
  return { child, url, exited, stderr: () => err };
}

/** SIGTERM (a graceful stop) unless it already ended; resolves when it has. */
export async function stopChild(r: { readonly child: ChildProcess; readonly exited: Promise<unknown> }): Promise<void> {
  if (r.child.exitCode === null && r.child.signalCode === null) r.child.kill('SIGTERM');
  await r.exited;
}

/** What the aggregator tests' agents cache and send. */
export const AGENT_EVENTS = {
  columns: [
    { name: 'id', type: 'INT64', nullable: false },
    { name: 'ts', type: 'TIMESTAMP', nullable: false },
    { name: 'msg', type: 'STRING', nullable: true },
  ],
  timestampColumn: 'ts',
};
/** The aggregator's dataset: the agents' columns and the client column it sets. */
export const RECEIVED = { ...AGENT_EVENTS, columns: [...AGENT_EVENTS.columns, { name: 'hyp_client', type: 'STRING', nullable: false }] };
/** An agent's token, as its line in the aggregator's tokens file names it. */
export const tokenOf = (agent: string) => `tok-${agent}-Zq8Lw3Xp7Rk2Vn5`;
