/**
 * Spools: the durable landing place for host rows before a flush. Each append
 * writes one frame (frames.ts) as a line and fsyncs it, so an append is atomic:
 * a frame torn by a crash was never acknowledged and is cut off.
 * A flush seals `current.ndjson` into an immutable `seg-<n>.ndjson` (n only
 * grows) and commits the sealed segments; the segment number is what each
 * partition's manifest records as consumed.
 * @ref LLP 0002: exactly-once flush
 */
import { promises as fsp } from 'node:fs';
import { join } from 'node:path';
import { HypsinkError } from '../../types/errors.js';
import { fault } from '../fault.js';
import { fsyncDir, readJsonFile, syncFile, writeJsonAtomic } from '../io/durable.js';
import { ProcessLock } from '../io/lock.js';
import { KeyedMutex } from '../mutex.js';
import { type BatchMark, checkBatchMark, decodeFrameLine, type Frame, frameHeader } from './frames.js';
import { encodeSegment } from '../store/segments.js';
import { mkdirs } from '../io/mkdirs.js';

export interface SpoolRef {
  readonly dataset: string;
  readonly id: string;
}

export interface SealedSegment {
  readonly n: number;
  readonly path: string;
}

const SEG = /^seg-(\d+)\.ndjson$/;

interface SpoolMeta {
  v: 1;
  nextSegment: number;
  /** The batch mark of the last frame sealed: how far the batch is durable, whatever was flushed since. */
  progress?: BatchMark;
}

function checkMeta(v: unknown): string | null {
  const m = v as SpoolMeta;
  if (!Number.isInteger(m?.nextSegment)) return 'expected {"nextSegment":<n>}';
  return m.progress === undefined ? null : checkBatchMark(m.progress);
}

/** The further of two marks (an end mark is as far as a batch goes). */
const further = (a: BatchMark | null, b: BatchMark | null | undefined): BatchMark | null =>
  !b ? a : !a || b.end || (!a.end && b.lines > a.lines) ? b : a;

export class Spool {
  readonly dir: string;
  readonly key: string;
  private readonly lock: ProcessLock;
  /**
   * The process lock is shared within a process, so appends and seals of this
   * spool by one process are ordered here: a frame written into the file after a
   * seal renamed it, and after the flush read it, would be deleted unflushed.
   */
  private readonly serial = new KeyedMutex();

  constructor(
    spoolsRoot: string,
    readonly ref: SpoolRef,
    lockWaitMs: number,
  ) {
    this.key = `${encodeSegment(ref.dataset)}/${encodeSegment(ref.id)}`;
    this.dir = join(spoolsRoot, this.key);
    this.lock = new ProcessLock(this.dir, `spool ${this.dir}`, { waitMs: lockWaitMs });
  }

  private get currentPath(): string {
    return join(this.dir, 'current.ndjson');
  }

  /**
   * Append one frame (its line, encodeFrameLine) durably. The current file is
   * sealed after it when it has grown past `maxBytes`, or when `seal` asks for
   * it; the segment sealed is returned.
   */
  async append(line: Uint8Array, maxBytes: number, seal = false): Promise<SealedSegment | null> {
    await mkdirs(this.dir);
    return this.serial.run('', () => this.lock.with('append', async () => {
      const size = await cutTornTail(this.currentPath);
      const fh = await fsp.open(this.currentPath, 'a');
      try {
        await fh.write(line);
        await syncFile(fh);
      } finally {
        await fh.close();
      }
      if (size === 0) await fsyncDir(this.dir);
      fault('spool.afterAppend');
      return seal || size + line.byteLength >= maxBytes ? this.sealLocked() : null;
    }));
  }

  /**
   * Seal the current file (if it has frames) and list sealed segments in order.
   * With `skipBusy`, null at once when another process holds the spool (an
   * ingest writing it, which flushes it itself).
   */
  seal(skipBusy?: false): Promise<SealedSegment[]>;
  seal(skipBusy: boolean): Promise<SealedSegment[] | null>;
  async seal(skipBusy = false): Promise<SealedSegment[] | null> {
    try {
      await fsp.access(this.dir);
    } catch {
      return [];
    }
    const work = async () => {
      await this.sealLocked();
      return this.sealed();
    };
    return this.serial.run('', async () => {
      if (!skipBusy) return this.lock.with('seal', work);
      const r = await this.lock.tryWith('seal', work);
      return r.ran ? r.value : null;
    });
  }

  private get metaPath(): string {
    return join(this.dir, 'meta.json');
  }

  private readMeta(): Promise<SpoolMeta | undefined> {
    return readJsonFile<SpoolMeta>(this.metaPath, checkMeta, 'spool meta');
  }

