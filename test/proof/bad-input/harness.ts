/**
 * The harness of the bad-input matrix (test/proof/bad-input.test.ts): a temp
 * workspace with real config files, the CLI's own entry point run in this
 * process (`main`, exit code and stderr captured) or `bin/hypsink.js` in a
 * child process, and three exactly-once oracles that read the destinations
 * directly — local-fs Parquet files decoded with parquet-wasm, S3 objects read
 * from s3rver, and the reference receiver's ledger and data files — never
 * through the kernel's own reader.
 */
import assert from 'node:assert/strict';
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { promises as fsp, mkdirSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { join, relative, sep } from 'node:path';
import { GetObjectCommand, ListObjectsV2Command, S3Client } from '@aws-sdk/client-s3';
import { tableFromIPC } from 'apache-arrow';
import * as pw from 'parquet-wasm/node';
import { readStored } from '../../../fixtures/receiver/server.js';
import type { StatusReport } from '../../../kernel/runtime.js';
import type { ErrorCode } from '../../../types/errors.js';
import { BIN, type CliResult, cli, decodeParquet, REPO, walkFiles } from '../../support/kernel.js';

export type Json = Record<string, unknown>;
export { BIN, REPO };

// ---------------------------------------------------------------- config

/**
 * The dataset every case uses: the issue's `events` plus a DOUBLE column, and a
 * small `maxRowBytes` so an oversized row is cheap to make.
 */
export const EVENTS = {
  columns: [
    { name: 'id', type: 'INT64', nullable: false },
    { name: 'ts', type: 'TIMESTAMP', nullable: false },
    { name: 'msg', type: 'STRING', nullable: true },
    { name: 'dur', type: 'DOUBLE', nullable: true },
  ],
  timestampColumn: 'ts',
  maxRowBytes: 300,
};

export function config(sinks: Record<string, Json>, extra: Json = {}): Json {
  return {
    cache: { root: 'cache', lockWaitMs: 3000 },
    state: { dir: 'state' },
    driver: { lockWaitMs: 3000 },
    datasets: { events: EVENTS },
    sinks,
    ...extra,
  };
}

export function archiveSink(dir = 'exports'): Json {
  return { writer: '@hypsink/format-parquet', destination: '@hypsink/local-fs', datasets: ['events'], config: { dir } };
}

/** Fast failure for network cases (the defaults wait minutes). */
export const FAST_FORWARD: Json = { timeoutMs: 2000, ladderMs: [50], maxInlineWaitMs: 2000, retry: { attempts: 2, baseMs: 10, maxMs: 20 } };

export function centralSink(url: string, token: string, extra: Json = {}): Json {
  return { plugin: '@hypsink/forward', datasets: ['events'], config: { url, token, ...FAST_FORWARD, ...extra } };
}

export function lakeSink(endpoint: string, bucket: string, prefix: string): Json {
  return {
    writer: '@hypsink/format-parquet',
    destination: '@hypsink/s3',
    datasets: ['events'],
    config: { bucket, prefix, region: 'us-east-1', endpoint, forcePathStyle: true, retry: { attempts: 2, baseMs: 10, maxMs: 20 } },
  };
}

// ---------------------------------------------------------------- rows

let nextId = 1;

/** Globally unique ids, so a row found anywhere tells which case (and source) wrote it. */
export function freshIds(n: number): number[] {
  return Array.from({ length: n }, () => nextId++);
}

/** One valid row of EVENTS. */
export function row(id: number): Json {
  return { id, ts: new Date(Date.UTC(2026, 0, 1) + id * 1000).toISOString(), msg: `m${id}`, dur: id / 4 };
}

export const line = (id: number): string => JSON.stringify(row(id));

// ---------------------------------------------------------------- workspace + CLI

export class Workspace {
  private files = 0;
  /** Every id this workspace ingested validly: what the oracles expect, exactly once. */
  readonly valid: number[] = [];

  constructor(readonly dir: string) {}

  path(...p: string[]): string {
    return join(this.dir, ...p);
  }

  get cacheRoot(): string {
    return this.path('cache');
  }

  /** Write a config file (object or raw text) and return its path. */
  async writeConfig(cfg: Json | string, name = 'hypsink.config.json'): Promise<string> {
    const p = this.path(name);
    await fsp.writeFile(p, typeof cfg === 'string' ? cfg : `${JSON.stringify(cfg, null, 1)}\n`);
    return p;
  }

  /** The CLI's own entry point in this process, `--config` appended. */
  cli(configPath: string, ...args: string[]): Promise<CliResult> {
    return cli(...args, '--config', configPath);
  }

  /** `hypsink ingest <dataset> --source <s> --file <f>` of these NDJSON lines. */
  async ingest(configPath: string, source: string, lines: readonly string[], dataset = 'events'): Promise<CliResult & { file: string }> {
    const file = this.path(`input-${++this.files}.ndjson`);
    await fsp.writeFile(file, lines.map((l) => `${l}\n`).join(''));
    const r = await this.cli(configPath, 'ingest', dataset, '--source', source, '--file', file);
    return { ...r, file };
  }

  /** Ingest `n` fresh valid rows (must succeed) and remember them; returns their ids. */
  async ingestValid(configPath: string, source: string, n: number): Promise<number[]> {
    const ids = freshIds(n);
    const r = await this.ingest(configPath, source, ids.map(line));
    assert.equal(r.code, 0, `valid rows ingest: ${r.err}`);
    this.valid.push(...ids);
    return ids;
  }

  async status(configPath: string): Promise<StatusReport> {
    const r = await this.cli(configPath, 'status', '--json');
    assert.equal(r.code, 0, `status: ${r.err}`);
    return JSON.parse(r.out) as StatusReport;
  }

  /** The operator points a sink at another destination on purpose (LLP 0022). */
  async acceptDestination(configPath: string, sink: string): Promise<void> {
    const r = await this.cli(configPath, 'accept-destination', sink);
    assert.equal(r.code, 0, `accept-destination: ${r.err}`);
  }

  async exportOk(configPath: string, sink?: string): Promise<CliResult> {
    const r = await this.cli(configPath, 'export', '--json', ...(sink ? ['--sink', sink] : []));
    assert.equal(r.code, 0, `export must succeed: ${r.err}`);
    return r;
  }
}

/**
 * The error contract of the CLI: this exit code, this error code, and a
 * message naming every `mention` (the file, line, sink or field involved).
 */
export function assertFails(r: CliResult, exit: 1 | 2, code: ErrorCode, ...mentions: (string | RegExp)[]): void {
  // BADINPUT_SHOW=1 prints every asserted message (as TAP comments), to review their wording.
  if (process.env.BADINPUT_SHOW) process.stdout.write(`\n# ${r.err.split('\n').join('\n# ')}\n`);
  assert.equal(r.code, exit, `exit code ${exit} expected, got ${r.code}; stderr: ${r.err}`);
  assert.match(r.err, new RegExp(`^hypsink: ${code}: `, 'm'), `error code ${code} expected: ${r.err}`);
  for (const m of mentions) {
    if (typeof m === 'string') assert.ok(r.err.includes(m), `the message names ${JSON.stringify(m)}: ${r.err}`);
    else assert.match(r.err, m, `the message matches ${m}`);
  }
}

/** One partition of `status --json`. */
export function partitionOf(s: StatusReport, sink: string, source: string): StatusReport['sinks'][number]['partitions'][number] {
  const all = s.sinks.find((x) => x.name === sink)?.partitions.filter((p) => p.source === source && p.dataset === 'events') ?? [];
  assert.equal(all.length, 1, `status has exactly one ${sink} × events/${JSON.stringify(source)} partition`);
  return all[0]!;
}

// ---------------------------------------------------------------- oracles

/** Where each delivered row was found: one entry per delivered copy. */
export interface Delivered {
  readonly id: number;
  /** The folder (blob key prefix) or receiver source it was found under. */
  readonly where: string;
}

/**
 * Exactly once: `found` holds each id of `expected` exactly once and nothing
 * else (no duplicate, no row that was never validly ingested; within `scope`
 * and `expected` when a scope is given).
 */
export function assertExactlyOnce(found: readonly Delivered[], expected: readonly number[], what: string, scope?: readonly number[]): void {
  // With a scope (a case of a shared workspace), only the case's own ids are looked at,
  // so one failing case does not fail the cases after it.
  const inScope = scope ? new Set([...scope, ...expected]) : null;
  const count = new Map<number, number>();
  for (const d of found) if (!inScope || inScope.has(d.id)) count.set(d.id, (count.get(d.id) ?? 0) + 1);
  const dupes = [...count].filter(([, n]) => n > 1).map(([id, n]) => `${id}×${n}`);
  assert.deepEqual(dupes, [], `${what}: rows delivered more than once`);
  const want = new Set(expected);
  const missing = expected.filter((id) => !count.has(id));
  assert.deepEqual(missing, [], `${what}: valid rows never delivered`);
  const extra = [...count.keys()].filter((id) => !want.has(id));
  assert.deepEqual(extra, [], `${what}: rows delivered that were never validly ingested`);
}

export interface ExportFile {
  /** Relative to the export dir, '/'-separated. */
  readonly rel: string;
  /** The folder part of `rel`. */
  readonly folder: string;
  readonly ids: number[];
  readonly columns: string[];
}

/** Every committed file of a local-fs export dir, decoded (the temp dir excluded). */
export async function localFiles(exportDir: string): Promise<ExportFile[]> {
  const out: ExportFile[] = [];
  for (const p of await walkFiles(exportDir, '.hypsink-tmp')) {
    const rel = relative(exportDir, p).split(sep).join('/');
    assert.ok(rel.endsWith('.parquet'), `only Parquet files under the export dir, found ${rel}`);
    const { columns, rows } = decodeParquet(p);
    out.push({ rel, folder: rel.slice(0, rel.lastIndexOf('/')), ids: rows.map((r) => Number(r.id)), columns });
  }
  return out;
}

export async function localDelivered(exportDir: string): Promise<Delivered[]> {
  const files = await localFiles(exportDir);
  for (const f of files) assert.deepEqual(f.columns.filter((c) => c.startsWith('_hyp_')), [], `${f.rel} has internal columns`);
  return files.flatMap((f) => f.ids.map((id) => ({ id, where: f.folder })));
}

/** Files left in local-fs's temp dir (a failed put must leave none; its `commits` folder of commit records is not one: LLP 0028). */
export async function tempLeft(exportDir: string): Promise<string[]> {
  try {
    return (await fsp.readdir(join(exportDir, '.hypsink-tmp'))).filter((n) => n !== 'commits');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw e;
  }
}

/** Rows the reference receiver stored (ledger-backed), for these sources. */
export async function receiverDelivered(dataDir: string, sources: readonly string[]): Promise<Delivered[]> {
  const st = await readStored(dataDir);
  assert.equal(st.unledgeredBytes, 0, 'the receiver holds bytes no ledger entry owns');
  const ids = st.ledger.map((e) => e.id);
  assert.equal(new Set(ids).size, ids.length, 'a batch id is ledgered twice');
  const out: Delivered[] = [];
  for (const s of sources) {
    for (const r of st.rows.events?.[s] ?? []) {
      assert.deepEqual(Object.keys(r).filter((k) => k.startsWith('_hyp_')), [], 'a forwarded row carries internal keys');
      out.push({ id: Number(r.id), where: s });
    }
  }
  return out;
}

/** Ledger entries (batch ids) of one source. */
export async function receiverBatches(dataDir: string, source: string): Promise<string[]> {
  return (await readStored(dataDir)).ledger.filter((e) => e.source === source).map((e) => e.id);
}

/** Every object under `prefix/` of a bucket, straight from the store (not through any proxy). */
export async function s3Delivered(client: S3Client, bucket: string, prefix: string): Promise<Delivered[]> {
  const out: Delivered[] = [];
  const list = await client.send(new ListObjectsV2Command({ Bucket: bucket, Prefix: `${prefix}/` }));
  for (const o of list.Contents ?? []) {
    const got = await client.send(new GetObjectCommand({ Bucket: bucket, Key: o.Key! }));
    const bytes = await got.Body!.transformToByteArray();
    const t = tableFromIPC(pw.readParquet(bytes).intoIPCStream());
    const folder = o.Key!.slice(0, o.Key!.lastIndexOf('/'));
    for (const r of t.toArray()) out.push({ id: Number((r as { id: unknown }).id), where: folder });
  }
  return out;
}

// ---------------------------------------------------------------- "nothing was written"

/** Every file (by content hash) and folder under `dir`. */
export async function snapshot(dir: string): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  const walk = async (d: string) => {
    for (const e of await fsp.readdir(d, { withFileTypes: true })) {
      const p = join(d, e.name);
      const rel = relative(dir, p);
      if (e.isDirectory()) {
        out.set(rel, 'dir');
        await walk(p);
      } else {
        out.set(rel, createHash('sha256').update(await fsp.readFile(p)).digest('hex'));
      }
    }
  };
  await walk(dir);
  return out;
}

