/**
 * `hypsink`, the host API: what a host embeds to record rows into the cache
 * and export them, exactly once. The CLI is a layer over these same calls.
 * What is public here, and what counts as a breaking change, is LLP 0024.
 *
 *   const k = await open({ config: 'hypsink.config.json' });
 *   await k.ingest('events', rows, { source: 'web', batchId: 'host-42' });
 *   await k.export();
 *   await k.close();
 *
 * @ref LLP 0024: the public API surface
 */
import type { Logger } from 'pino';
import { configFromObject, loadConfig } from './config/load.js';
import { createLogger } from './log.js';
import { Hypsink } from './runtime.js';

export interface OpenOptions {
  /**
   * A config file's path, or the config itself as an object (what the file's
   * JSON holds). Default: `hypsink.config.json` in `baseDir`, else the
   * embedded default config.
   */
  readonly config?: string | object;
  /** Where a relative config path and a config object's relative paths resolve (default: the working folder). */
  readonly baseDir?: string;
  /** A pino logger for the kernel's logs (default: JSON lines on stderr at HYPSINK_LOG_LEVEL, else info). */
  readonly log?: Logger;
}

/**
 * Open a kernel: load and check the config, take the cache (creating it on
 * first use). Plugin code loads when a sink is first built to export.
 * Close it when done: `close()` ends parked waits, releases the destinations
 * and the cache.
 */
export async function open(options: OpenOptions = {}): Promise<Hypsink> {
  const baseDir = options.baseDir ?? process.cwd();
  const loaded = typeof options.config === 'object' && options.config !== null ? configFromObject(options.config, baseDir) : await loadConfig(options.config, baseDir);
  return Hypsink.open(loaded, { log: options.log ?? createLogger() });
}

export type { Hypsink, HostIngestOptions, IngestInput, PartitionStatus, SinkStatus, AbsentSinkStatus, StatusReport, ForgetPlan, RetentionPass } from './runtime.js';
export type { IngestResult } from './ingest/ingest.js';
export { IngestError } from './ingest/ingest.js';
export type { TickReport, PartitionReport } from './sinks/driver.js';
export type { ConnectionCheck } from './sinks/connect.js';
export type { FlushResult } from './cache.js';
export { ERROR_CODES, type ErrorCode, HypsinkError, isHypsinkError } from '../types/errors.js';
