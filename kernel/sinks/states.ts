/**
 * A sink instance's state on disk: `<state.dir>/sinks/<name>/` holds its
 * watermarks, its export lock, and `sink.json`, which says which destination
 * those watermarks belong to and which datasets the sink has ever exported.
 *
 * Retention and gap accounting count every sink state on disk, configured now
 * or not, until the operator forgets it (`hypsink forget`): a sink left out of
 * the config for one maintenance run still holds its unexported rows.
 * @ref LLP 0019: gaps are counted against every watermark on disk
 * @ref LLP 0022: a watermark knows its destination
 */
import { randomBytes } from 'node:crypto';
import { promises as fsp } from 'node:fs';
import { join } from 'node:path';
import { HypsinkError } from '../../types/errors.js';
import { decodeSegment, encodeSegment } from '../store/segments.js';
import { fault } from '../fault.js';
import { readdirOrEmpty, readJsonFile, writeJsonAtomic } from '../io/durable.js';
import { WatermarkStore } from './watermarks.js';
import { mkdirs } from '../io/mkdirs.js';

export interface SinkStateFile {
  readonly v: 1;
  readonly sink: string;
  /** Where the watermarks' rows went (no secrets), or null before the first export. */
  readonly destination: string | null;
  /** Every dataset this sink has exported, in order first seen. */
  readonly datasets: readonly string[];
  /**
   * Destinations the sink was forgotten at (all datasets, or one): they still
   * hold what it delivered, so exporting there again from the oldest row would
   * deliver those rows twice. Refused until the operator accepts it.
   */
  readonly spent?: readonly Spent[];
  /**
   * What the watermarks' rows were delivered as beyond where: the sink's
   * transforms and key layout (`SinkRuntime.delivers`); absent for rows as
   * cached, in the default layout. @ref LLP 0049
   */
  readonly delivers?: string;
}

export interface Spent {
  readonly destination: string;
  /** null: every dataset. */
  readonly dataset: string | null;
}

function checkState(v: unknown): string | null {
  const s = v as SinkStateFile;
  if (s?.v !== 1 || typeof s.sink !== 'string') return 'not a v1 sink state';
  if (s.destination !== null && typeof s.destination !== 'string') return 'bad destination';
  if (!Array.isArray(s.datasets) || !s.datasets.every((d) => typeof d === 'string')) return 'bad datasets';
  if (s.spent !== undefined && !(Array.isArray(s.spent) && s.spent.every((x) => typeof x?.destination === 'string' && (x.dataset === null || typeof x.dataset === 'string')))) {
    return 'bad spent destinations';
  }
  if (s.delivers !== undefined && (typeof s.delivers !== 'string' || s.delivers === '')) return 'bad delivered shape';
  return null;
}

/** A delivered shape in words, for messages. */
function shapeText(delivers: string): string {
  if (delivers === '') return 'as cached (no transforms, default keys)';
  const d = JSON.parse(delivers) as { transforms?: Record<string, unknown>[]; keys?: { time?: string } };
  const parts: string[] = [];
  // Each entry as its canonical form (no secrets: hash keys are fingerprints there), cut short.
  const entry = (t: Record<string, unknown>) => {
    const text = JSON.stringify(t);
    return text.length > 120 ? `${text.slice(0, 117)}…` : text;
  };
  if (d.transforms) parts.push(`with transforms ${d.transforms.map(entry).join(', ')}`);
  else parts.push('with no transforms');
  parts.push(d.keys?.time ? `keys by ${d.keys.time}` : 'default keys');
  return parts.join(', ');
}

/** `<state.dir>/sinks`: one folder per sink instance. */
export const sinksRoot = (stateDir: string) => join(stateDir, 'sinks');

/** Forgotten watermarks wait under this name for their removal (a crash may leave them). */
const TRASH = /^\.forgotten-/;

export class SinkState {
  readonly watermarks: WatermarkStore;

  constructor(
    readonly dir: string,
    readonly name: string,
  ) {
    this.watermarks = new WatermarkStore(dir);
  }

  static of(stateDir: string, name: string): SinkState {
    return new SinkState(join(sinksRoot(stateDir), encodeSegment(name)), name);
  }

  private get file(): string {
    return join(this.dir, 'sink.json');
  }

