/**
 * Helpers for sink, CLI and plugin tests: a temp config on real disk, an
 * in-process `Hypsink` opened from it (logs captured), NDJSON rows, the CLI run
 * in-process (`main`), through `bin/hypsink.js`, or as a scripted child that runs
 * several CLI commands in one process (test/fixtures/cli-steps.ts), and an
 * oracle that decodes exported Parquet files directly with parquet-wasm — not
 * through the kernel's reader.
 */
import assert from 'node:assert/strict';
import { promises as fsp, readFileSync } from 'node:fs';
import { join, relative, sep } from 'node:path';
import { Readable } from 'node:stream';
import { tableFromIPC } from 'apache-arrow';
import * as pw from 'parquet-wasm/node';
import { main } from '../../kernel/cli/main.js';
import { loadConfig } from '../../kernel/config/load.js';
import { type IngestResult, ingestNdjson } from '../../kernel/ingest/ingest.js';
import { createLogger } from '../../kernel/log.js';
import { Hypsink, type StatusReport } from '../../kernel/runtime.js';
import { type ProcResult, REPO, runNode } from './proc.js';

export { REPO, type ProcResult };
export const BIN = join(REPO, 'test/support/bin.mjs');
export const STEPS_CHILD = join(REPO, 'test/fixtures/cli-steps.ts');
export const FIXTURE_PLUGINS = join(REPO, 'test/fixtures/plugins');

export type Json = Record<string, unknown>;

/** The sample config, verbatim. */
export const SAMPLE_CONFIG_TEXT = `{ "cache": { "root": ".hypsink/cache" },
  "datasets": { "events": { "columns": [ { "name": "id", "type": "INT64", "nullable": false }, { "name": "ts", "type": "TIMESTAMP", "nullable": false }, { "name": "msg", "type": "STRING", "nullable": true } ], "timestampColumn": "ts" } },
  "sinks": { "archive": { "writer": "@hypsink/format-parquet", "destination": "@hypsink/local-fs", "datasets": ["events"], "schedule": "*/5 * * * *", "config": { "dir": "exports" } } } }
`;

/** A fresh copy of the sample config as an object, for tests to extend. */
export function sampleConfig(): Json & { sinks: Record<string, Json>; datasets: Record<string, Json> } {
  return JSON.parse(SAMPLE_CONFIG_TEXT);
}

export function archive(c: ReturnType<typeof sampleConfig>): Json {
  return c.sinks.archive!;
}

export async function writeConfig(dir: string, config: unknown, name = 'hypsink.config.json'): Promise<string> {
  const path = join(dir, name);
  await fsp.writeFile(path, typeof config === 'string' ? config : JSON.stringify(config, null, 1));
  return path;
}

export interface OpenKernel {
  readonly k: Hypsink;
  /** Every log line the kernel wrote, parsed. */
  readonly logs: Json[];
}

/** Load `configPath` and open the kernel in this process, capturing its logs. */
export async function openKernel(configPath: string): Promise<OpenKernel> {
  const logs: Json[] = [];
  const log = createLogger('info', {
    write(s: string) {
      logs.push(JSON.parse(s) as Json);
    },
  });
  const k = await Hypsink.open(await loadConfig(configPath), { log });
  return { k, logs };
}

/**
 * A copy made where the cache cannot see it (a VM disk image keeps the path,
 * the inode and often the machine id; a backup restored in place): its home is
 * settled as `hypsink identity --moved` would, so only the destinations'
 * checks of a unit's content stand between its rows and the original's.
 * @ref LLP 0055
 */
export async function unseenCopy(configPath: string): Promise<void> {
  const { k } = await openKernel(configPath);
  try {
    await k.identityMoved();
  } finally {
    await k.close();
  }
}

/** Rows of the sample `events` dataset with ids `from`..`from+n-1`; `extra` adds fields. */
export function eventLines(from: number, n: number, extra: (id: number) => Json = () => ({})): string {
  let s = '';
  for (let id = from; id < from + n; id++) {
    s += JSON.stringify({ id, ts: new Date(Date.UTC(2026, 0, 1) + id * 1000).toISOString(), msg: `m${id}`, ...extra(id) }) + '\n';
  }
  return s;
}

/** Ingest NDJSON text into the kernel, as `hypsink ingest` does (spool, flush, dead letter). */
export function ingestText(k: Hypsink, source: string, text: string, dataset = 'events'): Promise<IngestResult> {
  return ingestNdjson(k, dataset, source, Readable.from([text]), '<test>');
}

export async function ingest(k: Hypsink, source: string, from: number, n: number): Promise<void> {
  const r = await ingestText(k, source, eventLines(from, n));
  assert.equal(r.rejected, 0, 'test rows are valid');
  assert.equal(r.accepted, n);
}

