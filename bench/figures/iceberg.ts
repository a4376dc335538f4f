/**
 * The iceberg group (issue 14):
 *
 * - `iceberg_export_vs_parquet`: local-fs Iceberg export rows/s (the
 *   @hypsink/format-iceberg writer: data files with field ids and column
 *   statistics, a manifest, a manifest list and a metadata version per unit)
 *   ÷ local-fs Parquet (@hypsink/format-parquet) rows/s, of the same units of
 *   the same cache (N rows from a fresh watermark; 1M, --quick 100k; 3
 *   repetitions, --quick 9). Each
 *   repetition runs both in alternating order, each into a folder of its own,
 *   after one untimed export of each (its time a detail, `firstMs`).
 * - `iceberg_commit_ms_<n>w`, `iceberg_retries_per_commit_<n>w` (report only):
 *   n = 1, 4, 8 writer processes, each with a cache of its own, export their
 *   own partition to one local table at the same moment, in small units (many
 *   commits). Per commit: the time from its manifest written to its metadata
 *   version created, and the races it lost on the way, from each writer's
 *   `iceberg: committed` debug line. The median commit time, and retries per
 *   commit over all the commits of that run.
 * - `iceberg_commit_history_ratio`: one writer, one-row units (one commit
 *   each). An old table is grown to 4,900 units (--quick 1,900); then three
 *   times, back to back in alternating order, the old table's next 100
 *   commits and a young table's commits 101–200. Each pair: the old window's
 *   median commit time ÷ the young one's; the figure is the median pair
 *   (≤ 1.5). The two windows of a pair meet the same moment of the machine:
 *   run one after the other, 40 s apart, the windows' medians moved by up to
 *   a factor 1.75 with no change of history (LLP 0113). Manifests merge on
 *   commit (LLP 0072); `maintain --tables` (compaction, then expiry keeping
 *   100 snapshots) runs after every tick of 100 units, as on the daemon's
 *   schedule, so both windows commit against a log of 100–200 snapshots:
 *   what the history costs here is the table's manifests, not the point of
 *   the expiry cycle a window falls on (LLP 0086).
 * - `iceberg_compaction_rows_per_s` (report only) and
 *   `iceberg_compaction_vs_parquet` (report only): a table of N rows in small
 *   units (one data file each: 100k rows in units of 500, --quick 20k in
 *   units of 200), compacted by `maintain --tables` (compaction, then expiry
 *   and the orphan scan, as the command runs them; with the default retention
 *   nothing expires), N ÷ its time; and that ÷ the rows/s of a local-fs
 *   Parquet export of the same rows, measured next to it in alternating
 *   order. The data files of the current snapshot before and after, from the
 *   table's metadata. Each repetition a table of its own.
 * @ref LLP 0051, LLP 0072, LLP 0078, LLP 0113
 */
import { spawn } from 'node:child_process';
import { promises as fsp } from 'node:fs';
import { join } from 'node:path';
import type { BenchContext } from '../lib/context.js';
import { figure, type FigureGroup, ge, le, report } from '../lib/figure.js';
import { DATASET, localFsSink, openKernel, type SinkSpec, tick, writeWorkspace } from '../lib/kernel.js';
import { median, pairedRates, settle, timed } from '../lib/measure.js';
import { createLogger } from '../../kernel/log.js';
import { Hypsink } from '../../kernel/runtime.js';
import { loadConfig } from '../../kernel/config/load.js';
import { fillPartition } from '../lib/fill.js';
import { REPO } from '../lib/receiver.js';
import { sharedPartition } from '../lib/shared.js';

function icebergSink(dir: string, extra: Record<string, unknown> = {}): SinkSpec {
  return { writer: '@hypsink/format-iceberg', destination: '@hypsink/local-fs', datasets: [DATASET], config: { dir }, ...extra };
}

