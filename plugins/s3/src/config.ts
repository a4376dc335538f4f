/**
 * The s3 destination's config: validated once, at sink build time, so a typo
 * fails the load with one message naming the sink and the field.
 */
import { z } from 'zod';
import { type PluginOptionsSpec, parseSinkConfig } from 'hypsink/plugin';

export const MiB = 1024 * 1024;
/** Real S3 rejects parts under 5 MiB (except the last); s3rver and MinIO-in-tests accept smaller. */
export const S3_MIN_PART_SIZE = 5 * MiB;
/** S3 caps a multipart upload at 10,000 parts. */
export const S3_MAX_PARTS = 10_000;

/**
 * How create-if-absent is enforced (LLP 0007):
 * - `header`: `If-None-Match: *` on PutObject / CompleteMultipartUpload only (AWS S3).
 * - `head`:   HeadObject pre-check only, no conditional header (stores that reject it).
 * - `auto`:   HeadObject pre-check, then the conditional write (default; safe on both kinds).
 */
export const CreateIfAbsentMode = z.enum(['header', 'head', 'auto']);
export type CreateIfAbsentMode = z.infer<typeof CreateIfAbsentMode>;

const RetrySchema = z
  .object({
    /** Tries per request, the first one included. */
    attempts: z.number().int().min(1).max(50).default(5),
    /** First backoff; doubles per retry, with jitter. */
    baseMs: z.number().int().min(0).default(200),
    /** Cap on one backoff wait; a Retry-After above it ends the budget early (the kernel waits instead). */
    maxMs: z.number().int().min(0).default(20_000),
  })
  .strict();

const BUCKET_RE = /^[A-Za-z0-9][A-Za-z0-9._-]*[A-Za-z0-9]$/;

export const S3ConfigSchema = z
  .object({
    bucket: z
      .string({ error: 'required: the bucket name' })
      .min(3, 'must be at least 3 characters')
      .max(255)
      .regex(BUCKET_RE, 'must be a bucket name (letters, digits, ".", "-", "_"), not a URL or path'),
    /** Prepended to every key as `prefix/`; leading, trailing and doubled slashes are dropped. */
    prefix: z.string().default(''),
    region: z.string().min(1).default('us-east-1'),
    /** An S3-compatible endpoint (MinIO, s3rver, ...); omit for AWS. */
    endpoint: z
      .url({ protocol: /^https?$/, error: 'must be an http(s) URL' })
      .refine((u) => !/^[a-z]+:\/\/[^/]*@/i.test(u), 'must not carry credentials; use the AWS credential chain')
      .optional(),
    /** Path-style addressing (`endpoint/bucket/key`), which most S3-compatible stores need. */
    forcePathStyle: z.boolean().default(false),
    /** Bytes per multipart part; blobs larger than this go multipart. S3 needs ≥ 5 MiB for real stores. */
    partSize: z
      .number()
      .int()
      .min(1)
      .max(5 * 1024 * MiB)
      .default(8 * MiB),
    createIfAbsent: CreateIfAbsentMode.default('auto'),
    retry: RetrySchema.default({ attempts: 5, baseMs: 200, maxMs: 20_000 }),
    /** One request (including its body) must finish within this; a timeout is retried. */
    requestTimeoutMs: z.number().int().min(1).default(120_000),
    connectTimeoutMs: z.number().int().min(1).default(10_000),
  })
  .strict();

/** The sink's `config`, declared so the host checks it before `create` (`retry` by its own keys). @ref LLP 0032 */
export const S3_OPTIONS: PluginOptionsSpec = {
  keys: [...Object.keys(S3ConfigSchema.shape), ...Object.keys(RetrySchema.shape).map((k) => `retry.${k}`)],
  validate: S3ConfigSchema['~standard'].validate,
};

export type S3Config = z.infer<typeof S3ConfigSchema>;
export type RetryBudget = S3Config['retry'];

/** Validates and normalizes; throws HYPSINK_ERR_CONFIG naming the sink and every bad field. */
export function parseS3Config(raw: unknown, sink: string): S3Config {
  const cfg = parseSinkConfig(S3ConfigSchema, raw, sink);
  return { ...cfg, prefix: normalizePrefix(cfg.prefix) };
}

export function normalizePrefix(prefix: string): string {
  return prefix.split('/').filter(Boolean).join('/');
}
