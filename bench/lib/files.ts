/** What a local-fs sink left on disk: committed files and their bytes (temp files excluded). */
import { promises as fsp } from 'node:fs';
import { join } from 'node:path';

export interface Tree {
  readonly files: number;
  readonly bytes: number;
}

/** Files under `dir` (those whose name `keep` accepts) and their bytes. */
export async function tree(dir: string, keep: (name: string) => boolean = () => true): Promise<Tree> {
  let files = 0;
  let bytes = 0;
  const walk = async (d: string): Promise<void> => {
    let ents: import('node:fs').Dirent[];
    try {
      ents = await fsp.readdir(d, { withFileTypes: true });
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return;
      throw e;
    }
    for (const e of ents) {
      const p = join(d, e.name);
      if (e.isDirectory()) {
        if (e.name !== '.hypsink-tmp') await walk(p);
      } else if (e.isFile() && keep(e.name)) {
        files++;
        bytes += (await fsp.stat(p)).size;
      }
    }
  };
  await walk(dir);
  return { files, bytes };
}
