/**
 * Permission and read-only errors are permanent: no retry makes a folder
 * writable. Every place where an error that is not a HypsinkError gets its
 * code (the kernel's sink driver, ingest and CLI, a plugin's own mapping of
 * its filesystem errors) asks `accessError` first, so EACCES, EPERM and EROFS
 * are HYPSINK_ERR_ACCESS everywhere, naming the path and the user the process
 * runs as. (EPERM of `process.kill(pid, 0)` means "alive"; those callers catch
 * it themselves and it never reaches here.)
 * @ref LLP 0033
 */
import { userInfo } from 'node:os';
import { dirname } from 'node:path';
import { HypsinkError } from './errors.js';

const ACCESS = new Set(['EACCES', 'EPERM', 'EROFS']);
/** Calls that make or remove a name in a folder. */
const NAMING = new Set(['mkdir', 'rmdir', 'unlink', 'rename', 'link', 'symlink']);

const WHAT: Record<string, string> = {
  EACCES: 'permission denied',
  EPERM: 'operation not permitted',
  EROFS: 'read-only file system',
};

/** `user "nobody" (uid 65534)`: who the process runs as, the name when the system knows it. */
export function runningAs(): string {
  const uid = process.getuid?.();
  let name: string | undefined;
  try {
    name = userInfo().username;
  } catch {
    // No passwd entry for this uid (a container's arbitrary uid): the uid alone.
  }
  if (uid === undefined) return name === undefined ? 'this user' : `user "${name}"`;
  return name === undefined ? `uid ${uid}` : `user "${name}" (uid ${uid})`;
}

export interface AccessErrorOptions {
  /** Who met it, e.g. `sink "archive"`; the message starts with it. */
  readonly context?: string;
  /** The other way out, e.g. `pass another --file` (default: `choose another path in the config`). */
  readonly elsewhere?: string;
}

/**
 * HYPSINK_ERR_ACCESS for an EACCES, EPERM or EROFS error from the filesystem
 * (not retryable), naming its path and the user; undefined for any other error.
 */
export function accessError(e: unknown, opts: AccessErrorOptions = {}): HypsinkError | undefined {
  const err = e as NodeJS.ErrnoException & { dest?: string };
  if (typeof err !== 'object' || err === null || typeof err.code !== 'string' || !ACCESS.has(err.code)) return undefined;
  const path = typeof err.path === 'string' ? err.path : undefined;
  const where = path === undefined ? err.message : `${err.syscall ? `${err.syscall} ` : ''}${path}${typeof err.dest === 'string' ? ` → ${err.dest}` : ''}`;
  const who = runningAs();
  const elsewhere = opts.elsewhere ?? 'choose another path in the config';
  const target = path ?? 'the named path';
  // Making or removing a name needs write access to the folder it is in, not to the name.
  const inFolder = path !== undefined && NAMING.has(err.syscall ?? '');
  const hint =
    err.code === 'EROFS'
      ? `${target} is on a read-only filesystem: mount it read-write or ${elsewhere}; then run again.`
      : inFolder
        ? `Give ${who} write access to ${dirname(path)} (ls -ld shows its owner and mode), or ${elsewhere}; then run again.`
        : `Give ${who} access to ${target} and the folders above it (ls -ld shows their owner and mode), or ${elsewhere}; then run again.`;
  const what = path === undefined ? where : `${where}: ${WHAT[err.code]} (${err.code})`;
  return new HypsinkError('HYPSINK_ERR_ACCESS', `${opts.context ? `${opts.context}: ` : ''}${what}, for ${who}`, { cause: e, retryable: false, hint });
}
