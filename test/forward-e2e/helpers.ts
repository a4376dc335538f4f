/**
 * Helpers for the forward end-to-end proof: a temp workspace with a real config
 * file, the kernel opened in this process from it (`Hypsink.open(await
 * loadConfig(path))`, logs captured), the CLI (`bin/hypsink.js`) in child
 * processes, and the exactly-once oracle over what the reference receiver stored
 * (its ledger and data files, read back with `readStored`).
 */
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { promises as fsp } from 'node:fs';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { readStored, type Stored } from '../../fixtures/receiver/server.js';
import { loadConfig } from '../../kernel/config/load.js';
import { ingestNdjson } from '../../kernel/ingest/ingest.js';
import { createLogger } from '../../kernel/log.js';
import { Hypsink, type PartitionStatus, type StatusReport } from '../../kernel/runtime.js';
import { tempDir } from '../receiver/helpers.js';

export const REPO = fileURLToPath(new URL('../../', import.meta.url));
export const BIN = join(REPO, 'test/support/bin.mjs');

/** The token the config reads through `${HYPSINK_TOKEN}` (and the receiver expects). */
export const TOKEN = 'e2e-bearer-Tk7Qz9Lw2Xp4';

export type Json = Record<string, unknown>;

/** The `events` dataset of the issue: id INT64 non-null, ts TIMESTAMP non-null, msg STRING nullable. */
export const EVENTS = {
  columns: [
    { name: 'id', type: 'INT64', nullable: false },
    { name: 'ts', type: 'TIMESTAMP', nullable: false },
    { name: 'msg', type: 'STRING', nullable: true },
  ],
  timestampColumn: 'ts',
};

export interface ConfigOptions {
  /** The sink's `unit` bounds (kernel-level): small maxRows gives several chunks. */
  readonly unit?: { maxRows?: number; maxBytes?: number };
  /** Extra forward config fields (retry, ladderMs, …) merged over `url` and `token`. */
  readonly forward?: Json;
  readonly driver?: Json;
  readonly schedule?: string;
}

/** The config of the issue: the `events` dataset and the `central` forward sink, as a user writes it. */
export function e2eConfig(url: string, o: ConfigOptions = {}): Json {
  const central: Json = {
    plugin: '@hypsink/forward',
    datasets: ['events'],
    schedule: o.schedule ?? '* * * * *',
    // biome-ignore lint/suspicious/noTemplateCurlyInString: the config's own ${ENV} reference, interpolated by the kernel
    config: { url, token: '${HYPSINK_TOKEN}', ...o.forward },
  };
  if (o.unit) central.unit = o.unit;
  const cfg: Json = {
    cache: { root: 'cache' },
    state: { dir: 'state' },
    datasets: { events: EVENTS },
    sinks: { central },
  };
  if (o.driver) cfg.driver = o.driver;
  return cfg;
}

/** Short waits for tests that provoke network failures (the defaults are minutes). */
export const FAST: Json = { timeoutMs: 3000, ladderMs: [100], retry: { attempts: 2, baseMs: 20, maxMs: 40 } };

export interface Workspace {
  readonly dir: string;
  /** The receiver's data dir. */
  readonly recv: string;
  readonly configPath: string;
  writeConfig(cfg: Json): Promise<string>;
  cleanup(): Promise<void>;
}

export async function workspace(prefix: string): Promise<Workspace> {
  const { dir, cleanup } = await tempDir(`fe2e-${prefix}`);
  const configPath = join(dir, 'hypsink.config.json');
  return {
    dir,
    recv: join(dir, 'receiver-data'),
    configPath,
    async writeConfig(cfg: Json) {
      await fsp.writeFile(configPath, JSON.stringify(cfg, null, 1));
      return configPath;
    },
    cleanup,
  };
}

export interface OpenKernel {
  readonly k: Hypsink;
  /** Every log line the kernel and its plugins wrote, parsed. */
  readonly logs: Json[];
}

/** `Hypsink.open(await loadConfig(path))` in this process, HYPSINK_TOKEN set, logs captured. */
export async function openKernel(configPath: string, token = TOKEN): Promise<OpenKernel> {
  process.env.HYPSINK_TOKEN = token;
  const logs: Json[] = [];
  const log = createLogger('debug', {
    write(s: string) {
      logs.push(JSON.parse(s) as Json);
    },
  });
  const k = await Hypsink.open(await loadConfig(configPath), { log });
  return { k, logs };
}

