/**
 * local-fs's connection check (`hypsink validate --connect`): config.dir is a
 * folder this user may write, or can be made in its nearest existing folder,
 * by the rules an export applies (no link in the root's path unless
 * followRootLinks, LLP 0028), and nothing is created to find out: no folder
 * is made, and a probe file is written only inside an existing `.hypsink-tmp`,
 * local-fs's own folder, then removed.
 * @ref LLP 0036: what each connection check proves
 */
import { constants, promises as fsp } from 'node:fs';
import { dirname, join, parse, sep } from 'node:path';
import { accessError, HypsinkError, runningAs } from 'hypsink/plugin';
import { tempName } from './files.js';
import { checkRootLevel, kindOf, linkTarget, lstatOrNull, O_NOFOLLOW, treeError } from './tree.js';

const AGAIN = 'then run "hypsink validate --connect" again';

export async function checkFolder(sink: string, root: string, followRootLinks: boolean, tmp: string): Promise<string> {
  const user = runningAs();
  // A permission is HYPSINK_ERR_ACCESS, worded as an export words it (@ref LLP 0033); anything else, the destination.
  const refused = (path: string, e: unknown, what: string) =>
    accessError(e, { context: `sink "${sink}": ${path} ${what}`, elsewhere: `set config.dir of sink "${sink}" to a folder it may write` }) ??
    new HypsinkError('HYPSINK_ERR_DESTINATION', `sink "${sink}": ${path} ${what} by ${user} (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`, {
      cause: e,
      hint: `Set config.dir of sink "${sink}" to a folder ${user} may write; ${AGAIN}.`,
    });

  // The root's path, component by component, as an export walks it, but creating nothing.
  const top = parse(root).root;
  let cur = top;
  let nearest = top;
  let missing = false;
  for (const seg of root.slice(top.length).split(sep).filter((s) => s !== '')) {
    cur = join(cur, seg);
    let st: Awaited<ReturnType<typeof lstatOrNull>>;
    try {
      st = await lstatOrNull(cur);
    } catch (e) {
      throw refused(dirname(cur), e, 'cannot be searched');
    }
    if (st === null) {
      missing = true;
      break;
    }
    await checkRootLevel(sink, root, cur, st, followRootLinks);
    nearest = cur;
  }

  try {
    await fsp.access(nearest, constants.W_OK | constants.X_OK);
  } catch (e) {
    throw refused(nearest, e, missing ? `(the nearest existing folder of config.dir ${root}) cannot be written` : 'cannot be written');
  }
  if (missing) return `folder ${root} does not exist yet; its nearest existing folder ${nearest} is writable by ${user}, so the first export creates it`;

  // Our own temp folder, if there: it must be a real folder, and a file written there proves the write.
  const tmpDir = join(root, tmp);
  const st = await lstatOrNull(tmpDir);
  if (st === null) return `folder ${root} exists and is writable by ${user}`;
  if (!st.isDirectory()) {
    const what = st.isSymbolicLink() ? `a symbolic link${await linkTarget(tmpDir)}` : kindOf(st);
    throw treeError(sink, `${tmpDir} is ${what}, not a folder; local-fs writes its temp files only into a real folder there: move it aside, ${AGAIN}`);
  }
  // Named as local-fs names its temps, so a crash before the unlink leaves what the sweep removes.
  const probe = join(tmpDir, tempName());
  try {
    await (await fsp.open(probe, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | O_NOFOLLOW, 0o600)).close();
  } catch (e) {
    throw refused(tmpDir, e, 'cannot be written');
  }
  await fsp.unlink(probe);
  return `folder ${root} exists and is writable by ${user} (a temp file written and removed in its ${tmp})`;
}
