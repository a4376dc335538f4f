/** The local-fs destination as the host builds it, for tests that call it directly. */
import activate from '../../plugins/local-fs/src/index.js';
import type { BlobDestination, DestinationFactory, PluginContext, PluginManifest } from '../../types/index.js';

/** local-fs on `dir` (sink "archive"), built by the plugin's own factory. */
export function localFs(dir: string, config: Record<string, unknown> = {}): BlobDestination {
  const found: DestinationFactory[] = [];
  const manifest = { name: '@hypsink/local-fs' } as PluginManifest;
  const nothing = () => {
    throw new Error('local-fs registers a destination only');
  };
  activate({ manifest, registerDestination: (f: DestinationFactory) => found.push(f), registerSink: nothing, registerEncoder: nothing, registerTransform: nothing } as unknown as PluginContext);
  const log = { debug() {}, info() {}, warn() {}, error() {} };
  return found[0]!.create({ dir, ...config }, { sink: 'archive', stateDir: dir, cacheId: '00000000-0000-4000-8000-000000000000', baseDir: dir, log });
}

/**
 * `inner` with the methods in `over` in place of its own, every other one
 * called on `inner` (a class's methods do not survive a spread): a test's
 * view of a real destination that holds or counts some of its calls.
 */
export function overDestination(inner: BlobDestination, over: Partial<BlobDestination>): BlobDestination {
  return new Proxy(inner, {
    get(target, key, receiver) {
      if (Object.hasOwn(over, key)) return over[key as keyof BlobDestination];
      const v = Reflect.get(target, key, receiver) as unknown;
      return typeof v === 'function' ? v.bind(target) : v;
    },
  });
}
