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
import { spawn } from 'node:child_process';
import { promises as fsp, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import { after } from 'node:test';
import { BIN } from './kernel.js';
import type { ProcResult } from './proc.js';
import { REPO } from './proc.js';

const ROOT = process.getuid?.() === 0;

/** What a root child runs without: the capabilities that pass permission checks. */
const DROP = '--bounding-set=-dac_override,-dac_read_search,-fowner';

/** The user the child runs as: this one (as root, without the capabilities above). */
export const CHILD_USER: { readonly uid: number; readonly gid: number; readonly name: string } = {
  uid: process.getuid!(),
  gid: process.getgid!(),
  name: userInfo().username,
};

export interface ChildOptions {
  readonly cwd?: string;
  readonly env?: Record<string, string | undefined>;
  readonly input?: string;
  /** Run with this process's own rights (as root: its capabilities kept). */
  readonly asSelf?: boolean;
  /** Kill the child after this long (default 60 s). */
  readonly killAfterMs?: number;
}

/** `hypsink <args>` from the sources, bound by permissions unless `asSelf`; killed (SIGKILL) after `killAfterMs`. */
export function runCli(args: readonly string[], opts: ChildOptions = {}): Promise<ProcResult> {
  const env: NodeJS.ProcessEnv = { ...process.env, HYPSINK_FAULT: '', HYPSINK_FAULT_AT: '', HYPSINK_LOG_LEVEL: 'warn' };
  delete env.NODE_TEST_CONTEXT;
  for (const [k, v] of Object.entries(opts.env ?? {})) {
    if (v === undefined) delete env[k];
    else env[k] = v;
  }
  const node = [process.execPath, BIN, ...args];
  const argv = ROOT && !opts.asSelf ? ['setpriv', DROP, ...node] : node;
  return new Promise((resolve, reject) => {
    const child = spawn(argv[0]!, argv.slice(1), { cwd: opts.cwd ?? REPO, env, stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => {
      stdout += c.toString('utf8');
    });
    child.stderr.on('data', (c: Buffer) => {
      stderr += c.toString('utf8');
    });
    const timer = setTimeout(() => child.kill('SIGKILL'), opts.killAfterMs ?? 60_000);
    child.on('error', reject);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr, pid: child.pid ?? -1 });
    });
    child.stdin.end(opts.input ?? '');
  });
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
