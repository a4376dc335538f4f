/**
 * `/metrics` during a big tick: `hypsink run --metrics-port` (the compiled CLI,
 * a child process) exports a 1M-row partition (--quick 200k) with the local-fs
 * Parquet sink, while this process scrapes `/metrics` every 0.2 s from the
 * moment it listens until the tick is logged. The figure is the worst answer
 * time of those scrapes (ms): what a Prometheus scrape timeout meets. A scrape
 * that fails or answers other than 200 fails the measurement.
 * @ref LLP 0068
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { request } from 'node:http';
import { createServer } from 'node:net';
import { join } from 'node:path';
import type { BenchContext } from '../lib/context.js';
import { figure, type FigureGroup, le } from '../lib/figure.js';
import { localFsSink, writeWorkspace } from '../lib/kernel.js';
import { REPO } from '../lib/receiver.js';
import { sharedPartition } from '../lib/shared.js';

const EVERY_MS = 200;

async function freePort(): Promise<number> {
  const s = createServer().listen(0, '127.0.0.1');
  await once(s, 'listening');
  const port = (s.address() as { port: number }).port;
  s.close();
  return port;
}

/** One GET, its answer time in ms (read to the end). */
function scrape(port: number): Promise<{ ms: number; status: number }> {
  const t0 = performance.now();
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path: '/metrics', agent: false }, (res) => {
      res.resume();
      res.on('end', () => resolve({ ms: performance.now() - t0, status: res.statusCode ?? 0 }));
    });
    req.on('error', reject);
    req.end();
  });
}

const percentile = (xs: number[], q: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(q * xs.length))]!;

export const scrapeDuringExport: FigureGroup = {
  id: 'scrape',
  title: '/metrics answer time during a big export of hypsink run (child process)',
  async run(ctx: BenchContext) {
    const rows = ctx.size(1_000_000, 200_000);
    const shared = await sharedPartition(ctx, rows);
    // Scheduled once a year: only the tick at start runs.
    const ws = await writeWorkspace(await ctx.tempDir('scrape'), { scrape: { ...localFsSink('scrape'), schedule: '0 0 1 1 *' } }, shared.cacheRoot);
    const port = await freePort();
    const child = spawn(process.execPath, [join(REPO, 'bin/hypsink.js'), 'run', '--config', ws.configPath, '--metrics-port', String(port), '--log-format', 'json'], {
      cwd: ws.dir,
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let stderr = '';
    let tick: { rows?: number; failed?: number } | undefined;
    let listening = false;
    child.stderr!.setEncoding('utf8').on('data', (s: string) => {
      stderr += s;
      for (const line of stderr.split('\n')) {
        if (line.includes('"msg":"metrics on /metrics"')) listening = true;
        if (line.includes('"msg":"tick"')) tick ??= JSON.parse(line);
      }
    });
    const exited = once(child, 'exit');
    const answers: number[] = [];
    const t0 = performance.now();
    try {
      while (!listening) {
        if (child.exitCode !== null) throw new Error(`hypsink run exited: ${stderr.slice(-2000)}`);
        await new Promise((r) => setTimeout(r, 20));
      }
      ctx.progress(`scrape: scraping every ${EVERY_MS} ms while hypsink run exports ${rows} rows`);
      const inFlight: Promise<void>[] = [];
      while (tick === undefined) {
        if (child.exitCode !== null) throw new Error(`hypsink run exited: ${stderr.slice(-2000)}`);
        inFlight.push(
          scrape(port).then((a) => {
            if (a.status !== 200) throw new Error(`/metrics answered ${a.status}`);
            answers.push(a.ms);
          }),
        );
        await new Promise((r) => setTimeout(r, EVERY_MS));
      }
      await Promise.all(inFlight);
    } finally {
      child.kill('SIGTERM');
      await exited;
    }
    if (tick.rows !== rows || tick.failed !== 0) throw new Error(`scrape: the tick exported ${tick.rows} of ${rows} rows, ${tick.failed} failed: ${stderr.slice(-2000)}`);
    if (answers.length < 3) throw new Error(`scrape: only ${answers.length} scrape(s) during the tick; too few to say anything`);
    const worst = Math.max(...answers);
    ctx.detail('metrics_scrape_worst_ms_during_1m_export', {
      rows,
      scrapes: answers.length,
      medianMs: Math.round(percentile(answers, 0.5)),
      p90Ms: Math.round(percentile(answers, 0.9)),
      tickMs: Math.round(performance.now() - t0),
      answersMs: answers.map((x) => Math.round(x)),
    });
    return [figure('metrics_scrape_worst_ms_during_1m_export', worst, le(250), answers)];
  },
};
