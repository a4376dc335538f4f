/**
 * `mkdir -p` with an end. Node's own (`mkdir` with `recursive`)
 * never returns for a folder under /proc: mkdir says ENOENT, the parent
 * exists, and it climbs to the parent and back down again, forever, at full
 * CPU on a thread of the pool that nothing can cancel. Here each missing level
 * is made once, top down; ENOENT while the parent is there is an error naming
 * the path, and a parent removed meanwhile is made again a bounded number of times.
 * @ref LLP 0034
 */
import { promises as fsp } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { runningAs } from '../../types/access.js';
import { HypsinkError } from '../../types/errors.js';

/** Levels removed by someone else while we make them, before we give up (a rival `rm -r` in a loop). */
const RACES = 8;

function errno(code: string, syscall: string, path: string, text: string): NodeJS.ErrnoException {
  return Object.assign(new Error(`${code}: ${text}, ${syscall} '${path}'`), { code, syscall, path });
}

/** Whether `path` is a folder (following links, as `mkdir -p` does); false when nothing is there. */
async function isFolder(path: string): Promise<boolean> {
  try {
    const st = await fsp.stat(path);
    if (st.isDirectory()) return true;
    throw errno('EEXIST', 'mkdir', path, 'file already exists');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return false;
    throw e;
  }
}

/** Make `dir` and every missing folder above it; errors as `mkdir -p` gives them (EEXIST, ENOTDIR, EACCES, …). */
export async function mkdirs(dir: string): Promise<void> {
  const target = resolve(dir);
  for (let race = 0; ; race++) {
    // The missing levels, deepest first.
    const missing: string[] = [];
    for (let cur = target; !(await isFolder(cur)); cur = dirname(cur)) {
      missing.push(cur);
      if (dirname(cur) === cur) break;
    }
    let lost = false;
    for (const level of missing.reverse()) {
      try {
        await fsp.mkdir(level);
      } catch (e) {
        const code = (e as NodeJS.ErrnoException).code;
        if (code === 'EEXIST' && (await isFolder(level))) continue;
        if (code !== 'ENOENT') throw e;
        if (await isFolder(dirname(level))) {
          throw new HypsinkError(
            'HYPSINK_ERR_ACCESS',
            `cannot make folder ${level}: ${dirname(level)} takes no new folders (mkdir says ENOENT though ${dirname(level)} is there, as under /proc or /sys), for ${runningAs()}`,
            { cause: e, retryable: false, hint: 'Choose a path on a real filesystem in the config (cache.root, state.dir, a sink\'s config.dir) or on the command line; then run again.' },
          );
        }
        lost = true; // the parent went away meanwhile: start over from what is there now
        break;
      }
    }
    if (!lost) return;
    if (race >= RACES) throw errno('ENOENT', 'mkdir', target, `no such file or directory (its folders were removed ${RACES} times while being made)`);
  }
}
