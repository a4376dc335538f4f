/**
 * A real S3-compatible server for tests: s3rver 3.7.1 on 127.0.0.1, an ephemeral
 * port and its own temp directory.
 *
 * s3rver lacks two multipart operations a careful S3 client relies on:
 * AbortMultipartUpload (it answers 405) and ListMultipartUploads (501). This
 * helper adds both in front of s3rver's router, working on s3rver's own on-disk
 * upload directories, so "no upload left behind" is checked against the real
 * store state. It answers a write once its bytes are written (wholeWrites).
 * Everything else is plain s3rver. It does not enforce If-None-Match (use
 * test/support/fault-proxy.ts for the 412 path).
 *
 * Credentials: s3rver knows one account, `S3RVER` / `S3RVER` (it checks the
 * access key id, not V4 signatures). Plugins use the AWS default provider chain,
 * so tests put these in the environment with `useS3rverCredentials()`.
 */
import { createHash } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { mkdir, mkdtemp, readFile, readdir, rm, stat, writeFile } from 'node:fs/promises';
import type { Server } from 'node:http';
import { createRequire } from 'node:module';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';

const require = createRequire(import.meta.url);

interface KoaContext {
  method: string;
  path: string;
  query: Record<string, string | string[] | undefined>;
  headers: Record<string, string | string[] | undefined>;
  status: number;
  body: unknown;
  type: string;
}
type KoaMiddleware = (ctx: KoaContext, next: () => Promise<void>) => Promise<void>;
/** What wholeWrites replaces and uses of s3rver's FilesystemStore. */
interface S3rverStore {
  getResourcePath(bucket: string, key: string | undefined, resource: string): string;
  putMetadata(bucket: string, key: string, metadata: unknown, md5: string): Promise<void>;
  putObject(object: { bucket: string; key: string; content: Readable | Buffer; metadata: unknown }): Promise<Written>;
  putPart(bucket: string, uploadId: string, partNumber: number, content: Readable): Promise<Written>;
}
interface Written {
  size: number;
  md5: string;
}
interface S3rverInstance {
  middleware: KoaMiddleware[];
  store: S3rverStore;
  run(): Promise<AddressInfo>;
  close(): Promise<void>;
  httpServer?: Server;
}
type S3rverCtor = new (opts: Record<string, unknown>) => S3rverInstance;
type S3ErrorCtor = new (code: string, message?: string, detail?: Record<string, string>) => Error;
interface AccountRegistry {
  registry: Map<string, unknown>;
}

const S3rver = require('s3rver') as S3rverCtor;
const S3Error = require('s3rver/lib/models/error') as S3ErrorCtor;
const AWSAccount = require('s3rver/lib/models/account') as AccountRegistry;

export const S3RVER_ACCESS_KEY_ID = 'S3RVER';
export const S3RVER_SECRET_ACCESS_KEY = 'S3RVER';

/** Point the AWS default credential chain at s3rver's account. */
export function useS3rverCredentials(): void {
  process.env.AWS_ACCESS_KEY_ID = S3RVER_ACCESS_KEY_ID;
  process.env.AWS_SECRET_ACCESS_KEY = S3RVER_SECRET_ACCESS_KEY;
  delete process.env.AWS_SESSION_TOKEN;
  // Keep the SDK off the network for anything but the endpoint under test.
  process.env.AWS_EC2_METADATA_DISABLED = 'true';
}

export interface PendingUpload {
  readonly uploadId: string;
  readonly key: string;
}

export interface TestS3Server {
  /** `http://127.0.0.1:<port>`; use with `forcePathStyle: true`. */
  readonly endpoint: string;
  readonly port: number;
  /** s3rver's data directory (removed by stop()). */
  readonly directory: string;
  /** Reads the store directly, not over HTTP. */
  objectExists(bucket: string, key: string): Promise<boolean>;
  /** Multipart uploads initiated but neither completed nor aborted, from s3rver's disk state. */
  pendingUploads(bucket: string): Promise<PendingUpload[]>;
  stop(): Promise<void>;
}

function uploadsDir(directory: string, bucket: string): string {
  // s3rver's FilesystemStore.getResourcePath(bucket, undefined, 'uploads')
  return path.join(directory, bucket, '._S3rver_uploads');
}

async function listPending(directory: string, bucket: string): Promise<PendingUpload[]> {
  const dir = uploadsDir(directory, bucket);
  let ids: string[];
  try {
    ids = await readdir(dir);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw e;
  }
  const out: PendingUpload[] = [];
  for (const uploadId of ids.sort()) {
    let key = '';
    try {
      key = await readFile(path.join(dir, uploadId, 'key'), 'utf8');
    } catch {
      // s3rver's UploadPart creates the directory even for an unknown upload id.
    }
    out.push({ uploadId, key });
  }
  return out;
}

