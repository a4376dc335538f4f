/**
 * The receiver under abuse (issue 18): the median latency of GET /v1/health
 * while 50 clients without a token POST as fast as they are answered, with the
 * 16 KB Authorization header that made the old bearer regex quadratic, as a
 * ratio to its median latency idle. The receiver, the abusers and the prober
 * each run in a process of their own. Target <= 3.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import * as http from 'node:http';
import { join } from 'node:path';
import type { BenchContext } from '../lib/context.js';
import { figure, type FigureGroup, le } from '../lib/figure.js';
import { median } from '../lib/measure.js';
import { REPO, spawnReceiver } from '../lib/receiver.js';

const ABUSERS = 50;
const TOKEN = 'bench-abuse-token-0123456789';

/** One probe on a fresh connection (as a monitor would), in ms. */
function probe(url: string): Promise<number> {
  const u = new URL(url);
  const t0 = performance.now();
  return new Promise((resolve, reject) => {
    const req = http.get({ hostname: u.hostname, port: u.port, path: '/v1/health', agent: false }, (res) => {
      res.resume();
      res.on('end', () => (res.statusCode === 200 ? resolve(performance.now() - t0) : reject(new Error(`health answered ${res.statusCode}`))));
    });
    req.on('error', reject);
  });
}

/** `n` probes one after another: their median latency, and each. */
async function probes(url: string, n: number): Promise<{ median: number; ms: number[] }> {
  const ms: number[] = [];
  for (let i = 0; i < n; i++) {
    ms.push(await probe(url));
    await new Promise((r) => setTimeout(r, 5));
  }
  return { median: median(ms), ms };
}

function startAbuse(url: string): Promise<{ child: ChildProcess; sent: () => number }> {
  const child = spawn(process.execPath, ['--import', 'tsx', join(REPO, 'bench/lib/abuse-client.ts'), url, String(ABUSERS)], {
    cwd: REPO,
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let sent = 0;
  child.stdout!.setEncoding('utf8').on('data', (s: string) => {
    const m = /sent (\d+)\n?$/.exec(s.trim());
    if (m) sent = Number(m[1]);
  });
  return new Promise((resolve, reject) => {
    child.once('exit', (code) => reject(new Error(`the abuse client exited (${code})`)));
    const wait = () => (sent >= ABUSERS * 2 ? resolve({ child, sent: () => sent }) : setTimeout(wait, 50));
    wait();
  });
}

/** The ratio for a receiver started with `args`, and what it was computed from. */
async function measure(ctx: BenchContext, name: string, args: readonly string[]): Promise<{ ratio: number; samples: number[]; detail: Record<string, number> }> {
  const dir = await ctx.tempDir(`abuse-${name}`);
  const receiver = await spawnReceiver(join(dir, 'receiver'), TOKEN, args);
  const n = ctx.size(400, 150);
  try {
    await probes(receiver.url, 20); // warm up
    const idle = (await probes(receiver.url, n)).median;
    const abuse = await startAbuse(receiver.url);
    try {
      const s0 = abuse.sent();
      const t0 = performance.now();
      const under = await probes(receiver.url, n);
      const abused = under.median;
      const perSec = ((abuse.sent() - s0) / (performance.now() - t0)) * 1000;
      ctx.progress(`abuse (${name}): health median idle ${idle.toFixed(2)} ms, under abuse ${abused.toFixed(2)} ms; ${Math.round(perSec)} abusive requests/s`);
      return {
        ratio: abused / idle,
        // Each probe under abuse against the idle median: their median is the ratio.
        samples: under.ms.map((x) => x / idle),
        detail: { idleMedianMs: Number(idle.toFixed(3)), abusedMedianMs: Number(abused.toFixed(3)), abuseRequestsPerSec: Math.round(perSec), probes: n },
      };
    } finally {
      abuse.child.kill('SIGKILL');
    }
  } finally {
    await receiver.close();
  }
}

export const receiverAbuse: FigureGroup = {
  id: 'abuse',
  title: 'receiver /v1/health latency under 50 abusive unauthenticated clients vs idle',
  async run(ctx: BenchContext) {
    // As shipped (401s held 200 ms, so an abuser cannot spin), and with the hold off: the linear token check alone.
    const held = await measure(ctx, 'default', []);
    const unheld = await measure(ctx, 'no 401 delay', ['--unauthorized-delay-ms', '0']);
    ctx.detail('receiver_health_under_abuse_vs_idle', { abusers: ABUSERS, ...held.detail, withoutUnauthorizedDelay: { ratio: Number(unheld.ratio.toFixed(3)), ...unheld.detail } });
    return [figure('receiver_health_under_abuse_vs_idle', held.ratio, le(3), held.samples)];
  },
};
