/**
 * Test-side views of a cache that do not go through the reader under test:
 * Parquet files decoded directly with parquet-wasm, manifests and cursors read
 * as JSON, and a child-process runner for test/support/cache-worker.ts.
 */
import { spawn } from 'node:child_process';
import { promises as fsp } from 'node:fs';
import { basename, dirname, join, relative } from 'node:path';
import { tableFromIPC } from 'apache-arrow';
import * as pw from 'parquet-wasm/node';
import type { WorkerScript } from '../support/cache-worker.js';
import { REPO, runNode } from '../support/proc.js';

export { REPO };

const WORKER = join(REPO, 'test/support/cache-worker.ts');

export interface WorkerRun {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly stdout: string;
  readonly stderr: string;
  readonly pid: number;
  readonly events: Record<string, unknown>[];
}

/** Run the cache worker to completion (or death). */
export async function runWorker(script: WorkerScript, env: Record<string, string> = {}): Promise<WorkerRun> {
  const r = await runNode(['--import', 'tsx', WORKER, JSON.stringify(script)], { env });
  const events = r.stdout
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as Record<string, unknown>);
  return { ...r, events };
}

/** Start the worker; `ready` resolves once it printed an event named `waitFor`, `exited` when it ends. */
export function startWorker(script: WorkerScript, waitFor: string) {
  const child = spawn(process.execPath, ['--import', 'tsx', WORKER, JSON.stringify(script)], {
    cwd: REPO,
    env: { ...process.env, HYPSINK_FAULT: '' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  const events: Record<string, unknown>[] = [];
  let onEvent: (ev: Record<string, unknown>) => void = () => undefined;
  child.stderr.on('data', (c: Buffer) => {
    stderr += c.toString('utf8');
  });
  child.stdout.on('data', (c: Buffer) => {
    stdout += c.toString('utf8');
    const lines = stdout.split('\n');
    stdout = lines.pop() ?? '';
    for (const line of lines) {
      if (!line.startsWith('{')) continue;
      const ev = JSON.parse(line) as Record<string, unknown>;
      events.push(ev);
      onEvent(ev);
    }
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null; stderr: string; events: typeof events }>((r) =>
    child.on('close', (code, signal) => r({ code, signal, stderr, events })),
  );
  const ready = new Promise<Record<string, unknown>>((resolve, reject) => {
    onEvent = (ev) => {
      if (ev.ev === waitFor) resolve(ev);
    };
    void exited.then(({ code, signal }) => reject(new Error(`worker exited (${code ?? signal}) before "${waitFor}": ${stderr}`)));
  });
  return { child, ready, exited };
}

/** Every file under `dir` (relative paths), recursively. */
export async function walk(dir: string): Promise<string[]> {
  const out: string[] = [];
  const visit = async (d: string) => {
    let entries: import('node:fs').Dirent[];
    try {
      entries = await fsp.readdir(d, { withFileTypes: true });
    } catch {
      return;
    }
    for (const e of entries) {
      const p = join(d, e.name);
      if (e.isDirectory()) await visit(p);
      else out.push(relative(dir, p));
    }
  };
  await visit(dir);
  return out.sort();
}

/** A data file decoded straight from disk: every column as plain values. */
export async function readParquetRaw(path: string): Promise<Record<string, unknown[]>> {
  const bytes = new Uint8Array(await fsp.readFile(path));
  const t = tableFromIPC(pw.readParquet(bytes).intoIPCStream());
  const out: Record<string, unknown[]> = {};
  for (const f of t.schema.fields) out[f.name] = Array.from({ length: t.numRows }, (_, i) => t.getChild(f.name)!.get(i));
  return out;
}

/** Row-group row counts as the Parquet footer states them. */
export async function parquetRowGroups(path: string): Promise<number[]> {
  const blob = new Blob([await fsp.readFile(path)]);
  const f = await pw.ParquetFile.fromFile(blob);
  const m = f.metadata();
  const out: number[] = [];
  for (let i = 0; i < m.numRowGroups(); i++) out.push(m.rowGroup(i).numRows());
  f.free();
  return out;
}

export interface ManifestJson {
  generation: number;
  files: {
    name: string;
    rows: number;
    bytes: number;
    minSeq: string | null;
    maxSeq: string | null;
    rowGroups: { rows: number; minSeq: string | null; maxSeq: string | null }[];
    minTs: number | null;
    maxTs: number | null;
  }[];
  spools: Record<string, number>;
  prunedThroughSeq: string | null;
  forcedPrunes: [string, string][];
}

export async function readJson<T>(path: string): Promise<T> {
  return JSON.parse(await fsp.readFile(path, 'utf8')) as T;
}

export async function currentManifest(partitionDir: string): Promise<{ generation: number; manifest: ManifestJson }> {
  const cursor = await readJson<{ generation: number }>(join(partitionDir, 'cursor.json'));
  const manifest = await readJson<ManifestJson>(join(partitionDir, `table-${cursor.generation}`, 'manifest.json'));
  return { generation: cursor.generation, manifest };
}

export interface DumpRow {
  /** `_hyp_ingest_seq` as a decimal string, or null for legacy rows. */
  readonly seq: string | null;
  readonly rowId: string | null;
  readonly batchId: string | null;
  readonly id: number;
  readonly file: string;
}

/** Every committed row of a partition, in manifest (commit) order, decoded from the files directly. */
export async function dumpPartition(partitionDir: string): Promise<DumpRow[]> {
  const { generation, manifest } = await currentManifest(partitionDir);
  const out: DumpRow[] = [];
  for (const f of manifest.files) {
    const cols = await readParquetRaw(join(partitionDir, `table-${generation}`, f.name));
    const ids = cols.id ?? [];
    for (let i = 0; i < ids.length; i++) {
      const s = cols._hyp_ingest_seq?.[i];
      out.push({
        seq: s === null || s === undefined ? null : String(s),
        rowId: (cols._hyp_cache_row_id?.[i] as string | undefined) ?? null,
        batchId: (cols._hyp_cache_batch_id?.[i] as string | undefined) ?? null,
        id: Number(ids[i]),
        file: f.name,
      });
    }
  }
  return out;
}

/** The partition directories of a dataset (`datasets/<ds>/source=*`), absolute. */
export async function partitionDirs(root: string, datasetSegment = 'events'): Promise<string[]> {
  const base = join(root, 'datasets', datasetSegment);
  let names: string[] = [];
  try {
    names = await fsp.readdir(base);
  } catch {
    return [];
  }
  return names.filter((n) => n.startsWith('source=')).map((n) => join(base, n));
}

/**
 * Every `_hyp_ingest_seq` value in every Parquet file anywhere under the root
 * (orphans and old generations too). A kill can cut an orphan short while a
 * concurrent flush of another spool writes it: that one holds no seq; a cut
 * file that its generation's manifest lists is an error.
 */
export async function seqsOnDisk(root: string): Promise<bigint[]> {
  const out: bigint[] = [];
  for (const rel of await walk(join(root, 'datasets'))) {
    if (!rel.endsWith('.parquet')) continue;
    let cols: Record<string, unknown[]>;
    try {
      cols = await readParquetRaw(join(root, 'datasets', rel));
    } catch (e) {
      const manifest = await readJson<ManifestJson>(join(root, 'datasets', dirname(rel), 'manifest.json')).catch(() => null);
      if (manifest?.files.some((f) => f.name === basename(rel))) throw e;
      continue;
    }
    for (const s of cols._hyp_ingest_seq ?? []) if (s !== null && s !== undefined) out.push(BigInt(s as bigint));
  }
  return out;
}

/** Assert-free check that a list of decimal seqs strictly increases; returns the first offending index or -1. */
export function firstNonIncreasing(seqs: readonly (string | null)[]): number {
  let prev = -1n;
  for (let i = 0; i < seqs.length; i++) {
    const s = seqs[i];
    const v = s === null || s === undefined ? 0n : BigInt(s);
    if (v <= prev && !(v === 0n && prev === 0n && s === null)) return i;
    prev = v;
  }
  return -1;
}
