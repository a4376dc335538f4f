/**
 * The s3 destination's connection check (`hypsink validate --connect`): the
 * bucket exists (HeadBucket) and the credentials may write under the sink's
 * prefix (CreateMultipartUpload, then AbortMultipartUpload, of a probe key).
 * An upload never completed creates no object, so nothing becomes visible,
 * even at a key that exists. One attempt per request, no retry: the kernel
 * bounds the whole check.
 * @ref LLP 0036: what each connection check proves
 */
import { randomBytes } from 'node:crypto';
import {
  AbortMultipartUploadCommand,
  CreateMultipartUploadCommand,
  HeadBucketCommand,
  ListMultipartUploadsCommand,
  type S3Client,
} from '@aws-sdk/client-s3';
import { HypsinkError } from 'hypsink/plugin';
import type { S3Config } from './config.js';
import { classify, type Fault, isNoSuchUpload } from './errors.js';

/** Probe keys begin so (after the prefix): an earlier check's leftover upload is known by it. */
export const PROBE = '.hypsink-connection-check-';
const AGAIN = 'then run "hypsink validate --connect" again';

export async function checkBucket(client: S3Client, cfg: S3Config, sink: string, signal: AbortSignal): Promise<string> {
  const store = cfg.endpoint ?? `AWS region ${cfg.region}`;
  const root = `s3://${cfg.bucket}/${cfg.prefix ? `${cfg.prefix}/` : ''}`;
  const head = `sink "${sink}"`;
  const fail = (op: string, e: unknown): HypsinkError => failure(e, signal, { head, op, bucket: cfg.bucket, store, root, region: cfg.region, endpoint: cfg.endpoint });

  // HeadBucket needs s3:ListBucket; credentials that may only write get a 403 here, so a 403
  // leaves the verdict to the write probe below. @ref LLP 0036
  let listable = true;
  try {
    await client.send(new HeadBucketCommand({ Bucket: cfg.bucket }), { abortSignal: signal });
  } catch (e) {
    if (classify(e, signal).kind !== 'auth') throw fail('HeadBucket', e);
    listable = false;
  }

  const base = `${cfg.prefix ? `${cfg.prefix}/` : ''}${PROBE}`;
  await reapProbes(client, cfg.bucket, base, signal);
  const key = `${base}${randomBytes(6).toString('hex')}`;
  let uploadId: string | undefined;
  try {
    uploadId = (await client.send(new CreateMultipartUploadCommand({ Bucket: cfg.bucket, Key: key }), { abortSignal: signal })).UploadId;
  } catch (e) {
    throw fail('CreateMultipartUpload', e);
  }
  if (!uploadId) {
    throw new HypsinkError('HYPSINK_ERR_DESTINATION', `${head}: CreateMultipartUpload s3://${cfg.bucket}/${key} at ${store} returned no upload id; the store is not S3-compatible enough for multipart uploads`, {
      hint: `Raise config.partSize above the largest unit so no upload goes multipart; ${AGAIN}.`,
    });
  }
  try {
    // Its own bound: the probe upload is removed even when the check's signal ended it.
    await client.send(new AbortMultipartUploadCommand({ Bucket: cfg.bucket, Key: key, UploadId: uploadId }), { abortSignal: AbortSignal.timeout(5_000) });
  } catch (e) {
    if (!isNoSuchUpload(e)) {
      const f = classify(e);
      throw new HypsinkError(
        f.kind === 'auth' ? 'HYPSINK_ERR_AUTH' : 'HYPSINK_ERR_DESTINATION',
        `${head}: the credentials may begin an upload under ${root} at ${store} but AbortMultipartUpload of the probe s3://${cfg.bucket}/${key} failed (${f.summary}); ` +
          'that upload stays pending (no object, but stored) until it is aborted; a failed export would leave its uploads so too',
        { hint: `Allow s3:AbortMultipartUpload on bucket "${cfg.bucket}" (and add a lifecycle rule AbortIncompleteMultipartUpload); ${AGAIN}.` },
      );
    }
  }
  const exists = listable ? `bucket "${cfg.bucket}" exists at ${store}` : `bucket "${cfg.bucket}" at ${store} (HeadBucket refused: no s3:ListBucket, which exports do not need)`;
  return `${exists}; the credentials may write under ${root} (a multipart upload begun and aborted, no object made)`;
}

