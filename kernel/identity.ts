/**
 * Where a cache lives, and whether it is still where it was made. A cache is
 * known to its destinations by its id (`cache.json`) and its seqs; a copy of
 * its folder (a VM or container image baked with a warm cache, a migrated
 * laptop, a restored backup) carries both, and would hand out the same seqs
 * again for other rows. So the cache records its home: the machine (a hash of
 * its machine id), its root's real path and the root folder's inode. A cache
 * opened anywhere else is a suspected copy: before any new row gets a seq,
 * the evidence and the fork seq (every seq at or below it may be shared with
 * the original) are recorded, and exports stop until the operator says what
 * it is (`hypsink identity --moved` or `--copy`).
 * @ref LLP 0055: copied and restored caches
 */
import { createHash } from 'node:crypto';
import { promises as fsp } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { HypsinkError } from '../types/errors.js';
import { createJsonOnce, isDecimalSeq, readJsonFile, writeJsonAtomic } from './io/durable.js';

/** A place a cache was opened: enough to tell another machine, another folder, another copy. */
export interface Home {
  readonly v: 1;
  /** SHA-256 (16 hex) of the machine id; null on a system without one (a container). */
  readonly machine: string | null;
  /** The host name then, for messages only (it changes with every container). */
  readonly host: string;
  /** The root's real path. */
  readonly root: string;
  /** The root folder's inode: a copy of a folder, or a folder restored by copying, is a new inode. */
  readonly ino: number;
}

/** The evidence that a cache was opened away from its home, recorded once, before any new seq. */
export interface CopyEvidence {
  readonly v: 1;
  readonly home: Home;
  readonly seen: Home;
  /** The seq allocator's top when it was first seen away: seqs at or below it may be the original's too. */
  readonly forkSeq: string;
  readonly at: string;
}

const HOME = 'home.json';
const SUSPECT = 'copy-suspected.json';

const isHome = (h: unknown): h is Home => {
  const x = h as Home;
  return x?.v === 1 && (x.machine === null || typeof x.machine === 'string') && typeof x.host === 'string' && typeof x.root === 'string' && Number.isSafeInteger(x.ino);
};
const homeProblem = (v: unknown) => (isHome(v) ? null : 'expected {"v":1,"machine","host","root","ino"}');
const evidenceProblem = (v: unknown) => {
  const e = v as CopyEvidence;
  return e?.v === 1 && isHome(e.home) && isHome(e.seen) && isDecimalSeq(e.forkSeq) && typeof e.at === 'string' ? null : 'expected {"v":1,"home","seen","forkSeq","at"}';
};

/** The machine id (systemd's, or D-Bus's), hashed; `HYPSINK_MACHINE_ID` stands in for it (tests of two hosts on one machine). */
async function machineId(): Promise<string | null> {
  let raw = process.env.HYPSINK_MACHINE_ID;
  for (const f of ['/etc/machine-id', '/var/lib/dbus/machine-id']) {
    if (raw) break;
    raw = (await fsp.readFile(f, 'utf8').catch(() => '')).trim();
  }
  return raw ? createHash('sha256').update(raw).digest('hex').slice(0, 16) : null;
}

/** Where `root` is now. */
export async function homeOf(root: string): Promise<Home> {
  const real = await fsp.realpath(root);
  const st = await fsp.stat(real);
  return { v: 1, machine: await machineId(), host: hostname(), root: real, ino: st.ino };
}

/** How `seen` differs from `home`, in words; empty when it is the same place. */
export function differences(home: Home, seen: Home): string[] {
  const out: string[] = [];
  if (home.machine !== seen.machine && home.machine !== null && seen.machine !== null) out.push(`made on machine ${home.machine} (host ${home.host}), now on machine ${seen.machine} (host ${seen.host})`);
  if (home.root !== seen.root) out.push(`made at ${home.root}, now at ${seen.root}`);
  else if (home.ino !== seen.ino) out.push(`its folder ${seen.root} is another folder than the one it was made in (inode ${home.ino}, now ${seen.ino}: copied or restored in place)`);
  return out;
}

/**
 * Check the cache's home at open. First open (or a cache made before homes were
 * recorded): this is its home. Away from it: record the evidence with the fork
 * seq, once (the first sighting's is kept), and return it. Runs before the
 * cache hands out any seq.
 */
export async function checkHome(root: string, forkSeq: () => Promise<string>): Promise<CopyEvidence | null> {
  const seen = await homeOf(root);
  const recorded = await readJsonFile<CopyEvidence>(join(root, SUSPECT), evidenceProblem, 'copy evidence');
  if (recorded) return recorded;
  const home = await readJsonFile<Home>(join(root, HOME), homeProblem, 'cache home');
  if (!home) {
    await writeJsonAtomic(join(root, HOME), seen);
    return null;
  }
  if (differences(home, seen).length === 0) return null;
  // Created once: of two processes opening the copy at once, the first sighting's fork seq stands.
  const evidence: CopyEvidence = { v: 1, home, seen, forkSeq: await forkSeq(), at: new Date().toISOString() };
  return createJsonOnce(join(root, SUSPECT), evidence, evidenceProblem, 'copy evidence');
}

/** This is the cache's home now (`identity --moved`, or after `--copy`): the evidence is cleared. */
export async function settleHome(root: string): Promise<void> {
  await writeJsonAtomic(join(root, HOME), await homeOf(root));
  await fsp.rm(join(root, SUSPECT), { force: true });
}

/** The evidence in words, for status, export and verify. */
export function evidenceText(e: CopyEvidence): string {
  const why = differences(e.home, e.seen).join('; ') || 'its home record says another place';
  return `this cache appears to be a copy of another (same id, different history): ${why} (first seen ${e.at}; seqs up to ${e.forkSeq} may be shared with the original)`;
}

/** The refusal of an export while the cache is a suspected copy. */
export function suspectedCopy(e: CopyEvidence, what: string): HypsinkError {
  return new HypsinkError(
    'HYPSINK_ERR_CONFLICT',
    `${what}: ${evidenceText(e)}. Nothing was exported: its rows could collide with the original's at the destinations. ` +
      'If the original no longer runs (the folder was moved, the host migrated), run "hypsink identity --moved". ' +
      'If both run (a cloned image or host), or this is a restored backup whose later history reached the destinations, run "hypsink identity --copy" here: this cache gets its own identity, and its own rows then export exactly once under it',
    { hint: 'Run "hypsink identity" to see the evidence, then "hypsink identity --moved" or "hypsink identity --copy" as the message says.' },
  );
}
