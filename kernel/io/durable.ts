/**
 * Durable file primitives. Every state file goes through here so that an
 * unreadable one is an error naming the file, never a silent reset.
 */
import { randomUUID } from 'node:crypto';
import { constants, promises as fsp } from 'node:fs';
import { dirname } from 'node:path';
import writeFileAtomic from 'write-file-atomic';
import { HypsinkError } from '../../types/errors.js';

/**
 * HYPSINK_UNSAFE_NO_FSYNC=1 skips every fsync. For tests that only kill
 * processes (the page cache outlives a killed process, not a power cut); never
 * for data anyone needs.
 */
export const FSYNC = process.env.HYPSINK_UNSAFE_NO_FSYNC !== '1';

/** fsync an open file (unless disabled for tests). */
export async function syncFile(fh: fsp.FileHandle): Promise<void> {
  if (FSYNC) await fh.sync();
}

/** fsync a directory so a rename or create in it survives a power cut. */
export async function fsyncDir(dir: string): Promise<void> {
  if (!FSYNC) return;
  let fh: fsp.FileHandle | undefined;
  try {
    fh = await fsp.open(dir, constants.O_RDONLY);
    await fh.sync();
  } catch (e) {
    // Some filesystems refuse fsync on directories; the rename itself is still atomic.
    if ((e as NodeJS.ErrnoException).code !== 'EISDIR' && (e as NodeJS.ErrnoException).code !== 'EINVAL') throw e;
  } finally {
    await fh?.close();
  }
}

/** Replace a JSON state file atomically (temp, fsync, rename, fsync dir). */
export async function writeJsonAtomic(path: string, value: unknown): Promise<void> {
  await writeFileAtomic(path, JSON.stringify(value, null, 1) + '\n', { fsync: FSYNC });
  await fsyncDir(dirname(path));
}

/**
 * Read a JSON state file. Absent → undefined. Present but unparsable or failing
 * `check` → HYPSINK_ERR_CORRUPT naming the file.
 */
export async function readJsonFile<T>(
  path: string,
  check?: (v: unknown) => string | null,
  what = 'state file',
): Promise<T | undefined> {
  let text: string;
  try {
    text = await fsp.readFile(path, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw e;
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (e) {
    throw new HypsinkError('HYPSINK_ERR_CORRUPT', `${what} ${path} is not valid JSON (${(e as Error).message})`, {
      cause: e,
    });
  }
  const problem = check?.(value);
  if (problem) throw new HypsinkError('HYPSINK_ERR_CORRUPT', `${what} ${path} is damaged: ${problem}`);
  return value as T;
}

/** Write a new file that must not exist yet, durably. */
export async function writeNewFileDurable(path: string, data: Uint8Array | string): Promise<void> {
  const fh = await fsp.open(path, 'wx');
  try {
    await fh.writeFile(data);
    await syncFile(fh);
  } finally {
    await fh.close();
  }
  await fsyncDir(dirname(path));
}

/**
 * Create a JSON file once: written whole aside, then linked in, so a reader
 * never sees it half-written and of two creators the first link wins. Returns
 * what is there after (ours, or the winner's), read back through `check`.
 */
export async function createJsonOnce<T>(path: string, value: T, check: (v: unknown) => string | null, what: string): Promise<T> {
  const temp = `${path}.${process.pid}-${randomUUID()}.tmp`;
  await writeNewFileDurable(temp, `${JSON.stringify(value)}\n`);
  try {
    await fsp.link(temp, path);
    await fsyncDir(dirname(path));
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
  } finally {
    await fsp.rm(temp, { force: true });
  }
  const made = await readJsonFile<T>(path, check, what);
  if (!made) throw new HypsinkError('HYPSINK_ERR_INVARIANT', `${what} ${path} vanished right after it was written`);
  return made;
}

/** A folder's entries, sorted; none when it does not exist. */
export async function readdirOrEmpty(dir: string): Promise<string[]> {
  try {
    return (await fsp.readdir(dir)).sort();
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw e;
  }
}

export async function exists(path: string): Promise<boolean> {
  try {
    await fsp.access(path);
    return true;
  } catch {
    return false;
  }
}

export function isDecimalSeq(v: unknown): v is string {
  return typeof v === 'string' && /^(0|[1-9][0-9]{0,18})$/.test(v);
}
