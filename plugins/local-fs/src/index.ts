/**
 * `@hypsink/local-fs`: blobs as files under `config.dir`. A put writes a temp
 * file, fsyncs it, then links it under its key — create-if-absent: a link onto
 * an existing name fails, so a committed file is never overwritten and an
 * existing file means the unit already committed.
 * @ref LLP 0005: write-ahead intent (a retried unit finds its file and stops)
 */
import { randomBytes } from 'node:crypto';
import { constants, promises as fsp } from 'node:fs';
import { dirname, isAbsolute, join, relative, resolve } from 'node:path';
import { z } from 'zod';
import { type BlobBody, type BlobDestination, HypsinkError, isHypsinkError, parseSinkConfig, type PluginContext, type PutResult, type SinkBuildContext } from 'hypsink/plugin';

const configSchema = z.object({ dir: z.string().min(1) }).strict();
const TMP = '.hypsink-tmp';

async function fsyncDir(dir: string): Promise<void> {
  const fh = await fsp.open(dir, constants.O_RDONLY);
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Temp files of dead writers (a crash between write and link) are removed. */
async function sweepTemps(tmpDir: string): Promise<void> {
  let names: string[] = [];
  try {
    names = await fsp.readdir(tmpDir);
  } catch {
    return;
  }
  for (const n of names) {
    const pid = Number(n.split('-')[0]);
    if (!Number.isInteger(pid) || !alive(pid)) await fsp.rm(join(tmpDir, n), { force: true });
  }
}

class LocalFsDestination implements BlobDestination {
  private readonly tmpDir: string;
  private swept: Promise<void> | undefined;

  constructor(
    private readonly root: string,
    private readonly build: SinkBuildContext,
  ) {
    this.tmpDir = join(root, TMP);
  }

  describe(key: string): string {
    return join(this.root, key);
  }

  get destination(): string {
    return `local-fs ${this.root}`;
  }

  private target(key: string): string {
    const path = resolve(this.root, key);
    const rel = relative(this.root, path);
    if (rel.startsWith('..') || isAbsolute(rel) || rel.split(/[\\/]/)[0] === TMP) {
      throw new HypsinkError('HYPSINK_ERR_INVARIANT', `sink "${this.build.sink}": key ${key} escapes ${this.root}`);
    }
    return path;
  }

  async putIfAbsent(key: string, body: BlobBody, opts: { signal: AbortSignal }): Promise<PutResult> {
    const final = this.target(key);
    // Sweep first: a writer that died after linking left its temp behind, and the retry of
    // that unit finds the key and returns early, so a later sweep might never come.
    this.swept ??= sweepTemps(this.tmpDir);
    await this.swept;
    try {
      const st = await fsp.stat(final);
      return { created: false, bytes: st.size };
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw this.fsError(e, final);
    }
    await fsp.mkdir(this.tmpDir, { recursive: true });
    await fsp.mkdir(dirname(final), { recursive: true });
    const temp = join(this.tmpDir, `${process.pid}-${randomBytes(6).toString('hex')}.part`);
    let bytes = 0;
    try {
      const fh = await fsp.open(temp, 'wx');
      try {
        for await (const chunk of body) {
          if (opts.signal.aborted) throw new HypsinkError('HYPSINK_ERR_ABORTED', `sink "${this.build.sink}": write of ${final} aborted by shutdown`);
          await fh.write(chunk);
          bytes += chunk.byteLength;
        }
        await fh.sync();
      } finally {
        await fh.close();
      }
      this.build.fault?.('localfs.afterTemp');
      try {
        await fsp.link(temp, final);
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code === 'EEXIST') return { created: false, bytes };
        throw e;
      }
      await fsyncDir(dirname(final));
      this.build.fault?.('localfs.afterLink');
      return { created: true, bytes };
    } catch (e) {
      throw isHypsinkError(e) ? e : this.fsError(e, final);
    } finally {
      await fsp.rm(temp, { force: true });
    }
  }

  private fsError(e: unknown, path: string): HypsinkError {
    const code = (e as NodeJS.ErrnoException).code;
    // A full disk or a transient I/O error may clear; permissions and bad paths will not.
    const retryable = code === 'ENOSPC' || code === 'EIO' || code === 'EAGAIN' || code === 'EBUSY';
    return new HypsinkError(
      retryable ? 'HYPSINK_ERR_RETRYABLE' : 'HYPSINK_ERR_DESTINATION',
      `sink "${this.build.sink}": cannot write ${path} (${code ?? (e as Error).message})`,
      { cause: e, retryable },
    );
  }

  async close(): Promise<void> {}
}

export default function activate(ctx: PluginContext): void {
  ctx.registerDestination({
    name: ctx.manifest.name,
    create(config, build) {
      const { dir } = parseSinkConfig(configSchema, config, build.sink);
      return new LocalFsDestination(resolve(build.baseDir, dir), build);
    },
  });
}