  read(): Promise<SinkStateFile | undefined> {
    return readJsonFile<SinkStateFile>(this.file, checkState, 'sink state');
  }

  /** Datasets this sink holds rows for: those its state names and those it has watermarks of. */
  async datasets(): Promise<Set<string>> {
    const out = new Set((await this.read())?.datasets ?? []);
    for (const seg of await readdirOrEmpty(join(this.dir, 'watermarks'))) {
      const d = seg.startsWith('.') ? undefined : decodeSegment(seg);
      if (d !== undefined) out.add(d);
    }
    return out;
  }

  /**
   * Before a tick (the sink's lock held): the destination must be the one the
   * watermarks belong to, and what it delivers (transforms, key layout) what
   * they were delivered as; the first tick records both, and every tick
   * records the datasets it exports. A destination no unit was ever planned
   * for (a typo fixed before the first export) is replaced by the config's:
   * the one replaced is returned, to be logged. @ref LLP 0070
   */
  async admit(destination: string | null, datasets: readonly string[], where: string, delivers = ''): Promise<string | null> {
    const cur = await this.read();
    const had = cur?.delivers ?? '';
    // A state with no destination and no datasets (forgotten) has delivered nothing: it takes the new shape.
    if (cur && (cur.destination !== null || cur.datasets.length > 0) && had !== delivers) {
      throw new HypsinkError(
        'HYPSINK_ERR_CONFIG',
        `${where}: its watermarks were delivered ${shapeText(had)}, but the config now says ${shapeText(delivers)}; ` +
          'the rows exported so far have the old shape, and a unit recorded under it must not be finished in the new one. ' +
          `To deliver the new shape from here on, run "hypsink accept-destination ${this.name}"; to deliver every row in the new shape, give the sink a new name (and a new destination) or run "hypsink forget ${this.name} --yes"; otherwise restore the old ${had === '' ? 'config (no transforms, default keys)' : 'transforms and keys'}`,
        {
          hint:
            `Run "hypsink accept-destination ${this.name}" to deliver the new shape from here on, or restore the old one in the config` +
            (had === '' ? '.' : ` (as recorded in ${this.file}: ${had}).`),
        },
      );
    }
    const known = cur?.destination ?? null;
    const spent = cur?.spent?.find((x) => x.destination === destination && (x.dataset === null || datasets.includes(x.dataset)));
    if (spent && destination !== null) {
      throw new HypsinkError(
        'HYPSINK_ERR_CONFIG',
        `${where}: it was forgotten ("hypsink forget"${spent.dataset === null ? '' : ` --dataset ${spent.dataset}`}) after exporting to ${destination}, which still holds what it delivered then; ` +
          `going on would deliver those rows there again. Point the sink at a new destination (or give it a new name); if ${destination} was emptied, run "hypsink accept-destination ${this.name}"`,
        { hint: `Point sink "${this.name}" at another destination in the config, or empty ${destination} and run "hypsink accept-destination ${this.name}".` },
      );
    }
    let replaced: string | null = null;
    if (known !== null && destination !== null && known !== destination) {
      // No unit was ever planned for the old destination, so nothing of this sink can be
      // there (a typo fixed before the first export): the config's is taken. @ref LLP 0070
      if (!(await this.untouched(true))) {
        throw new HypsinkError(
          'HYPSINK_ERR_CONFIG',
          `${where}: its watermarks belong to ${known}, but the config now points it at ${destination}; ` +
            `the rows exported so far are at the old destination, and going on would give the new one only the rows from here. ` +
            `To start the new destination from the oldest row in the cache, give the sink a new name or run "hypsink forget ${this.name} --yes"; ` +
            `if the data was moved there, run "hypsink accept-destination ${this.name}"; otherwise restore the old destination in the config`,
          {
            hint: `Once the rows exported so far are at ${destination}, run "hypsink accept-destination ${this.name}"; to export every row there again, run "hypsink forget ${this.name} --yes"; or put ${known} back in the config.`,
          },
        );
      }
      replaced = known;
    }
    const all = [...(cur?.datasets ?? [])];
    for (const d of datasets) if (!all.includes(d)) all.push(d);
    if (cur && replaced === null && known === (destination ?? known) && all.length === cur.datasets.length) return null;
    await this.writeState({ v: 1, sink: this.name, destination: destination ?? known, datasets: all, ...(cur?.spent ? { spent: cur.spent } : {}), ...(delivers ? { delivers } : {}) });
    fault('export.afterSinkState');
    return replaced;
  }

