/**
 * A kernel on a bench workspace: a config file with the demo dataset
 * (`activity`, from the embedded default) and the sinks a figure needs, loaded
 * and opened as the CLI would, logging nothing.
 */
import { promises as fsp } from 'node:fs';
import { join } from 'node:path';
import type { Logger as Pino } from 'pino';
import { DEFAULT_CONFIG } from '../../kernel/config/defaults.js';
import { loadConfig } from '../../kernel/config/load.js';
import { Hypsink } from '../../kernel/runtime.js';
import type { PartitionRef } from '../../types/storage.js';

export const DATASET = 'activity';

export type SinkSpec = Record<string, unknown>;

/** A local-fs Parquet sink writing under `exports/<name>` of the workspace. */
export function localFsSink(name: string): SinkSpec {
  return {
    writer: '@hypsink/format-parquet',
    destination: '@hypsink/local-fs',
    datasets: [DATASET],
    config: { dir: exportDir('.', name) },
  };
}

/** A forward sink posting to `url` (the reference receiver). */
export function forwardSink(url: string, extra: Record<string, unknown> = {}): SinkSpec {
  return { plugin: '@hypsink/forward', datasets: [DATASET], config: { url, ...extra } };
}

export function exportDir(workspace: string, sink: string): string {
  return join(workspace, 'exports', sink);
}

export interface Workspace {
  readonly dir: string;
  readonly configPath: string;
}

/**
 * Write the workspace's config: state under `dir`, the cache there too unless
 * `cacheRoot` names a shared one, the demo dataset, `sinks`.
 */
export async function writeWorkspace(dir: string, sinks: Record<string, SinkSpec>, cacheRoot = 'cache'): Promise<Workspace> {
  const config = {
    cache: { root: cacheRoot },
    state: { dir: 'state' },
    datasets: DEFAULT_CONFIG.datasets,
    sinks,
  };
  const configPath = join(dir, 'hypsink.config.json');
  await fsp.writeFile(configPath, JSON.stringify(config, null, 1));
  return { dir, configPath };
}

export async function openKernel(ws: Workspace, log: Pino): Promise<Hypsink> {
  return Hypsink.open(await loadConfig(ws.configPath), { log });
}

export function partitionOf(k: Hypsink, source: string): PartitionRef {
  return k.cache.partition(DATASET, source);
}

/** One tick of `sink`; throws if a partition failed (a bench number over a failed export means nothing). */
export async function tick(k: Hypsink, sink: string): Promise<{ rows: number; bytes: number; units: number }> {
  const [r] = await k.export(sink);
  if (!r) throw new Error(`no sink ${sink}`);
  const failed = r.partitions.find((p) => p.error);
  if (failed?.error) throw new Error(`sink ${sink}: ${failed.partition.key}: ${failed.error.message}`);
  return { rows: r.rows, bytes: r.bytes, units: r.units };
}

export interface DataFile {
  readonly path: string;
  readonly rows: number;
  readonly bytes: number;
  readonly minSeq: bigint;
  readonly maxSeq: bigint;
}

/** The current generation's data files of a partition, from its manifest. */
export async function dataFiles(k: Hypsink, p: PartitionRef): Promise<DataFile[]> {
  const snap = await k.cache.store(p).snapshot();
  try {
    return snap.manifest.files.map((f) => ({
      path: join(snap.dir, f.name),
      rows: f.rows,
      bytes: f.bytes,
      minSeq: BigInt(f.minSeq ?? 0),
      maxSeq: BigInt(f.maxSeq ?? 0),
    }));
  } finally {
    await snap.release();
  }
}

/** The sink's watermark on a partition, as a seq (-1 before the first export). */
export async function watermark(k: Hypsink, sink: string, p: PartitionRef): Promise<bigint> {
  const rec = await (await k.sink(sink)).watermarks.read(p);
  return rec.continuation ? BigInt(rec.continuation.seq) : -1n;
}
