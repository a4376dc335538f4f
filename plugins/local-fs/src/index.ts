/**
 * `@hypsink/local-fs`: blobs as files under `config.dir`. A put writes a temp
 * file (hashing it as it streams), fsyncs it, durably records the key with the
 * blob's size and sha256 and the unit's digest in the key's commit record, then
 * links it under its key: create-if-absent, a link onto an existing name fails,
 * so a committed file is never overwritten.
 *
 * An existing entry at the key counts as a unit committed before only when it
 * is a regular file and its contents are the unit's: its size and sha256 are
 * the commit record's for this key (which then says which unit it holds: its
 * digest goes back to the kernel, which refuses another unit's), or, without
 * such a record, equal to the body given now. Anything else (a link, dangling
 * or not, a folder, someone else's file) is an error naming the path. No link
 * is followed inside the root, and the temp sweep removes only local-fs's own
 * temp files.
 * @ref LLP 0005: write-ahead intent (a retried unit finds its file and stops)
 * @ref LLP 0028: local-fs never follows links it did not make
 * @ref LLP 0054, LLP 0057: a unit is known by its digest, recorded with its blob
 */
import { promises as fsp } from 'node:fs';
import { dirname, isAbsolute, join, relative, resolve, sep } from 'node:path';
import { pathToFileURL } from 'node:url';
import { z } from 'zod';
import {
  accessError,
  type BlobBody,
  type BlobDestination,
  HypsinkError,
  isHypsinkError,
  type ListedBlob,
  type PluginContext,
  type PluginOptionsSpec,
  type PutOptions,
  type PutResult,
  parseSinkConfig,
  type SinkBuildContext,
} from 'hypsink/plugin';
import { checkFolder } from './check.js';
import { type CommitRecord, type Digest, digestBody, digestFile, folderRecordPath, readRecord, recordPath, sweepTemps, tempName, writeNew, writeRecord } from './files.js';
import { listBlobs, readRange } from './readback.js';
import { checkRoot, ensureFolders, existingFolders, fsyncDir, kindOf, lstatOrNull, linkTarget, rootPresent, treeError } from './tree.js';

const configSchema = z
  .object({
    dir: z.string().min(1),
    /** Links in the path of `dir` itself (the dir and its ancestors) are followed. Never inside it. */
    followRootLinks: z.boolean().optional(),
  })
  .strict();
/** The sink's `config`, declared so the host checks it before `create`. @ref LLP 0032 */
export const LOCAL_FS_OPTIONS: PluginOptionsSpec = { keys: Object.keys(configSchema.shape), validate: configSchema['~standard'].validate };
const TMP = '.hypsink-tmp';
/** Inside TMP: one commit record per key (and, from before LLP 0057, one per partition folder). */
const COMMITS = 'commits';

class LocalFsDestination implements BlobDestination {
  /** The root's path checked, the temp dir made real and swept: once per destination, retried after a failure. */
  private ready: Promise<void> | undefined;

  constructor(
    private readonly root: string,
    private readonly followRootLinks: boolean,
    private readonly build: SinkBuildContext,
  ) {}

  describe(key: string): string {
    return join(this.root, key);
  }

  locate(key: string): string {
    return pathToFileURL(this.target(key)).href;
  }

  get destination(): string {
    return `local-fs ${this.root}`;
  }

  private get sink(): string {
    return this.build.sink;
  }

  private target(key: string): string {
    const path = resolve(this.root, key);
    const rel = relative(this.root, path);
    if (rel === '' || rel.startsWith('..') || isAbsolute(rel) || rel.split(/[\\/]/)[0] === TMP) {
      throw new HypsinkError('HYPSINK_ERR_INVARIANT', `sink "${this.sink}": key ${key} escapes ${this.root}`);
    }
    return path;
  }

  private prepare(): Promise<void> {
    this.ready ??= (async () => {
      await checkRoot(this.sink, this.root, this.followRootLinks);
      // Sweep first: a writer that died after linking left its temp behind, and the retry of
      // that unit finds the key and returns early, so a later sweep might never come.
      await sweepTemps(await ensureFolders(this.sink, this.root, TMP));
    })().catch((e: unknown) => {
      this.ready = undefined;
      throw e;
    });
    return this.ready;
  }

