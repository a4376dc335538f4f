/**
 * The Iceberg sink (ice) as the oracle reads it back. At every step: the
 * table's newest metadata version (the highest `v<N>.metadata.json`, which is
 * what the plugin's writers commit by create-if-absent), its current snapshot's
 * manifest list and manifests decoded with avsc (test/support/iceberg.ts,
 * checked against the v2 spec tables) and its live data files read with
 * parquet-wasm: each file is read once (files never change), so a step costs
 * a readdir and a JSON parse. After the clean run: the same version read with
 * icebird, a reader we did not write, which must agree row for row.
 *
 * A table is shared by the caches of a scenario (two writers): the rows of a
 * cache's partition are the table's rows of that source whose ids this cache
 * was sent (ids are never shared between the caches of a scenario).
 */
import { promises as fsp } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { tableFromIPC } from 'apache-arrow';
import * as pw from 'parquet-wasm/node';
import { checkAvroFiles, fileRoute, readIcebergTable, serveDir } from '../support/iceberg.js';

export const ICE_SINK = 'ice';

/** One table version's rows: source → ids (a multiset, in file order). */
export interface IceRows {
  /** 0: no table yet. */
  readonly version: number;
  readonly bySource: ReadonlyMap<string, readonly number[]>;
  /** What version-hint.text names (NaN: absent or unreadable). */
  readonly hint: number;
}

const EMPTY: IceRows = { version: 0, bySource: new Map(), hint: Number.NaN };

/** Decoded Avro and Parquet files of tables, by path: committed files are never rewritten. */
const avroCache = new Map<string, Awaited<ReturnType<typeof checkAvroFiles>>>();
const dataCache = new Map<string, { id: number; source: string }[]>();
/** The last read of each table: a version never changes once created. */
const headCache = new Map<string, { version: number; rows: Map<string, number[]> }>();

/** Forget what was read under a dir (a scenario's dir, once removed). */
export function forgetIce(dir: string): void {
  for (const m of [avroCache, dataCache, headCache] as Map<string, unknown>[]) for (const k of m.keys()) if (k.startsWith(dir)) m.delete(k);
}

function push(m: Map<string, number[]>, source: string, id: number): void {
  const l = m.get(source);
  if (l) l.push(id);
  else m.set(source, [id]);
}

async function newestVersion(tableDir: string): Promise<number> {
  const names = await fsp.readdir(join(tableDir, 'metadata')).catch(() => [] as string[]);
  let max = 0;
  for (const n of names) {
    const m = /^v([1-9]\d*)\.metadata\.json$/.exec(n);
    if (m) max = Math.max(max, Number(m[1]));
  }
  return max;
}

async function hintOf(tableDir: string): Promise<number> {
  const t = await fsp.readFile(join(tableDir, 'metadata', 'version-hint.text'), 'utf8').catch(() => '');
  return t.trim() === '' ? Number.NaN : Number(t.trim());
}

async function avro(path: string): Promise<Awaited<ReturnType<typeof checkAvroFiles>>> {
  let hit = avroCache.get(path);
  if (!hit) {
    hit = await checkAvroFiles([{ name: path, bytes: await fsp.readFile(path) }]);
    avroCache.set(path, hit);
  }
  return hit;
}

async function dataFile(path: string): Promise<{ id: number; source: string }[]> {
  let hit = dataCache.get(path);
  if (!hit) {
    const t = tableFromIPC(pw.readParquet(await fsp.readFile(path), { columns: ['id', 'source'] }).intoIPCStream());
    const ids = t.getChild('id')!;
    const src = t.getChild('source')!;
    hit = Array.from({ length: t.numRows }, (_, i) => ({ id: Number(ids.get(i) as bigint), source: String(src.get(i)) }));
    dataCache.set(path, hit);
  }
  return hit;
}

/** A location the table names, as a path: only file: URLs inside the table's own dir. */
function pathOf(tableDir: string, location: string): string {
  if (!location.startsWith('file:')) throw new Error(`${tableDir}: the table names ${location}, not a file: URL`);
  const p = fileURLToPath(location);
  if (!p.startsWith(`${tableDir}/`)) throw new Error(`${tableDir}: the table names ${location}, outside the table's dir`);
  return p;
}

