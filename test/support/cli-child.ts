/**
 * The CLI in a child process that permissions bind, with a bound on its life.
 * Root passes every permission check by its capabilities, not by who it is:
 * as root the child keeps uid 0 but runs without CAP_DAC_OVERRIDE,
 * CAP_DAC_READ_SEARCH and CAP_FOWNER (util-linux `setpriv --bounding-set`),
 * so a file's owner bits bind it like any owner. It so reads the checkout
 * wherever that is (a CI runner's folder may be closed to other users; a
 * child run as nobody could not load hypsink there: CI failed that way). Any
 * other user is bound already and runs it as itself. A child still running
 * after `killAfterMs` is killed and reported with its signal: a wait that
 * never ends fails the test instead of hanging it.
 */
import { promises as fsp, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import { after } from 'node:test';
import { BIN } from './kernel.js';
import { type ProcResult, type RunOptions, runProcess } from './proc.js';

const ROOT = process.getuid?.() === 0;

/** What a root child runs without: the capabilities that pass permission checks. */
const DROP = '--bounding-set=-dac_override,-dac_read_search,-fowner';

/** The user the child runs as: this one (as root, without the capabilities above). */
export const CHILD_USER: { readonly uid: number; readonly gid: number; readonly name: string } = {
  uid: process.getuid!(),
  gid: process.getgid!(),
  name: userInfo().username,
};

/** As `runNode`'s, the kill bound 60 s unless given. */
export interface ChildOptions extends RunOptions {
  /** Run with this process's own rights (as root: its capabilities kept). */
  readonly asSelf?: boolean;
}

/** `hypsink <args>` from the sources, bound by permissions unless `asSelf`; killed (SIGKILL) after `killAfterMs`. */
export function runCli(args: readonly string[], opts: ChildOptions = {}): Promise<ProcResult> {
  const node = [process.execPath, BIN, ...args];
  const [command, ...rest] = ROOT && !opts.asSelf ? ['setpriv', DROP, ...node] : node;
  return runProcess(command!, rest, { ...opts, env: { HYPSINK_LOG_LEVEL: 'warn', ...opts.env }, killAfterMs: opts.killAfterMs ?? 60_000 });
}

/**
 * A fresh temp dir for the child, removed when the test ends (its locked
 * parts unlocked first).
 */
export function childTempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'hypsink-child-'));
  after(async () => {
    await unlock(dir);
    rmSync(dir, { recursive: true, force: true });
  });
  return dir;
}

/**
 * Make `path` (recursively) readable but not writable by the child; with
 * `unreadable`, not readable either: the owner's own bits dropped, which bind
 * the child as they bind any owner (as root it has no capability to pass them).
 */
export async function lockOut(path: string, unreadable = false): Promise<void> {
  const dir = (await fsp.lstat(path)).isDirectory();
  if (dir) for (const n of await fsp.readdir(path)) await lockOut(join(path, n), unreadable);
  await fsp.chmod(path, dir ? (unreadable ? 0o000 : 0o555) : unreadable ? 0o000 : 0o444);
}

/** Undo `lockOut`, so the folder can be removed (root could anyway; another user could not). */
export async function unlock(path: string): Promise<void> {
  const st = await fsp.lstat(path);
  await fsp.chmod(path, st.isDirectory() ? 0o755 : 0o644);
  if (st.isDirectory()) for (const n of await fsp.readdir(path)) await unlock(join(path, n));
}
