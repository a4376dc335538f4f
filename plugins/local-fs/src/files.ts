/**
 * local-fs's own files: temp files it writes (and only those it sweeps), the
 * digest of what it writes or finds, and its commit records.
 * @ref LLP 0028: local-fs never follows links it did not make, never deletes what it did not write
 */
import { createHash, randomBytes } from 'node:crypto';
import { constants, promises as fsp } from 'node:fs';
import { join } from 'node:path';
import type { BlobBody, HypsinkError } from 'hypsink/plugin';
import { fsyncDir, O_NOFOLLOW } from './tree.js';

/** Exactly the names local-fs gives its temp files: `<pid>-<12 hex>.part`. */
const TEMP_NAME = /^([1-9][0-9]{0,9})-[0-9a-f]{12}\.part$/;
/** A new file, never an existing one, never through a link. */
const CREATE = constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | O_NOFOLLOW;
/** O_NONBLOCK: a FIFO swapped in after its check must not hang the open. */
const READ = constants.O_RDONLY | O_NOFOLLOW | (constants.O_NONBLOCK ?? 0);
/** A commit record is a few hundred bytes; anything much bigger is not one. */
const MAX_RECORD = 64 * 1024;

export function tempName(): string {
  return `${process.pid}-${randomBytes(6).toString('hex')}.part`;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * Remove temp files of dead writers (a crash between write and link) from
 * `tmpDir`, a real folder the caller checked. Only entries named exactly as
 * local-fs names its temps, that are regular files, of a pid not running: any
 * other entry (the `commits` folder, someone's file, a link) is kept.
 */
export async function sweepTemps(tmpDir: string): Promise<void> {
  let names: string[];
  try {
    names = await fsp.readdir(tmpDir);
  } catch {
    return;
  }
  for (const n of names) {
    const m = TEMP_NAME.exec(n);
    if (!m || alive(Number(m[1]))) continue;
    const path = join(tmpDir, n);
    const st = await fsp.lstat(path).catch(() => null);
    if (!st?.isFile()) continue;
    await fsp.unlink(path).catch(() => undefined);
  }
}

export interface Digest {
  readonly size: number;
  readonly sha256: string;
}

/** Write `body` to a new file at `path` (never through a link), fsynced, and return its size and digest. */
export async function writeNew(path: string, body: BlobBody, signal: AbortSignal | undefined, aborted: () => HypsinkError): Promise<Digest> {
  const hash = createHash('sha256');
  let size = 0;
  const fh = await fsp.open(path, CREATE, 0o666);
  try {
    for await (const chunk of body) {
      if (signal?.aborted) throw aborted();
      await fh.write(chunk);
      hash.update(chunk);
      size += chunk.byteLength;
    }
    await fh.sync();
  } finally {
    await fh.close();
  }
  return { size, sha256: hash.digest('hex') };
}

/** The size and digest of a body, consumed without being stored. */
export async function digestBody(body: BlobBody, signal: AbortSignal | undefined, aborted: () => HypsinkError): Promise<Digest> {
  const hash = createHash('sha256');
  let size = 0;
  for await (const chunk of body) {
    if (signal?.aborted) throw aborted();
    hash.update(chunk);
    size += chunk.byteLength;
  }
  return { size, sha256: hash.digest('hex') };
}

/**
 * The size and digest of the regular file at `path`, opened without following
 * a link; null if what is there now is not a regular file (swapped since it was checked).
 */
export async function digestFile(path: string): Promise<Digest | null> {
  const fh = await fsp.open(path, READ);
  try {
    const st = await fh.stat();
    if (!st.isFile()) return null;
    const hash = createHash('sha256');
    let size = 0;
    for await (const chunk of fh.createReadStream({ autoClose: false })) {
      hash.update(chunk as Buffer);
      size += (chunk as Buffer).byteLength;
    }
    return { size, sha256: hash.digest('hex') };
  } finally {
    await fh.close();
  }
}

/**
 * local-fs's commit record of a blob: its key, size and sha256, and the unit
 * digest the kernel gave its put. Written durably before the link, so a retry
 * that finds the key knows the file for its own even when the unit would now
 * encode to other bytes (compaction changed the batch boundaries), and knows
 * which unit it holds: the same key with another digest is other rows under
 * this unit's name (a copied or restored cache), which the kernel refuses.
 * `digest` is absent from records written before digests (and from puts given
 * none): such a key is taken by its name and bytes, as before.
 * @ref LLP 0054, LLP 0057
 */
export interface CommitRecord extends Digest {
  readonly v: 1;
  readonly key: string;
  readonly digest?: string;
}

/**
 * One record per key: `<commitsDir>/unit-<sha256 of the key>.json`, so every
 * blob's digest stays known, not only the last one linked in its folder.
 */
export function recordPath(commitsDir: string, key: string): string {
  return join(commitsDir, `unit-${createHash('sha256').update(key).digest('hex')}.json`);
}

/**
 * Where local-fs before LLP 0057 kept one record per partition folder (the last
 * key it linked there, without a digest): `<commitsDir>/<sha256 of the folder's
 * path relative to the root, with '/'>.json`. Still read, never written.
 */
export function folderRecordPath(commitsDir: string, relDir: string): string {
  return join(commitsDir, `${createHash('sha256').update(relDir).digest('hex')}.json`);
}

/** A unit digest as the kernel writes them (`u1-` and base64url), or a later scheme's: a short printable tag. */
const DIGEST = /^[a-z0-9]{1,8}-[A-Za-z0-9_-]{1,128}$/;

/** The record at `path`, or null when there is none or it is not one of ours (then the caller reads back). */
export async function readRecord(path: string): Promise<CommitRecord | null> {
  let text: string;
  try {
    const fh = await fsp.open(path, READ);
    try {
      const st = await fh.stat();
      if (!st.isFile() || st.size > MAX_RECORD) return null;
      text = await fh.readFile('utf8');
    } finally {
      await fh.close();
    }
  } catch {
    return null;
  }
  try {
    const r = JSON.parse(text) as Partial<CommitRecord>;
    if (r.v === 1 && typeof r.key === 'string' && Number.isSafeInteger(r.size) && typeof r.sha256 === 'string' && /^[0-9a-f]{64}$/.test(r.sha256)) {
      // A digest that is not one is no digest: the key is then taken by its bytes alone.
      const digest = typeof r.digest === 'string' && DIGEST.test(r.digest) ? { digest: r.digest } : {};
      return { v: 1, key: r.key, size: r.size!, sha256: r.sha256, ...digest };
    }
  } catch {
    // not JSON: not a record of ours
  }
  return null;
}

/**
 * Replace the record at `path` atomically and durably: a new temp file in
 * `tmpDir` (named like every temp, so a crash leaves only what the sweep
 * removes), fsync, rename over the record, fsync the records folder.
 */
export async function writeRecord(tmpDir: string, commitsDir: string, path: string, rec: CommitRecord): Promise<void> {
  const temp = join(tmpDir, tempName());
  try {
    const fh = await fsp.open(temp, CREATE, 0o666);
    try {
      await fh.writeFile(`${JSON.stringify(rec)}\n`);
      await fh.sync();
    } finally {
      await fh.close();
    }
    await fsp.rename(temp, path);
  } catch (e) {
    await fsp.unlink(temp).catch(() => undefined);
    throw e;
  }
  await fsyncDir(commitsDir);
}