export function assertUnchanged(before: Map<string, string>, after: Map<string, string>, what: string): void {
  const changed: string[] = [];
  for (const [k, v] of after) if (before.get(k) !== v) changed.push(before.has(k) ? `changed ${k}` : `created ${k}`);
  for (const k of before.keys()) if (!after.has(k)) changed.push(`removed ${k}`);
  assert.deepEqual(changed, [], `${what}: nothing may be written`);
}

// ---------------------------------------------------------------- network fixtures

/** A server that accepts connections and never answers: a hung receiver. */
export interface HangServer {
  readonly url: string;
  /** Connections accepted so far. */
  connections(): number;
  stop(): Promise<void>;
}

export async function startHangServer(): Promise<HangServer> {
  const sockets = new Set<Socket>();
  let accepted = 0;
  const server: Server = createServer((s) => {
    accepted++;
    sockets.add(s);
    s.on('error', () => {});
    s.on('close', () => sockets.delete(s));
    s.resume(); // read and discard the request; never write a byte back
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as { port: number }).port;
  return {
    url: `http://127.0.0.1:${port}`,
    connections: () => accepted,
    async stop() {
      for (const s of sockets) s.destroy();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}

/** A loopback port nobody listens on (bound, then released). */
export async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as { port: number }).port;
  await new Promise<void>((r) => server.close(() => r()));
  return port;
}

// ---------------------------------------------------------------- child processes

export interface Child {
  readonly child: ChildProcess;
  readonly pid: number;
  stdout(): string;
  stderr(): string;
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** Resolves once stdout matches `re`. */
  waitOut(re: RegExp, timeoutMs?: number): Promise<void>;
}

export function spawnChild(args: string[], env: Record<string, string> = {}): Child {
  const child = spawn(process.execPath, args, {
    cwd: REPO,
    env: { ...process.env, HYPSINK_FAULT: '', HYPSINK_FAULT_AT: '', HYPSINK_LOG_LEVEL: 'warn', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stdout!.setEncoding('utf8').on('data', (s: string) => {
    out += s;
  });
  child.stderr!.setEncoding('utf8').on('data', (s: string) => {
    err += s;
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((r) =>
    child.on('close', (code, signal) => r({ code, signal })),
  );
  return {
    child,
    pid: child.pid ?? -1,
    stdout: () => out,
    stderr: () => err,
    exited,
    waitOut: (re, timeoutMs = 20_000) => until(() => re.test(out) || child.exitCode !== null, `${re} from child (${err})`, timeoutMs).then(() => {
      assert.match(out, re, `child exited early: ${err}`);
    }),
  };
}

export async function until(cond: () => boolean, what: string, timeoutMs = 20_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

// ---------------------------------------------------------------- a full disk

/**
 * Mount a tmpfs of `size` at `dir` (as root). Returns the unmount function, or
 * the reason it could not be mounted (not root, no CAP_SYS_ADMIN, no mount(8)).
 */
export function mountTmpfs(dir: string, size: string): { unmount: () => void } | { reason: string } {
  mkdirSync(dir, { recursive: true });
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${size},mode=0755`, 'tmpfs', dir], { stdio: 'pipe' });
  } catch (e) {
    return { reason: String((e as { stderr?: Buffer }).stderr ?? e).trim() };
  }
  let mounted = true;
  return {
    unmount() {
      if (!mounted) return;
      mounted = false;
      execFileSync('umount', [dir], { stdio: 'pipe' });
    },
  };
}

/** Fill the filesystem holding `file` until it is out of space (ENOSPC). */
export async function fillDisk(file: string): Promise<void> {
  const fh = await fsp.open(file, 'w');
  try {
    const chunk = Buffer.alloc(4096, 0x61);
    for (;;) {
      try {
        await fh.write(chunk);
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code === 'ENOSPC') return;
        throw e;
      }
    }
  } finally {
    await fh.close();
  }
}

export { S3Client };
