/**
 * The main job (`npm start`): ingest a new batch of demo rows into the cache
 * and export incrementally, on the demo's own config (DEMO_CONFIG: Parquet
 * files under ./demo-exports). Each run ingests a new batch and exports
 * exactly those rows.
 */
import { promises as fsp } from 'node:fs';
import { join, relative } from 'node:path';
import { Readable } from 'node:stream';
import { SingleBar } from 'cli-progress';
import { demoBatch } from '../../fixtures/demo/generate.js';
import { HypsinkError } from '../../types/errors.js';
import { readJsonFile, writeJsonAtomic } from '../io/durable.js';
import { ingestNdjson } from '../ingest/ingest.js';
import type { Hypsink } from '../runtime.js';
import { exportTable, statusTable } from './render.js';
import { mkdirs } from '../io/mkdirs.js';

const PER_SOURCE = 2000;

async function listFiles(dir: string): Promise<string[]> {
  const out: string[] = [];
  const walk = async (d: string) => {
    let entries: import('node:fs').Dirent[] = [];
    try {
      entries = await fsp.readdir(d, { withFileTypes: true });
    } catch {
      return;
    }
    for (const e of entries) {
      if (e.name.startsWith('.')) continue;
      const p = join(d, e.name);
      if (e.isDirectory()) await walk(p);
      else out.push(p);
    }
  };
  await walk(dir);
  return out.sort();
}

export async function runDemo(k: Hypsink, out: (s: string) => void): Promise<void> {
  const dataset = Object.keys(k.loaded.config.datasets)[0]!;
  const statePath = join(k.loaded.stateDir, 'demo.json');
  const state = (await readJsonFile<{ run: number; nextId: number }>(statePath)) ?? { run: 0, nextId: 1 };
  const run = state.run + 1;
  const batches = demoBatch(run, state.nextId, PER_SOURCE);
  const total = batches.reduce((n, b) => n + b.lines.length, 0);
  // Claim the run first: a run cut short is never ingested a second time under the same ids.
  await mkdirs(k.loaded.stateDir);
  await writeJsonAtomic(statePath, { run, nextId: state.nextId + total });

  const bar = process.stderr.isTTY ? new SingleBar({ format: 'ingest {bar} {value}/{total} rows', stream: process.stderr }) : null;
  bar?.start(total, 0);
  let done = 0;
  for (const b of batches) {
    const r = await ingestNdjson(k, dataset, b.source, Readable.from(b.lines.map((l) => `${l}\n`)), `demo run ${run}`);
    done += r.accepted;
    bar?.update(done);
    // The demo's rows fit the demo's schema: a rejection is a bug to show, never a quiet dead letter.
    if (r.rejected > 0) {
      bar?.stop();
      throw new HypsinkError('HYPSINK_ERR_INVARIANT', `demo run ${run}: ${r.rejected} demo row(s) of ${b.source} were rejected (${r.samples[0]?.reason ?? 'no reason'}); they are in ${r.deadLetter}`);
    }
  }
  bar?.stop();
  out(`run ${run}: ingested ${done} demo rows into "${dataset}" (${batches.map((b) => b.source).join(', ')})`);

  const dest = k.loaded.config.sinks.archive?.config?.dir;
  const exportDir = typeof dest === 'string' ? join(k.loaded.baseDir, dest) : null;
  const before = new Set(exportDir ? await listFiles(exportDir) : []);
  const reports = await k.export();
  out(exportTable(reports));
  out(statusTable(await k.status()));
  if (exportDir) {
    const fresh = (await listFiles(exportDir)).filter((f) => !before.has(f));
    out(`new files this run (${fresh.length}), under ${exportDir}:`);
    for (const f of fresh) out(`  ${relative(exportDir, f)}`);
  }
}
