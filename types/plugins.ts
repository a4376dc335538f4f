/**
 * Plugins: a folder with `plugin.json` and a module whose default export (or
 * `activate` export) is a function over the context it is handed.
 */
import type { HookTaps } from './hooks.js';
import type { DestinationFactory, EncoderFactory, SinkFactory } from './sinks.js';
import type { TransformFactory } from './transforms.js';

/** The plugin API version this kernel implements; a manifest's `apiVersion` must match its major. */
export const PLUGIN_API_VERSION = '1.0.0';

export type Capability = 'sink' | 'encoder' | 'destination' | 'transform';

/** `plugin.json`: the only place a plugin's name and version live. */
export interface PluginManifest {
  readonly name: string;
  readonly version: string;
  /** Module relative to the plugin folder; default `src/index.ts`, then `src/index.js`. */
  readonly main?: string;
  readonly apiVersion?: string;
  readonly provides: readonly Capability[];
  /** Other plugin names this one needs loaded first. */
  readonly requires?: readonly string[];
}

export interface Logger {
  debug(obj: object | string, msg?: string): void;
  info(obj: object | string, msg?: string): void;
  warn(obj: object | string, msg?: string): void;
  error(obj: object | string, msg?: string): void;
}

/** Handed to `activate`: one per plugin, its logger already tagged with the plugin's name. */
export interface PluginContext {
  readonly manifest: PluginManifest;
  readonly log: Logger;
  readonly hooks: HookTaps;
  registerSink(factory: SinkFactory): void;
  registerEncoder(factory: EncoderFactory): void;
  registerDestination(factory: DestinationFactory): void;
  /** A transform kind sinks name in `transforms` as `{ "plugin": "<name>" }`. @ref LLP 0046 */
  registerTransform(factory: TransformFactory): void;
}

export type ActivateFn = (ctx: PluginContext) => void | Promise<void>;
