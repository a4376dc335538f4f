/**
 * The config file, validated with zod at load. Errors name the sink (or
 * dataset) and the field. A key no schema here knows is an error (load.ts,
 * keys.ts), but "//" comments. @ref LLP 0032
 */
import { Cron } from 'croner';
import { z } from 'zod';
import type { COLUMN_TYPES } from '../../types/schema.js';
import { parseDuration } from './duration.js';

const duration = z.union([z.string(), z.number()]).refine((v) => parseDuration(v) !== null, {
  message: 'expected a duration like "90s", "5m", "12h", "30d" or milliseconds',
});

export const cronExpr = z.string().superRefine((v, ctx) => {
  if (v.trim().split(/\s+/).length !== 5) {
    ctx.addIssue({ code: 'custom', message: `"${v}" is not a 5-field cron expression (minute hour day month weekday)` });
    return;
  }
  try {
    new Cron(v, { paused: true }).stop();
  } catch (e) {
    ctx.addIssue({ code: 'custom', message: `"${v}" is not a valid cron expression (${(e as Error).message})` });
  }
});

const name = z.string().regex(/^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$/, 'use 1-64 characters of A-Z a-z 0-9 _ . - (not starting with . or -)');

const column = z.object({
  name: z.string().min(1).refine((n) => !n.startsWith('_hyp_') && n !== 'source', {
    message: 'names starting with _hyp_ and the name "source" are reserved',
  }),
  type: z.enum(['INT64', 'DOUBLE', 'STRING', 'BOOLEAN', 'TIMESTAMP', 'JSON'] satisfies typeof COLUMN_TYPES),
  nullable: z.boolean().default(true),
});

export const datasetSchema = z
  .object({
    columns: z.array(column).min(1),
    timestampColumn: z.string().optional(),
    /** Rows whose NDJSON line is longer than this go to the dead letter. */
    maxRowBytes: z.number().int().positive().default(1024 * 1024),
  })
  .superRefine((d, ctx) => {
    const seen = new Set<string>();
    d.columns.forEach((c, i) => {
      if (seen.has(c.name)) ctx.addIssue({ code: 'custom', path: ['columns', i, 'name'], message: `duplicate column "${c.name}"` });
      seen.add(c.name);
    });
    if (d.timestampColumn !== undefined) {
      const c = d.columns.find((x) => x.name === d.timestampColumn);
      if (c?.type !== 'TIMESTAMP') {
        ctx.addIssue({ code: 'custom', path: ['timestampColumn'], message: `"${d.timestampColumn}" is not a TIMESTAMP column` });
      }
    }
  });

const sinkCommon = {
  datasets: z.array(z.string()).min(1),
  schedule: cronExpr.default('*/5 * * * *'),
  config: z.record(z.string(), z.unknown()).default({}),
  /** Small-file policy: wait until this many rows are pending… */
  minRows: z.number().int().positive().default(1),
  /**
   * …or the oldest pending row has waited this long. Default 0 (export every
   * tick); 1h when only `minRows` is given, so a quiet source still ships.
   */
  maxDelay: duration.optional(),
  unit: z
    .object({ maxRows: z.number().int().positive().optional(), maxBytes: z.number().int().positive().optional() })
    .default({}),
  /**
   * What the sink does to rows between the read and its encoder or shipper, as
   * written: the transform engine checks each entry (strict keys, `${NAME}`
   * resolved there, so it knows which values are secrets). @ref LLP 0046
   */
  transforms: z.array(z.unknown()).default([]),
};

export const blobSink = z.object({
  writer: z.string().min(1),
  destination: z.string().min(1),
  /** Options of the writer (encoder); `config` belongs to the destination. */
  writerConfig: z.record(z.string(), z.unknown()).default({}),
  /** Key layout: Hive-style time segments (`dt=YYYY-MM-DD`, and `hour=HH`) from the dataset's timestamp column, in UTC. */
  keys: z.object({ time: z.enum(['day', 'hour']).optional() }).strict().default({}),
  ...sinkCommon,
});
export const requestSink = z.object({ plugin: z.string().min(1), ...sinkCommon });