export interface CliResult {
  readonly code: number;
  readonly out: string;
  readonly err: string;
}

/** The CLI's own entry point (`main`), in this process, output captured. Pass absolute paths. */
export async function cli(...args: string[]): Promise<CliResult> {
  let out = '';
  let err = '';
  const code = await main(['node', 'hypsink', ...args], {
    out: (s) => {
      out += s.endsWith('\n') ? s : `${s}\n`;
    },
    err: (s) => {
      err += s.endsWith('\n') ? s : `${s}\n`;
    },
  });
  return { code, out, err };
}

interface SpawnOpts {
  readonly cwd?: string;
  readonly env?: Record<string, string>;
  readonly input?: string;
}

/** Children log at warn unless a test asks for more. */
function run(args: string[], opts: SpawnOpts): Promise<ProcResult> {
  return runNode(args, { ...opts, env: { HYPSINK_LOG_LEVEL: 'warn', ...opts.env } });
}

/** `node bin/hypsink.js <args>`: the real CLI in a real process. */
export function runBin(args: string[], opts: SpawnOpts = {}): Promise<ProcResult> {
  return run([BIN, ...args], opts);
}

export interface StepResult {
  readonly args: string[];
  readonly code: number;
  readonly out: string;
  readonly err: string;
}

/**
 * Several CLI commands run one after another by `main` in one child process
 * (a fault point set in `env` may SIGKILL it midway). Returns the finished steps.
 */
export async function runSteps(steps: string[][], env: Record<string, string> = {}): Promise<ProcResult & { steps: StepResult[] }> {
  const r = await run(['--import', 'tsx', STEPS_CHILD, JSON.stringify(steps)], { env });
  const done = r.stdout
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as StepResult);
  return { ...r, steps: done };
}

export interface ExportedFile {
  /** Path relative to the export dir, with `/` separators. */
  readonly rel: string;
  readonly name: string;
  readonly source: string;
  readonly columns: string[];
  readonly rows: Json[];
}

const plain = (v: unknown): unknown => (typeof v === 'bigint' ? Number(v) : v);

/** Decode a Parquet file with parquet-wasm + apache-arrow (independent of the kernel's reader). */
export function decodeParquet(path: string): { columns: string[]; rows: Json[] } {
  const t = tableFromIPC(pw.readParquet(readFileSync(path)).intoIPCStream());
  const columns = t.schema.fields.map((f) => f.name);
  const rows = t.toArray().map((r) => {
    const o = (r as { toJSON(): Json }).toJSON();
    return Object.fromEntries(Object.entries(o).map(([k, v]) => [k, plain(v)]));
  });
  return { columns, rows };
}

/** Every file under `dir` (none if it does not exist), sorted, skipping folders named `skip`. */
export async function walkFiles(dir: string, skip?: string): Promise<string[]> {
  const out: string[] = [];
  let ents: import('node:fs').Dirent[];
  try {
    ents = await fsp.readdir(dir, { withFileTypes: true });
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return out;
    throw e;
  }
  for (const e of ents) {
    if (e.name === skip) continue;
    const p = join(dir, e.name);
    if (e.isDirectory()) out.push(...(await walkFiles(p, skip)));
    else out.push(p);
  }
  return out.sort();
}

/** Every committed file under an export dir (the temp dir excluded), Parquet decoded. */
export async function readExports(dir: string): Promise<ExportedFile[]> {
  const files = await walkFiles(dir, '.hypsink-tmp');
  return files.map((path) => {
    const rel = relative(dir, path).split(sep).join('/');
    const m = /(?:^|\/)source=([^/]+)\//.exec(rel);
    const name = rel.slice(rel.lastIndexOf('/') + 1);
    assert.ok(name.endsWith('.parquet'), `only Parquet files under the export dir, found ${rel}`);
    return { rel, name, source: decodeURIComponent(m?.[1] ?? ''), ...decodeParquet(path) };
  });
}

/** Files left in local-fs's temp dir (its `commits` folder of commit records is not one: LLP 0028). */
export async function tempFiles(dir: string): Promise<string[]> {
  try {
    return (await fsp.readdir(join(dir, '.hypsink-tmp'))).filter((n) => n !== 'commits');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw e;
  }
}

/**
 * The exactly-once oracle: every expected (source, id) appears in exactly one
 * row of exactly one file, nothing else appears, and no file has an internal column.
 */
