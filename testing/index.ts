/**
 * `hypsink/testing`: the conformance kit a sink author runs in their own test
 * suite. It drives a sink through the exactly-once cases the built-in sinks
 * pass, with a real kernel, a real cache on disk and real process kills, and
 * reads back what the sink's destination holds through the author's `read`.
 * A case that fails throws a `ConformanceError` naming the case and the rows
 * missing or delivered twice.
 *
 *   import { test } from 'node:test';
 *   import { conformance } from 'hypsink/testing';
 *   for (const c of conformance({ plugins: [dir], sink: (d) => ({ plugin: 'my-sink', config: { dir: d } }), read })) test(c.name, c.run);
 *
 * @ref LLP 0024: the public API surface
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, promises as fsp, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { open } from '../kernel/api.js';
import { resetFaultHits } from '../kernel/fault.js';
import { createLogger } from '../kernel/log.js';

/** A row as the kit writes it: the `conformance` dataset's columns. */
export interface KitRow {
  readonly id: number;
  readonly ts: string;
  readonly msg: string | null;
}

export interface ConformanceOptions {
  /**
   * The sink under test, as in a config's `sinks` (without `datasets`): a
   * request sink `{ plugin, config }`, or a blob sink `{ writer, destination,
   * config, writerConfig }`. Called with each case's own empty folder, so each
   * case starts from an empty destination.
   */
  readonly sink: (dir: string) => Record<string, unknown> | Promise<Record<string, unknown>>;
  /**
   * Every row the destination holds for the case's folder, duplicates
   * included; each has at least the `id` the kit gave it.
   */
  readonly read: (dir: string) => Promise<readonly { readonly id: unknown }[]>;
  /** Plugins to load by path or package name (a config's `plugins`): the one under test, unless it is a built-in. */
  readonly plugins?: readonly string[];
  /** Where plugin paths and package names resolve (default: the working folder). */
  readonly baseDir?: string;
  /** Rows per unit, small so each case spans several units (default 4). */
  readonly unitRows?: number;
}

export interface ConformanceCase {
  readonly name: string;
  /** Runs the case in a fresh folder; throws a `ConformanceError` naming the case when the sink fails it. */
  readonly run: () => Promise<void>;
}

export class ConformanceError extends Error {
  constructor(
    readonly caseName: string,
    message: string,
  ) {
    super(`conformance case "${caseName}": ${message}`);
    this.name = 'ConformanceError';
  }
}

const DATASET = 'conformance';
const SOURCE = 'kit';

/** The kit's child (child.ts beside this file, compiled or not). */
const CHILD = fileURLToPath(new URL(`./child${import.meta.url.endsWith('.ts') ? '.ts' : '.js'}`, import.meta.url));

/** One case's world: its folder, its config file, the rows it has ingested. */
class World {
  readonly rows: KitRow[] = [];
  private constructor(
    readonly name: string,
    readonly dir: string,
    readonly config: string,
    private readonly opts: ConformanceOptions,
  ) {}

  static async make(name: string, opts: ConformanceOptions): Promise<World> {
    const dir = mkdtempSync(join(tmpdir(), 'hypsink-conformance-'));
    const dest = join(dir, 'destination');
    await fsp.mkdir(dest);
    const sink = await opts.sink(dest);
    const config = {
      plugins: [...(opts.plugins ?? [])],
      cache: { root: join(dir, 'cache') },
      state: { dir: join(dir, 'state') },
      datasets: {
        [DATASET]: {
          columns: [
            { name: 'id', type: 'INT64', nullable: false },
            { name: 'ts', type: 'TIMESTAMP', nullable: false },
            { name: 'msg', type: 'STRING', nullable: true },
          ],
          timestampColumn: 'ts',
        },
      },
      sinks: { sut: { ...sink, datasets: [DATASET], unit: { ...(sink.unit as object | undefined), maxRows: opts.unitRows ?? 4 } } },
    };
    const path = join(dir, 'hypsink.config.json');
    await fsp.writeFile(path, JSON.stringify(config, null, 1));
    return new World(name, dest, path, opts);
  }

