/**
 * Generations and reader leases. A reader leases the generation it reads; a
 * writer that replaced a generation (retention, compaction) tombstones it and
 * deletes it only when no live lease remains. The lease/tombstone pair is a
 * two-flag handshake: a reader creates its lease, then looks for the tombstone;
 * the deleter writes the tombstone, then looks for leases — one of them always
 * sees the other.
 *
 * The deleter never removes a generation in place: a recursive remove takes the
 * tombstone away before the directory, and a late reader would then lease a
 * generation whose files are going. It renames the generation aside in one step
 * (`.trash-…`, beside it), then removes that. A reader confirms its lease file
 * is still at its path after finding no tombstone: a lease taken on a generation
 * already moved aside is not there, and is refused.
 * @ref LLP 0004: generations, cursor swap and reader leases
 */
import { randomBytes } from 'node:crypto';
import { promises as fsp } from 'node:fs';
import { basename, dirname, join } from 'node:path';

let leaseCounter = 0;

export const generationDir = (partitionDir: string, n: number) => join(partitionDir, `table-${n}`);

/** Names of generations moved aside for deletion; what a crashed deleter leaves, removed by sweep(). */
export const TRASH_PREFIX = '.trash-';

async function exists(file: string): Promise<boolean> {
  try {
    await fsp.access(file);
    return true;
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ENOTDIR') return false;
    throw e;
  }
}

/** Take a lease on a generation; undefined when it is gone or retired (re-read the cursor). */
export async function takeLease(genDir: string): Promise<(() => Promise<void>) | undefined> {
  const leases = join(genDir, '.leases');
  const lease = join(leases, `${process.pid}-${++leaseCounter}`);
  try {
    await fsp.mkdir(leases, { recursive: false }).catch((e: NodeJS.ErrnoException) => {
      if (e.code !== 'EEXIST') throw e;
    });
    await fsp.writeFile(lease, String(process.pid), { flag: 'wx' });
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw e;
  }
  const release = () => fsp.rm(lease, { force: true });
  try {
    // No tombstone, and the lease still in place (not moved aside with a generation being deleted).
    if (!(await exists(join(genDir, '.retired'))) && (await exists(lease))) return release;
  } catch (e) {
    await release();
    throw e;
  }
  await release();
  return undefined;
}

function alive(pid: number): boolean {
  if (pid === process.pid) return true;
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Tombstone a generation, then delete it if no live reader holds a lease. Returns true when deleted. */
export async function retireGeneration(genDir: string): Promise<boolean> {
  try {
    await fsp.writeFile(join(genDir, '.retired'), '');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return true;
    throw e;
  }
  let leases: string[] = [];
  try {
    leases = await fsp.readdir(join(genDir, '.leases'));
  } catch {
    // no lease dir: nobody ever read it
  }
  for (const l of leases) {
    const pid = Number(l.split('-')[0]);
    if (Number.isInteger(pid) && alive(pid)) return false;
  }
  const trash = join(dirname(genDir), `${TRASH_PREFIX}${basename(genDir)}-${process.pid}-${randomBytes(4).toString('hex')}`);
  try {
    await fsp.rename(genDir, trash);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return true; // another deleter moved it first
    throw e;
  }
  await fsp.rm(trash, { recursive: true, force: true });
  return true;
}
