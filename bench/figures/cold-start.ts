/**
 * Cold start of the compiled CLI (bin/hypsink.js → dist/, what a host runs),
 * each a ratio to `node -e 0` measured in the same run: `status`, a 1-row
 * `ingest` and `--help`, medians of runs taken round-robin so a slow moment
 * of the machine falls on every command alike. The config has an S3 sink
 * besides a local one, whose plugin (and the AWS SDK) these commands never load.
 */
import { existsSync, promises as fsp } from 'node:fs';
import { join } from 'node:path';
import type { BenchContext } from '../lib/context.js';
import { figure, type FigureGroup, le } from '../lib/figure.js';
import { BIN, timeNode } from '../lib/process.js';
import { REPO } from '../lib/receiver.js';

const median = (xs: readonly number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};

export const coldStart: FigureGroup = {
  id: 'cold',
  title: 'cold start of the compiled CLI, as ratios to node -e 0',
  async run(ctx: BenchContext) {
    if (!existsSync(join(REPO, 'dist/cli/main.js'))) throw new Error('cold start: dist/ is missing; `npm run bench` builds it (npm run build)');
    const dir = await ctx.tempDir('cold');
    const config = {
      cache: { root: 'cache' },
      state: { dir: 'state' },
      datasets: {
        events: {
          columns: [
            { name: 'id', type: 'INT64', nullable: false },
            { name: 'ts', type: 'TIMESTAMP', nullable: false },
          ],
          timestampColumn: 'ts',
        },
      },
      sinks: {
        archive: { writer: '@hypsink/format-parquet', destination: '@hypsink/local-fs', datasets: ['events'], config: { dir: 'exports' } },
        lake: { writer: '@hypsink/format-parquet', destination: '@hypsink/s3', datasets: ['events'], config: { bucket: 'lake', region: 'us-east-1' } },
      },
    };
    await fsp.writeFile(join(dir, 'hypsink.config.json'), JSON.stringify(config));
    await fsp.writeFile(join(dir, 'one.ndjson'), '{"id":1,"ts":"2026-01-01T00:00:00Z"}\n');
    const commands = {
      node: ['-e', '0'],
      status: [BIN, 'status'],
      ingest: [BIN, 'ingest', 'events', '--source', 'web', '--file', 'one.ndjson'],
      help: [BIN, '--help'],
    } as const;
    // One of each first: the page cache warm, the cache and its partition made.
    for (const args of Object.values(commands)) await timeNode(args, dir);
    const runs = ctx.size(11, 7);
    const ms: Record<keyof typeof commands, number[]> = { node: [], status: [], ingest: [], help: [] };
    for (let i = 0; i < runs; i++) {
      ctx.progress(`cold: round ${i + 1} of ${runs}`);
      for (const [name, args] of Object.entries(commands)) ms[name as keyof typeof commands].push(await timeNode(args, dir));
    }
    const m = Object.fromEntries(Object.entries(ms).map(([k, v]) => [k, median(v)])) as Record<keyof typeof commands, number>;
    ctx.detail('cold_start_ms', { runs, ...Object.fromEntries(Object.entries(m).map(([k, v]) => [k, Math.round(v)])) });
    // Each run against the median of node's: their median is the figure.
    const vsNode = (xs: readonly number[]) => xs.map((x) => x / m.node);
    return [
      figure('cold_start_status_vs_node', m.status / m.node, le(4), vsNode(ms.status)),
      figure('cold_start_ingest_1_row_vs_node', m.ingest / m.node, le(5), vsNode(ms.ingest)),
      figure('cold_start_help_vs_node', m.help / m.node, le(3), vsNode(ms.help)),
    ];
  },
};
