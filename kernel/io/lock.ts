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
 *
 * A holder whose event loop is blocked past `staleMs` stops refreshing the lock,
 * and another process may take it as stale (remove the lock dir, make its own).
 * `assertHeld` is how a holder notices before a commit point: the lock dir must
 * still be the one it made (device, inode and birth time; ext4 hands a new dir
 * the freed inode at once), the holder record its own, and the lock fresh.
 * @ref LLP 0001 (one writer per cache; why the allocator reloads on acquire)
 */
import { randomBytes } from 'node:crypto';
import { type BigIntStats, promises as fsp } from 'node:fs';
import { hostname } from 'node:os';
import lockfile from 'proper-lockfile';
import { HypsinkError, isHypsinkError } from '../../types/errors.js';
import { encodeSegment } from '../store/segments.js';
import { mkdirs } from './mkdirs.js';

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
  /** Per take: tells our record from a later holder's. */
  token?: string;
}

/** One take of the lock: what identifies the lock dir we made, and what proper-lockfile told us since. */
interface Held {
  readonly release: () => Promise<void>;
  readonly dev: bigint;
  readonly ino: bigint;
  readonly birthtimeNs: bigint;
  readonly token: string;
  /** Filled by proper-lockfile's onCompromised for this take only. */
  readonly reports: { compromised?: Error };
}

/** proper-lockfile's own floor for `stale`. */
const MIN_STALE_MS = 2000;

export class ProcessLock {
  private refs = 0;
  private held: Held | undefined;
  private acquiring: Promise<void> | undefined;
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

  private get lockDir(): string {
    return `${this.target}/.lock`;
  }

  private get staleMs(): number {
    return Math.max(this.opts.staleMs ?? 30_000, MIN_STALE_MS);
  }

  /**
   * Throw HYPSINK_ERR_LOCKED unless this process still provably holds the lock;
   * call it right before a commit point. It does not refresh the lock: a lock
   * found stale is lost, since any contender may take it from now on.
   */
  async assertHeld(what: string): Promise<void> {
    const held = this.refs > 0 ? this.held : undefined;
    const lost = held
      ? (compromisedReason(held) ?? (await this.replaced(held)) ?? (await this.staleness()))
      : 'this process does not hold it';
    if (lost !== undefined) {
      throw new HypsinkError('HYPSINK_ERR_LOCKED', `${this.label}: the lock is not held before ${what}: ${lost}; nothing is committed`);
    }
  }

  /** Why the lock dir is no longer the one `held` took (removed, or replaced by another holder's), or undefined. */
  private async replaced(held: Held): Promise<string | undefined> {
    let st: BigIntStats;
    try {
      st = await fsp.stat(this.lockDir, { bigint: true });
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return 'lost (its lock dir was removed)';
      throw e;
    }
    if (st.dev !== held.dev || st.ino !== held.ino || st.birthtimeNs !== held.birthtimeNs) {
      return 'lost (its lock dir was replaced: another process took it as stale)';
    }
    let holder: Partial<Holder> | undefined;
    try {
      holder = JSON.parse(await fsp.readFile(this.holderPath, 'utf8')) as Partial<Holder>;
    } catch {
      // Absent or torn: proves nothing either way; the lock dir's identity decides.
    }
    if (holder?.token !== undefined && holder.token !== held.token) {
      return `lost (taken by pid ${holder.pid} on ${holder.host}, ${holder.op})`;
    }
    return undefined;
  }

