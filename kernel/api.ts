/**
 * `hypsink`, the host API: what a host embeds to record rows into the cache
 * and export them, exactly once. The CLI is a layer over these same calls.
 * What is public here, and what counts as a breaking change, is LLP 0024.
 *
 *   const k = await open('hypsink.config.json');   // or open({ config: {...} })
 *   await k.ingest('events', rows, { source: 'web', batchId: 'host-42' });
 *   await k.export();
 *   await k.close();
 *
 * @ref LLP 0024: the public API surface
 */
import type { Logger } from 'pino';
import { HypsinkError } from '../types/errors.js';
import type { HypsinkConfig } from '../types/config-file.js';
import { didYouMean } from './config/keys.js';
import { configFromObject, loadConfig } from './config/load.js';
import { createLogger } from './log.js';
import { Hypsink } from './runtime.js';

export interface OpenOptions {
  /**
   * A config file's path, or the config itself as an object (what the file's
   * JSON holds). Default: `hypsink.config.json` in `baseDir`, else the
   * embedded default config.
   */
  readonly config?: string | HypsinkConfig;
  /** Where a relative config path and a config object's relative paths resolve (default: the working folder). */
  readonly baseDir?: string;
  /** A pino logger for the kernel's logs (default: JSON lines on stderr at HYPSINK_LOG_LEVEL, else info). */
  readonly log?: Logger;
}

const OPTIONS: readonly (keyof OpenOptions)[] = ['config', 'baseDir', 'log'];

/**
 * What `open` was given, checked: from JavaScript nothing stops `open(path)` or
 * `open({ configPath })`, which used to open the embedded default config
 * without a word. A string is a config path. @ref LLP 0070
 */
function openOptions(given: unknown): OpenOptions {
  if (given === undefined) return {};
  if (typeof given === 'string') return { config: given };
  if (typeof given !== 'object' || given === null || Array.isArray(given)) {
    throw new HypsinkError('HYPSINK_ERR_USAGE', `open(): expected a config path or options ({ config, baseDir, log }), got ${Array.isArray(given) ? 'an array' : String(given)}`, {
      hint: 'Call open("path/to/hypsink.config.json") or open({ config, baseDir, log }).',
    });
  }
  for (const key of Object.keys(given)) {
    if ((OPTIONS as readonly string[]).includes(key)) continue;
    // `configPath`, `configFile`: the option they grew from.
    const guess = didYouMean(key, OPTIONS) ?? OPTIONS.find((o) => key.toLowerCase().startsWith(o.toLowerCase()));
    throw new HypsinkError('HYPSINK_ERR_USAGE', `open(): unknown option "${key}"${guess ? `; did you mean "${guess}"?` : ''} (options: ${OPTIONS.join(', ')})`, {
      hint: 'Pass only the options open() knows: config (a path or the config object), baseDir, log.',
    });
  }
  return given as OpenOptions;
}

/**
 * Open a kernel: load and check the config, take the cache (creating it on
 * first use). Plugin code loads when a sink is first built to export.
 * `open(path)` is `open({ config: path })`.
 * Close it when done: `close()` ends parked waits, releases the destinations
 * and the cache.
 */
export async function open(options: OpenOptions | string = {}): Promise<Hypsink> {
  const o = openOptions(options);
  const baseDir = o.baseDir ?? process.cwd();
  const loaded = typeof o.config === 'object' && o.config !== null ? configFromObject(o.config, baseDir) : await loadConfig(o.config, baseDir);
  return Hypsink.open(loaded, { log: o.log ?? createLogger() });
}

export type { Hypsink, HostIngestOptions, IngestInput, PartitionStatus, SinkStatus, AbsentSinkStatus, StatusReport, ForgetPlan, RetentionPass } from './runtime.js';
export type { IngestResult } from './ingest/ingest.js';
export { IngestError } from './ingest/ingest.js';
export type { TickReport, PartitionReport } from './sinks/driver.js';
export type { ConnectionCheck } from './sinks/connect.js';
export type { FlushResult } from './cache.js';
export type { VerifyReport, SinkVerify } from './sinks/verify.js';
export type { HypsinkConfig, SinkConfigInput, BlobSinkConfigInput, RequestSinkConfigInput, DatasetConfig, ColumnConfig, DurationInput } from '../types/config-file.js';
export { ERROR_CODES, type ErrorCode, HypsinkError, isHypsinkError } from '../types/errors.js';
