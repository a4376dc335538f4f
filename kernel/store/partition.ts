/**
 * One logical partition: `datasets/<dataset>/source=<source>/`. It is the
 * identity every watermark is keyed by; its generations `table-<n>/` come and
 * go under it. `cursor.json` names the current generation.
 */
import { promises as fsp } from 'node:fs';
import { join } from 'node:path';
import { HypsinkError } from '../../types/errors.js';
import type { PartitionRef } from '../../types/storage.js';
import { fault } from '../fault.js';
import { readJsonFile, writeJsonAtomic } from '../io/durable.js';
import { generationDir, retireGeneration, TRASH_PREFIX, takeLease } from './generations.js';
import { type Cursor, checkCursor, emptyManifest, type Manifest, readManifest, writeManifest } from './manifest.js';
import { encodeSegment } from './segments.js';
import { mkdirs } from '../io/mkdirs.js';

export function partitionRef(dataset: string, source: string): PartitionRef {
  const ds = encodeSegment(dataset);
  const src = encodeSegment(source);
  return { dataset, source, path: `datasets/${ds}/source=${src}`, key: `${ds}/source=${src}` };
}

/** The writer lock, as a commit point sees it: throws once the lock is no longer provably held. */
export interface CommitGuard {
  assertHeld(what: string): Promise<void>;
}

export interface Snapshot {
  readonly generation: number;
  readonly dir: string;
  readonly manifest: Manifest;
  release(): Promise<void>;
}

export class PartitionStore {
  readonly dir: string;

  constructor(
    readonly root: string,
    readonly ref: PartitionRef,
    /** For a writer: proves the cache's writer lock is still ours right before a commit point. */
    readonly writer?: CommitGuard,
  ) {
    this.dir = join(root, ref.path);
  }

  get cursorPath(): string {
    return join(this.dir, 'cursor.json');
  }

  manifestPath(generation: number): string {
    return join(generationDir(this.dir, generation), 'manifest.json');
  }

  async readCursor(): Promise<Cursor | undefined> {
    return readJsonFile<Cursor>(this.cursorPath, checkCursor, 'partition cursor');
  }

  /** Create the partition if it does not exist. Writer-side (lock held). */
  async ensure(): Promise<Cursor> {
    const cur = await this.readCursor();
    if (cur) return cur;
    await mkdirs(generationDir(this.dir, 0));
    await writeJsonAtomic(join(this.dir, 'partition.json'), { v: 1, dataset: this.ref.dataset, source: this.ref.source });
    await writeManifest(this.manifestPath(0), emptyManifest(0));
    const cursor: Cursor = { v: 1, generation: 0 };
    await writeJsonAtomic(this.cursorPath, cursor);
    fault('partition.afterCursor');
    return cursor;
  }

  /** The current manifest, for a writer holding the partition's commit section. */
  async current(): Promise<{ generation: number; manifest: Manifest }> {
    const cur = await this.ensure();
    return { generation: cur.generation, manifest: await readManifest(this.manifestPath(cur.generation)) };
  }

  /** A leased, consistent view for a reader. An absent partition reads as empty. */
  async snapshot(): Promise<Snapshot> {
    for (let attempt = 0; attempt < 100; attempt++) {
      const cur = await this.readCursor();
      if (!cur) {
        return { generation: -1, dir: '', manifest: emptyManifest(-1), release: async () => undefined };
      }
      const dir = generationDir(this.dir, cur.generation);
      const release = await takeLease(dir);
      if (!release) {
        // Swapped and retired under us: read the new cursor. A cursor that still names
        // it is damage (generations are retired only after the cursor moved past them).
        if ((await this.readCursor())?.generation !== cur.generation) continue;
        throw new HypsinkError(
          'HYPSINK_ERR_CORRUPT',
          `partition ${this.dir}: cursor.json names generation ${cur.generation}, but ${dir} is missing or retired`,
        );
      }
      try {
        return { generation: cur.generation, dir, manifest: await readManifest(join(dir, 'manifest.json')), release };
      } catch (e) {
        await release();
        throw e;
      }
    }
    throw new HypsinkError('HYPSINK_ERR_INVARIANT', `partition ${this.dir}: the generation kept changing under the reader`);
  }

  /**
   * The current manifest without a lease, for facts that need no data file
   * (retention records, stats). A generation retired between reading the
   * cursor and its manifest is simply read again from the new cursor.
   */
  async peekManifest(): Promise<Manifest> {
    for (let attempt = 0; attempt < 100; attempt++) {
      const cur = await this.readCursor();
      if (!cur) return emptyManifest(-1);
      try {
        return await readManifest(this.manifestPath(cur.generation));
      } catch (e) {
        if ((await this.readCursor())?.generation === cur.generation) throw e;
      }
    }
    throw new HypsinkError('HYPSINK_ERR_INVARIANT', `partition ${this.dir}: the generation kept changing under the reader`);
  }

  /** Swap the cursor to a fully written generation, then retire the old one. Writer-side. */
  async swapTo(generation: number, before: 'compact' | 'retention'): Promise<void> {
    const old = (await this.readCursor())?.generation;
    fault(before === 'compact' ? 'compact.beforeCursorSwap' : 'retention.afterNewGeneration');
    await this.writer?.assertHeld(`swapping ${this.cursorPath} to generation ${generation}`);
    await writeJsonAtomic(this.cursorPath, { v: 1, generation } satisfies Cursor);
    fault(before === 'compact' ? 'compact.afterCursorSwap' : 'retention.afterCursorSwap');
    if (old !== undefined && old !== generation) await retireGeneration(generationDir(this.dir, old));
  }

  /**
   * Remove what a crash left: generations above the cursor (a rewrite that never
   * swapped in), below it (retired but still present once their readers left),
   * and generations a deleter moved aside but did not finish removing.
   */
  async sweep(): Promise<void> {
    const cur = await this.readCursor();
    if (!cur) return;
    for (const name of await fsp.readdir(this.dir)) {
      if (name.startsWith(TRASH_PREFIX)) {
        await fsp.rm(join(this.dir, name), { recursive: true, force: true });
        continue;
      }
      const m = /^table-(\d+)$/.exec(name);
      if (!m) continue;
      const n = Number(m[1]);
      if (n > cur.generation) await fsp.rm(join(this.dir, name), { recursive: true, force: true });
      else if (n < cur.generation) await retireGeneration(join(this.dir, name));
    }
  }

  /** Data files in the current generation that no manifest lists (a crash between file and manifest). */
  async removeOrphans(generation: number, manifest: Manifest): Promise<void> {
    const listed = new Set(manifest.files.map((f) => f.name));
    const dir = generationDir(this.dir, generation);
    for (const name of await fsp.readdir(dir)) {
      if (name.endsWith('.parquet') && !listed.has(name)) await fsp.rm(join(dir, name), { force: true });
    }
  }
}