  fail(message: string): never {
    throw new ConformanceError(this.name, `${message} (case folder kept: ${join(this.dir, '..')})`);
  }

  /** Open a kernel on the case's config, in this process. */
  open() {
    return open({ config: this.config, baseDir: this.opts.baseDir, log: createLogger('silent') });
  }

  /** Ingest `n` new rows as one batch and commit them. */
  async ingest(n: number): Promise<void> {
    const first = this.rows.length + 1;
    const batch = Array.from({ length: n }, (_, i) => ({ id: first + i, ts: new Date(Date.UTC(2026, 0, 1, 0, 0, first + i)).toISOString(), msg: i % 3 === 0 ? null : `row ${first + i}` }));
    const k = await this.open();
    try {
      await k.ingest(DATASET, batch, { source: SOURCE, batchId: `kit-${first}` });
    } finally {
      await k.close();
    }
    this.rows.push(...batch);
  }

  /** One export in this process; `fault` arms a fault point that throws (a failed call, the process lives). */
  async export(fault?: { point: string; at?: number }): Promise<{ rows: number; units: number; failed: number }> {
    const env = process.env;
    const saved = [env.HYPSINK_FAULT, env.HYPSINK_FAULT_AT, env.HYPSINK_FAULT_ACTION];
    resetFaultHits();
    if (fault) Object.assign(env, { HYPSINK_FAULT: fault.point, HYPSINK_FAULT_AT: String(fault.at ?? 1), HYPSINK_FAULT_ACTION: 'throw' });
    const k = await this.open();
    try {
      const [r] = await k.export('sut');
      return { rows: r?.rows ?? 0, units: r?.units ?? 0, failed: r?.failed ?? 0 };
    } finally {
      for (const [i, key] of ['HYPSINK_FAULT', 'HYPSINK_FAULT_AT', 'HYPSINK_FAULT_ACTION'].entries()) {
        if (saved[i] === undefined) delete env[key];
        else env[key] = saved[i];
      }
      resetFaultHits();
      await k.close();
    }
  }

  /** One export in a child process killed (SIGKILL) at the `at`-th hit of `point`. */
  async exportKilledAt(point: string, at: number): Promise<void> {
    // The child runs under this process's loader flags (a TypeScript plugin under tsx), not its test flags.
    const execArgv = process.execArgv.filter((a) => !a.startsWith('--test'));
    const env: NodeJS.ProcessEnv = { ...process.env, HYPSINK_FAULT: point, HYPSINK_FAULT_AT: String(at), HYPSINK_FAULT_ACTION: '' };
    delete env.NODE_TEST_CONTEXT;
    const { code, signal, stderr } = await new Promise<{ code: number | null; signal: NodeJS.Signals | null; stderr: string }>((done, failed) => {
      const child = spawn(process.execPath, [...execArgv, CHILD, this.config], { env, stdio: ['ignore', 'ignore', 'pipe'] });
      let stderr = '';
      child.stderr.on('data', (b: Buffer) => {
        stderr += b.toString();
      });
      child.on('error', failed);
      child.on('exit', (code, signal) => done({ code, signal, stderr }));
    });
    if (signal === 'SIGKILL') return;
    this.fail(`the export was to be killed at fault point ${point} (hit ${at}), but it exited with code ${code}${stderr ? `: ${stderr.trim().split('\n').slice(-3).join(' / ')}` : ''}`);
  }

  /** The destination holds every row ingested so far, each exactly once. */
  async expectEachOnce(when: string): Promise<readonly { readonly id: unknown }[]> {
    const held = await this.opts.read(this.dir);
    const count = new Map<string, number>();
    for (const r of held) count.set(String(r.id), (count.get(String(r.id)) ?? 0) + 1);
    const missing = this.rows.filter((r) => !count.has(String(r.id))).map((r) => r.id);
    const twice = [...count].filter(([, n]) => n > 1).map(([id, n]) => `${id} (${n} times)`);
    const unknown = [...count.keys()].filter((id) => !this.rows.some((r) => String(r.id) === id));
    const problems = [
      missing.length ? `${missing.length} row(s) missing (ids ${list(missing)})` : '',
      twice.length ? `${twice.length} row(s) delivered more than once (ids ${list(twice)})` : '',
      unknown.length ? `${unknown.length} row(s) the kit never ingested (ids ${list(unknown)})` : '',
    ].filter(Boolean);
    if (problems.length) this.fail(`${when}: ${problems.join('; ')}`);
    return held;
  }

