/**
 * The CLI in a child process that permissions bind, with a bound on its life.
 * Root passes every permission check, so as root the child runs as nobody
 * (uid/gid 65534, via util-linux `setpriv`); any other user is bound already
 * and runs it as itself. A child still running after `killAfterMs` is killed
 * and reported with its signal: a wait that never ends fails the test instead
 * of hanging it.
 */
import { spawn } from 'node:child_process';
import { chmodSync, promises as fsp, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import { after } from 'node:test';
import { BIN } from './kernel.js';
import type { ProcResult } from './proc.js';
import { REPO } from './proc.js';

const ROOT = process.getuid?.() === 0;

/** The user the child runs as. */
export const CHILD_USER: { readonly uid: number; readonly gid: number; readonly name: string } = ROOT
  ? { uid: 65534, gid: 65534, name: nameOf(65534) }
  : { uid: process.getuid!(), gid: process.getgid!(), name: userInfo().username };

function nameOf(uid: number): string {
  for (const line of readFileSync('/etc/passwd', 'utf8').split('\n')) {
    const f = line.split(':');
    if (Number(f[2]) === uid) return f[0]!;
  }
  return String(uid);
}

export interface ChildOptions {
  readonly cwd?: string;
  readonly env?: Record<string, string | undefined>;
  readonly input?: string;
  /** Run as CHILD_USER (default) or as this process's own user. */
  readonly asSelf?: boolean;
  /** Kill the child after this long (default 60 s). */
  readonly killAfterMs?: number;
}

/** `hypsink <args>` from the sources, as CHILD_USER unless `asSelf`; killed (SIGKILL) after `killAfterMs`. */
export function runCli(args: readonly string[], opts: ChildOptions = {}): Promise<ProcResult> {
  const env: NodeJS.ProcessEnv = { ...process.env, HYPSINK_FAULT: '', HYPSINK_FAULT_AT: '', HYPSINK_LOG_LEVEL: 'warn' };
  delete env.NODE_TEST_CONTEXT;
  for (const [k, v] of Object.entries(opts.env ?? {})) {
    if (v === undefined) delete env[k];
    else env[k] = v;
  }
  const node = [process.execPath, BIN, ...args];
  const argv = ROOT && !opts.asSelf ? ['setpriv', `--reuid=${CHILD_USER.uid}`, `--regid=${CHILD_USER.gid}`, '--clear-groups', ...node] : node;
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
 * A fresh temp dir the child can reach (0755), removed when the test ends
 * (its locked parts unlocked first). Call `giveToChild` once it is set up.
 */
export function childTempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'hypsink-child-'));
  chmodSync(dir, 0o755);
  after(async () => {
    await unlock(dir);
    rmSync(dir, { recursive: true, force: true });
  });
  return dir;
}

/** Hand `path` (recursively) to CHILD_USER, so the child may use it as its own. */
export async function giveToChild(path: string): Promise<void> {
  if (!ROOT) return;
  await fsp.chown(path, CHILD_USER.uid, CHILD_USER.gid);
  if ((await fsp.lstat(path)).isDirectory()) for (const n of await fsp.readdir(path)) await giveToChild(join(path, n));
}

/**
 * Make `path` (recursively) readable but not writable by CHILD_USER; with
 * `unreadable`, not readable either. As root: owned by root, mode 0755/0644
 * (0700/0600 unreadable); otherwise the owner's own write (and read) bits are dropped.
 */
export async function lockOut(path: string, unreadable = false): Promise<void> {
  const dir = (await fsp.lstat(path)).isDirectory();
  if (dir) for (const n of await fsp.readdir(path)) await lockOut(join(path, n), unreadable);
  if (ROOT) {
    await fsp.chown(path, 0, 0);
    await fsp.chmod(path, dir ? (unreadable ? 0o700 : 0o755) : unreadable ? 0o600 : 0o644);
  } else {
    await fsp.chmod(path, dir ? (unreadable ? 0o000 : 0o555) : unreadable ? 0o000 : 0o444);
  }
}

/** Undo `lockOut` for cleanup by a non-root runner (root removes anything). */
export async function unlock(path: string): Promise<void> {
  if (ROOT) return;
  const st = await fsp.lstat(path);
  await fsp.chmod(path, st.isDirectory() ? 0o755 : 0o644);
  if (st.isDirectory()) for (const n of await fsp.readdir(path)) await unlock(join(path, n));
}
