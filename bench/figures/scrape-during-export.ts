/**
 * `/metrics` and the control API during a big tick: `hypsink run --metrics-port
 * --api` (the compiled CLI, a child process) exports a 1M-row partition (--quick
 * 200k) with the local-fs Parquet sink, while this process scrapes `/metrics`
 * and asks the API for `/v1/status` every 0.2 s each, from the moment both
 * listen until the tick is logged. The figures are the worst answer time of
 * each (ms): what a Prometheus scrape timeout or a probe meets. An answer that
 * fails or is other than 200 fails the measurement.
 * @ref LLP 0068
 * @ref LLP 0076
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
function scrape(port: number, path: string): Promise<{ ms: number; status: number }> {
  const t0 = performance.now();
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path, agent: false }, (res) => {
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
  title: '/metrics and control API answer times during a big export of hypsink run (child process)',
  async run(ctx: BenchContext) {
    const rows = ctx.size(1_000_000, 200_000);
    const shared = await sharedPartition(ctx, rows);
    // Scheduled once a year: only the tick at start runs.
    const ws = await writeWorkspace(await ctx.tempDir('scrape'), { scrape: { ...localFsSink('scrape'), schedule: '0 0 1 1 *' } }, shared.cacheRoot);
    const port = await freePort();
    const apiPort = await freePort();
    const args = ['run', '--config', ws.configPath, '--metrics-port', String(port), '--api', `127.0.0.1:${apiPort}`, '--log-format', 'json'];
    const child = spawn(process.execPath, [join(REPO, 'bin/hypsink.js'), ...args], {
      cwd: ws.dir,
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let stderr = '';
    let tick: { rows?: number; failed?: number } | undefined;
    let listening = false;
    let apiListening = false;
    child.stderr!.setEncoding('utf8').on('data', (s: string) => {
      stderr += s;
      for (const line of stderr.split('\n')) {
        if (line.includes('"msg":"metrics on /metrics"')) listening = true;
        if (line.includes('"msg":"control API listening"')) apiListening = true;
        if (line.includes('"msg":"tick"')) tick ??= JSON.parse(line);
      }
    });
    const exited = once(child, 'exit');
    const answers: number[] = [];
    const apiAnswers: number[] = [];
    const t0 = performance.now();
    try {
      while (!listening || !apiListening) {
        if (child.exitCode !== null) throw new Error(`hypsink run exited: ${stderr.slice(-2000)}`);
        await new Promise((r) => setTimeout(r, 20));
      }
      ctx.progress(`scrape: scraping every ${EVERY_MS} ms while hypsink run exports ${rows} rows`);
      const inFlight: Promise<void>[] = [];
      while (tick === undefined) {
        if (child.exitCode !== null) throw new Error(`hypsink run exited: ${stderr.slice(-2000)}`);
        inFlight.push(
          scrape(port, '/metrics').then((a) => {
            if (a.status !== 200) throw new Error(`/metrics answered ${a.status}`);
            answers.push(a.ms);
          }),
          scrape(apiPort, '/v1/status').then((a) => {
            if (a.status !== 200) throw new Error(`/v1/status answered ${a.status}`);
            apiAnswers.push(a.ms);
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
    if (answers.length < 3 || apiAnswers.length < 3) {
      throw new Error(`scrape: only ${answers.length} scrape(s) and ${apiAnswers.length} status answer(s) during the tick; too few to say anything`);
    }
    const tickMs = Math.round(performance.now() - t0);
    const detail = (xs: number[]) => ({
      rows,
      scrapes: xs.length,
      medianMs: Math.round(percentile(xs, 0.5)),
      p90Ms: Math.round(percentile(xs, 0.9)),
      tickMs,
      answersMs: xs.map((x) => Math.round(x)),
    });
    ctx.detail('metrics_scrape_worst_ms_during_1m_export', detail(answers));
    ctx.detail('api_status_worst_ms_during_1m_export', detail(apiAnswers));
    return [
      figure('metrics_scrape_worst_ms_during_1m_export', Math.max(...answers), le(250), answers),
      figure('api_status_worst_ms_during_1m_export', Math.max(...apiAnswers), le(250), apiAnswers),
    ];
  },
};
