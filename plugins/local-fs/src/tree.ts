/**
 * Walking local-fs's tree without following a link it did not make. Every
 * folder from the root down to a blob's folder is checked with `lstat`, the
 * levels judged in order from the top (looked up together: LLP 0110), and
 * created one level at a time (never `mkdir -p`, which follows links): a
 * symbolic link or anything but a folder at any level is a refusal naming the
 * path, never a write somewhere else.
 * The root's own path (the configured dir and its ancestors) is checked once
 * per destination: links there are refused unless `followRootLinks` says the
 * operator meant them.
 * @ref LLP 0028: local-fs never follows links it did not make
 */
import { type Stats, constants, promises as fsp } from 'node:fs';
import { dirname, join, parse, relative, sep } from 'node:path';
import { HypsinkError } from 'hypsink/plugin';

/** 0 where the platform has no such flag (Windows): there `lstat` is the only check. */
export const O_NOFOLLOW = constants.O_NOFOLLOW ?? 0;
const O_DIRECTORY = constants.O_DIRECTORY ?? 0;

export function kindOf(st: Stats): string {
  if (st.isSymbolicLink()) return 'a symbolic link';
  if (st.isDirectory()) return 'a folder';
  if (st.isFile()) return 'a regular file';
  if (st.isFIFO()) return 'a named pipe (FIFO)';
  if (st.isSocket()) return 'a socket';
  if (st.isCharacterDevice() || st.isBlockDevice()) return 'a device';
  return 'not a regular file';
}

/** `lstat`, or null when nothing is there. */
export async function lstatOrNull(path: string): Promise<Stats | null> {
  try {
    return await fsp.lstat(path);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw e;
  }
}

/** The folders of `rel` under `root`, outermost first (split at `/` or the platform's separator, or at `split`). */
function pathsUnder(root: string, rel: string, split: string | RegExp = /[\\/]/): string[] {
  const out: string[] = [];
  let cur = root;
  for (const seg of rel.split(split)) {
    if (seg === '' || seg === '.') continue;
    cur = join(cur, seg);
    out.push(cur);
  }
  return out;
}

/**
 * `lstat` of every path at once, each awaited in order by the caller: a walk
 * of N levels waits for about one round trip to the thread pool, not N (an
 * Iceberg commit walks some twenty paths). Each level is still judged in
 * order, as soon as its own answer is in, so the first missing or refused
 * level decides as it did one at a time; what deeper levels answered is then
 * never read, and a failure there is dropped.
 * @ref LLP 0110
 */
function lstatEach(paths: readonly string[]): Promise<Stats | null>[] {
  return paths.map((p) => {
    const st = lstatOrNull(p);
    st.catch(() => undefined); // read in order by the caller, or never once a level above decided
    return st;
  });
}

/** "(to X)" for a link, with "which does not exist" when it dangles. */
export async function linkTarget(path: string): Promise<string> {
  let to: string;
  try {
    to = await fsp.readlink(path);
  } catch {
    return '';
  }
  const real = await fsp.realpath(path).catch(() => null);
  if (real === null) return ` (to ${to}, which does not exist)`;
  return real === to ? ` (to ${to})` : ` (to ${to}, really ${real})`;
}

/** A refusal of the tree: not retryable, it does not pass on its own. */
export function treeError(sink: string, message: string, cause?: unknown): HypsinkError {
  return new HypsinkError('HYPSINK_ERR_DESTINATION', `sink "${sink}": ${message}`, { cause, retryable: false });
}

/**
 * Flush a folder's entries (a new name in it) to disk. The folder is opened
 * without following a link, unless `follow`: a folder of the root's own path,
 * checked by `checkRoot` (with `followRootLinks`, the root may be a link).
 */
export async function fsyncDir(dir: string, follow = false): Promise<void> {
  const fh = await fsp.open(dir, constants.O_RDONLY | O_DIRECTORY | (follow ? 0 : O_NOFOLLOW));
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}

/**
 * `dir` must be a real folder (created if missing, its parent already checked):
 * `mkdir` without `recursive`, and on EEXIST (someone made it meanwhile) `lstat` again.
 */
async function realFolder(sink: string, dir: string, inside: string): Promise<void> {
  let st = await lstatOrNull(dir);
  if (st === null) {
    try {
      await fsp.mkdir(dir);
      // The new name is in its parent only once the parent is flushed.
      await fsyncDir(dirname(dir), dirname(dir) === inside);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
    }
    st = await fsp.lstat(dir);
  }
  await refuseUnlessFolder(sink, dir, st, inside);
}