  /**
   * Whether the folders down to `path` (a target inside the root) are all
   * there, checked as a write checks them but making nothing: the root's
   * path, then every folder below it with `lstat`. A link or anything but a
   * folder on the way is refused, so no read or remove passes a link (a key
   * may come from a file someone else wrote: an Iceberg manifest).
   * @ref LLP 0028, LLP 0063
   */
  private async reachable(path: string): Promise<boolean> {
    if (!(await rootPresent(this.sink, this.root, this.followRootLinks))) return false;
    return existingFolders(this.sink, this.root, relative(this.root, dirname(path)));
  }

  async putIfAbsent(key: string, body: BlobBody, opts: PutOptions): Promise<PutResult> {
    const final = this.target(key);
    try {
      await this.prepare();
      // Checked at every put: a link made since the first one is refused too.
      const tmpDir = await ensureFolders(this.sink, this.root, TMP);
      const commitsDir = await ensureFolders(this.sink, this.root, `${TMP}/${COMMITS}`);
      const relDir = relative(this.root, dirname(final)).split(sep).join('/');
      const records = { commitsDir, relDir };
      // Every folder down to the key's is checked (and made) before the key itself is looked at.
      await ensureFolders(this.sink, this.root, relDir);
      if (await lstatOrNull(final)) return await this.existing(key, final, records, { body, signal: opts.signal }, opts.exclusive === true);
      const temp = join(tmpDir, tempName());
      try {
        const written = await writeNew(temp, body, opts.signal, () => this.aborted(final));
        this.build.fault?.('localfs.afterTemp');
        // An exclusive put's record would never be read: a key found taken is answered unread, and it
        // carries no digest for verify. Two fsyncs and a rename fewer for each Iceberg commit's three. @ref LLP 0095
        if (!opts.exclusive || opts.digest !== undefined) {
          await writeRecord(tmpDir, commitsDir, recordPath(commitsDir, key), { v: 1, key, ...written, ...(opts.digest === undefined ? {} : { digest: opts.digest }) });
          this.build.fault?.('localfs.afterRecord');
        }
        try {
          await fsp.link(temp, final);
        } catch (e) {
          // Something appeared at the key since it was checked: ours only if it holds these very bytes.
          if ((e as NodeJS.ErrnoException).code === 'EEXIST') return await this.existing(key, final, records, { written }, opts.exclusive === true);
          throw e;
        }
        await fsyncDir(dirname(final));
        this.build.fault?.('localfs.afterLink');
        return { created: true, bytes: written.size };
      } finally {
        await fsp.unlink(temp).catch(() => undefined);
      }
    } catch (e) {
      throw isHypsinkError(e) ? e : this.fsError(e, final);
    }
  }

  /**
   * An entry is at the key. It is a unit committed before only when it is a
   * regular file with a unit's contents: the size and sha256 this key's commit
   * record holds (its digest then goes back to the kernel, which refuses the
   * put when it is another unit's), or else (a file from before commit
   * records, or not ours) those of the body. Anything else is refused, naming
   * the path. `exclusive`: any regular file there answers "not created", unread.
   */
  private async existing(
    key: string,
    final: string,
    records: { commitsDir: string; relDir: string },
    unit: { body: BlobBody; signal: AbortSignal } | { written: Digest },
    exclusive: boolean,
  ): Promise<PutResult> {
    const st = await fsp.lstat(final);
    if (!st.isFile()) {
      const what = st.isSymbolicLink() ? `a symbolic link${await linkTarget(final)}` : kindOf(st);
      throw treeError(
        this.sink,
        `${final} is ${what}, where this unit's blob goes; local-fs never follows links it did not make and writes only regular files: remove it, then export again (the unit is written there then)`,
      );
    }
    if (exclusive) return { created: false, bytes: st.size };
    const found = await digestFile(final);
    if (found === null) throw treeError(this.sink, `${final} changed while it was read (it is no longer a regular file): remove what is there, then export again`);
    const rec = await this.recordOf(key, records.commitsDir, records.relDir);
    // The digest recorded with these very bytes; null: recorded before digests (taken by its name). @ref LLP 0054
    if (rec !== null && rec.size === found.size && rec.sha256 === found.sha256) return { created: false, bytes: found.size, digest: rec.digest ?? null };
    const mine = 'written' in unit ? unit.written : await digestBody(unit.body, unit.signal, () => this.aborted(final));
    // The unit's own bytes: this unit, whatever the record says.
    if (mine.size === found.size && mine.sha256 === found.sha256) return { created: false, bytes: found.size, digest: null };
    const sizes = mine.size === found.size ? `both ${found.size} bytes, other contents` : `${found.size} bytes there, the unit ${mine.size} bytes`;
    const why = rec !== null ? 'and it is not the file local-fs committed there (changed or replaced since)' : 'and local-fs has no record of committing it';
    throw treeError(
      this.sink,
      `${final} exists but is not this unit's blob (${sizes}), ${why}; local-fs never overwrites a file: move it aside, then export again to write the unit there`,
    );
  }