export const configSchema = z.object({
  cache: z
    .object({
      root: z.string().default('.hypsink/cache'),
      lockWaitMs: z.number().int().positive().default(10_000),
      seqBlockSize: z.number().int().positive().default(1024),
      segmentBytes: z.number().int().positive().default(64 * 1024 * 1024),
      // DEFAULT_ROW_GROUP_ROWS (cache/parquet.ts, LLP 0017), written out: this module loads no Parquet.
      rowGroupRows: z.number().int().positive().default(16_384),
      // DEFAULT_CACHE_COMPRESSION (store/parquet.ts, LLP 0103), likewise.
      compression: z.enum(['lz4', 'zstd']).default('lz4'),
    })
    .default({ root: '.hypsink/cache', lockWaitMs: 10_000, seqBlockSize: 1024, segmentBytes: 64 * 1024 * 1024, rowGroupRows: 16_384, compression: 'lz4' }),
  state: z.object({ dir: z.string().default('.hypsink/state') }).default({ dir: '.hypsink/state' }),
  maintenance: z
    .object({
      schedule: cronExpr.optional(),
      retention: z
        .object({
          maxAge: duration.optional(),
          maxRows: z.number().int().positive().optional(),
          /** Past this many rows a partition is pruned even if a sink has not exported them: a gap. */
          hardMaxRows: z.number().int().positive().optional(),
          /** Keep rows until every sink exporting the dataset has them (default on). */
          ackCoupled: z.boolean().default(true),
        })
        .optional(),
      /**
       * Scheduled maintenance and `maintain --compact` compact partitions with at least
       * minFiles data files; without this section `maintain --compact` takes 2 and the
       * schedule 8.
       */
      compaction: z.object({ minFiles: z.number().int().min(2).default(8) }).optional(),
    })
    .default({}),
  driver: z
    .object({
      concurrency: z.number().int().positive().default(4),
      lockWaitMs: z.number().int().positive().default(10_000),
      outboxBaseMs: z.number().int().positive().default(5_000),
      outboxMaxMs: z.number().int().positive().default(300_000),
    })
    .default({ concurrency: 4, lockWaitMs: 10_000, outboxBaseMs: 5_000, outboxMaxMs: 300_000 }),
  datasets: z.record(name, datasetSchema),
  plugins: z.array(z.string()).default([]),
  /** Each sink is checked on its own (blobSink or requestSink) so errors name it. */
  sinks: z.record(name, z.record(z.string(), z.unknown())),
});

export type BlobSinkConfig = z.infer<typeof blobSink>;
export type RequestSinkConfig = z.infer<typeof requestSink>;
export type SinkConfig = BlobSinkConfig | RequestSinkConfig;
export type Config = Omit<z.infer<typeof configSchema>, 'sinks'> & { sinks: Record<string, SinkConfig> };

export function isBlobSink(s: SinkConfig): s is BlobSinkConfig {
  return 'writer' in s;
}

/**
 * The public config type (types/config-file.ts, what `open({ config })` takes)
 * names the keys this schema knows, at every level: a key added here and not
 * there (or the other way) fails to compile, naming the level. @ref LLP 0070
 */
type Keys<T> = Exclude<keyof NonNullable<T>, '//'>;
type SameKeys<Public, Schema> = [Keys<Public>] extends [Keys<Schema>] ? ([Keys<Schema>] extends [Keys<Public>] ? true : Keys<Schema> | Keys<Public>) : Keys<Schema> | Keys<Public>;
type In = z.input<typeof configSchema>;
type Maint = NonNullable<In['maintenance']>;
type Pub = import('../../types/config-file.js').HypsinkConfig;
type PubMaint = NonNullable<Pub['maintenance']>;
type PubBlob = import('../../types/config-file.js').BlobSinkConfigInput;
type PubRequest = import('../../types/config-file.js').RequestSinkConfigInput;
type PubDataset = import('../../types/config-file.js').DatasetConfig;
const publicConfigKeys: {
  top: SameKeys<Pub, In>;
  cache: SameKeys<Pub['cache'], In['cache']>;
  state: SameKeys<Pub['state'], In['state']>;
  driver: SameKeys<Pub['driver'], In['driver']>;
  maintenance: SameKeys<PubMaint, Maint>;
  retention: SameKeys<PubMaint['retention'], Maint['retention']>;
  compaction: SameKeys<PubMaint['compaction'], Maint['compaction']>;
  dataset: SameKeys<PubDataset, z.input<typeof datasetSchema>>;
  column: SameKeys<PubDataset['columns'][number], z.input<typeof column>>;
  blobSink: SameKeys<Exclude<keyof PubBlob, 'plugin'> extends infer K ? { [k in K & PropertyKey]: 0 } : never, z.input<typeof blobSink>>;
  requestSink: SameKeys<Exclude<keyof PubRequest, 'writer' | 'destination'> extends infer K ? { [k in K & PropertyKey]: 0 } : never, z.input<typeof requestSink>>;
} = { top: true, cache: true, state: true, driver: true, maintenance: true, retention: true, compaction: true, dataset: true, column: true, blobSink: true, requestSink: true };
void publicConfigKeys;
