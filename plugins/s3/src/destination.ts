/**
 * The S3 blob destination: create-if-absent commits of whole blobs, single
 * PutObject for small ones, multipart for large ones, never a partial object
 * and never an upload left pending. Each object carries the unit digest the
 * kernel gave its put as user metadata (`x-amz-meta-hypsink-digest`), read
 * back with HeadObject when the key is found taken, so another unit's rows
 * under this unit's key are refused by the kernel, never taken as committed.
 * @ref LLP 0007: the S3 commit rule
 * @ref LLP 0054, LLP 0057: a unit is known by its digest, recorded with its blob
 */
import {
  AbortMultipartUploadCommand,
  type CompletedPart,
  CompleteMultipartUploadCommand,
  CreateMultipartUploadCommand,
  DeleteObjectCommand,
  GetObjectCommand,
  HeadObjectCommand,
  ListMultipartUploadsCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  S3Client,
  UploadPartCommand,
} from '@aws-sdk/client-s3';
import type { BlobBody, BlobDestination, ConnectionCheckOptions, ListedBlob, Logger, PutOptions, PutResult } from 'hypsink/plugin';
import { HypsinkError } from 'hypsink/plugin';
import { checkBucket } from './check.js';
import { S3_MAX_PARTS, S3_MIN_PART_SIZE, type S3Config } from './config.js';
import { classify, isNoSuchUpload, isNotFound, isPreconditionFailed, redact } from './errors.js';
import { PartReader } from './parts.js';
import { type RetryScope, errorFor, withRetry } from './retry.js';

/** A put's end: created, or the key found taken, with the digest recorded on the object there. */
type Outcome = { readonly created: true } | { readonly created: false; readonly digest: string | null };
const CREATED: Outcome = { created: true };

/** The user-metadata key of the unit digest (`x-amz-meta-hypsink-digest`); S3 hands metadata keys back lower-case. */
export const DIGEST_METADATA = 'hypsink-digest';

/** What HeadObject tells of an object at a key: the unit digest recorded with it; null: none (put before digests). */
interface Found {
  readonly digest: string | null;
}

export interface S3DestinationOptions {
  readonly sink: string;
  readonly config: S3Config;
  readonly log: Logger;
  /** The kernel's crash-test hook (SinkBuildContext.fault); inert in production. */
  readonly fault?: ((point: string) => void) | undefined;
}

/** Fault points this plugin owns (for the kernel's list and the crash matrix). */
export const S3_FAULT_POINTS = {
  's3.afterParts': 'every multipart part is uploaded, CompleteMultipartUpload not sent: a pending upload, no object',
} as const;

export class S3Destination implements BlobDestination {
  private readonly client: S3Client;
  private readonly sink: string;
  private readonly cfg: S3Config;
  private readonly log: Logger;
  private readonly fault: (point: keyof typeof S3_FAULT_POINTS) => void;
  private closed = false;

  constructor(opts: S3DestinationOptions) {
    this.sink = opts.sink;
    this.cfg = opts.config;
    this.log = opts.log;
    this.fault = opts.fault ?? (() => {});
    // The SDK warns that its releases after January 2027 will need Node 22. hypsink pins its
    // SDK version, so the warning asks nothing of a hypsink user; the engines field says
    // when hypsink itself needs a newer Node. An operator's own setting wins. @ref LLP 0025
    process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';
    // No credentials here: the SDK's default provider chain (env, shared files, SSO, instance role).
    this.client = new S3Client({
      region: this.cfg.region,
      ...(this.cfg.endpoint === undefined ? {} : { endpoint: this.cfg.endpoint }),
      forcePathStyle: this.cfg.forcePathStyle,
      // Our retry loop owns the budget (retry.ts); the SDK's would multiply it.
      maxAttempts: 1,
      requestHandler: {
        connectionTimeout: this.cfg.connectTimeoutMs,
        requestTimeout: this.cfg.requestTimeoutMs,
        throwOnRequestTimeout: true,
      },
    });
    if (this.cfg.partSize < S3_MIN_PART_SIZE && this.cfg.endpoint === undefined) {
      this.log.warn(
        { sink: this.sink, partSize: this.cfg.partSize },
        's3: config.partSize is under 5 MiB; AWS S3 rejects such multipart parts',
      );
    }
  }

