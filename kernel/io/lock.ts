/**
 * Cross-process locks (proper-lockfile) with a bounded wait and a named holder.
 * Held per operation, never for a process's lifetime: `ingest` and `export` work
 * while `run` sits idle between ticks. Within one process the lock is shared
 * (refcounted), so concurrent operations of one writer process do not deadlock
 * each other; their in-process ordering is the job of finer mutexes.
 *
 * A holder killed outright (SIGKILL, power cut) leaves the lock directory behind.
 * proper-lockfile would take it only once its mtime is `staleMs` old (30 s); we
 * take it at once when it provably belongs to a dead process: every contender
 * first writes a claim `<target>/.lock-claims/<pid>,<nonce>,<host>`, and keeps it
 * until it has released. So a held lock always has a live claim, and a lock with
 * no claim of a live process (other than ours) on this host is abandoned. Two
 * contenders each claim before they look, so at most one of them sees no other
 * live claim and removes the dead lock. Claims from other hosts count as alive.
 * @ref LLP 0001 (one writer per cache; why the allocator reloads on acquire)
 */
import { randomBytes } from 'node:crypto';
import { promises as fsp } from 'node:fs';
import { hostname } from 'node:os';
import lockfile from 'proper-lockfile';
import { HypsinkError } from '../../types/errors.js';

export interface LockOptions {
  /** How long to wait for another holder before failing (ms). */
  readonly waitMs: number;
  /** A lock not refreshed for this long is taken as abandoned by a dead process (ms). */
  readonly staleMs?: number;
  /** Called each time this process takes the lock from nobody (not when it joins itself). */
  readonly onAcquire?: () => void | Promise<void>;
}

interface Holder {
  pid: number;
  host: string;
  op: string;
  since: string;
}

export class ProcessLock {
  private refs = 0;
  private release: (() => Promise<void>) | undefined;
  private acquiring: Promise<void> | undefined;
  private compromised: Error | undefined;
  private claim: string | undefined;

  /** `target` is an existing directory; the lock lives beside it in `<target>/.lock`. */
  constructor(
    private readonly target: string,
    private readonly label: string,
    private readonly opts: LockOptions,
  ) {}

  private get holderPath(): string {
    return `${this.target}/.lock-holder.json`;
  }

  private get claimsDir(): string {
    return `${this.target}/.lock-claims`;
  }

  /** True when no process but a dead one (on this host) can hold the lock. Removes dead claims. */
  private async holderIsDead(mine: string): Promise<boolean> {
    let names: string[];
    try {
      names = await fsp.readdir(this.claimsDir);
    } catch {
      return false;
    }
    let dead = false;
    for (const name of names) {
      if (`${this.claimsDir}/${name}` === mine) continue;
      const [pidText, , host] = name.split(',');
      const pid = Number(pidText);
      if (!Number.isInteger(pid) || host === undefined || decodeURIComponent(host) !== hostname()) return false;
      if (pid === process.pid || alive(pid)) return false;
      dead = true;
      await fsp.rm(`${this.claimsDir}/${name}`, { force: true });
    }
    // No claim at all: the holder predates claims or died before writing one; leave it to the mtime rule.
    return dead;
  }

  /** Run `fn` holding the lock. */
  async with<T>(op: string, fn: () => Promise<T>): Promise<T> {
    await this.acquire(op);
    try {
      return await fn();
    } finally {
      await this.releaseOne();
    }
  }

  private async acquire(op: string): Promise<void> {
    while (this.acquiring) await this.acquiring.catch(() => undefined);
    if (this.refs > 0) {
      this.refs += 1;
      return;
    }
    this.acquiring = this.take(op);
    try {
      await this.acquiring;
      this.refs = 1;
    } finally {
      this.acquiring = undefined;
    }
  }

  private async take(op: string): Promise<void> {
    const claim = `${this.claimsDir}/${process.pid},${randomBytes(6).toString('hex')},${encodeURIComponent(hostname())}`;
    await fsp.mkdir(this.claimsDir, { recursive: true });
    await fsp.writeFile(claim, '');
    try {
      await this.takeClaimed(op, claim);
      this.claim = claim;
    } catch (e) {
      await fsp.rm(claim, { force: true });
      throw e;
    }
  }

  private async takeClaimed(op: string, claim: string): Promise<void> {
    const deadline = Date.now() + this.opts.waitMs;
    let delay = 25;
    for (;;) {
      try {
        this.compromised = undefined;
        this.release = await lockfile.lock(this.target, {
          lockfilePath: `${this.target}/.lock`,
          realpath: false,
          stale: this.opts.staleMs ?? 30_000,
          retries: 0,
          onCompromised: (err) => {
            // Another process took it as stale: our critical section is no longer exclusive.
            this.compromised = err;
          },
        });
        break;
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== 'ELOCKED') throw e;
        if (await this.holderIsDead(claim)) {
          // Abandoned by a dead holder: remove its lock directory and contend again at once.
          await fsp.rmdir(`${this.target}/.lock`).catch((err: NodeJS.ErrnoException) => {
            if (err.code !== 'ENOENT') throw err;
          });
          continue;
        }
        if (Date.now() >= deadline) throw await this.lockedError();
        await new Promise((r) => setTimeout(r, delay));
        delay = Math.min(delay * 2, 250);
      }
    }
    const holder: Holder = { pid: process.pid, host: hostname(), op, since: new Date().toISOString() };
    await fsp.writeFile(this.holderPath, JSON.stringify(holder)).catch(() => undefined);
    await this.opts.onAcquire?.();
  }

  private async lockedError(): Promise<HypsinkError> {
    let who = 'another process';
    try {
      const h = JSON.parse(await fsp.readFile(this.holderPath, 'utf8')) as Holder;
      who = `pid ${h.pid} on ${h.host} (${h.op}, since ${h.since})`;
    } catch {
      // No holder record: the holder crashed before writing it, or is just starting.
    }
    return new HypsinkError(
      'HYPSINK_ERR_LOCKED',
      `${this.label} is locked by ${who}; waited ${this.opts.waitMs} ms. Wait for it to finish or stop it.`,
    );
  }

  private async releaseOne(): Promise<void> {
    this.refs -= 1;
    if (this.refs > 0) return;
    const release = this.release;
    const claim = this.claim;
    this.release = undefined;
    this.claim = undefined;
    await fsp.rm(this.holderPath, { force: true });
    await release?.().catch(() => undefined);
    // Only now: until the lock directory is gone, this claim is what marks its holder alive.
    if (claim) await fsp.rm(claim, { force: true });
    if (this.compromised) {
      const err = this.compromised;
      this.compromised = undefined;
      throw new HypsinkError('HYPSINK_ERR_LOCKED', `${this.label}: the lock was lost during the operation (${err.message})`);
    }
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}
