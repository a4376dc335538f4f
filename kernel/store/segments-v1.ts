/**
 * Names made under the first name rule (v1: uppercase letters passed through,
 * device names were not escaped) are renamed once to the current rule, in a
 * cache root or a state dir, before anything else reads it. Without this a
 * partition, a spool or a watermark named under v1 would be invisible (its name
 * does not decode under the current rule): a sink would export its partition
 * again from the start, or never.
 *
 * Each rename is atomic and the pass can be repeated, so a crash anywhere in it
 * is finished by the next open; `names.json` is written last and marks a root
 * done. Concurrent openers may rename at once: a name already moved is skipped.
 * Nothing is overwritten: a directory moves only onto an empty or absent one,
 * a file by link-then-unlink, and a conflict is an error naming both paths.
 * A v1 name that was cut (hashed) is matched through the value recorded beside
 * it (partition.json, sink.json, a watermark record) or a configured name.
 * @ref LLP 0029 (one name rule)
 */
import { promises as fsp } from 'node:fs';
import { join } from 'node:path';
import { HypsinkError } from '../../types/errors.js';
import { fault } from '../fault.js';
import { fsyncDir, readdirOrEmpty, writeNewFileDurable } from '../io/durable.js';
import { decodeWith, encodeSegment, encodeWith, type SafeChars } from './segments.js';

/** The file that marks a root as named under the current rule. */
export const NAMES_FILE = 'names.json';
const NAMES = { v: 2 } as const;

const isSafeV1: SafeChars = (c) =>
  (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a) || c === 0x5f || c === 0x2d;

/** A value's segment under the first rule. */
export function encodeSegmentV1(value: string): string {
  return encodeWith(value, isSafeV1, false);
}

function decodeSegmentV1(segment: string): string | undefined {
  return decodeWith(segment, isSafeV1, encodeSegmentV1);
}

async function readValue(path: string, field: string): Promise<string | undefined> {
  try {
    const v = JSON.parse(await fsp.readFile(path, 'utf8')) as Record<string, unknown>;
    return typeof v[field] === 'string' ? (v[field] as string) : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The value a v1 segment names: decoded, or (cut) found by `lookup`, or one of
 * the `known` names whose v1 segment it is. Undefined: not a v1 name of ours.
 */
async function v1Value(segment: string, known: readonly string[], lookup?: () => Promise<string | undefined>): Promise<string | undefined> {
  const decoded = decodeSegmentV1(segment);
  if (decoded !== undefined) return decoded;
  const found = known.find((k) => encodeSegmentV1(k) === segment);
  if (found !== undefined) return found;
  const v = await lookup?.();
  return v !== undefined && encodeSegmentV1(v) === segment ? v : undefined;
}

class Renamer {
  count = 0;
  private readonly touched = new Set<string>();

  /** Move `dir/from` to `dir/to` (a directory, or a file when `file`), never over anything that holds data. */
  async move(dir: string, from: string, to: string, file: boolean): Promise<void> {
    const a = join(dir, from);
    const b = join(dir, to);
    try {
      if (file) {
        try {
          await fsp.link(a, b);
        } catch (e) {
          if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
          // A crash between link and unlink leaves both names on one file: finish the move.
          const [sa, sb] = await Promise.all([fsp.stat(a), fsp.stat(b)]);
          if (sa.ino !== sb.ino || sa.dev !== sb.dev) throw conflict(a, b);
        }
        await fsp.unlink(a);
      } else {
        await fsp.rename(a, b);
      }
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code === 'ENOENT') return; // moved by a concurrent opener
      if (code === 'ENOTEMPTY' || code === 'EEXIST') throw conflict(a, b);
      throw e;
    }
    this.count++;
    this.touched.add(dir);
    fault('names.afterRename');
  }

  async sync(): Promise<void> {
    for (const d of this.touched) await fsyncDir(d);
    this.touched.clear();
  }
}

function conflict(a: string, b: string): HypsinkError {
  return new HypsinkError(
    'HYPSINK_ERR_CORRUPT',
    `${a} (named under hypsink's first name rule) and ${b} (its name now) both hold data; an older hypsink may still be running on this folder. Stop every hypsink process, then move one of them aside and merge by hand`,
  );
}

/** Rename the entries of `dir` that are v1 names of values; returns the entries' names after it. */
async function renameLevel(
  r: Renamer,
  dir: string,
  opts: { prefix?: string; suffix?: string; file?: boolean; known?: readonly string[]; lookup?: (entry: string) => Promise<string | undefined> },
): Promise<string[]> {
  const prefix = opts.prefix ?? '';
  const suffix = opts.suffix ?? '';
  const after: string[] = [];
  for (const entry of await readdirOrEmpty(dir)) {
    if (entry.startsWith('.') || !entry.startsWith(prefix) || !entry.endsWith(suffix) || entry.length < prefix.length + suffix.length) {
      after.push(entry);
      continue;
    }
    const seg = entry.slice(prefix.length, entry.length - suffix.length);
    // Already a current name (a name without uppercase letters or device names is the same under both).
    const value = await v1Value(seg, opts.known ?? [], opts.lookup && (() => opts.lookup!(entry)));
    const now = value === undefined ? entry : `${prefix}${encodeSegment(value)}${suffix}`;
    if (now !== entry) await r.move(dir, entry, now, opts.file === true);
    after.push(now);
  }
  await r.sync();
  return after;
}

/** Whether `root` still needs the pass. One stat on every open after the first. */
async function marked(root: string): Promise<boolean> {
  try {
    await fsp.access(join(root, NAMES_FILE));
    return true;
  } catch {
    return false;
  }
}

/** Mark `root` done; a root not made yet has nothing to rename and is marked once it exists. */
async function mark(root: string): Promise<void> {
  try {
    await writeNewFileDurable(join(root, NAMES_FILE), `${JSON.stringify(NAMES)}\n`);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code !== 'EEXIST' && code !== 'ENOENT') throw e;
  }
}

