/** Running a Node process to its end (or death) and keeping what it printed. */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

export const REPO = fileURLToPath(new URL('../../', import.meta.url));

export interface ProcResult {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly stdout: string;
  readonly stderr: string;
  readonly pid: number;
}

export interface RunOptions {
  readonly cwd?: string;
  /** Merged over the parent's environment; `undefined` removes a variable. */
  readonly env?: Record<string, string | undefined>;
  /** Written to standard input, which is then closed. */
  readonly input?: string;
  /** Kill the process (SIGKILL) after this long: a wait that never ends fails the test, not hangs it. */
  readonly killAfterMs?: number;
}

/**
 * `node <args>` with no fault point armed (a test arms one explicitly in `env`)
 * and without the parent's test-runner context.
 */
export function runNode(args: readonly string[], opts: RunOptions = {}): Promise<ProcResult> {
  return runProcess(process.execPath, args, opts);
}

/** `command <args>` as `runNode` runs node: no fault point armed, no test-runner context. */
export function runProcess(command: string, args: readonly string[], opts: RunOptions = {}): Promise<ProcResult> {
  const env: NodeJS.ProcessEnv = { ...process.env, HYPSINK_FAULT: '', HYPSINK_FAULT_AT: '' };
  delete env.NODE_TEST_CONTEXT;
  for (const [k, v] of Object.entries(opts.env ?? {})) {
    if (v === undefined) delete env[k];
    else env[k] = v;
  }
  return new Promise((resolve, reject) => {
    const child = spawn(command, [...args], { cwd: opts.cwd ?? REPO, env, stdio: ['pipe', 'pipe', 'pipe'] });
    const timer = opts.killAfterMs === undefined ? undefined : setTimeout(() => child.kill('SIGKILL'), opts.killAfterMs);
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => {
      stdout += c.toString('utf8');
    });
    child.stderr.on('data', (c: Buffer) => {
      stderr += c.toString('utf8');
    });
    child.on('error', reject);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr, pid: child.pid ?? -1 });
    });
    child.stdin.end(opts.input ?? '');
  });
}

/** Poll `cond` until it holds; after `ms`, fail naming `what` (a bound on a wait, never a timing assertion). */
export async function until(cond: () => boolean, ms: number, what: string): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
