/**
 * The whole lifecycle in one place (webpack's Compiler.hooks): one frozen object
 * of typed tapable hooks. The kernel is the only caller; plugins get `taps()`,
 * a view without `call*`. Each hook's kind is chosen in types/hooks.ts.
 */
import { AsyncParallelHook, AsyncSeriesHook, SyncHook } from 'tapable';
import type { HookTaps, LifecycleHooks } from '../types/hooks.js';

export function createHooks(): LifecycleHooks {
  return Object.freeze({
    cacheFlushed: new AsyncSeriesHook(['event']),
    retentionDone: new AsyncSeriesHook(['event']),
    compactionDone: new AsyncSeriesHook(['event']),
    tickStart: new AsyncSeriesHook(['event']),
    tickEnd: new AsyncSeriesHook(['event']),
    partitionExported: new AsyncSeriesHook(['event']),
    partitionFailed: new AsyncSeriesHook(['event']),
    watermarkAdvanced: new SyncHook(['event']),
    gapDetected: new AsyncSeriesHook(['event']),
    shutdown: new AsyncParallelHook<[]>(),
  }) as LifecycleHooks;
}

/** The tap-only view handed to plugins. */
export function taps(hooks: LifecycleHooks): HookTaps {
  const view: Record<string, unknown> = {};
  for (const [name, hook] of Object.entries(hooks)) {
    type AnyFn = (...args: unknown[]) => unknown;
    const h = hook as unknown as { tap: AnyFn; tapPromise?: AnyFn };
    view[name] = Object.freeze({
      tap: h.tap.bind(hook),
      ...(h.tapPromise ? { tapPromise: h.tapPromise.bind(hook) } : {}),
    });
  }
  return Object.freeze(view) as unknown as HookTaps;
}
