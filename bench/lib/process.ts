/** Whole processes, timed from spawn to exit: what a user's shell would see. */
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { REPO } from './receiver.js';

/** The compiled CLI, as a host runs it (`npm run bench` builds dist/ first). */
export const BIN = join(REPO, 'bin/hypsink.js');

/**
 * Wall time of `node <args>` in `cwd`, start to exit, in ms; a non-zero exit
 * throws with its stderr. None of the bench's TypeScript conditions: the
 * compiled code, as a user's shell runs it.
 */
export function timeNode(args: readonly string[], cwd: string, env: Record<string, string> = {}): Promise<number> {
  const childEnv = { ...process.env, NODE_OPTIONS: '', HYPSINK_LOG_LEVEL: 'warn', ...env };
  return new Promise((done, failed) => {
    const t0 = process.hrtime.bigint();
    const child = spawn(process.execPath, [...args], { cwd, env: childEnv, stdio: ['ignore', 'ignore', 'pipe'] });
    let err = '';
    child.stderr.on('data', (b: Buffer) => {
      err += b.toString();
    });
    child.on('error', failed);
    child.on('exit', (code) => {
      const ms = Number(process.hrtime.bigint() - t0) / 1e6;
      if (code !== 0) failed(new Error(`node ${args.join(' ')} exited ${code}: ${err.trim()}`));
      else done(ms);
    });
  });
}
