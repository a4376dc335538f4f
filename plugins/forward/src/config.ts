/**
 * The forward sink's config: validated once, when the sink is built, so a typo
 * fails the load with one message naming the sink and every bad field.
 * The kernel has already interpolated `${ENV}` references: `token` is plain text here.
 * No message ever quotes a value (the token is one of them).
 */
import { z } from 'zod';
import { type PluginOptionsSpec, parseSinkConfig } from 'hypsink/plugin';

export const MiB = 1024 * 1024;

const RetrySchema = z
  .object({
    /** Tries per unit for network errors and 5xx, the first one included. */
    attempts: z.number().int().min(1).max(50).default(5),
    /** First backoff; doubles per retry, with jitter. */
    baseMs: z.number().int().min(0).default(500),
    /** Cap on one backoff wait. */
    maxMs: z.number().int().min(0).default(30_000),
  })
  .strict();

const positiveInt = z.number().int().min(1);

export const ForwardConfigSchema = z
  .object({
    /** The receiver's base URL; `/v1/ingest/<dataset>` is appended. */
    url: z
      .url({
        protocol: /^https?$/,
        error: (iss) => (iss.input === undefined ? "required: the receiver's base URL" : 'must be an http(s) URL'),
      })
      .refine((u) => !/^[a-z]+:\/\/[^/]*@/i.test(u), 'must not carry credentials; use config.token')
      .refine((u) => !/[?#]/.test(u), 'must not have a query or fragment'),
    /** Bearer token; usually "${HYPSINK_TOKEN}". */
    token: z
      .string({ error: 'must be a string' })
      .min(1, 'is empty (is the environment variable it names set?)')
      .refine((t) => /^[\x21-\x7e]+$/.test(t), 'must be visible ASCII without spaces (a bearer token)')
      .optional(),
    /**
     * Cut a unit at this many rows. Each unit is one POST and, at an
     * aggregator, one commit: a chain of fsynced steps whatever its rows, so
     * units far smaller than this spend most of both tiers' time on that chain
     * (LLP 0087). ~3.4 MB of NDJSON for 170-byte rows.
     */
    maxRows: positiveInt.default(20_000),
    /**
     * Cut a unit near this many bytes as the kernel estimates them: from the cache's
     * Parquet file sizes, not from the NDJSON body. For files of many rows the body
     * is larger (about 2× for typical activity rows, more for repetitive ones), so
     * keep this well under the receiver's body limit (16 MiB for the reference one).
     */
    maxBytes: positiveInt.default(4 * MiB),
    /** One POST, body and answer included; a timeout is retried like a network error. */
    timeoutMs: positiveInt.default(30_000),
    /** Total waiting per unit (backpressure and backoff) before the unit is handed back to the kernel. */
    maxInlineWaitMs: z.number().int().min(0).default(300_000),
    /** Backpressure waits when the receiver gives no usable Retry-After; the last step repeats. */
    ladderMs: z.array(positiveInt).min(1).default([30_000, 60_000, 120_000, 300_000]),
    retry: RetrySchema.default({ attempts: 5, baseMs: 500, maxMs: 30_000 }),
    /**
     * Mixed into every batch id, with the cache's own id (`SinkBuildContext.cacheId`),
     * which already keeps several caches forwarding to one receiver apart.
     * @ref LLP 0008, LLP 0021: what a batch id is derived from
     */
    idNamespace: z.string().min(1).optional(),
  })
  .strict();

/** The sink's `config`, declared so the host checks it before `create` (`retry` by its own keys). @ref LLP 0032 */
export const FORWARD_OPTIONS: PluginOptionsSpec = {
  keys: [...Object.keys(ForwardConfigSchema.shape), ...Object.keys(RetrySchema.shape).map((k) => `retry.${k}`)],
  validate: ForwardConfigSchema['~standard'].validate,
};

export type ForwardConfig = z.infer<typeof ForwardConfigSchema>;
export type RetryBudget = ForwardConfig['retry'];

/** Validates and normalizes; throws HYPSINK_ERR_CONFIG naming the sink and every bad field. */
export function parseForwardConfig(raw: unknown, sink: string): ForwardConfig {
  const data = parseSinkConfig(ForwardConfigSchema, raw, sink);
  // One base without a trailing slash, so `${url}/v1/ingest/…` never doubles it.
  return { ...data, url: data.url.replace(/\/+$/, '') };
}
