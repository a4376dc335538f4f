/**
 * Reading local-fs's tree back for `hypsink verify`: every committed blob under
 * a key prefix, found with `lstat` alone (no link is followed, not even to
 * list it), local-fs's own temp dir left out; and a byte range of one blob,
 * opened without following a link.
 * @ref LLP 0028: local-fs never follows links it did not make
 * @ref LLP 0037: what verify reads back
 */
import { constants, type Dirent, promises as fsp } from 'node:fs';
import { join } from 'node:path';
import type { ListedBlob } from 'hypsink/plugin';
import { kindOf, linkTarget, lstatOrNull, O_NOFOLLOW, treeError } from './tree.js';

/** O_NONBLOCK: a FIFO at a key must not hang the open. */
const READ = constants.O_RDONLY | O_NOFOLLOW | (constants.O_NONBLOCK ?? 0);

/**
 * Every regular file under `root` whose key (its path below `root`, '/'-separated)
 * starts with `prefix`. The folders of the prefix must be real folders (a link
 * there is refused, naming it); below them, links and other non-files are not
 * blobs and are passed over. `skip` (the temp dir) is never entered.
 */
export async function* listBlobs(sink: string, root: string, prefix: string, skip: string, signal: AbortSignal): AsyncGenerator<ListedBlob> {
  const cut = prefix.lastIndexOf('/');
  const folders = cut < 0 ? [] : prefix.slice(0, cut).split('/').filter((s) => s !== '');
  const namePrefix = prefix.slice(cut + 1);
  let dir = root;
  for (const seg of folders) {
    dir = join(dir, seg);
    const st = await lstatOrNull(dir);
    if (st === null) return;
    if (st.isSymbolicLink()) {
      throw treeError(sink, `${dir} is a symbolic link${await linkTarget(dir)}; local-fs never follows links it did not make, so what is behind it cannot be verified: remove the link`);
    }
    if (!st.isDirectory()) throw treeError(sink, `${dir} is ${kindOf(st)}, not a folder: no blob of this partition can be there; move it aside`);
  }
  const rel = folders.length ? `${folders.join('/')}/` : '';
  yield* walk(join(root, ...folders), rel, namePrefix, folders.length === 0 ? skip : undefined, signal);
}

async function* walk(dir: string, rel: string, namePrefix: string, skip: string | undefined, signal: AbortSignal): AsyncGenerator<ListedBlob> {
  let ents: Dirent[];
  try {
    ents = await fsp.readdir(dir, { withFileTypes: true });
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return;
    throw e;
  }
  ents.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  for (const ent of ents) {
    if (signal.aborted) throw signal.reason;
    if (!ent.name.startsWith(namePrefix) || ent.name === skip) continue;
    const path = join(dir, ent.name);
    // readdir's types are lstat's: a link is a link here, never what it points to.
    if (ent.isDirectory()) yield* walk(path, `${rel}${ent.name}/`, '', undefined, signal);
    else if (ent.isFile()) {
      const st = await lstatOrNull(path);
      if (st?.isFile()) yield { key: `${rel}${ent.name}`, bytes: st.size, modifiedMs: st.mtimeMs };
    }
  }
}

/** Bytes `[offset, offset + length)` of the regular file at `path`, opened without following a link. */
export async function readRange(path: string, offset: number, length: number): Promise<Uint8Array> {
  const fh = await fsp.open(path, READ);
  try {
    const st = await fh.stat();
    if (!st.isFile()) throw Object.assign(new Error(`${path} is ${kindOf(st)}, not a regular file`), { code: 'EISDIR' });
    const n = Math.max(0, Math.min(length, st.size - offset));
    const buf = Buffer.alloc(n);
    let got = 0;
    while (got < n) {
      const { bytesRead } = await fh.read(buf, got, n - got, offset + got);
      if (bytesRead === 0) break;
      got += bytesRead;
    }
    return buf.subarray(0, got);
  } finally {
    await fh.close();
  }
}