  /**
   * The object key: `prefix/` + the kernel's relative key, without doubled
   * slashes. A `.` or `..` name is refused: S3 keeps it literally, but the SDK
   * and S3-compatible stores resolve it in the request path (s3rver removes
   * `<prefix>/a/../../x` as `x`), which would reach outside the prefix.
   * @ref LLP 0063
   */
  objectKey(key: string): string {
    const names = key.split('/').filter(Boolean);
    if (names.some((n) => n === '.' || n === '..')) {
      throw new HypsinkError('HYPSINK_ERR_INVARIANT', `sink "${this.sink}": blob key ${JSON.stringify(key)} has a "." or ".." name; it could reach outside s3://${this.cfg.bucket}/${this.cfg.prefix}`);
    }
    const rel = names.join('/');
    if (!rel) throw new HypsinkError('HYPSINK_ERR_INVARIANT', `sink "${this.sink}": empty blob key`);
    return this.cfg.prefix ? `${this.cfg.prefix}/${rel}` : rel;
  }

  describe(key: string): string {
    return `s3://${this.cfg.bucket}/${this.objectKey(key)}`;
  }

  locate(key: string): string {
    return this.describe(key);
  }

  /** The bucket and prefix, and the store they are in (the endpoint, or AWS's region). */
  get destination(): string {
    const where = this.cfg.endpoint ?? `aws ${this.cfg.region}`;
    return `s3://${this.cfg.bucket}/${this.cfg.prefix ? `${this.cfg.prefix}/` : ''} at ${where}`;
  }