function xmlEscape(s: string): string {
  return s.replace(/[<>&'"]/g, (c) => `&#${c.charCodeAt(0)};`);
}

function first(v: string | string[] | undefined): string | undefined {
  return Array.isArray(v) ? v[0] : v;
}

/** The minimum of s3rver's access-key check, for the two operations answered here. */
function checkAccessKey(ctx: KoaContext): void {
  const auth = first(ctx.headers.authorization);
  if (auth === undefined) return;
  const m = /Credential=([^/,\s]+)\//.exec(auth);
  const accessKeyId = m?.[1] ?? '';
  if (!AWSAccount.registry.has(accessKeyId)) {
    throw new S3Error('InvalidAccessKeyId', 'The AWS Access Key Id you provided does not exist in our records.', {
      AWSAccessKeyId: accessKeyId,
    });
  }
}

function multipartGaps(directory: string): KoaMiddleware {
  return async (ctx, next) => {
    const segs = ctx.path.split('/').slice(1);
    const bucket = decodeURIComponent(segs[0] ?? '');
    const key = segs.slice(1).map(decodeURIComponent).join('/');
    const bucketExists = async () => {
      try {
        await stat(path.join(directory, bucket));
      } catch {
        throw new S3Error('NoSuchBucket', 'The specified bucket does not exist', { BucketName: bucket });
      }
    };
    const uploadId = first(ctx.query.uploadId);
    if (ctx.method === 'DELETE' && bucket && key && uploadId !== undefined) {
      // AbortMultipartUpload
      checkAccessKey(ctx);
      await bucketExists();
      const dir = path.join(uploadsDir(directory, bucket), path.basename(uploadId));
      try {
        await stat(dir);
      } catch {
        throw new S3Error(
          'NoSuchUpload',
          'The specified upload does not exist. The upload ID may be invalid, or the upload may have been aborted or completed.',
          { UploadId: uploadId },
        );
      }
      await rm(dir, { recursive: true, force: true });
      ctx.status = 204;
      return;
    }
    if (ctx.method === 'GET' && bucket && !key && 'uploads' in ctx.query) {
      // ListMultipartUploads (no pagination: tests hold few uploads)
      checkAccessKey(ctx);
      await bucketExists();
      const prefix = first(ctx.query.prefix) ?? '';
      const uploads = (await listPending(directory, bucket)).filter((u) => u.key.startsWith(prefix));
      const items = uploads
        .map(
          (u) =>
            `<Upload><Key>${xmlEscape(u.key)}</Key><UploadId>${xmlEscape(u.uploadId)}</UploadId>` +
            `<Initiated>${new Date().toISOString()}</Initiated><StorageClass>STANDARD</StorageClass></Upload>`,
        )
        .join('');
      ctx.type = 'application/xml';
      ctx.body =
        '<?xml version="1.0" encoding="UTF-8"?>\n' +
        `<ListMultipartUploadsResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">` +
        `<Bucket>${xmlEscape(bucket)}</Bucket><Prefix>${xmlEscape(prefix)}</Prefix>` +
        `<MaxUploads>1000</MaxUploads><IsTruncated>false</IsTruncated>${items}</ListMultipartUploadsResult>`;
      return;
    }
    await next();
  };
}

/** `content` into `file`, resolved once the file stream has written every byte: its size and md5. */
async function writeWhole(file: string, content: Readable | Buffer): Promise<Written> {
  await mkdir(path.dirname(file), { recursive: true });
  const md5 = createHash('md5');
  let size = 0;
  await pipeline(
    Buffer.isBuffer(content) ? Readable.from([content]) : content,
    async function* (chunks: AsyncIterable<Buffer>) {
      for await (const c of chunks) {
        md5.update(c);
        size += c.length;
        yield c;
      }
    },
    createWriteStream(file),
  );
  return { size, md5: md5.digest('hex') };
}

/**
 * s3rver 3.7.1 answers a PutObject, an UploadPart and (through putObject) a
 * CompleteMultipartUpload once the bytes have passed its md5 stream, while its
 * file stream may still be writing them: on a loaded disk an object read right
 * after its answer was cut, and a part read at completion was cut into the
 * object for good. S3 answers a write once it is whole; these two store
 * methods, the same steps, do too. Readers during a write still see it under
 * way (iceberg.ts's wholeObjectReads holds those). @ref LLP 0107
 */
function wholeWrites(store: S3rverStore): void {
  store.putObject = async (object) => {
    const w = await writeWhole(store.getResourcePath(object.bucket, object.key, 'object'), object.content);
    await store.putMetadata(object.bucket, object.key, object.metadata, w.md5);
    return w;
  };
  store.putPart = async (bucket, uploadId, partNumber, content) => {
    const file = path.join(store.getResourcePath(bucket, undefined, 'uploads'), uploadId, String(partNumber));
    const w = await writeWhole(file, content);
    await writeFile(`${file}.md5`, w.md5);
    return w;
  };
}

export async function startS3Server(opts: { buckets?: readonly string[] } = {}): Promise<TestS3Server> {
  const directory = await mkdtemp(path.join(tmpdir(), 'hypsink-s3rver-'));
  const server = new S3rver({
    address: '127.0.0.1',
    port: 0,
    silent: true,
    directory,
    vhostBuckets: false,
    configureBuckets: (opts.buckets ?? []).map((name) => ({ name })),
  });
  wholeWrites(server.store);
  // Before the router (the last middleware), after logging, XML encoding and vhost.
  server.middleware.splice(server.middleware.length - 1, 0, multipartGaps(directory));
  const address = await server.run();
  const port = address.port;
  let stopped = false;
  return {
    endpoint: `http://127.0.0.1:${port}`,
    port,
    directory,
    async objectExists(bucket, key) {
      const parts = key.split('/');
      const last = parts.pop() ?? '';
      try {
        await stat(path.join(directory, bucket, ...parts, `${last}._S3rver_object`));
        return true;
      } catch {
        return false;
      }
    },
    pendingUploads: (bucket) => listPending(directory, bucket),
    async stop() {
      if (stopped) return;
      stopped = true;
      const closing = server.close();
      server.httpServer?.closeAllConnections();
      await closing;
      await rm(directory, { recursive: true, force: true });
    },
  };
}