  /** Why the lock, still ours, may be taken from us any moment now (not refreshed within staleMs), or undefined. */
  private async staleness(): Promise<string | undefined> {
    const mtime = (await fsp.stat(this.lockDir)).mtimeMs;
    const age = Date.now() - mtime;
    return age > this.staleMs ? `lost (not refreshed for ${Math.round(age)} ms, stale after ${this.staleMs} ms)` : undefined;
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
      if (!Number.isInteger(pid) || host === undefined || !isThisHost(host)) return false;
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

  /**
   * Run `fn` holding the lock if it can be had now (held here already, free, or
   * abandoned by a dead holder); `{ ran: false }` at once if a live process
   * holds it: for work that another process is doing anyway (a flush of a
   * spool its ingest is writing).
   */
  async tryWith<T>(op: string, fn: () => Promise<T>): Promise<{ ran: true; value: T } | { ran: false }> {
    try {
      await this.acquire(op, 0);
    } catch (e) {
      if (isHypsinkError(e) && e.code === 'HYPSINK_ERR_LOCKED') return { ran: false };
      throw e;
    }
    try {
      return { ran: true, value: await fn() };
    } finally {
      await this.releaseOne();
    }
  }

  private async acquire(op: string, waitMs = this.opts.waitMs): Promise<void> {
    while (this.acquiring) await this.acquiring.catch(() => undefined);
    if (this.refs > 0) {
      this.refs += 1;
      return;
    }
    this.acquiring = this.take(op, waitMs);
    try {
      await this.acquiring;
      this.refs = 1;
    } finally {
      this.acquiring = undefined;
    }
  }

  private async take(op: string, waitMs: number): Promise<void> {
    const claim = `${this.claimsDir}/${process.pid},${randomBytes(6).toString('hex')},${encodeSegment(hostname())}`;
    await mkdirs(this.claimsDir);
    await fsp.writeFile(claim, '');
    try {
      await this.takeClaimed(op, claim, waitMs);
      this.claim = claim;
    } catch (e) {
      await fsp.rm(claim, { force: true });
      throw e;
    }
  }

  private async takeClaimed(op: string, claim: string, waitMs: number): Promise<void> {
    const deadline = Date.now() + waitMs;
    let delay = 25;
    let release: () => Promise<void>;
    // Per take: a late report about an earlier take must not mark this one.
    const reports: { compromised?: Error } = {};
    for (;;) {
      try {
        release = await lockfile.lock(this.target, {
          lockfilePath: this.lockDir,
          realpath: false,
          stale: this.opts.staleMs ?? 30_000,
          retries: 0,
          onCompromised: (err) => {
            // Another process took it as stale: our critical section is no longer exclusive.
            reports.compromised ??= err;
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
    // Just made (and fresh): nobody can have replaced it yet.
    const st = await fsp.stat(this.lockDir, { bigint: true }).catch(async (e: Error) => {
      await release().catch(() => undefined);
      throw e;
    });
    const token = randomBytes(8).toString('hex');
    this.held = { release, dev: st.dev, ino: st.ino, birthtimeNs: st.birthtimeNs, token, reports };
    const holder: Holder = { pid: process.pid, host: hostname(), op, since: new Date().toISOString(), token };
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
    const held = this.held;
    const claim = this.claim;
    this.held = undefined;
    this.claim = undefined;
    // (A stat that fails for another reason than ENOENT: release as before.)
    const replaced = held ? await this.replaced(held).catch(() => undefined) : undefined;
    // A lock another process took over is its lock now: its dir and holder record are not ours to remove.
    if (!replaced) {
      await fsp.rm(this.holderPath, { force: true });
      // (A no-op once proper-lockfile has reported the lock compromised.)
      await held?.release().catch(() => undefined);
    }
    // Only now: until the lock directory is gone, this claim is what marks its holder alive.
    if (claim) await fsp.rm(claim, { force: true });
    const lost = replaced ?? (held ? compromisedReason(held) : undefined);
    if (lost !== undefined) {
      throw new HypsinkError('HYPSINK_ERR_LOCKED', `${this.label}: the lock was lost during the operation: ${lost}`);
    }
  }
}

function compromisedReason(held: Held): string | undefined {
  const err = held.reports.compromised;
  return err ? `lost (${err.message})` : undefined;
}

/** A claim's host part names this host: by the one name rule, or URI-encoded as claims were before it (@ref LLP 0029). */
function isThisHost(host: string): boolean {
  const here = hostname();
  return host === encodeSegment(here) || host === encodeURIComponent(here);
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}