  /**
   * `exclusive` changes nothing here: an object at the key is never compared
   * with the body. `digest` is stored as the object's metadata and, when the
   * key is found taken, the digest of the object there is returned.
   */
  async putIfAbsent(key: string, body: BlobBody, opts: PutOptions): Promise<PutResult> {
    if (this.closed) throw new HypsinkError('HYPSINK_ERR_INVARIANT', `sink "${this.sink}": s3 destination used after close()`);
    const objectKey = this.objectKey(key);
    const scope: RetryScope = {
      sink: this.sink,
      bucket: this.cfg.bucket,
      where: `s3://${this.cfg.bucket}/${objectKey}`,
      budget: this.cfg.retry,
      signal: opts.signal,
      log: this.log,
      contact: { answered: false },
    };
    const iterator = body[Symbol.asyncIterator]();
    try {
      // @ref LLP 0007: the HeadObject pre-check, for stores that ignore If-None-Match; also saves
      // reading and uploading a unit whose earlier attempt already committed.
      const found = this.cfg.createIfAbsent === 'header' ? null : await this.exists(objectKey, scope);
      if (found !== null) {
        this.log.info({ sink: this.sink, location: scope.where }, 's3: key already committed; nothing uploaded');
        return { created: false, bytes: 0, digest: found.digest };
      }
      const meta = opts.digest === undefined ? {} : { Metadata: { [DIGEST_METADATA]: opts.digest } };
      const reader = new PartReader(iterator, this.cfg.partSize);
      const first = await this.readPart(reader, scope);
      if (reader.done) return await this.putSingle(objectKey, first ?? Buffer.alloc(0), opts.contentType, meta, scope);
      return await this.putMultipart(objectKey, first!, reader, opts.contentType, meta, scope);
    } finally {
      // Release the producer (an encoder, a file stream) whether or not we read it to the end.
      try {
        await iterator.return?.();
      } catch {
        // The body's own cleanup failing does not change what was committed.
      }
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    this.client.destroy();
  }

  /** The connection check: the bucket exists, the credentials may write; nothing made. @ref LLP 0036 */
  check(opts: ConnectionCheckOptions): Promise<string> {
    if (this.closed) return Promise.reject(new HypsinkError('HYPSINK_ERR_INVARIANT', `sink "${this.sink}": s3 destination used after close()`));
    return checkBucket(this.client, this.cfg, this.sink, opts.signal);
  }

  /** The producer's errors pass through unchanged; only an abort is turned into ABORTED. */
  private async readPart(reader: PartReader, scope: RetryScope): Promise<Buffer | null> {
    if (scope.signal.aborted) throw errorFor(classify(scope.signal.reason, scope.signal), scope, 'upload', 0);
    return reader.next();
  }

  /** HeadObject with its own retry budget: the object at the key, or null when there is none. */
  private async exists(objectKey: string, scope: RetryScope): Promise<Found | null> {
    return withRetry('HeadObject', scope, () => this.headOnce(objectKey, scope));
  }

  /** One HeadObject, every fault but 404 thrown: the object and the digest recorded with it, or null. */
  private async head(objectKey: string, signal: AbortSignal): Promise<Found | null> {
    try {
      const r = await this.client.send(new HeadObjectCommand({ Bucket: this.cfg.bucket, Key: objectKey }), { abortSignal: signal });
      return { digest: r.Metadata?.[DIGEST_METADATA] ?? null };
    } catch (e) {
      if (isNotFound(e)) return null;
      throw e;
    }
  }

  /**
   * One HeadObject; inside an enclosing retry loop its faults count against that loop's budget.
   * In "auto" mode a 403 is not final: S3 answers 403 for a missing key when the credentials
   * lack s3:ListBucket, so the conditional write decides instead.
   */
  private async headOnce(objectKey: string, scope: RetryScope): Promise<Found | null> {
    try {
      return await this.head(objectKey, scope.signal);
    } catch (e) {
      if (this.cfg.createIfAbsent === 'auto' && classify(e, scope.signal).kind === 'auth') {
        this.log.debug({ sink: this.sink, location: scope.where }, 's3: HeadObject refused; relying on If-None-Match');
        return null;
      }
      throw e;
    }
  }

  /**
   * The key was found taken by a conditional write (412): the digest recorded
   * on the object there, which the kernel compares with the unit's. Read with
   * HeadObject, a refusal included: without it a taken key cannot be told
   * from another unit's (s3:GetObject allows it). @ref LLP 0054
   */
  private async taken(objectKey: string, scope: RetryScope): Promise<Outcome> {
    const found = await withRetry('HeadObject', scope, () => this.head(objectKey, scope.signal));
    if (found === null) {
      // 412 said an object is there; gone now (removed by someone): try the unit again later.
      throw new HypsinkError(
        'HYPSINK_ERR_RETRYABLE',
        `sink "${this.sink}": ${scope.where} was there when the unit was written (412) but is gone now; the unit is shipped again under the same key on a later tick`,
        { retryable: true },
      );
    }
    return { created: false, digest: found.digest };
  }

  private ifNoneMatch(): { IfNoneMatch?: string } {
    return this.cfg.createIfAbsent === 'head' ? {} : { IfNoneMatch: '*' };
  }

  private async putSingle(objectKey: string, buf: Buffer, contentType: string, meta: { Metadata?: Record<string, string> }, scope: RetryScope): Promise<PutResult> {
    let sent = false;
    let refused = false;
    let outcome = await withRetry<Outcome>('PutObject', scope, async (attempt) => {
      // An earlier try may have committed and lost its answer: look before writing again
      // (where the store enforces If-None-Match, the 412 below says the same).
      if (attempt > 1 && this.cfg.createIfAbsent !== 'header') {
        const found = await this.headOnce(objectKey, scope);
        if (found !== null) return { created: false, digest: found.digest };
      }
      try {
        sent = true;
        await this.client.send(
          new PutObjectCommand({
            Bucket: this.cfg.bucket,
            Key: objectKey,
            Body: buf,
            ContentLength: buf.length,
            ContentType: contentType,
            // The unit's digest, with the object in the same request: never an object without it. @ref LLP 0054
            ...meta,
            // @ref LLP 0007: create-if-absent; 412 means the key is taken (by this unit, if the digest says so).
            ...this.ifNoneMatch(),
          }),
          { abortSignal: scope.signal },
        );
        return CREATED;
      } catch (e) {
        if (isPreconditionFailed(e)) {
          refused = true;
          return { created: false, digest: null };
        }
        throw e;
      }
    });
    // Read outside the write's retry loop: the HeadObject has its own budget.
    if (refused) outcome = await this.taken(objectKey, scope);
    this.log.debug({ sink: this.sink, location: scope.where, bytes: buf.length, created: outcome.created }, 's3: put');
    return { created: outcome.created, bytes: sent ? buf.length : 0, ...(outcome.created ? {} : { digest: outcome.digest }) };
  }

  private async putMultipart(
    objectKey: string,
    first: Buffer,
    reader: PartReader,
    contentType: string,
    meta: { Metadata?: Record<string, string> },
    scope: RetryScope,
  ): Promise<PutResult> {
    await this.reapPendingUploads(objectKey, scope);
    const checksums = (await this.client.config.requestChecksumCalculation()) === 'WHEN_SUPPORTED';
    let createTries = 0;
    const created = await withRetry('CreateMultipartUpload', scope, (attempt) => {
      createTries = attempt;
      return this.client.send(
        new CreateMultipartUploadCommand({
          Bucket: this.cfg.bucket,
          Key: objectKey,
          ContentType: contentType,
          // The unit's digest: the completed object carries the upload's metadata. @ref LLP 0054
          ...meta,
          // As lib-storage does: the parts' CRC32s are then checked by the store at completion.
          ...(checksums ? { ChecksumAlgorithm: 'CRC32' as const } : {}),
        }),
        { abortSignal: scope.signal },
      );
    });
    const uploadId = created.UploadId;
    if (!uploadId) {
      throw new HypsinkError(
        'HYPSINK_ERR_DESTINATION',
        `sink "${this.sink}": CreateMultipartUpload ${scope.where} returned no upload id; the store is not S3-compatible enough for multipart uploads (raise config.partSize to avoid them).`,
      );
    }
    const parts: CompletedPart[] = [];
    let sentBytes = 0;
    let inflight: Promise<void> | undefined;
    let completed = false;
    try {
      let part: Buffer | null = first;
      for (let n = 1; part !== null; n++) {
        if (n > S3_MAX_PARTS) {
          throw new HypsinkError(
            'HYPSINK_ERR_DESTINATION',
            `sink "${this.sink}": ${scope.where} needs more than ${S3_MAX_PARTS} parts of ${this.cfg.partSize} bytes; raise config.partSize or lower the sink's unit size.`,
          );
        }
        // Upload part n while part n+1 is read: two parts in memory at most.
        const buf: Buffer = part;
        inflight = this.uploadPart(objectKey, uploadId, n, buf, scope).then((p) => {
          parts.push(p);
          sentBytes += buf.length;
        });
        const current = inflight;
        current.catch(() => {}); // awaited below; this only silences an early rejection
        const next: Buffer | null = reader.done ? null : await this.readPart(reader, scope);
        await current;
        inflight = undefined;
        part = next;
      }
      parts.sort((a, b) => (a.PartNumber ?? 0) - (b.PartNumber ?? 0));
      this.fault('s3.afterParts');
      const outcome = await withRetry<Outcome>('CompleteMultipartUpload', scope, async (attempt) => {
        try {
          await this.client.send(
            new CompleteMultipartUploadCommand({
              Bucket: this.cfg.bucket,
              Key: objectKey,
              UploadId: uploadId,
              MultipartUpload: { Parts: parts },
              // @ref LLP 0007: the completion is the commit point, so it carries the condition.
              ...this.ifNoneMatch(),
            }),
            { abortSignal: scope.signal },
          );
          return CREATED;
        } catch (e) {
          if (isPreconditionFailed(e)) return { created: false, digest: null };
          // An earlier try completed and lost its answer: the upload is gone and the object is there.
          if (attempt > 1 && isNoSuchUpload(e) && (await this.headOnce(objectKey, scope)) !== null) return CREATED;
          throw e;
        }
      });
      if (!outcome.created) {
        // @ref LLP 0007: 412 = the key is taken; the parts we sent are discarded.
        await this.abortUpload(objectKey, uploadId, scope);
        completed = true;
        this.log.info({ sink: this.sink, location: scope.where, bytes: sentBytes }, 's3: key already committed');
        // Which unit holds it: the kernel refuses another's. @ref LLP 0054
        const held = await this.taken(objectKey, scope);
        return { created: false, bytes: sentBytes, ...(held.created ? {} : { digest: held.digest }) };
      }
      completed = true;
      this.log.debug({ sink: this.sink, location: scope.where, bytes: sentBytes, parts: parts.length }, 's3: multipart put');
      return { created: true, bytes: sentBytes };
    } finally {
      if (!completed) {
        // @ref LLP 0007: a failed or interrupted upload is aborted, never left to accrue storage.
        if (inflight) await inflight.catch(() => {});
        await this.abortUpload(objectKey, uploadId, scope);
      }
      // A retried CreateMultipartUpload may have created an upload whose id we never heard.
      if (createTries > 1) {
        await this.reapPendingUploads(objectKey, { ...scope, signal: AbortSignal.timeout(10_000) }).catch(() => {});
      }
    }
  }

  private async uploadPart(
    objectKey: string,
    uploadId: string,
    partNumber: number,
    buf: Buffer,
    scope: RetryScope,
  ): Promise<CompletedPart> {
    const r = await withRetry(`UploadPart #${partNumber}`, scope, () =>
      this.client.send(
        new UploadPartCommand({
          Bucket: this.cfg.bucket,
          Key: objectKey,
          UploadId: uploadId,
          PartNumber: partNumber,
          Body: buf,
          ContentLength: buf.length,
        }),
        { abortSignal: scope.signal },
      ),
    );
    if (!r.ETag) {
      throw new HypsinkError(
        'HYPSINK_ERR_DESTINATION',
        `sink "${this.sink}": UploadPart #${partNumber} ${scope.where} returned no ETag; the store is not S3-compatible enough for multipart uploads.`,
      );
    }
    return {
      PartNumber: partNumber,
      ETag: r.ETag,
      ...(r.ChecksumCRC32 ? { ChecksumCRC32: r.ChecksumCRC32 } : {}),
      ...(r.ChecksumCRC32C ? { ChecksumCRC32C: r.ChecksumCRC32C } : {}),
      ...(r.ChecksumCRC64NVME ? { ChecksumCRC64NVME: r.ChecksumCRC64NVME } : {}),
      ...(r.ChecksumSHA1 ? { ChecksumSHA1: r.ChecksumSHA1 } : {}),
      ...(r.ChecksumSHA256 ? { ChecksumSHA256: r.ChecksumSHA256 } : {}),
    };
  }

  /**
   * AbortMultipartUpload, with its own short budget and its own signal: it must run
   * even when the unit's signal is what interrupted the upload.
   */
  private async abortUpload(objectKey: string, uploadId: string, scope: RetryScope): Promise<void> {
    const own: RetryScope = {
      ...scope,
      signal: AbortSignal.timeout(Math.max(5_000, this.cfg.connectTimeoutMs * 2)),
      budget: { ...scope.budget, attempts: Math.min(scope.budget.attempts, 3), maxMs: Math.min(scope.budget.maxMs, 1_000) },
    };
    try {
      await withRetry('AbortMultipartUpload', own, async () => {
        try {
          await this.client.send(
            new AbortMultipartUploadCommand({ Bucket: this.cfg.bucket, Key: objectKey, UploadId: uploadId }),
            { abortSignal: own.signal },
          );
        } catch (e) {
          if (isNoSuchUpload(e)) return; // already gone
          throw e;
        }
      });
      this.log.debug({ sink: this.sink, location: scope.where }, 's3: multipart upload aborted');
    } catch (e) {
      this.log.warn(
        { sink: this.sink, location: scope.where, error: redact(e instanceof Error ? e.message : String(e)) },
        's3: could not abort a multipart upload; the next attempt on this key aborts it, or a bucket lifecycle rule (AbortIncompleteMultipartUpload) does',
      );
    }
  }

  /**
   * Aborts uploads pending under this exact key (a crashed earlier attempt, or a lost
   * CreateMultipartUpload answer). Safe: only this sink instance writes its keys, under
   * the kernel's lock. Best effort: ListMultipartUploads may be denied or unimplemented.
   */
  private async reapPendingUploads(objectKey: string, scope: RetryScope): Promise<void> {
    let uploads: { Key?: string | undefined; UploadId?: string | undefined }[];
    try {
      const r = await this.client.send(new ListMultipartUploadsCommand({ Bucket: this.cfg.bucket, Prefix: objectKey }), {
        abortSignal: scope.signal,
      });
      uploads = r.Uploads ?? [];
    } catch (e) {
      const fault = classify(e, scope.signal);
      if (fault.kind === 'aborted') throw errorFor(fault, scope, 'ListMultipartUploads', 1);
      this.log.debug({ sink: this.sink, location: scope.where, fault: fault.summary }, 's3: cannot list pending uploads');
      return;
    }
    for (const u of uploads) {
      if (u.Key !== objectKey || !u.UploadId) continue;
      this.log.info({ sink: this.sink, location: scope.where }, 's3: aborting a pending upload left by an earlier attempt');
      await this.abortUpload(objectKey, u.UploadId, scope);
    }
  }

  /**
   * Committed objects under `prefix` (ListObjectsV2 under the sink's own
   * prefix, page by page), keys as the kernel gave them. Multipart uploads not
   * completed are never listed by S3. @ref LLP 0037
   */
  async *list(prefix: string, opts: { signal: AbortSignal }): AsyncIterable<ListedBlob> {
    const root = this.cfg.prefix ? `${this.cfg.prefix}/` : '';
    const scope = this.readScope(`s3://${this.cfg.bucket}/${root}${prefix}`, opts.signal);
    let token: string | undefined;
    do {
      const page = await withRetry('ListObjectsV2', scope, () =>
        this.client.send(new ListObjectsV2Command({ Bucket: this.cfg.bucket, Prefix: `${root}${prefix}`, ContinuationToken: token }), { abortSignal: opts.signal }),
      );
      for (const o of page.Contents ?? []) {
        if (!o.Key?.startsWith(root) || o.Key.endsWith('/')) continue;
        yield { key: o.Key.slice(root.length), bytes: o.Size ?? 0, ...(o.LastModified ? { modifiedMs: o.LastModified.getTime() } : {}) };
      }
      token = page.IsTruncated ? page.NextContinuationToken : undefined;
    } while (token);
  }

  /** The unit digest recorded on a committed object (HeadObject); null: none, or no object at the key. @ref LLP 0054 */
  async digestOf(key: string, opts: { signal: AbortSignal }): Promise<string | null> {
    const objectKey = this.objectKey(key);
    const scope = this.readScope(`s3://${this.cfg.bucket}/${objectKey}`, opts.signal);
    const found = await withRetry('HeadObject', scope, () => this.head(objectKey, opts.signal));
    return found?.digest ?? null;
  }

  /** A byte range of an object (a ranged GetObject; a store that ignores Range is cut to it here). @ref LLP 0037 */
  async read(key: string, range: { offset: number; length: number }, opts: { signal: AbortSignal }): Promise<Uint8Array> {
    if (range.length <= 0) return new Uint8Array(0);
    const objectKey = this.objectKey(key);
    const scope = this.readScope(`s3://${this.cfg.bucket}/${objectKey}`, opts.signal);
    const r = await withRetry('GetObject', scope, async () => {
      const out = await this.client.send(
        new GetObjectCommand({ Bucket: this.cfg.bucket, Key: objectKey, Range: `bytes=${range.offset}-${range.offset + range.length - 1}` }),
        { abortSignal: opts.signal },
      );
      return { body: (await out.Body?.transformToByteArray()) ?? new Uint8Array(0), ranged: out.ContentRange !== undefined };
    });
    return r.ranged ? r.body : r.body.subarray(range.offset, range.offset + range.length);
  }

  /** A small object whole, or null when there is none at the key. @ref LLP 0051 */
  async get(key: string, opts: { signal: AbortSignal }): Promise<Uint8Array | null> {
    const objectKey = this.objectKey(key);
    const scope = this.readScope(`s3://${this.cfg.bucket}/${objectKey}`, opts.signal);
    return withRetry('GetObject', scope, async () => {
      try {
        const out = await this.client.send(new GetObjectCommand({ Bucket: this.cfg.bucket, Key: objectKey }), { abortSignal: opts.signal });
        return (await out.Body?.transformToByteArray()) ?? new Uint8Array(0);
      } catch (e) {
        if (isNotFound(e)) return null;
        throw e;
      }
    });
  }

  /** A pointer replaced whole by one PutObject (S3 makes it visible atomically). */
  async replace(key: string, bytes: Uint8Array, opts: { contentType: string; signal: AbortSignal }): Promise<void> {
    const objectKey = this.objectKey(key);
    const scope = this.readScope(`s3://${this.cfg.bucket}/${objectKey}`, opts.signal);
    await withRetry('PutObject', scope, () =>
      this.client.send(new PutObjectCommand({ Bucket: this.cfg.bucket, Key: objectKey, Body: bytes, ContentType: opts.contentType }), { abortSignal: opts.signal }),
    );
  }

  /** An object removed (table maintenance); S3 answers a missing key as removed too. */
  async remove(key: string, opts: { signal: AbortSignal }): Promise<void> {
    const objectKey = this.objectKey(key);
    const scope = this.readScope(`s3://${this.cfg.bucket}/${objectKey}`, opts.signal);
    await withRetry('DeleteObject', scope, () => this.client.send(new DeleteObjectCommand({ Bucket: this.cfg.bucket, Key: objectKey }), { abortSignal: opts.signal }));
  }

  private readScope(where: string, signal: AbortSignal): RetryScope {
    return { sink: this.sink, bucket: this.cfg.bucket, where, budget: this.cfg.retry, signal, log: this.log };
  }
}