/** Open, run `fn`, close. */
export async function withKernel<T>(configPath: string, fn: (o: OpenKernel) => Promise<T>): Promise<T> {
  const o = await openKernel(configPath);
  try {
    return await fn(o);
  } finally {
    await o.k.close();
  }
}

/** The row with this id, as ingested (and as it must arrive): every third msg is null. */
export function eventRow(id: number): Json {
  return { id, ts: new Date(Date.UTC(2026, 0, 1) + id * 1000).toISOString(), msg: id % 3 === 0 ? null : `m${id}` };
}

export function eventLines(from: number, n: number): string {
  let s = '';
  for (let id = from; id < from + n; id++) s += `${JSON.stringify(eventRow(id))}\n`;
  return s;
}

export const ids = (from: number, n: number): number[] => Array.from({ length: n }, (_, i) => from + i);

/** `hypsink ingest` in this process: NDJSON → spool → flush. */
export async function ingest(k: Hypsink, source: string, from: number, n: number): Promise<void> {
  const r = await ingestNdjson(k, 'events', source, Readable.from([eventLines(from, n)]), '<test>');
  assert.equal(r.rejected, 0, 'test rows are valid');
  assert.equal(r.accepted, n);
}

export async function ingestWith(configPath: string, rows: Record<string, [from: number, n: number]>): Promise<void> {
  await withKernel(configPath, async ({ k }) => {
    for (const [source, [from, n]] of Object.entries(rows)) await ingest(k, source, from, n);
  });
}

export async function statusOf(configPath: string): Promise<StatusReport> {
  return withKernel(configPath, ({ k }) => k.status());
}

export function partitionStatus(s: StatusReport, source: string): PartitionStatus {
  const p = s.sinks.find((x) => x.name === 'central')?.partitions.find((x) => x.source === source);
  assert.ok(p, `status has central × events/${source}`);
  return p;
}

/** `hfw1-<since|start>-<until>-<hash>` → the seq range. */
export function batchRange(id: string): { since: number | null; until: number } {
  const m = /^hfw1-(start|\d+)-(\d+)-[0-9a-f]{32}$/.exec(id);
  assert.ok(m, `batch id ${id} has the documented shape`);
  return { since: m[1] === 'start' ? null : Number(m[1]), until: Number(m[2]) };
}

/**
 * The exactly-once oracle over the receiver's data dir: every batch id ledgered
 * once, no un-ledgered bytes, ledger and data files agree, every row exactly the
 * ingested row (no `_hyp_*` key, no other key), and per source exactly the
 * expected ids, each once, in ingest order.
 */
export async function assertExactlyOnce(recvDir: string, expected: Record<string, readonly number[]>): Promise<Stored> {
  const st = await readStored(recvDir);
  const idsSeen = st.ledger.map((e) => e.id);
  assert.equal(new Set(idsSeen).size, idsSeen.length, `a batch id is ledgered twice: ${idsSeen.join(' ')}`);
  assert.equal(st.unledgeredBytes, 0, 'data files hold bytes no ledger entry owns');
  assert.equal(
    st.ledger.reduce((n, e) => n + e.rows, 0),
    st.rowCount,
    'the ledger row counts and the data files disagree',
  );
  for (const e of st.ledger) {
    assert.equal(e.dataset, 'events');
    batchRange(e.id);
  }
  const got: Record<string, number[]> = {};
  for (const [source, rows] of Object.entries(st.rows.events ?? {})) {
    got[source] = rows.map((r) => {
      const internal = Object.keys(r).filter((key) => key.startsWith('_hyp_'));
      assert.deepEqual(internal, [], `a stored row carries internal keys: ${JSON.stringify(r)}`);
      assert.deepEqual({ ...r }, eventRow(Number(r.id)), 'a stored row differs from the ingested one');
      return Number(r.id);
    });
  }
  const dupes = Object.entries(got).flatMap(([s, list]) => list.filter((id, i) => list.indexOf(id) !== i).map((id) => `${s}/${id}`));
  assert.deepEqual(dupes, [], 'rows stored more than once');
  const want = Object.fromEntries(Object.entries(expected).map(([s, list]) => [s, [...list]]));
  assert.deepEqual(got, want, 'stored rows differ from the ingested rows');
  return st;
}