async function exportVsParquet(ctx: BenchContext) {
  const rows = ctx.size(1_000_000, 100_000);
  // Nine at --quick, as the Postgres figure: a 100k-row unit takes ~130 ms, and one fsync that waits
  // 20 ms (the table's files, LLP 0110) moves a repetition's ratio by 0.1; five read 0.72–1.14 in one run.
  const reps = ctx.size(3, 9);
  const shared = await sharedPartition(ctx, rows);
  const dir = await ctx.tempDir('iceberg-export');
  const sinks: Record<string, SinkSpec> = {};
  for (let r = 0; r < reps; r++) {
    sinks[`pq${r}`] = localFsSink(`pq${r}`);
    sinks[`ice${r}`] = icebergSink(join(dir, 'exports', `ice${r}`));
  }
  sinks.pqWarm = localFsSink('pqWarm');
  sinks.iceWarm = icebergSink(join(dir, 'exports', 'iceWarm'));
  const k = await openKernel(await writeWorkspace(dir, sinks, shared.cacheRoot), ctx.log);
  const pqMs: number[] = [];
  const iceMs: number[] = [];
  /** The untimed first exports, Parquet then Iceberg: reported, not in the figure. */
  const firstMs: number[] = [];
  const units: number[] = [];
  try {
    const side = async (name: string, into: number[]) => {
      settle();
      const t = await timed(() => tick(k, name));
      if (t.value.rows !== rows) throw new Error(`iceberg: ${name} shipped ${t.value.rows} rows, expected ${rows}`);
      into.push(t.ms);
      units.push(t.value.units);
      await fsp.rm(join(dir, 'exports', name), { recursive: true });
    };
    // One untimed export of each first: the process's first of each loads its plugin and compiles its
    // code; at 100k rows that was a third of a round, and the three rounds after were still warming
    // (the figure's spread at --quick ran 0.67–1.93). Each side pays its own, so neither gains.
    ctx.progress('iceberg: a warm-up export of each');
    await side('pqWarm', firstMs);
    await side('iceWarm', firstMs);
    units.length = 0;
    for (let r = 0; r < reps; r++) {
      ctx.progress(`iceberg: export repetition ${r + 1}/${reps}`);
      if (r % 2 === 0) {
        await side(`pq${r}`, pqMs);
        await side(`ice${r}`, iceMs);
      } else {
        await side(`ice${r}`, iceMs);
        await side(`pq${r}`, pqMs);
      }
    }
  } finally {
    await k.close();
  }
  const { paired, ratios, details } = pairedRates(rows, iceMs, pqMs);
  ctx.detail('iceberg_export_vs_parquet', { rows, units: [...new Set(units)], ...details, icebergMs: iceMs.map(Math.round), parquetMs: pqMs.map(Math.round), firstMs: { parquet: Math.round(firstMs[0]!), iceberg: Math.round(firstMs[1]!) } });
  return figure('iceberg_export_vs_parquet', paired, ge(0.85), ratios);
}

interface WriterResult {
  readonly rows: number;
  readonly ms: number;
  readonly commits: readonly { ms: number; attempts: number }[];
}

function runWriter(configPath: string, sink: string, rows: number, goAt: number): Promise<WriterResult> {
  const args = ['--import', 'tsx', join(REPO, 'bench/child/iceberg-writer.ts'), configPath, sink, String(rows), String(goAt)];
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, args, { cwd: REPO, stdio: ['ignore', 'pipe', 'pipe'] });
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
      if (code !== 0 || !line) reject(new Error(`iceberg writer child exited ${code}: ${err.trim().slice(0, 2000)}`));
      else resolve(JSON.parse(line) as WriterResult);
    });
  });
}

/** `n` writers, each its own cache and process, one table; every commit's time and lost races. */
async function concurrentCommits(ctx: BenchContext, n: number, rowsPerWriter: number, unitRows: number) {
  const root = await ctx.tempDir(`iceberg-commit-${n}w`);
  const lake = join(root, 'lake');
  const configs: string[] = [];
  for (let w = 0; w < n; w++) {
    const dir = join(root, `w${w}`);
    await fsp.mkdir(dir);
    const sink = icebergSink(lake, { unit: { maxRows: unitRows }, writerConfig: { commitAttempts: 1000 } });
    configs.push((await writeWorkspace(dir, { lake: sink })).configPath);
  }
  // Children need a few seconds to start and fill; the exports then begin together.
  const goAt = Date.now() + 3000 + 300 * n;
  const results = await Promise.all(configs.map((c) => runWriter(c, 'lake', rowsPerWriter, goAt)));
  const commits = results.flatMap((r) => r.commits);
  for (const r of results) if (r.rows !== rowsPerWriter) throw new Error(`iceberg: a writer exported ${r.rows} rows, expected ${rowsPerWriter}`);
  if (commits.length !== n * Math.ceil(rowsPerWriter / unitRows)) throw new Error(`iceberg: ${commits.length} commits logged, expected ${n * Math.ceil(rowsPerWriter / unitRows)}`);
  const retries = commits.reduce((s, c) => s + c.attempts - 1, 0) / commits.length;
  const medianMs = median(commits.map((c) => c.ms));
  const snapshots = commits.length;
  const exportMs = results.map((r) => Math.round(r.ms));
  return { n, medianMs, retries, snapshots, exportMs, p90Ms: quantile(commits.map((c) => c.ms), 0.9), maxAttempts: Math.max(...commits.map((c) => c.attempts)) };
}

