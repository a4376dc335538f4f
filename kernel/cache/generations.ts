/**
 * Generations and reader leases. A reader leases the generation it reads; a
 * writer that replaced a generation (retention, compaction) tombstones it and
 * deletes it only when no live lease remains. The lease/tombstone pair is a
 * two-flag handshake: a reader creates its lease, then looks for the tombstone;
 * the deleter writes the tombstone, then looks for leases — one of them always
 * sees the other.
 * @ref LLP 0004: generations, cursor swap and reader leases
 */
import { promises as fsp } from 'node:fs';
import { join } from 'node:path';

let leaseCounter = 0;

export const generationDir = (partitionDir: string, n: number) => join(partitionDir, `table-${n}`);

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
    await fsp.access(join(genDir, '.retired'));
    await release();
    return undefined;
  } catch {
    return release;
  }
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
  await fsp.rm(genDir, { recursive: true, force: true });
  return true;
}