/** Abort uploads an earlier check left (cut between its create and its abort). Best effort. */
async function reapProbes(client: S3Client, bucket: string, base: string, signal: AbortSignal): Promise<void> {
  try {
    const r = await client.send(new ListMultipartUploadsCommand({ Bucket: bucket, Prefix: base }), { abortSignal: signal });
    for (const u of r.Uploads ?? []) {
      if (!u.Key?.startsWith(base) || !u.UploadId) continue;
      await client.send(new AbortMultipartUploadCommand({ Bucket: bucket, Key: u.Key, UploadId: u.UploadId }), { abortSignal: signal }).catch(() => undefined);
    }
  } catch {
    // Listing uploads may be denied or not implemented; the probe goes on without it.
  }
}

interface Where {
  readonly head: string;
  readonly op: string;
  readonly bucket: string;
  readonly store: string;
  readonly root: string;
  readonly region: string;
  readonly endpoint: string | undefined;
}

/** What a refused or unanswered request of the check means, naming the bucket and the store. */
function failure(e: unknown, signal: AbortSignal, w: Where): HypsinkError {
  const f: Fault = classify(e, signal);
  const what = `${w.op}: ${f.summary}`;
  if (f.kind === 'aborted') return new HypsinkError('HYPSINK_ERR_ABORTED', `${w.head}: the connection check of bucket "${w.bucket}" at ${w.store} was stopped (${w.op})`);
  if (f.kind === 'noBucket' || (w.op === 'HeadBucket' && f.status === 404)) {
    return new HypsinkError('HYPSINK_ERR_DESTINATION', `${w.head}: bucket "${w.bucket}" does not exist at ${w.store} (${what})`, {
      hint: `Create the bucket, or fix config.bucket / config.endpoint / config.region of this sink; ${AGAIN}.`,
    });
  }
  const redirect = f.status === 301 || f.code === 'PermanentRedirect' || f.code === 'AuthorizationHeaderMalformed' || f.code === 'IllegalLocationConstraintException';
  if (redirect) {
    const there = regionOf(e);
    return new HypsinkError(
      'HYPSINK_ERR_DESTINATION',
      `${w.head}: bucket "${w.bucket}" is not in config.region "${w.region}"${there ? ` but in "${there}"` : ''} at ${w.store} (${what})`,
      { hint: `Set config.region of this sink to the bucket's region${there ? ` ("${there}")` : ''}; ${AGAIN}.` },
    );
  }
  if (f.kind === 'auth') {
    const may = w.op === 'HeadBucket' ? `were refused for bucket "${w.bucket}"` : `may not write to bucket "${w.bucket}" under ${w.root}`;
    return new HypsinkError('HYPSINK_ERR_AUTH', `${w.head}: the credentials the AWS default chain finds ${may} at ${w.store} (${what})`, {
      hint: `Check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, AWS_PROFILE or the instance role, and that they allow s3:PutObject and s3:AbortMultipartUpload on bucket "${w.bucket}"; ${AGAIN}.`,
    });
  }
  if (f.kind === 'retryable') {
    const network = f.status === undefined;
    const msg = network
      ? `${w.head}: could not reach the store at ${w.store} for bucket "${w.bucket}" (${what}); check ${w.endpoint === undefined ? 'the network and config.region' : 'config.endpoint'} and that the store runs`
      : `${w.head}: the store at ${w.store} is throttling or failing (${what}) for bucket "${w.bucket}"`;
    return new HypsinkError('HYPSINK_ERR_RETRYABLE', msg, {
      retryable: true,
      hint: network ? `Start the store, or fix config.endpoint of this sink; ${AGAIN}.` : `Wait a moment; ${AGAIN}.`,
    });
  }
  return new HypsinkError('HYPSINK_ERR_DESTINATION', `${w.head}: ${w.op} of bucket "${w.bucket}" at ${w.store} was refused (${f.summary})`, {
    hint: `Check config.bucket, config.region and config.endpoint of this sink; ${AGAIN}.`,
  });
}

/** The region S3 says the bucket is in (x-amz-bucket-region), when it says. */
function regionOf(e: unknown): string | undefined {
  const h = (e as { $response?: { headers?: Record<string, string | undefined> } } | null)?.$response?.headers;
  const r = h?.['x-amz-bucket-region'];
  return typeof r === 'string' && /^[a-z0-9-]{1,32}$/.test(r) ? r : undefined;
}