/** Units per export tick in the history figure; `maintain --tables` runs after each. */
const HISTORY_TICK = 100;

interface Commit {
  readonly ms: number;
  readonly merged: number;
}

/**
 * One writer's table of one-row units (one commit each), in ticks of
 * `HISTORY_TICK` units, each followed by `maintain --tables` (compaction, then
 * expiry keeping 100 snapshots) as on the daemon's schedule. Commit times from
 * the writer's `iceberg: committed` line.
 */
async function historyTable(ctx: BenchContext, name: string) {
  const root = await ctx.tempDir(`iceberg-history-${name}`);
  const sink = icebergSink(join(root, 'lake'), { unit: { maxRows: 1 }, writerConfig: { maxSnapshotAgeMs: 1, minSnapshotsToKeep: 100 } });
  const ws = await writeWorkspace(root, { lake: sink });
  const commits: Commit[] = [];
  const log = createLogger('debug', {
    write(line: string) {
      if (!line.includes('iceberg: committed')) return;
      const o = JSON.parse(line) as { commitMs: number; manifestsMerged: number };
      commits.push({ ms: o.commitMs, merged: o.manifestsMerged });
    },
  });
  const k = await Hypsink.open(await loadConfig(ws.configPath), { log });
  let next = 1;
  return {
    /** Grow the table by one tick of units; their commits. */
    async tick(): Promise<Commit[]> {
      const from = commits.length;
      next = await fillPartition(k, 'w', HISTORY_TICK, { firstId: next });
      const t = await tick(k, 'lake');
      if (t.units !== HISTORY_TICK) throw new Error(`iceberg: a tick shipped ${t.units} units, expected ${HISTORY_TICK}`);
      await k.maintain({ tables: true });
      const mine = commits.slice(from);
      if (mine.length !== HISTORY_TICK) throw new Error(`iceberg: ${mine.length} commits logged in a tick, expected ${HISTORY_TICK}`);
      return mine;
    },
    close: () => k.close(),
  };
}

/**
 * Commit time after `units` units of history against commit time after 100,
 * measured at the same moments: an old table is grown to `units - 100` units;
 * then, `pairs` times, a young table's second tick (its commits 101–200) and
 * the old table's next tick run back to back, in alternating order. Each
 * pair's ratio is late ÷ early of its two windows' medians. @ref LLP 0113
 */
async function commitsOverHistory(ctx: BenchContext, units: number, pairs: number) {
  const old = await historyTable(ctx, 'old');
  const early: number[] = [];
  const late: number[] = [];
  let maxMerged = 0;
  try {
    for (let done = 0; done < units - HISTORY_TICK; done += HISTORY_TICK) {
      if (done % 1000 === 0) ctx.progress(`iceberg: commits over history, ${done}/${units} units`);
      await old.tick();
    }
    for (let p = 0; p < pairs; p++) {
      ctx.progress(`iceberg: commits over history, pair ${p + 1}/${pairs}: a young table's commits 101–200 beside the old one's next 100`);
      const young = await historyTable(ctx, `young-${p}`);
      try {
        await young.tick(); // its first 100 commits: a new table's, in neither window
        let y: Commit[];
        let o: Commit[];
        if (p % 2 === 0) {
          y = await young.tick();
          o = await old.tick();
        } else {
          o = await old.tick();
          y = await young.tick();
        }
        early.push(median(y.map((c) => c.ms)));
        late.push(median(o.map((c) => c.ms)));
        maxMerged = Math.max(maxMerged, ...o.map((c) => c.merged));
      } finally {
        await young.close();
      }
    }
  } finally {
    await old.close();
  }
  return { early, late, ratios: late.map((o, i) => o / early[i]!), maxMerged };
}

/** `total-data-files` of the current snapshot of a local table, from its newest metadata version. */
async function dataFilesOf(table: string): Promise<number> {
  const names = await fsp.readdir(join(table, 'metadata'));
  const v = Math.max(...names.flatMap((n) => /^v(\d+)\.metadata\.json$/.exec(n)?.[1] ?? []).map(Number));
  const meta = JSON.parse(await fsp.readFile(join(table, 'metadata', `v${v}.metadata.json`), 'utf8')) as {
    'current-snapshot-id': number;
    snapshots: { 'snapshot-id': number; summary: Record<string, string> }[];
  };
  const current = meta.snapshots.find((x) => x['snapshot-id'] === meta['current-snapshot-id']);
  return Number(current?.summary['total-data-files'] ?? Number.NaN);
}

