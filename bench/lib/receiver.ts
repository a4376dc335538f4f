/**
 * The reference receiver in a child process of its own (fixtures/receiver/main.ts),
 * so that on this 2-core machine it does not share an event loop with the sink
 * being measured, plus what a raw client needs: the bodies the receiver stored
 * (from its ledger: each batch's byte range in its data file) and a plain
 * keep-alive POST.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { promises as fsp } from 'node:fs';
import * as http from 'node:http';
import * as net from 'node:net';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const REPO = fileURLToPath(new URL('../../', import.meta.url));

export interface ReceiverProcess {
  readonly url: string;
  readonly dataDir: string;
  /** CPU time (user + system) the receiver process has used so far, in ms (Linux /proc; NaN elsewhere). */
  cpuMs(): Promise<number>;
  close(): Promise<void>;
}

/** utime + stime of a process from /proc/<pid>/stat (fields 14 and 15, after the parenthesised name), in ms. */
async function procCpuMs(pid: number | undefined): Promise<number> {
  if (pid === undefined) return Number.NaN;
  try {
    const stat = await fsp.readFile(`/proc/${pid}/stat`, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // Clock ticks of 10 ms (USER_HZ 100 on Linux).
    return (Number(f[11]) + Number(f[12])) * 10;
  } catch {
    return Number.NaN;
  }
}

/**
 * A receiver child process, resolved with its URL once a line of its stdout
 * says it listens (`listening`: that line's URL, or null while it does not).
 */
async function spawnListening(args: readonly string[], env: NodeJS.ProcessEnv, what: string, listening: (out: string) => string | null) {
  const child = spawn(process.execPath, args, { cwd: REPO, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr!.on('data', (c: Buffer) => {
    stderr += c.toString('utf8');
  });
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  const url = await new Promise<string>((resolve, reject) => {
    let out = '';
    const onData = (c: Buffer) => {
      out += c.toString('utf8');
      const u = listening(out);
      if (u === null) return;
      child.stdout!.off('data', onData);
      child.stdout!.resume();
      resolve(u);
    };
    child.stdout!.on('data', onData);
    child.once('exit', (code) => reject(new Error(`${what} exited (${code}) before listening: ${stderr.trim()}`)));
  });
  return { child, url, exited, stderr: () => stderr };
}

export async function spawnReceiver(dataDir: string, token: string, extraArgs: readonly string[] = []): Promise<ReceiverProcess> {
  const args = ['--import', 'tsx', join(REPO, 'fixtures/receiver/main.ts'), '--port', '0', '--data', dataDir, '--log-level', 'info', ...extraArgs];
  const { child, url, exited } = await spawnListening(args, { ...process.env, HYPSINK_TOKEN: token }, 'receiver', (out) => {
    for (const line of out.split('\n')) {
      if (!line.startsWith('{')) continue;
      try {
        const j = JSON.parse(line) as { msg?: string; url?: string };
        if (j.msg === 'listening' && j.url) return j.url;
      } catch {
        // a partial line: wait for the rest
      }
    }
    return null;
  });
  return { url, dataDir, cpuMs: () => procCpuMs(child.pid), close: () => stop(child, exited) };
}

async function stop(child: ChildProcess, exited: Promise<void>): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  child.kill('SIGTERM');
  await exited;
}

export interface StoredBatch {
  readonly source: string;
  readonly dataset: string;
  readonly rows: number;
  readonly body: Buffer;
}

/** Every batch the receiver has ledgered, in order, with its bytes as stored (= as sent). */
export async function storedBatches(dataDir: string): Promise<StoredBatch[]> {
  const text = await fsp.readFile(join(dataDir, '_ledger.ndjson'), 'utf8');
  const out: StoredBatch[] = [];
  const files = new Map<string, Buffer>();
  for (const line of text.split('\n')) {
    if (line === '') continue;
    const e = JSON.parse(line) as { dataset: string; source: string; rows: number; file: string; offset: number; bytes: number };
    let data = files.get(e.file);
    if (!data) {
      data = await fsp.readFile(join(dataDir, e.file));
      files.set(e.file, data);
    }
    out.push({ dataset: e.dataset, source: e.source, rows: e.rows, body: data.subarray(e.offset, e.offset + e.bytes) });
  }
  return out;
}

/** One POST; resolves with the status once the answer is read. */
export function post(agent: http.Agent, url: string, path: string, headers: Record<string, string>, body: Buffer): Promise<number> {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const req = http.request({ hostname: u.hostname, port: u.port, path, method: 'POST', headers, agent }, (res) => {
      res.on('data', () => undefined);
      res.on('end', () => resolve(res.statusCode ?? 0));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(body);
  });
}

/**
 * `hypsink receiver --config <configPath> --tokens-file <tokensFile>` (the
 * aggregator, LLP 0074), the compiled CLI in a child process as a host runs
 * it, resolved once it listens (on `port`; 0: any free one). `close` is a
 * graceful stop (SIGTERM: its sinks drain, it exits).
 */
export async function spawnAggregator(configPath: string, tokensFile: string, port = 0): Promise<ReceiverProcess> {
  const args = [join(REPO, 'bin/hypsink.js'), 'receiver', '--config', configPath, '--tokens-file', tokensFile, '--port', String(port)];
  const env = { ...process.env, NODE_OPTIONS: '', HYPSINK_LOG_LEVEL: 'warn', HYPSINK_TOKEN: '' };
  const { child, url, exited, stderr } = await spawnListening(args, env, 'aggregator', (out) => /listening on (http:\/\/\S+)/.exec(out)?.[1] ?? null);
  return {
    url,
    dataDir: '',
    cpuMs: () => procCpuMs(child.pid),
    async close() {
      await stop(child, exited);
      if (child.exitCode !== 0) throw new Error(`aggregator exited ${child.exitCode ?? child.signalCode} on SIGTERM: ${stderr().trim().slice(-2000)}`);
    },
  };
}

/** A port free on loopback now, for a server that restarts at the same address. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as net.AddressInfo;
      s.close(() => resolve(port));
    });
  });
}