interface Metadata {
  location: string;
  'current-snapshot-id': number;
  snapshots: { 'snapshot-id': number; 'manifest-list': string; summary: Record<string, string> }[];
}

/** The rows of the table's newest version (our own read: avsc + parquet-wasm). Throws when the table is unreadable. */
export async function readIce(tableDir: string): Promise<IceRows> {
  const version = await newestVersion(tableDir);
  const hint = await hintOf(tableDir);
  if (version === 0) return { ...EMPTY, hint };
  const cached = headCache.get(tableDir);
  if (cached?.version === version) return { version, bySource: cached.rows, hint };
  const md = JSON.parse(await fsp.readFile(join(tableDir, 'metadata', `v${version}.metadata.json`), 'utf8')) as Metadata;
  const rows = new Map<string, number[]>();
  const snap = md.snapshots.find((s) => s['snapshot-id'] === md['current-snapshot-id']);
  if (md['current-snapshot-id'] !== -1 && !snap) throw new Error(`${tableDir} v${version}: current snapshot ${md['current-snapshot-id']} is not among its snapshots`);
  if (snap) {
    let total = 0;
    for (const list of (await avro(pathOf(tableDir, snap['manifest-list']))).lists) {
      for (const mf of list.manifests) {
        if (mf.content !== 0) throw new Error(`${tableDir}: manifest ${mf.manifest_path} holds deletes; hypsink only appends`);
        for (const m of (await avro(pathOf(tableDir, mf.manifest_path))).manifests) {
          for (const e of m.entries) {
            if (e.status === 2) continue;
            const got = await dataFile(pathOf(tableDir, e.data_file.file_path));
            if (got.length !== Number(e.data_file.record_count)) throw new Error(`${e.data_file.file_path}: ${got.length} rows, its manifest entry says ${e.data_file.record_count}`);
            const part = e.data_file.partition.source;
            for (const r of got) {
              if (r.source !== part) throw new Error(`${e.data_file.file_path}: a row of source ${r.source} in a file of partition source=${String(part)}`);
              push(rows, r.source, r.id);
            }
            total += got.length;
          }
        }
      }
    }
    const summed = snap.summary['total-records'];
    if (summed !== undefined && Number(summed) !== total) throw new Error(`${tableDir} v${version}: the snapshot's summary counts ${summed} records, its data files hold ${total}`);
  }
  headCache.set(tableDir, { version, rows });
  return { version, bySource: rows, hint };
}

/** The same version read by icebird (served over loopback HTTP from the table's parent dir). */
export async function readIceWithIcebird(tableDir: string, version: number): Promise<IceRows> {
  if (version === 0) return EMPTY;
  const root = dirname(tableDir);
  const server = await serveDir(root);
  try {
    const tableUrl = `file://${tableDir}`;
    const { rows } = await readIcebergTable({ tableUrl, route: fileRoute(root, server.url), metadataFileName: `v${version}.metadata.json` });
    const bySource = new Map<string, number[]>();
    for (const r of rows) {
      push(bySource, String(r.source), Number(r.id as bigint));
    }
    return { version, bySource, hint: await hintOf(tableDir) };
  } finally {
    await server.close();
  }
}

/** Where two reads of one version differ (sorted multisets per source), or undefined. */
export function iceDiffer(a: IceRows, b: IceRows): string | undefined {
  for (const s of new Set([...a.bySource.keys(), ...b.bySource.keys()])) {
    const x = [...(a.bySource.get(s) ?? [])].sort((p, q) => p - q);
    const y = [...(b.bySource.get(s) ?? [])].sort((p, q) => p - q);
    if (x.length !== y.length || x.some((v, i) => v !== y[i])) return `source ${s}: ${x.length} rows read with avsc + parquet-wasm, ${y.length} with icebird`;
  }
  return undefined;
}