/** Compaction of a table of small files by `maintain --tables`, against a local-fs Parquet export of the same rows. */
async function compaction(ctx: BenchContext) {
  const rows = ctx.size(100_000, 20_000);
  const unitRows = ctx.size(500, 200);
  const reps = ctx.size(3, 2);
  const shared = await sharedPartition(ctx, rows);
  const compactMs: number[] = [];
  const pqMs: number[] = [];
  const files: { before: number; after: number }[] = [];
  for (let r = 0; r < reps; r++) {
    ctx.progress(`iceberg: compaction repetition ${r + 1}/${reps}: ${rows / unitRows} small files`);
    const dir = await ctx.tempDir(`iceberg-compact-${r}`);
    const lake = join(dir, 'lake');
    const sinks = { ice: icebergSink(lake, { unit: { maxRows: unitRows }, writerConfig: { compactMinFiles: 2 } }), pq: localFsSink('pq') };
    const k = await openKernel(await writeWorkspace(dir, sinks, shared.cacheRoot), ctx.log);
    try {
      const t = await tick(k, 'ice');
      if (t.rows !== rows) throw new Error(`iceberg: the small-unit export shipped ${t.rows} rows, expected ${rows}`);
      const table = join(lake, DATASET);
      const before = await dataFilesOf(table);
      const compact = async () => {
        settle();
        const m = await timed(() => k.maintain({ tables: true }));
        if (!/compact/i.test(m.value.tables[0]?.done ?? '')) throw new Error(`iceberg: maintain --tables said ${JSON.stringify(m.value.tables)}`);
        compactMs.push(m.ms);
      };
      const parquet = async () => {
        settle();
        const p = await timed(() => tick(k, 'pq'));
        if (p.value.rows !== rows) throw new Error(`iceberg: the Parquet export shipped ${p.value.rows} rows, expected ${rows}`);
        pqMs.push(p.ms);
      };
      if (r % 2 === 0) {
        await compact();
        await parquet();
      } else {
        await parquet();
        await compact();
      }
      files.push({ before, after: await dataFilesOf(table) });
      if (files.at(-1)!.after >= before) throw new Error(`iceberg: compaction left ${files.at(-1)!.after} data files of ${before}`);
    } finally {
      await k.close();
    }
  }
  const rates = compactMs.map((ms) => rows / (ms / 1000));
  const { paired, ratios, details } = pairedRates(rows, compactMs, pqMs);
  ctx.detail('iceberg_compaction_rows_per_s', { rows, unitRows, files, compactMs: compactMs.map(Math.round), parquetExportMs: pqMs.map(Math.round), compactionRowsPerS: details.exportRowsPerS, parquetExportRowsPerS: details.rawRowsPerS });
  return [figure('iceberg_compaction_rows_per_s', median(rates), report, rates), figure('iceberg_compaction_vs_parquet', paired, report, ratios)];
}

function quantile(xs: readonly number[], q: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))]!;
}

export const icebergGroup: FigureGroup = {
  id: 'iceberg',
  title: 'Iceberg export rows/s ÷ local-fs Parquet rows/s; compaction rows/s; commit latency at 5,000 units of history ÷ at 100, side by side; commit latency and lost races with 1, 4, 8 writers on one table',
  async run(ctx: BenchContext) {
    const figures = [await exportVsParquet(ctx)];
    figures.push(...(await compaction(ctx)));
    const units = ctx.size(5000, 2000);
    ctx.progress(`iceberg: commit latency over ${units} units of history`);
    const h = await commitsOverHistory(ctx, units, 3);
    ctx.detail('iceberg_commit_history_ratio', { units, medianMsAt100: h.early, medianMsAtUnits: h.late, maxManifestsMergedInOneCommit: h.maxMerged });
    figures.push(figure('iceberg_commit_history_ratio', median(h.ratios), le(1.5), h.ratios));
    const rowsPerWriter = ctx.size(4000, 1000);
    const unitRows = 100;
    for (const n of [1, 4, 8]) {
      ctx.progress(`iceberg: ${n} concurrent writer(s), one table`);
      const r = await concurrentCommits(ctx, n, rowsPerWriter, unitRows);
      ctx.detail(`iceberg_commit_ms_${n}w`, { writers: n, rowsPerWriter, unitRows, commits: r.snapshots, medianMs: r.medianMs, p90Ms: r.p90Ms, maxAttempts: r.maxAttempts, exportMs: r.exportMs });
      figures.push(figure(`iceberg_commit_ms_${n}w`, r.medianMs, report, [r.medianMs]));
      figures.push(figure(`iceberg_retries_per_commit_${n}w`, r.retries, report, [r.retries]));
    }
    return figures;
  },
};