  private async sealLocked(): Promise<SealedSegment | null> {
    const size = await cutTornTail(this.currentPath);
    if (size === 0) return null;
    const meta = await this.readMeta();
    // Never reuse a number, even past the highest segment on disk: manifests remember them.
    const onDisk = (await this.sealed()).map((s) => s.n);
    const n = Math.max(meta?.nextSegment ?? 0, ...onDisk.map((x) => x + 1));
    // The batch's progress outlives the segment (deleted once flushed): it rides in the meta.
    const progress = further(meta?.progress ?? null, await lastMark(this.currentPath, size));
    await writeJsonAtomic(this.metaPath, { v: 1, nextSegment: n + 1, ...(progress ? { progress } : {}) } satisfies SpoolMeta);
    const path = join(this.dir, `seg-${n}.ndjson`);
    await fsp.rename(this.currentPath, path);
    await fsyncDir(this.dir);
    fault('spool.afterSeal');
    return { n, path };
  }

  /**
   * How far this spool's batch is durable: the furthest batch mark of its sealed
   * frames (kept in the meta) and of the frames in its current file. Caller
   * holds the spool's lock, so no seal moves frames meanwhile.
   */
  async progress(): Promise<BatchMark | null> {
    let mark = (await this.readMeta())?.progress ?? null;
    let bytes: Buffer;
    try {
      bytes = await fsp.readFile(this.currentPath);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return mark;
      throw e;
    }
    for (let start = 0; start < bytes.length; ) {
      const end = bytes.indexOf(0x0a, start);
      if (end < 0) break; // a torn tail was never acknowledged
      mark = further(mark, frameHeader(bytes.subarray(start, end))?.batch);
      start = end + 1;
    }
    return mark;
  }

  /** Frames wait in the current file (sealed or not, they are not yet flushed). */
  async hasCurrent(): Promise<boolean> {
    try {
      return (await fsp.stat(this.currentPath)).size > 0;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return false;
      throw e;
    }
  }

  /** The spool's lock, for a caller that must hold it across several steps (a batch's ingest). */
  get processLock(): ProcessLock {
    return this.lock;
  }

  async sealed(): Promise<SealedSegment[]> {
    let names: string[];
    try {
      names = await fsp.readdir(this.dir);
    } catch {
      return [];
    }
    return names
      .flatMap((name) => {
        const m = SEG.exec(name);
        return m ? [{ n: Number(m[1]), path: join(this.dir, name) }] : [];
      })
      .sort((a, b) => a.n - b.n);
  }
}

/** The batch mark in the header of the last frame of a file whose size is `size` (it ends in a newline). */
async function lastMark(path: string, size: number): Promise<BatchMark | null> {
  const fh = await fsp.open(path, 'r');
  try {
    // Back from the end for the newline before the last frame, a chunk at a time.
    let start = 0;
    for (let end = size - 1; end > 0; ) {
      const from = Math.max(0, end - (1 << 16));
      const buf = Buffer.alloc(end - from);
      await fh.read(buf, 0, buf.length, from);
      const nl = buf.lastIndexOf(0x0a);
      if (nl >= 0) {
        start = from + nl + 1;
        break;
      }
      end = from;
    }
    const line = Buffer.alloc(size - 1 - start);
    await fh.read(line, 0, line.length, start);
    return frameHeader(line)?.batch ?? null;
  } finally {
    await fh.close();
  }
}

/** Size of the file after cutting a torn (newline-less) last frame; 0 if absent. */
async function cutTornTail(path: string): Promise<number> {
  let fh: fsp.FileHandle;
  try {
    fh = await fsp.open(path, 'r+');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return 0;
    throw e;
  }
  try {
    const { size } = await fh.stat();
    if (size === 0) return 0;
    const last = Buffer.alloc(1);
    await fh.read(last, 0, 1, size - 1);
    if (last[0] === 0x0a) return size;
    // Scan back for the last complete frame.
    const chunk = 1 << 16;
    let end = size;
    while (end > 0) {
      const start = Math.max(0, end - chunk);
      const buf = Buffer.alloc(end - start);
      await fh.read(buf, 0, buf.length, start);
      const nl = buf.lastIndexOf(0x0a);
      if (nl >= 0) {
        await fh.truncate(start + nl + 1);
        await syncFile(fh);
        return start + nl + 1;
      }
      end = start;
    }
    await fh.truncate(0);
    await syncFile(fh);
    return 0;
  } finally {
    await fh.close();
  }
}

/**
 * Parse a sealed segment. Sealing cuts a torn tail first, so a sealed segment ends
 * with a complete frame: any damage, a cut-short end included, is an error.
 */
export async function readSegment(path: string): Promise<Frame[]> {
  const bytes = await fsp.readFile(path);
  if (bytes.length > 0 && bytes[bytes.length - 1] !== 0x0a) {
    throw new HypsinkError('HYPSINK_ERR_CORRUPT', `spool segment ${path} is cut short (its last frame has no end)`);
  }
  const frames: Frame[] = [];
  for (let start = 0, n = 1; start < bytes.length; n++) {
    const end = bytes.indexOf(0x0a, start);
    const line = bytes.subarray(start, end);
    start = end + 1;
    if (line.length === 0) continue;
    const frame = decodeFrameLine(line);
    if (typeof frame === 'string') throw new HypsinkError('HYPSINK_ERR_CORRUPT', `spool segment ${path} line ${n}: ${frame}`);
    frames.push(frame);
  }
  return frames;
}