  dispose(): void {
    rmSync(join(this.dir, '..'), { recursive: true, force: true });
  }
}

const list = (xs: readonly unknown[]) => (xs.length > 8 ? `${xs.slice(0, 8).join(', ')}, …` : xs.join(', '));

/** The cases, in the order they are best run. */
const CASES: readonly { name: string; run: (w: World) => Promise<void> }[] = [
  {
    name: 'an export over several units',
    run: async (w) => {
      await w.ingest(10);
      const r = await w.export();
      if (r.failed > 0) w.fail(`the export failed ${r.failed} partition(s)`);
      if (r.units < 3) w.fail(`10 rows in units of 4 are 3 units, but the export reported ${r.units}`);
      await w.expectEachOnce('after one export');
    },
  },
  {
    name: 'a tick with nothing new sends nothing',
    run: async (w) => {
      await w.ingest(6);
      await w.export();
      const before = (await w.expectEachOnce('after the first export')).length;
      const r = await w.export();
      if (r.rows !== 0 || r.units !== 0) w.fail(`nothing was new, but the tick reported ${r.rows} row(s) in ${r.units} unit(s)`);
      const after = await w.expectEachOnce('after the tick with nothing new');
      if (after.length !== before) w.fail(`the destination held ${before} row(s), then ${after.length} after a tick with nothing new`);
    },
  },
  {
    name: 'a crash after a ship, before its watermark advance',
    run: async (w) => {
      await w.ingest(10);
      // Killed once the second unit is shipped: its rows are at the destination, the watermark below them.
      await w.exportKilledAt('export.afterShip', 2);
      const r = await w.export();
      if (r.failed > 0) w.fail(`the export after the crash failed ${r.failed} partition(s)`);
      await w.expectEachOnce('after the crash and the next export');
    },
  },
  {
    name: 'a lost acknowledgement, the unit retried in the same process',
    run: async (w) => {
      await w.ingest(10);
      // The first unit is shipped, then the call fails as if its answer was lost.
      const lost = await w.export({ point: 'export.afterShip', at: 1 });
      if (lost.failed === 0) w.fail('the export with a lost acknowledgement did not fail; the kit could not lose it');
      await w.export();
      await w.expectEachOnce('after the retry');
    },
  },
  {
    name: 'a recorded unit replayed after a crash before its ship',
    run: async (w) => {
      await w.ingest(10);
      // Killed once the second unit's intent is durable, before its ship.
      await w.exportKilledAt('export.afterIntent', 2);
      // New rows since: the replayed unit must still be the recorded one.
      await w.ingest(5);
      await w.export();
      await w.expectEachOnce('after the replay and the new rows');
    },
  },
  {
    name: 'a crash right after a watermark advance',
    run: async (w) => {
      await w.ingest(10);
      // Killed once the partition's advances are durable (written together after its units):
      // every unit they cover must be at the destination already.
      await w.exportKilledAt('export.afterAdvance', 1);
      await w.export();
      await w.expectEachOnce('after the crash after an advance and the next export');
    },
  },
];

/** The kit's cases for `opts`, each runnable on its own (e.g. one `test()` each). */
export function conformance(opts: ConformanceOptions): ConformanceCase[] {
  return CASES.map((c) => ({
    name: c.name,
    run: async () => {
      const w = await World.make(c.name, opts);
      await c.run(w);
      w.dispose(); // kept when the case fails, for the author to look at
    },
  }));
}

/** Every case in turn; throws the first failure. */
export async function runConformance(opts: ConformanceOptions): Promise<void> {
  for (const c of conformance(opts)) await c.run();
}
