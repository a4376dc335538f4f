/** Shared setup for the S3 destination tests: the plugin loaded the way the host loads it. */
import { readFileSync } from 'node:fs';
import { GetObjectCommand, type HeadObjectCommandOutput, HeadObjectCommand, S3Client } from '@aws-sdk/client-s3';
import activate from '../../plugins/s3/src/index.js';
import type {
  BlobBody,
  BlobDestination,
  DestinationFactory,
  Logger,
  PluginContext,
  PluginManifest,
} from '../../types/index.js';

export interface LogEntry {
  readonly level: 'debug' | 'info' | 'warn' | 'error';
  readonly obj: object | string;
  readonly msg: string | undefined;
}

export interface CapturedLog {
  readonly log: Logger;
  readonly entries: LogEntry[];
  /** Everything logged, serialized the way a JSON logger would. */
  text(): string;
}

export function captureLog(): CapturedLog {
  const entries: LogEntry[] = [];
  const at =
    (level: LogEntry['level']) =>
    (obj: object | string, msg?: string): void => {
      entries.push({ level, obj, msg });
    };
  return {
    log: { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') },
    entries,
    text: () => JSON.stringify(entries),
  };
}

export const manifest = JSON.parse(
  readFileSync(new URL('../../plugins/s3/plugin.json', import.meta.url), 'utf8'),
) as PluginManifest;

/** Activates the plugin with a host context and returns the destination factory it registered. */
export function loadPlugin(): DestinationFactory {
  const found: DestinationFactory[] = [];
  const ctx: PluginContext = {
    manifest,
    log: captureLog().log,
    hooks: {} as PluginContext['hooks'],
    registerDestination: (f) => found.push(f),
    registerSink: () => {
      throw new Error('s3 plugin must not register a sink');
    },
    registerEncoder: () => {
      throw new Error('s3 plugin must not register an encoder');
    },
    registerTransform: () => {
      throw new Error('s3 plugin must not register a transform');
    },
  };
  activate(ctx);
  if (found.length !== 1 || !found[0]) throw new Error(`expected one destination, got ${found.length}`);
  return found[0];
}

export function makeDestination(
  config: Record<string, unknown>,
  opts: { sink?: string; log?: CapturedLog; fault?: (point: string) => void } = {},
): { dest: BlobDestination; log: CapturedLog } {
  const log = opts.log ?? captureLog();
  const dest = loadPlugin().create(config, {
    sink: opts.sink ?? 'lake',
    stateDir: '/nonexistent/state',
    cacheId: '00000000-0000-4000-8000-000000000000',
    baseDir: '/nonexistent',
    log: log.log,
    ...(opts.fault ? { fault: opts.fault } : {}),
  });
  return { dest, log };
}

/** A body in chunks of `chunkSize` bytes (fresh copies, as an encoder would yield). */
export async function* bodyOf(buf: Uint8Array, chunkSize = 16 * 1024): BlobBody {
  for (let i = 0; i < buf.length; i += chunkSize) {
    yield Uint8Array.prototype.slice.call(buf, i, i + chunkSize);
  }
}

/** Deterministic pseudo-random bytes, so a misplaced part changes the content. */
export function bytes(n: number, seed = 1): Buffer {
  const b = Buffer.alloc(n);
  let x = seed >>> 0 || 1;
  for (let i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    b[i] = x & 0xff;
  }
  return b;
}

/** Reads an object back with a separate client; null when absent. */
export async function readObject(endpoint: string, bucket: string, key: string): Promise<Buffer | null> {
  const client = new S3Client({ region: 'us-east-1', endpoint, forcePathStyle: true, maxAttempts: 1 });
  try {
    const r = await client.send(new GetObjectCommand({ Bucket: bucket, Key: key }));
    return Buffer.from(await r.Body!.transformToByteArray());
  } catch (e) {
    if ((e as { name?: string }).name === 'NoSuchKey') return null;
    throw e;
  } finally {
    client.destroy();
  }
}

/** HeadObject straight to the store: what any S3 client sees of an object (its metadata). */
export async function headObject(endpoint: string, bucket: string, key: string): Promise<HeadObjectCommandOutput> {
  const client = new S3Client({ region: 'us-east-1', endpoint, forcePathStyle: true, maxAttempts: 1 });
  try {
    return await client.send(new HeadObjectCommand({ Bucket: bucket, Key: key }));
  } finally {
    client.destroy();
  }
}

export function baseConfig(endpoint: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    bucket: 'lake',
    prefix: 'hyp',
    region: 'us-east-1',
    endpoint,
    forcePathStyle: true,
    retry: { attempts: 4, baseMs: 10, maxMs: 2_000 },
    ...extra,
  };
}

export const KEY = 'activity/source=web/activity.100-200.parquet';
export const OPTS = { contentType: 'application/vnd.apache.parquet' };