  /** Known once a unit was planned: a sink's state only ever leaves "untouched" by forget. */
  private touched = false;

  /**
   * No unit was ever planned for this sink (no intent open, no watermark
   * moved): nothing of it can be at any destination. An intent is recorded
   * before any byte of its unit leaves, and clears only as its watermark moves,
   * so an open one may have reached its destination unconfirmed. `fresh` reads
   * the disk even when this process saw a unit. @ref LLP 0070
   */
  async untouched(fresh = false): Promise<boolean> {
    if (this.touched && !fresh) return false;
    for (const { record: r } of await this.watermarks.list()) {
      const moved = r.continuation !== null || r.exportedRowCount > 0 || (r.rejectedRows ?? 0) > 0 || r.handedOver !== undefined || (r.shippedUntil ?? null) !== null;
      if (moved || r.intent !== null || (r.next ?? null) !== null) {
        this.touched = true;
        return false;
      }
    }
    this.touched = false;
    return true;
  }

  private async writeState(state: SinkStateFile): Promise<void> {
    await mkdirs(this.dir);
    await writeJsonAtomic(this.file, state);
  }

  /**
   * The operator moved the data (or emptied a destination it was forgotten
   * at, or changed what the sink delivers): the watermarks now belong to
   * `destination` and `delivers`.
   */
  async acceptDestination(destination: string | null, delivers = ''): Promise<string | null> {
    const cur = await this.read();
    const spent = cur?.spent?.filter((x) => x.destination !== destination);
    await this.writeState({
      v: 1,
      sink: this.name,
      destination: destination ?? cur?.destination ?? null,
      datasets: [...(cur?.datasets ?? [])],
      ...(spent?.length ? { spent } : {}),
      ...(delivers ? { delivers } : {}),
    });
    return cur?.destination ?? null;
  }

  /**
   * Drop this sink's watermarks and state (or one dataset's watermarks) with a
   * rename first, so a crash leaves either all of it or none of it in use. The
   * folder stays: its lock is held by the caller.
   */
  async forget(dataset?: string): Promise<void> {
    this.touched = false;
    const cur = await this.read();
    if (cur) {
      // First, so a crash between the two steps still refuses to export to the old destination again.
      const spent = [...(cur.spent ?? []), ...(cur.destination === null ? [] : [{ destination: cur.destination, dataset: dataset ?? null }])];
      await this.writeState(
        dataset === undefined
          ? { v: 1, sink: this.name, destination: null, datasets: [], spent }
          : { ...cur, datasets: cur.datasets.filter((d) => d !== dataset), spent },
      );
    }
    const from = dataset === undefined ? join(this.dir, 'watermarks') : join(this.dir, 'watermarks', encodeSegment(dataset));
    const trash = join(this.dir, `.forgotten-${randomBytes(6).toString('hex')}`);
    try {
      await fsp.rename(from, trash);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
    }
    fault('forget.afterRename');
    await fsp.rm(trash, { recursive: true, force: true });
  }

  /** Remove what an interrupted forget left behind. */
  async sweep(): Promise<void> {
    for (const n of await readdirOrEmpty(this.dir)) {
      if (TRASH.test(n)) await fsp.rm(join(this.dir, n), { recursive: true, force: true });
    }
  }
}

/** Every sink state on disk, in name order; leftovers of an interrupted forget are removed. */
export async function sinkStatesOnDisk(stateDir: string): Promise<SinkState[]> {
  const root = sinksRoot(stateDir);
  const out: SinkState[] = [];
  for (const seg of await readdirOrEmpty(root)) {
    if (seg.startsWith('.')) continue;
    const dir = join(root, seg);
    if (!(await fsp.stat(dir)).isDirectory()) continue;
    const file = await readJsonFile<SinkStateFile>(join(dir, 'sink.json'), checkState, 'sink state');
    const name = file?.sink ?? decodeSegment(seg);
    if (name !== undefined) out.push(new SinkState(dir, name));
  }
  return out.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}