/** A cache root: `datasets/<ds>/source=<src>/`, `spools/<ds>/<id>/`, `batches/<ds>/`. Returns the renames made. */
export async function renameCacheNamesV1(root: string, datasets: readonly string[]): Promise<number> {
  if (await marked(root)) return 0;
  const r = new Renamer();
  const partitionValue = (dsDir: string) => async (entry: string) => {
    // A cut dataset segment: any of its partitions records the dataset.
    for (const p of await readdirOrEmpty(join(dsDir, entry))) {
      const v = await readValue(join(dsDir, entry, p, 'partition.json'), 'dataset');
      if (v !== undefined) return v;
    }
    return undefined;
  };
  const data = join(root, 'datasets');
  for (const ds of await renameLevel(r, data, { known: datasets, lookup: partitionValue(data) })) {
    const dir = join(data, ds);
    await renameLevel(r, dir, { prefix: 'source=', lookup: (entry) => readValue(join(dir, entry, 'partition.json'), 'source') });
  }
  const spools = join(root, 'spools');
  for (const ds of await renameLevel(r, spools, { known: datasets })) await renameLevel(r, join(spools, ds), {});
  await renameLevel(r, join(root, 'batches'), { known: datasets });
  await mark(root);
  return r.count;
}

/** A state dir: `sinks/<sink>/watermarks/<ds>/source=<src>.json`, `dead-letter/<ds>.ndjson`. Returns the renames made. */
export async function renameStateNamesV1(stateDir: string, sinks: readonly string[], datasets: readonly string[]): Promise<number> {
  if (await marked(stateDir)) return 0;
  const r = new Renamer();
  const sinksDir = join(stateDir, 'sinks');
  for (const s of await renameLevel(r, sinksDir, { known: sinks, lookup: (entry) => readValue(join(sinksDir, entry, 'sink.json'), 'sink') })) {
    const wm = join(sinksDir, s, 'watermarks');
    const recordValue = (dir: string, field: string) => async (entry: string) => {
      if (entry.endsWith('.json')) return readValue(join(dir, entry), field);
      for (const f of await readdirOrEmpty(join(dir, entry))) {
        const v = await readValue(join(dir, entry, f), field);
        if (v !== undefined) return v;
      }
      return undefined;
    };
    for (const ds of await renameLevel(r, wm, { known: datasets, lookup: recordValue(wm, 'dataset') })) {
      const dir = join(wm, ds);
      await renameLevel(r, dir, { prefix: 'source=', suffix: '.json', file: true, lookup: recordValue(dir, 'source') });
    }
  }
  await renameLevel(r, join(stateDir, 'dead-letter'), { suffix: '.ndjson', file: true, known: datasets });
  await mark(stateDir);
  return r.count;
}
