/**
 * Figure 5: forward-sink export rows/s to the reference receiver over loopback
 * ÷ rows/s of a raw loop POSTing the very same NDJSON bodies (taken back from
 * the receiver's ledger: same chunking, same bytes), with the same headers and
 * fresh batch ids, one after another on a keep-alive connection, as the sink
 * does for one partition. The receiver runs in a child process. Repetitions
 * interleave export and raw; each export uses a sink of its own (own watermark,
 * own batch ids).
 */
import { randomBytes } from 'node:crypto';
import * as http from 'node:http';
import { join } from 'node:path';
import type { BenchContext } from '../lib/context.js';
import { figure, type FigureGroup, ge } from '../lib/figure.js';
import { fillPartition } from '../lib/fill.js';
import { forwardSink, openKernel, tick, writeWorkspace } from '../lib/kernel.js';
import { delta, median, pairedRates, settle, snapshot, timed } from '../lib/measure.js';
import type { ReadCounters } from '../../types/storage.js';
import { post, spawnReceiver, type StoredBatch, storedBatches } from '../lib/receiver.js';

const TOKEN = 'bench-token-0123456789';

async function rawLoop(url: string, batches: readonly StoredBatch[], rep: number): Promise<number> {
  const agent = new http.Agent({ keepAlive: true });
  const run = randomBytes(4).toString('hex');
  let rows = 0;
  try {
    for (const [i, b] of batches.entries()) {
      const headers = {
        'Content-Type': 'application/x-ndjson',
        'Content-Length': String(b.body.length),
        'X-Hyp-Partition': `source=${encodeURIComponent(b.source)}`,
        'X-Hyp-Batch-Id': `raw-${run}-${rep}-${i}`,
        Authorization: `Bearer ${TOKEN}`,
      };
      const status = await post(agent, url, `/v1/ingest/${encodeURIComponent(b.dataset)}`, headers, b.body);
      if (status !== 200) throw new Error(`forward: raw POST answered ${status}`);
      rows += b.rows;
    }
  } finally {
    agent.destroy();
  }
  return rows;
}

export const forwardVsRaw: FigureGroup = {
  id: 'forward',
  title: 'forward export rows/s ÷ raw loopback POST rows/s of the same bodies',
  async run(ctx: BenchContext) {
    const rows = ctx.size(200_000, 50_000);
    // Rounds are noisy on a shared 2-core machine (per round 0.2–1.2): 41 is the most a quick run affords.
    // @ref LLP 0040 (what was measured, and why ±0.05 between runs is not reached here)
    const reps = ctx.size(15, 41);
    // The first round warms the JIT and the receiver's connection; it is not counted.
    const rounds = reps + 1;
    const dir = await ctx.tempDir('forward');
    const receiver = await spawnReceiver(join(dir, 'receiver'), TOKEN);
    const exportMs: number[] = [];
    const rawMs: number[] = [];
    const exportCpuMs: number[] = [];
    // CPU of both processes (this one and the receiver's) per export and per raw loop: the work, without the waits.
    const cpuRatios: number[] = [];
    let units = 0;
    let reads: ReadCounters | undefined;
    try {
      const sinks = Object.fromEntries(Array.from({ length: rounds }, (_, i) => [`fwd${i}`, forwardSink(receiver.url, { token: TOKEN })]));
      const k = await openKernel(await writeWorkspace(dir, sinks), ctx.log);
      try {
        ctx.progress(`forward: filling a partition with ${rows} rows`);
        await fillPartition(k, 'web', rows);
        let ledgered = 0;
        for (let r = 0; r < rounds; r++) {
          ctx.progress(`forward: round ${r + 1}/${rounds}${r === 0 ? ' (warm-up)' : ''}`);
          settle();
          const c0 = snapshot(k.cache.storage.counters);
          const cpu0 = process.cpuUsage();
          const recv0 = await receiver.cpuMs();
          const exp = await timed(() => tick(k, `fwd${r}`));
          const cpu = process.cpuUsage(cpu0);
          const expRecvCpu = (await receiver.cpuMs()) - recv0;
          reads = delta(k.cache.storage.counters, c0);
          if (exp.value.rows !== rows) throw new Error(`forward: export shipped ${exp.value.rows} rows, expected ${rows}`);
          units = exp.value.units;
          // This export's bodies: the ledger entries it added.
          const all = await storedBatches(receiver.dataDir);
          const mine = all.slice(ledgered);
          settle();
          const rawCpu0 = process.cpuUsage();
          const rawRecv0 = await receiver.cpuMs();
          const raw = await timed(() => rawLoop(receiver.url, mine, r));
          const rawCpu = process.cpuUsage(rawCpu0);
          const rawRecvCpu = (await receiver.cpuMs()) - rawRecv0;
          if (raw.value !== rows) throw new Error(`forward: raw loop posted ${raw.value} rows, expected ${rows}`);
          ledgered = all.length + mine.length;
          if (r === 0) continue;
          exportMs.push(exp.ms);
          exportCpuMs.push((cpu.user + cpu.system) / 1000);
          rawMs.push(raw.ms);
          cpuRatios.push(((rawCpu.user + rawCpu.system) / 1000 + rawRecvCpu) / ((cpu.user + cpu.system) / 1000 + expRecvCpu));
        }
      } finally {
        await k.close();
      }
    } finally {
      await receiver.close();
    }
    const { paired, ratios, details } = pairedRates(rows, exportMs, rawMs);
    ctx.detail('forward_export_vs_raw_post', {
      rows,
      requestsPerExport: units,
      readsPerExport: reads,
      ...details,
      exportMs: exportMs.map(Math.round),
      exportCpuMs: exportCpuMs.map(Math.round),
      rawMs: rawMs.map(Math.round),
      cpuRatioMedian: Math.round(median(cpuRatios) * 1000) / 1000,
      cpuRatios: cpuRatios.map((x) => Math.round(x * 1000) / 1000),
    });
    return [figure('forward_export_vs_raw_post', paired, ge(0.6), ratios)];
  },
};
