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
import { cpSync, mkdtempSync, promises as fsp, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { open } from '../kernel/api.js';
import { resetFaultHits } from '../kernel/fault.js';
import { createLogger } from '../kernel/log.js';
import { setShipProbe } from '../kernel/sinks/probe.js';
import { type Probe, type ProbeEntry, shipProbe } from './probe.js';

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
  /**
   * How many times the case "a crash at each moment inside a ship" kills an
   * export, each time one I/O callback later inside the ship (default 8).
   * Raise it when your ship does more I/O than that before its rows are
   * durable (each kill is a process start).
   */
  readonly shipKills?: number;
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
  private probes = 0;
  private constructor(
    readonly name: string,
    /** The destination's folder (what `sink` and `read` are given). */
    readonly dir: string,
    /** The world's own folder: its cache, state, config and probe logs. */
    readonly home: string,
    readonly config: string,
    readonly opts: ConformanceOptions,
    private readonly sink: Record<string, unknown>,
  ) {}

  static async make(name: string, opts: ConformanceOptions): Promise<World> {
    const dir = mkdtempSync(join(tmpdir(), 'hypsink-conformance-'));
    const dest = join(dir, 'destination');
    await fsp.mkdir(dest);
    return World.at(name, dir, dest, opts, await opts.sink(dest));
  }

  /** A world in `home` exporting to `dest` through `sink`, its config written there. */
  private static async at(name: string, home: string, dest: string, opts: ConformanceOptions, sink: Record<string, unknown>): Promise<World> {
    const config = {
      plugins: [...(opts.plugins ?? [])],
      cache: { root: join(home, 'cache') },
      state: { dir: join(home, 'state') },
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
    const path = join(home, 'hypsink.config.json');
    await fsp.writeFile(path, JSON.stringify(config, null, 1));
    return new World(name, dest, home, path, opts, sink);
  }

  /**
   * A copy of this world's cache and state (a cloned host, a restored backup:
   * the same cache id, the same seqs handed out again), exporting to the same
   * destination through the same sink. Its folder sits inside this one's.
   */
  async clone(): Promise<World> {
    const home = join(this.home, 'clone');
    await fsp.mkdir(home);
    for (const d of ['cache', 'state']) cpSync(join(this.home, d), join(home, d), { recursive: true });
    const w = await World.at(this.name, home, this.dir, this.opts, this.sink);
    w.rows.push(...this.rows);
    // The kernel sees the copy (another folder) and exports nothing of it until told: told, wrongly,
    // that the original moved here, so what holds is the sink's own check. @ref LLP 0055
    const k = await w.open();
    try {
      await k.identityMoved();
    } finally {
      await k.close();
    }
    return w;
  }

  fail(message: string): never {
    throw new ConformanceError(this.name, `${message} (case folder kept: ${this.home})`);
  }

  /** Open a kernel on the case's config, in this process. */
  open() {
    return open({ config: this.config, baseDir: this.opts.baseDir, log: createLogger('silent') });
  }

  /** Ingest `n` new rows as one batch and commit them; their ids from `base` + the rows so far + 1. */
  async ingest(n: number, base = 0): Promise<KitRow[]> {
    const first = base + this.rows.length + 1;
    const batch = Array.from({ length: n }, (_, i) => ({ id: first + i, ts: new Date(Date.UTC(2026, 0, 1, 0, 0, first + i)).toISOString(), msg: i % 3 === 0 ? null : `row ${first + i}` }));
    const k = await this.open();
    try {
      await k.ingest(DATASET, batch, { source: SOURCE, batchId: `kit-${first}` });
    } finally {
      await k.close();
    }
    this.rows.push(...batch);
    return batch;
  }

  /**
   * One export in this process; `fault` arms a fault point that throws (a
   * failed call, the process lives); `probe` watches its ships.
   */
  async export(fault?: { point: string; at?: number }, probe?: Probe): Promise<{ rows: number; units: number; failed: number; errors: string[] }> {
    const env = process.env;
    const saved = [env.HYPSINK_FAULT, env.HYPSINK_FAULT_AT, env.HYPSINK_FAULT_ACTION];
    resetFaultHits();
    if (fault) Object.assign(env, { HYPSINK_FAULT: fault.point, HYPSINK_FAULT_AT: String(fault.at ?? 1), HYPSINK_FAULT_ACTION: 'throw' });
    if (probe) setShipProbe(shipProbe(probe));
    const k = await this.open();
    try {
      const [r] = await k.export('sut');
      const errors = (r?.partitions ?? []).flatMap((p) => (p.error ? [`${p.error.code}: ${p.error.message}`] : []));
      return { rows: r?.rows ?? 0, units: r?.units ?? 0, failed: r?.failed ?? 0, errors };
    } finally {
      setShipProbe(undefined);
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
    const { code, signal, stderr } = await this.child({ HYPSINK_FAULT: point, HYPSINK_FAULT_AT: String(at), HYPSINK_FAULT_ACTION: '' });
    if (signal === 'SIGKILL') return;
    this.fail(`the export was to be killed at fault point ${point} (hit ${at}), but it exited with code ${code}${tail(stderr)}`);
  }

  /**
   * One export in a child process whose ships `probe` watches (and kills);
   * what it logged, and whether it was killed (else it exited 0).
   */
  async exportProbed(probe: Unlogged): Promise<{ killed: boolean; log: ProbeEntry[] }> {
    this.probes += 1;
    const log = join(this.home, `probe-${this.probes}.jsonl`);
    const { code, signal, stderr } = await this.child({ HYPSINK_KIT_PROBE: JSON.stringify({ ...probe, log }) });
    if (signal !== 'SIGKILL' && code !== 0) this.fail(`an export the kit watched exited with code ${code}${tail(stderr)}`);
    return { killed: signal === 'SIGKILL', log: readLog(log) };
  }

  /** A probe log written in this process. */
  logFile(): string {
    this.probes += 1;
    return join(this.home, `probe-${this.probes}.jsonl`);
  }

  /** One export of this world's config in a child process with `vars` set. */
  private async child(vars: Record<string, string>): Promise<{ code: number | null; signal: NodeJS.Signals | null; stderr: string }> {
    // The child runs under this process's loader flags (a TypeScript plugin under tsx), not its test flags.
    const execArgv = process.execArgv.filter((a) => !a.startsWith('--test'));
    const env: NodeJS.ProcessEnv = { ...process.env, HYPSINK_FAULT: '', HYPSINK_KIT_PROBE: '', ...vars };
    delete env.NODE_TEST_CONTEXT;
    return await new Promise<{ code: number | null; signal: NodeJS.Signals | null; stderr: string }>((done, failed) => {
      const child = spawn(process.execPath, [...execArgv, CHILD, this.config], { env, stdio: ['ignore', 'ignore', 'pipe'] });
      let stderr = '';
      child.stderr.on('data', (b: Buffer) => {
        stderr += b.toString();
      });
      child.on('error', failed);
      child.on('exit', (code, signal) => done({ code, signal, stderr }));
    });
  }

  /** The destination holds every row ingested so far, each exactly once (`rows`: exactly these, `others`: these may be there too). */
  async expectEachOnce(when: string, rows: readonly KitRow[] = this.rows, others: readonly KitRow[] = []): Promise<readonly { readonly id: unknown }[]> {
    const held = await this.read(when);
    const count = new Map<string, number>();
    for (const r of held) count.set(String(r.id), (count.get(String(r.id)) ?? 0) + 1);
    const missing = rows.filter((r) => !count.has(String(r.id))).map((r) => r.id);
    const twice = [...count].filter(([, n]) => n > 1).map(([id, n]) => `${id} (${n} times)`);
    const known = new Set([...rows, ...others].map((r) => String(r.id)));
    const unknown = [...count.keys()].filter((id) => !known.has(id));
    const problems = [
      missing.length ? `${missing.length} row(s) missing (ids ${list(missing)})` : '',
      twice.length ? `${twice.length} row(s) delivered more than once (ids ${list(twice)})` : '',
      unknown.length ? `${unknown.length} row(s) the kit never ingested (ids ${list(unknown)})` : '',
    ].filter(Boolean);
    if (problems.length) this.fail(`${when}: ${problems.join('; ')}`);
    return held;
  }

  /** What the destination holds; a destination that cannot be read back (a torn or corrupt write) fails the case. */
  async read(when: string): Promise<readonly { readonly id: unknown }[]> {
    try {
      return await this.opts.read(this.dir);
    } catch (e) {
      return this.fail(`${when}: reading back what the destination holds failed (${(e as Error).message}): it holds a torn or corrupt write`);
    }
  }

  /** Which of `rows` the destination holds (each id's count). */
  async held(rows: readonly KitRow[]): Promise<Map<number, number>> {
    const want = new Map(rows.map((r) => [String(r.id), r.id]));
    const out = new Map<number, number>();
    for (const r of await this.read('reading the rows back')) {
      const id = want.get(String(r.id));
      if (id !== undefined) out.set(id, (out.get(id) ?? 0) + 1);
    }
    return out;
  }

  dispose(): void {
    rmSync(this.home, { recursive: true, force: true });
  }
}

/** A probe as the kit asks for it: the world names its log. */
type Unlogged = Probe extends infer P ? (P extends Probe ? Omit<P, 'log'> : never) : never;

const list = (xs: readonly unknown[]) => (xs.length > 8 ? `${xs.slice(0, 8).join(', ')}, …` : xs.join(', '));
const tail = (stderr: string) => (stderr ? `: ${stderr.trim().split('\n').slice(-3).join(' / ')}` : '');
const readLog = (file: string): ProbeEntry[] => {
  let text = '';
  try {
    text = readFileSync(file, 'utf8');
  } catch {
    return []; // nothing logged: the probe never fired
  }
  return text
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as ProbeEntry);
};

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
  {
    name: 'a ship is durable when it resolves',
    run: async (w) => {
      await w.ingest(10);
      // Killed the instant the second ship resolves: what it and the first acknowledged must be there now,
      // with no later turn of the event loop to finish a write the ship did not wait for.
      const { killed, log } = await w.exportProbed({ mode: 'resolved', at: 2 });
      if (!killed) w.fail('the export was to be killed when its second ship resolved, but it ended first: fewer than 2 units shipped');
      const acked = log.reduce((n, e) => n + (e.duplicate ? 0 : (e.rows ?? 0)), 0);
      const held = await w.held(w.rows);
      const lost = w.rows.slice(0, acked).filter((r) => !held.has(r.id));
      if (lost.length > 0) {
        w.fail(
          `ship resolved for ${log.length} unit(s) (${acked} rows; units ${log.map((e) => e.unit).join(', ')}), and the process died right then: ` +
            `${lost.length} of those rows are not at the destination (ids ${list(lost.map((r) => r.id))}). ` +
            'A ship resolves only once its rows (and its ledger record) are durable: await every write, and fsync (or wait for the commit) before returning',
        );
      }
      await w.export();
      await w.expectEachOnce('after the crash and the next export');
    },
  },
  {
    name: 'a crash at each moment inside a ship',
    run: async (w) => {
      // Each time a fresh world, its export killed inside its ships just before their k-th
      // I/O callback (a file operation done, a response read: the sink's own work, not the kernel's
      // reads of the rows), then restarted: at each of those moments, what the sink recorded as done
      // must be done (its rows before the ledger record that says "have it").
      const kills = w.opts.shipKills ?? 8;
      let at = 0;
      for (let k = 1; k <= kills; k++) {
        const v = k === 1 ? w : await World.make(w.name, w.opts);
        await v.ingest(10);
        const { killed, log } = await v.exportProbed({ mode: 'inShip', at: k });
        if (!killed) break; // fewer than k moments in the export's ships: every one was tried
        at = k;
        const r = await v.export();
        if (r.failed > 0) v.fail(`the export after a kill inside a ship (unit ${log[0]?.unit ?? '?'}, before its I/O callback ${k}) failed: ${r.errors.join('; ')}`);
        await v.expectEachOnce(`after a kill inside a ship (unit ${log[0]?.unit ?? '?'}, before its I/O callback ${k}) and a restart`);
        if (v !== w) v.dispose();
      }
      if (at === 0) w.fail('the first ship did no I/O of its own (no file operation, no request) before it resolved: its rows cannot be durable when it resolves');
    },
  },
  {
    name: "a unit's id is the same in every process",
    run: async (w) => {
      await w.ingest(10);
      // The first unit is recorded (its id in the intent) and the process dies at its ship: the
      // next process ships it under the recorded id, and must make that same id from its range.
      const first = await w.exportProbed({ mode: 'ids' });
      if (!first.killed || first.log.length === 0) w.fail('the export was to be stopped at its first ship, but it ended without shipping');
      const log = w.logFile();
      await w.export(undefined, { mode: 'compare', log });
      const differ = [...first.log, ...readLog(log)].filter((e) => e.again !== e.unit);
      if (differ.length > 0) {
        const e = differ[0]!;
        w.fail(
          `unitId gave "${e.again}" for the range of unit "${e.unit}" (${differ.length} unit(s) differ): a unit's id must be a pure function of its partition and range ` +
            '(no clock, no randomness, no counter), or a unit retried after a crash is shipped again under another id',
        );
      }
      await w.expectEachOnce('after the unit was shipped by another process');
    },
  },
  {
    name: 'a copy of the cache with other rows under the same labels is refused',
    run: async (w) => {
      await w.ingest(4);
      await w.export();
      // A cloned host (or a restored backup): the same cache id, and the same seqs handed out again.
      const copy = await w.clone();
      await w.ingest(4);
      const theirs = await copy.ingest(4, 1000);
      const r = await w.export();
      if (r.failed > 0) w.fail(`the original's export failed: ${r.errors.join('; ')}`);
      const c = await copy.export();
      const held = await w.held(theirs);
      if (c.failed === 0) {
        // Not refused: then the copy's rows must have been delivered, each once.
        const missing = theirs.filter((t) => !held.has(t.id));
        if (missing.length > 0) {
          w.fail(
            `the copy's unit has the label of one already delivered (same cache id, partition and seqs) and other rows; its export succeeded, but ${missing.length} of its rows are not at the destination (ids ${list(missing.map((t) => t.id))}): a silent loss. ` +
              "Record unit.digest with each unit in your ledger and, when a unit's id (or range) is already there, call it a duplicate only if the digests are equal; else throw unitConflict(...) from hypsink/plugin",
          );
        }
        await w.expectEachOnce('after both exports', [...w.rows, ...theirs]);
        return;
      }
      const conflict = c.errors.some((e) => e.startsWith('HYPSINK_ERR_CONFLICT:'));
      if (!conflict) w.fail(`the copy's unit was refused, but not as a conflict (${c.errors.join('; ')}): refuse a label taken by other content with unitConflict(...) from hypsink/plugin (HYPSINK_ERR_CONFLICT)`);
      if (held.size > 0) w.fail(`the copy's unit was refused, but ${held.size} of its rows are at the destination (ids ${list([...held.keys()])}): refuse before writing anything`);
      await w.expectEachOnce("after the copy's refusal", w.rows);
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
