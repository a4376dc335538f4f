/**
 * A config as its file holds it: what `open({ config })` of the `hypsink` entry
 * takes, typed, so a misspelled field fails at compile time as it fails at load
 * (LLP 0032). Optional fields have the defaults the README's config reference
 * gives; "//" keys are comments at every level. A compile-time check in
 * kernel/config/schema.ts keeps these keys the ones the loader's schema knows.
 * @ref LLP 0070
 */
import type { ColumnType } from './schema.js';

/** A comment, at any level of a config: never read. */
interface Commented {
  readonly '//'?: string;
}

/** A duration: "90s", "5m", "12h", "30d", or milliseconds. */
export type DurationInput = string | number;

export interface ColumnConfig extends Commented {
  readonly name: string;
  readonly type: ColumnType;
  /** Default true. */
  readonly nullable?: boolean;
}

export interface DatasetConfig extends Commented {
  readonly columns: readonly ColumnConfig[];
  readonly timestampColumn?: string;
  readonly maxRowBytes?: number;
}

/** What every sink has. `config` belongs to the sink's plugin (a blob sink's: its destination). */
interface SinkConfigCommon extends Commented {
  readonly datasets: readonly string[];
  /** A 5-field cron expression (default every 5 minutes). */
  readonly schedule?: string;
  readonly config?: Readonly<Record<string, unknown>>;
  readonly minRows?: number;
  readonly maxDelay?: DurationInput;
  readonly unit?: { readonly maxRows?: number; readonly maxBytes?: number } & Commented;
  /** Transform entries (`{ "drop": [...] }`, `{ "redact": {...} }`, a plugin's kind …), in order. */
  readonly transforms?: readonly Readonly<Record<string, unknown>>[];
}

/** A blob sink: an encoder (`writer`) and a blob `destination`. */
export interface BlobSinkConfigInput extends SinkConfigCommon {
  readonly writer: string;
  readonly destination: string;
  /** The writer's own options. */
  readonly writerConfig?: Readonly<Record<string, unknown>>;
  readonly keys?: { readonly time?: 'day' | 'hour' } & Commented;
  readonly plugin?: never;
}

/** A request sink: one plugin that ships units itself (forward, postgres …). */
export interface RequestSinkConfigInput extends SinkConfigCommon {
  readonly plugin: string;
  readonly writer?: never;
  readonly destination?: never;
}

export type SinkConfigInput = BlobSinkConfigInput | RequestSinkConfigInput;

export interface HypsinkConfig extends Commented {
  readonly cache?: {
    readonly root?: string;
    readonly lockWaitMs?: number;
    readonly seqBlockSize?: number;
    readonly segmentBytes?: number;
    readonly rowGroupRows?: number;
    /**
     * The codec of the cache files written from now on: `"lz4"` (default;
     * quicker to write and to read back for an export) or `"zstd"` (about 30%
     * smaller). Files already written are read as they are.
     */
    readonly compression?: 'lz4' | 'zstd';
  } & Commented;
  readonly state?: { readonly dir?: string } & Commented;
  readonly maintenance?: {
    readonly schedule?: string;
    readonly retention?: {
      readonly maxAge?: DurationInput;
      readonly maxRows?: number;
      readonly hardMaxRows?: number;
      readonly ackCoupled?: boolean;
    } & Commented;
    readonly compaction?: { readonly minFiles?: number } & Commented;
  } & Commented;
  readonly driver?: {
    readonly concurrency?: number;
    readonly lockWaitMs?: number;
    readonly outboxBaseMs?: number;
    readonly outboxMaxMs?: number;
  } & Commented;
  readonly datasets: Readonly<Record<string, DatasetConfig>>;
  /** Plugins to load: paths or package names (the `@hypsink/*` built-ins load by themselves). */
  readonly plugins?: readonly string[];
  readonly sinks: Readonly<Record<string, SinkConfigInput>>;
}
