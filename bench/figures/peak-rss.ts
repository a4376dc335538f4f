/**
 * Figure 7: peak RSS (MB) of a process whose only job is exporting a 1M-row
 * partition (--quick 200k) with the local-fs Parquet sink. The partition is
 * built by this (another) process first; the child's own high-water RSS at the
 * end is the figure (VmHWM: see bench/child/export.mjs for why not maxRSS). The
 * child runs the compiled package, as a host does; until LLP 0105 it ran the
 * sources under tsx, whose loader each worker thread loads again. The same
 * child with nothing to export gives the baseline (Node, the kernel and its
 * plugins loaded), kept in the details.
 */
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import type { BenchContext } from '../lib/context.js';
import { figure, type FigureGroup, le } from '../lib/figure.js';
import { localFsSink, writeWorkspace } from '../lib/kernel.js';
import { REPO } from '../lib/receiver.js';
import { sharedPartition } from '../lib/shared.js';

interface ChildResult {
  readonly rows: number;
  readonly ms: number;
  readonly peakRssKb: number;
  readonly maxRssKb: number;
  readonly end: Record<string, number>;
}

function runChild(configPath: string, sink: string, idle: boolean): Promise<ChildResult> {
  const args = [join(REPO, 'bench/child/export.mjs'), configPath, sink, ...(idle ? ['--idle'] : [])];
  // Without the bench's NODE_OPTIONS (its source condition, its loader): the package as a host runs it.
  const env = { ...process.env, NODE_OPTIONS: '', HYPSINK_LOG_LEVEL: 'silent' };
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, args, { cwd: REPO, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (c: Buffer) => {
      out += c.toString('utf8');
    });
    child.stderr.on('data', (c: Buffer) => {
      err += c.toString('utf8');
    });
    child.on('error', reject);
    child.on('close', (code) => {
      const line = out.split('\n').find((l) => l.startsWith('{'));
      if (code !== 0 || !line) reject(new Error(`peak-rss child exited ${code}: ${err.trim().slice(0, 2000)}`));
      else resolve(JSON.parse(line) as ChildResult);
    });
  });
}

export const peakRss: FigureGroup = {
  id: 'rss',
  title: 'peak RSS while exporting a big partition (local-fs Parquet), child process',
  async run(ctx: BenchContext) {
    const rows = ctx.size(1_000_000, 200_000);
    const shared = await sharedPartition(ctx, rows);
    const ws = await writeWorkspace(await ctx.tempDir('rss'), { rss: localFsSink('rss') }, shared.cacheRoot);
    const idle = await runChild(ws.configPath, 'rss', true);
    ctx.progress(`rss: child exporting ${rows} rows`);
    const run = await runChild(ws.configPath, 'rss', false);
    if (run.rows !== rows) throw new Error(`rss: child exported ${run.rows} rows, expected ${rows}`);
    const mb = (kb: number) => Math.round(kb / 102.4) / 10;
    ctx.detail('peak_rss_export_1m_mb', {
      rows,
      idleBaselineMb: mb(idle.peakRssKb),
      exportMs: Math.round(run.ms),
      ruMaxRssMb: mb(run.maxRssKb),
      memoryAtEndMb: run.end,
      idleMemoryAtEndMb: idle.end,
    });
    return [figure('peak_rss_export_1m_mb', run.peakRssKb / 1024, le(300), [run.peakRssKb / 1024])];
  },
};