/** Rows of one ledgered batch, as ids. */
export function batchIds(st: Stored, id: string): number[] {
  const e = st.ledger.find((x) => x.id === id);
  assert.ok(e, `batch ${id} is ledgered`);
  // Rows of a source are stored in ledger order: count the rows of earlier batches of that source.
  let skip = 0;
  for (const x of st.ledger) {
    if (x === e) break;
    if (x.dataset === e.dataset && x.source === e.source) skip += x.rows;
  }
  return (st.rows[e.dataset]?.[e.source] ?? []).slice(skip, skip + e.rows).map((r) => Number(r.id));
}

export interface ProcResult {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly stdout: string;
  readonly stderr: string;
}

export interface Cli {
  readonly child: ChildProcess;
  stdout(): string;
  stderr(): string;
  readonly exited: Promise<ProcResult>;
  /** Resolves with the first pino line on stderr that `pred` accepts. */
  waitForLog(pred: (line: Json) => boolean, timeoutMs?: number): Promise<Json>;
  /** Resolves with the first match of `re` on stdout. */
  waitForOut(re: RegExp, timeoutMs?: number): Promise<RegExpExecArray>;
}

/** Pino lines of a child's stderr. */
export function logLines(text: string): Json[] {
  return text
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .flatMap((l) => {
      try {
        return [JSON.parse(l) as Json];
      } catch {
        return [];
      }
    });
}

/** `node bin/hypsink.js <args>` in a child; no fault point unless `env` sets one. */
export function spawnCli(args: string[], env: Record<string, string> = {}): Cli {
  const child = spawn(process.execPath, [BIN, ...args], {
    cwd: REPO,
    env: { ...process.env, HYPSINK_FAULT: '', HYPSINK_FAULT_AT: '', HYPSINK_LOG_LEVEL: 'debug', HYPSINK_TOKEN: TOKEN, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  const listeners = new Set<() => void>();
  child.stdout!.setEncoding('utf8').on('data', (s: string) => {
    out += s;
    for (const l of listeners) l();
  });
  child.stderr!.setEncoding('utf8').on('data', (s: string) => {
    err += s;
    for (const l of listeners) l();
  });
  const exited = new Promise<ProcResult>((resolve, reject) => {
    child.on('error', reject);
    child.on('close', (code, signal) => {
      resolve({ code, signal, stdout: out, stderr: err });
      for (const l of listeners) l();
    });
  });
  /** Resolve with the first non-undefined `probe()`, re-probed on every output. */
  const waitUntil = <T>(probe: () => T | undefined, what: string, timeoutMs: number) =>
    new Promise<T>((resolve, reject) => {
      const check = () => {
        const hit = probe();
        if (hit !== undefined) {
          done();
          resolve(hit);
        } else if (child.exitCode !== null || child.signalCode !== null) {
          done();
          reject(new Error(`hypsink ${args[0]} exited before ${what}:\n${err}`));
        }
      };
      const timer = setTimeout(() => {
        done();
        reject(new Error(`timed out waiting for ${what} of hypsink ${args[0]}:\n${err}`));
      }, timeoutMs);
      const done = () => {
        clearTimeout(timer);
        listeners.delete(check);
      };
      listeners.add(check);
      check();
    });
  const waitForLog = (pred: (line: Json) => boolean, timeoutMs = 20_000) =>
    waitUntil(() => logLines(err).find(pred), 'the awaited log line', timeoutMs);
  const waitForOut = (re: RegExp, timeoutMs = 20_000) => waitUntil(() => re.exec(out) ?? undefined, `stdout ${re}`, timeoutMs);
  return { child, stdout: () => out, stderr: () => err, exited, waitForLog, waitForOut };
}

/** `hypsink receiver --port <port> --data <dir>` (token from HYPSINK_TOKEN), once it listens. */
export async function cliReceiver(port: number, dataDir: string, env: Record<string, string> = {}): Promise<Cli & { port: number; url: string }> {
  const c = spawnCli(['receiver', '--port', String(port), '--data', dataDir], env);
  const m = await c.waitForOut(/receiver listening on (http:\/\/127\.0\.0\.1:(\d+))/);
  return Object.assign(c, { url: m[1]!, port: Number(m[2]) });
}

export function runCli(args: string[], env: Record<string, string> = {}): Promise<ProcResult> {
  return spawnCli(args, env).exited;
}

/** Poll `cond` every 20 ms until it holds (or fail after `timeoutMs`). */
export async function until(cond: () => boolean, what: string, timeoutMs = 15_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