/** A component on the way to a blob: a link or anything but a folder is refused, naming it. */
async function refuseUnlessFolder(sink: string, dir: string, st: Stats, inside: string): Promise<void> {
  if (st.isSymbolicLink()) {
    throw treeError(
      sink,
      `${dir} is a symbolic link${await linkTarget(dir)}; local-fs never follows links it did not make inside its root ${inside}: remove the link (move what it points to there as a real folder if it belongs there), then export again`,
    );
  }
  if (!st.isDirectory()) {
    throw treeError(sink, `${dir} is ${kindOf(st)}, not a folder; local-fs writes only into folders inside its root ${inside}: move it aside, then export again`);
  }
}

/**
 * Every folder of `rel` (a relative path, `/` or the platform's separator)
 * under `root`, checked and created level by level. Returns the deepest one.
 */
export async function ensureFolders(sink: string, root: string, rel: string): Promise<string> {
  const paths = pathsUnder(root, rel);
  const found = lstatEach(paths);
  for (const [i, cur] of paths.entries()) {
    const st = await found[i]!;
    if (st === null) {
      // Missing from here down: made one level at a time.
      for (const dir of paths.slice(i)) await realFolder(sink, dir, root);
      break;
    }
    await refuseUnlessFolder(sink, cur, st, root);
  }
  return paths.at(-1) ?? root;
}

/**
 * The folders of `rel` under `root`, walked as `ensureFolders` walks them for
 * a write, but making nothing: for a read or a remove. False when one is
 * missing (nothing can be below it); a link or anything but a folder on the
 * way is refused, naming it, so no read or remove passes a link.
 * @ref LLP 0063
 */
export async function existingFolders(sink: string, root: string, rel: string): Promise<boolean> {
  const paths = pathsUnder(root, rel);
  const found = lstatEach(paths);
  for (const [i, cur] of paths.entries()) {
    const st = await found[i]!;
    if (st === null) return false;
    await refuseUnlessFolder(sink, cur, st, root);
  }
  return true;
}

/**
 * The root's own path for a read: every component checked as `checkRoot`
 * checks it, nothing made. False when a component is missing (nothing is
 * stored yet).
 */
export async function rootPresent(sink: string, root: string, followLinks: boolean): Promise<boolean> {
  const top = parse(root).root;
  const paths = pathsUnder(top, root.slice(top.length), sep);
  const found = lstatEach(paths);
  for (const [i, cur] of paths.entries()) {
    const st = await found[i]!;
    if (st === null) return false;
    await checkRootLevel(sink, root, cur, st, followLinks);
  }
  return true;
}

/**
 * The root's own path: every component, from the filesystem root down to the
 * configured dir, must be a real folder (missing ones are created, one level
 * at a time), unless `followLinks`, where a component may be a link to a folder.
 */
export async function checkRoot(sink: string, root: string, followLinks: boolean): Promise<void> {
  const top = parse(root).root;
  const segs = root.slice(top.length).split(sep).filter((s) => s !== '');
  let cur = top;
  for (const seg of segs) {
    cur = join(cur, seg);
    let st = await lstatOrNull(cur);
    if (st === null) {
      try {
        await fsp.mkdir(cur);
        await fsyncDir(dirname(cur), true);
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
      }
      st = await fsp.lstat(cur);
    }
    await checkRootLevel(sink, root, cur, st, followLinks);
  }
}

/**
 * One existing component `cur` of the root's path: a folder, or a link to one
 * with `followLinks`; else the refusal naming it (export and connection check alike).
 */
export async function checkRootLevel(sink: string, root: string, cur: string, found: Stats, followLinks: boolean): Promise<void> {
  let st = found;
  if (st.isSymbolicLink()) {
    if (!followLinks) {
      // The real path of the dir: the link resolved, the rest of the path as configured (it may not exist yet).
      const real = await fsp.realpath(cur).then(
        (r) => join(r, relative(cur, root)),
        () => null,
      );
      throw treeError(
        sink,
        `config.dir ${root}: ${cur} is a symbolic link${await linkTarget(cur)}; local-fs does not follow links in its root's path unless told to. ` +
          (real ? `Set config.dir to the real path (${real}), ` : 'Set config.dir to a real path, ') +
          'or set "followRootLinks": true in this sink\'s config if the link is yours and stays',
      );
    }
    st = await fsp.stat(cur).catch(() => st);
  }
  if (!st.isDirectory()) {
    throw treeError(sink, `config.dir ${root}: ${cur} is ${kindOf(st)}${st.isSymbolicLink() ? await linkTarget(cur) : ''}, not a folder: fix config.dir or move it aside`);
  }
}