  /**
   * The commit record of `key`: its own, or else the one its folder kept before
   * LLP 0057 when that names this key; null when neither does.
   */
  private async recordOf(key: string, commitsDir: string, relDir: string): Promise<CommitRecord | null> {
    const own = await readRecord(recordPath(commitsDir, key));
    if (own?.key === key) return own;
    const folder = await readRecord(folderRecordPath(commitsDir, relDir));
    return folder?.key === key ? folder : null;
  }

  /**
   * The unit digest recorded with a committed blob, for verify; null when its
   * record has none (written before digests) or no longer describes the file
   * there (its size differs: replaced since). Read-only. @ref LLP 0054
   */
  async digestOf(key: string): Promise<string | null> {
    const final = this.target(key);
    try {
      if (!(await this.reachable(final))) return null;
      const st = await lstatOrNull(final);
      if (!st?.isFile()) return null;
      if (!(await existingFolders(this.sink, this.root, `${TMP}/${COMMITS}`))) return null;
      const relDir = relative(this.root, dirname(final)).split(sep).join('/');
      const rec = await this.recordOf(key, join(this.root, TMP, COMMITS), relDir);
      return rec?.digest !== undefined && rec.size === st.size ? rec.digest : null;
    } catch (e) {
      throw isHypsinkError(e) ? e : this.readError(e, final);
    }
  }

  private aborted(final: string): HypsinkError {
    return new HypsinkError('HYPSINK_ERR_ABORTED', `sink "${this.sink}": write of ${final} aborted by shutdown`);
  }

  private fsError(e: unknown, path: string): HypsinkError {
    // Permission or read-only: permanent, naming the path refused and the user (@ref LLP 0033).
    const denied = accessError(e, { context: `sink "${this.sink}": cannot write ${path}`, elsewhere: "set this sink's config.dir to a folder it may write" });
    if (denied) return denied;
    const code = (e as NodeJS.ErrnoException).code;
    // A full disk or a transient I/O error may clear; permissions and bad paths will not.
    const retryable = code === 'ENOSPC' || code === 'EIO' || code === 'EAGAIN' || code === 'EBUSY';
    // ELOOP: a component became a link between its check and its use (O_NOFOLLOW refused it).
    const why = code === 'ELOOP' ? ': a link appeared in its path; local-fs never follows links it did not make, remove it' : '';
    return new HypsinkError(
      retryable ? 'HYPSINK_ERR_RETRYABLE' : 'HYPSINK_ERR_DESTINATION',
      `sink "${this.sink}": cannot write ${path} (${code ?? (e as Error).message})${why}`,
      { cause: e, retryable },
    );
  }

  async close(): Promise<void> {}

  /** The connection check: the root is (or can be made) a folder this user may write; nothing made. @ref LLP 0036 */
  check(): Promise<string> {
    return checkFolder(this.sink, this.root, this.followRootLinks, TMP);
  }

