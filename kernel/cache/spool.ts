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
import { decodeFrameLine, type Frame } from './frames.js';
import { encodeSegment } from './segments.js';

export interface SpoolRef {
  readonly dataset: string;
  readonly id: string;
}

export interface SealedSegment {
  readonly n: number;
  readonly path: string;
}

const SEG = /^seg-(\d+)\.ndjson$/;

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
    await fsp.mkdir(this.dir, { recursive: true });
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

  /** Seal the current file (if it has frames) and list sealed segments in order. */
  async seal(): Promise<SealedSegment[]> {
    try {
      await fsp.access(this.dir);
    } catch {
      return [];
    }
    return this.serial.run('', () =>
      this.lock.with('seal', async () => {
        await this.sealLocked();
        return this.sealed();
      }),
    );
  }

  private async sealLocked(): Promise<SealedSegment | null> {
    const size = await cutTornTail(this.currentPath);
    if (size === 0) return null;
    const metaPath = join(this.dir, 'meta.json');
    const meta = await readJsonFile<{ v: 1; nextSegment: number }>(
      metaPath,
      (v) => (Number.isInteger((v as { nextSegment?: unknown })?.nextSegment) ? null : 'expected {"nextSegment":<n>}'),
      'spool meta',
    );
    // Never reuse a number, even past the highest segment on disk: manifests remember them.
    const onDisk = (await this.sealed()).map((s) => s.n);
    const n = Math.max(meta?.nextSegment ?? 0, ...onDisk.map((x) => x + 1));
    await writeJsonAtomic(metaPath, { v: 1, nextSegment: n + 1 });
    const path = join(this.dir, `seg-${n}.ndjson`);
    await fsp.rename(this.currentPath, path);
    await fsyncDir(this.dir);
    fault('spool.afterSeal');
    return { n, path };
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