export function assertExactlyOnce(files: readonly ExportedFile[], expected: Record<string, readonly number[]>): void {
  const seen = new Map<string, number>();
  for (const f of files) {
    const internal = f.columns.filter((c) => c.startsWith('_hyp_'));
    assert.deepEqual(internal, [], `${f.rel} has internal columns`);
    for (const r of f.rows) {
      const key = `${f.source}/${String(r.id)}`;
      seen.set(key, (seen.get(key) ?? 0) + 1);
    }
  }
  const dupes = [...seen].filter(([, n]) => n > 1).map(([k, n]) => `${k}×${n}`);
  assert.deepEqual(dupes, [], 'rows delivered more than once');
  const want = Object.entries(expected).flatMap(([s, ids]) => ids.map((id) => `${s}/${id}`));
  const missing = want.filter((k) => !seen.has(k));
  assert.deepEqual(missing, [], 'rows never delivered');
  const extra = [...seen.keys()].filter((k) => !want.includes(k));
  assert.deepEqual(extra, [], 'rows delivered that were never ingested');
}

export const range = (from: number, n: number): number[] => Array.from({ length: n }, (_, i) => from + i);

/** The documented `status --json` fields of one partition. */
export const STATUS_PARTITION_KEYS = [
  'dataset',
  'source',
  'watermark',
  'highWater',
  'pendingRows',
  'exportedRows',
  'intent',
  'gapRows',
  'lastExportAt',
  'lastError',
] as const;

/** `hypsink status --json` through the CLI, checked against its documented shape. */
export async function cliStatus(config: string): Promise<StatusReport> {
  const r = await cli('status', '--json', '--config', config);
  assert.equal(r.code, 0, r.err);
  return assertStatusShape(r.out);
}

/** Check the documented shape of `status --json` (extra fields allowed) and return it typed. */
export function assertStatusShape(text: string): StatusReport {
  const s = JSON.parse(text) as Json;
  assert.ok(Array.isArray(s.sinks), 'status has "sinks"');
  for (const sink of s.sinks as Json[]) {
    assert.equal(typeof sink.name, 'string');
    assert.ok(sink.kind === 'blob' || sink.kind === 'request', `kind ${String(sink.kind)}`);
    assert.ok(Array.isArray(sink.partitions));
    for (const p of sink.partitions as Json[]) {
      for (const k of STATUS_PARTITION_KEYS) assert.ok(k in p, `partition status lacks "${k}"`);
      assert.equal(typeof p.dataset, 'string');
      assert.equal(typeof p.source, 'string');
      for (const k of ['watermark', 'highWater'] as const) {
        assert.ok(p[k] === null || (typeof p[k] === 'string' && /^(0|[1-9]\d*)$/.test(p[k] as string)), `${k} is a decimal string or null: ${String(p[k])}`);
      }
      for (const k of ['pendingRows', 'exportedRows', 'gapRows'] as const) {
        assert.ok(Number.isInteger(p[k]) && (p[k] as number) >= 0, `${k} is a count: ${String(p[k])}`);
      }
      assert.ok(p.lastExportAt === null || !Number.isNaN(Date.parse(p.lastExportAt as string)), 'lastExportAt is an ISO date or null');
      assert.ok(p.lastError === null || typeof p.lastError === 'string');
      assert.ok(p.intent === null || typeof p.intent === 'object');
    }
  }
  return s as unknown as StatusReport;
}

/** The status of one sink × partition. */
export function partitionStatus(s: StatusReport, sink: string, source: string, dataset = 'events') {
  const p = s.sinks.find((x) => x.name === sink)?.partitions.find((x) => x.source === source && x.dataset === dataset);
  assert.ok(p, `status has ${sink} × ${dataset}/${source}`);
  return p;
}

/** The `<dataset>.<since>-<until>.<ext>` parts of a blob name. */
export function unitRange(name: string): { since: number; until: number } {
  const m = /^[^.]+\.(\d+)-(\d+)\.[a-z]+$/.exec(name);
  assert.ok(m, `blob name ${name} is <dataset>.<since>-<until>.<ext>`);
  return { since: Number(m[1]), until: Number(m[2]) };
}

/** Open the kernel of `config`, run `fn`, close it whatever happens. */
export async function withKernel<T>(config: string, fn: (k: Hypsink) => Promise<T>): Promise<T> {
  const { k } = await openKernel(config);
  try {
    return await fn(k);
  } finally {
    await k.close();
  }
}

/** `eventLines(from, n)` ingested under `source` through the kernel of `config`; every row accepted. */
export async function ingestEvents(config: string, source: string, from: number, n: number): Promise<void> {
  await withKernel(config, async (k) => {
    const r = await ingestText(k, source, eventLines(from, n));
    assert.equal(r.rejected, 0, JSON.stringify(r));
  });
}

/** One export of sink `lake` through the kernel of `config`; no partition failed. */
export async function exportLake(config: string): Promise<void> {
  await withKernel(config, async (k) => {
    const e = await k.export('lake');
    for (const p of e[0]!.partitions) assert.equal(p.error, null, JSON.stringify(p.error));
  });
}