  /** Committed blobs under `prefix`, by lstat alone, the temp dir left out (readback.ts). @ref LLP 0037 */
  async *list(prefix: string, opts: { signal: AbortSignal }): AsyncIterable<ListedBlob> {
    try {
      // Read-only: a root not there holds nothing (checkRoot would make it).
      if (!(await rootPresent(this.sink, this.root, this.followRootLinks))) return;
      yield* listBlobs(this.sink, this.root, prefix, TMP, opts.signal);
    } catch (e) {
      throw isHypsinkError(e) ? e : this.readError(e, join(this.root, prefix));
    }
  }

  /** A byte range of a committed blob, opened without following a link. @ref LLP 0037 */
  async read(key: string, range: { offset: number; length: number }): Promise<Uint8Array> {
    const path = this.target(key);
    try {
      // Missing folders: the open below fails with ENOENT, as for a missing file.
      await this.reachable(path);
      return await readRange(path, range.offset, range.length);
    } catch (e) {
      throw isHypsinkError(e) ? e : this.readError(e, path);
    }
  }

  /** A small blob whole, or null when nothing is at the key. @ref LLP 0051 */
  async get(key: string): Promise<Uint8Array | null> {
    const path = this.target(key);
    try {
      if (!(await this.reachable(path))) return null;
      return await readRange(path, 0, Number.MAX_SAFE_INTEGER);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw isHypsinkError(e) ? e : this.readError(e, path);
    }
  }

  /** A pointer replaced whole: written aside, fsynced, renamed over the key (a reader sees old or new). */
  async replace(key: string, bytes: Uint8Array, opts: { signal: AbortSignal }): Promise<void> {
    const final = this.target(key);
    try {
      await this.prepare();
      const tmpDir = await ensureFolders(this.sink, this.root, TMP);
      await ensureFolders(this.sink, this.root, relative(this.root, dirname(final)).split(sep).join('/'));
      const st = await lstatOrNull(final);
      if (st && !st.isFile()) throw treeError(this.sink, `${final} is ${kindOf(st)}, not a file local-fs wrote: remove it, then export again`);
      const temp = join(tmpDir, tempName());
      try {
        await writeNew(temp, (async function* () {
          yield bytes;
        })(), opts.signal, () => this.aborted(final));
        await fsp.rename(temp, final);
        await fsyncDir(dirname(final));
      } finally {
        await fsp.unlink(temp).catch(() => undefined);
      }
    } catch (e) {
      throw isHypsinkError(e) ? e : this.fsError(e, final);
    }
  }

  /**
   * A committed blob removed (table maintenance); only a regular file, never a
   * link or folder, and only where every folder on the way is a real one
   * (the key may come from a manifest someone else rewrote). @ref LLP 0063
   */
  async remove(key: string): Promise<void> {
    const final = this.target(key);
    try {
      if (!(await this.reachable(final))) return;
      const st = await lstatOrNull(final);
      if (st === null) return;
      if (!st.isFile()) throw treeError(this.sink, `${final} is ${kindOf(st)}, not a blob local-fs wrote; it is left as it is`);
      await fsp.unlink(final);
      await fsyncDir(dirname(final));
      // Its record goes with it: a later blob at the key is a new commit. Only through real folders, as every remove.
      if (await existingFolders(this.sink, this.root, `${TMP}/${COMMITS}`)) await fsp.unlink(recordPath(join(this.root, TMP, COMMITS), key)).catch(() => undefined);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return;
      throw isHypsinkError(e) ? e : this.fsError(e, final);
    }
  }

  private readError(e: unknown, path: string): HypsinkError {
    const code = (e as NodeJS.ErrnoException).code;
    const retryable = code === 'EIO' || code === 'EAGAIN' || code === 'EBUSY';
    return new HypsinkError(retryable ? 'HYPSINK_ERR_RETRYABLE' : 'HYPSINK_ERR_DESTINATION', `sink "${this.sink}": cannot read ${path} (${code ?? (e as Error).message})`, { cause: e, retryable });
  }
}

export default function activate(ctx: PluginContext): void {
  ctx.registerDestination({
    name: ctx.manifest.name,
    options: LOCAL_FS_OPTIONS,
    create(config, build) {
      const { dir, followRootLinks } = parseSinkConfig(configSchema, config, build.sink);
      return new LocalFsDestination(resolve(build.baseDir, dir), followRootLinks === true, build);
    },
  });
}
