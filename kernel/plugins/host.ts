/**
 * The plugin host (Fastify's plugin-utils, Rollup's PluginDriver): loads a
 * plugin folder through small named checks — manifest shape, API version,
 * required plugins, provided capabilities — and hands `activate` a context of
 * its own. Every plugin error is wrapped here, once, with the plugin's name.
 * Registration closes when the kernel starts.
 */
import { promises as fsp } from 'node:fs';
import { createRequire } from 'node:module';
import { basename, dirname, isAbsolute, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { z } from 'zod';
import { HypsinkError, isHypsinkError } from '../../types/errors.js';
import type { LifecycleHooks } from '../../types/hooks.js';
import { type ActivateFn, type Capability, PLUGIN_API_VERSION, type PluginContext, type PluginManifest } from '../../types/plugins.js';
import type { DestinationFactory, EncoderFactory, SinkFactory } from '../../types/sinks.js';
import type { TransformFactory } from '../../types/transforms.js';
import { taps } from '../hooks.js';
import type { Logger } from '../../types/plugins.js';
import { didYouMean } from '../config/keys.js';

/** Running from TypeScript sources (tests, the bench), under tsx, rather than compiled (dist/). */
const FROM_SOURCES = import.meta.url.endsWith('.ts');

/** Set by the CLI bundle (scripts/build.mjs), whose chunks sit elsewhere in dist/: the plugins folder relative to them. */
declare const __HYPSINK_PLUGINS_DIR__: string | undefined;

export const BUILTIN_DIR = resolve(
  dirname(fileURLToPath(import.meta.url)),
  typeof __HYPSINK_PLUGINS_DIR__ === 'string' ? __HYPSINK_PLUGINS_DIR__ : '../../plugins',
);
const BUILTIN_PREFIX = '@hypsink/';

const manifestSchema = z.object({
  name: z.string().min(1),
  version: z.string().regex(/^\d+\.\d+\.\d+/, 'expected a semver version'),
  main: z.string().optional(),
  apiVersion: z.string().default(PLUGIN_API_VERSION),
  provides: z.array(z.enum(['sink', 'encoder', 'destination', 'transform'])).min(1),
  requires: z.array(z.string()).default([]),
});

export interface Registry {
  readonly sinks: Map<string, SinkFactory>;
  readonly encoders: Map<string, EncoderFactory>;
  readonly destinations: Map<string, DestinationFactory>;
  readonly transforms: Map<string, TransformFactory>;
}

/** A plugin named by what the user wrote, never by where hypsink is installed. @ref LLP 0032 */
const shown = (spec: string, rel: string) => `${spec.replace(/\/+$/, '')}/${rel}`;

const KIND_PLURAL: Record<Capability, string> = { sink: 'request sinks', encoder: 'encoders', destination: 'destinations', transform: 'transforms' };

/** No plugin by that name: said once a list of the names that exist can be added (`PluginHost.unknown`). */
class UnknownPlugin extends HypsinkError {
  constructor(
    readonly spec: string,
    readonly why: string | undefined,
  ) {
    super('HYPSINK_ERR_PLUGIN', `unknown plugin "${spec}"${why ? `: ${why}` : ''}`);
  }
}

const TS_FILE = /\.[mc]?ts$/;

/**
 * A plugin with TypeScript sources and no JavaScript: an installed hypsink runs
 * no TypeScript loader, so it cannot load. Said as such, not as a failure hypsink
 * has no code for. @ref LLP 0070
 */
function typescriptOnly(m: PluginManifest, spec: string, files: readonly string[]): HypsinkError {
  return new HypsinkError(
    'HYPSINK_ERR_PLUGIN',
    `plugin ${m.name}: ${files.map((f) => shown(spec, f)).join(' and ')} ${files.length > 1 ? 'are' : 'is'} TypeScript, and hypsink loads plugins as JavaScript (it runs no TypeScript loader)`,
    {
      hint: 'Compile the plugin to JavaScript first (tsc, to dist/index.js), and name the .js module in plugin.json "main" or leave "main" out (see PLUGIN_AUTHORING.md, "The package").',
    },
  );
}

/** A plugin module's activate function (default or named export). */
function activateOf(m: PluginManifest, file: string, mod: { default?: unknown; activate?: unknown }): ActivateFn {
  const fn = mod.activate ?? mod.default;
  if (typeof fn !== 'function') {
    throw new HypsinkError('HYPSINK_ERR_PLUGIN', `plugin ${m.name}: ${file} exports no activate function (default or named "activate")`);
  }
  return fn as ActivateFn;
}

export class PluginHost {
  readonly registry: Registry = { sinks: new Map(), encoders: new Map(), destinations: new Map(), transforms: new Map() };
  private readonly loaded = new Map<string, PluginManifest>();
  private readonly loading = new Set<string>();
  /** Plugins named by a sink, known by their manifest, not yet imported. */
  private readonly prepared = new Map<string, PluginManifest>();
  /** The plugin whose `activate` is running: the only one that may register. */
  private activating: string | undefined;

  constructor(
    private readonly hooks: LifecycleHooks,
    private readonly log: Logger & { child(b: object): Logger },
    private readonly baseDir: string,
  ) {}

  /** What kind of thing a registered name is, for config errors. */
  kindOf(name: string): Capability | undefined {
    if (this.registry.sinks.has(name)) return 'sink';
    if (this.registry.encoders.has(name)) return 'encoder';
    if (this.registry.destinations.has(name)) return 'destination';
    if (this.registry.transforms.has(name)) return 'transform';
    return undefined;
  }

  /**
   * What a plugin named by a sink provides, from its plugin.json alone: the
   * checks of the config run without importing its code.
   */
  async prepare(spec: string, want?: Capability): Promise<readonly Capability[]> {
    const kind = this.kindOf(spec);
    if (kind) return [kind];
    try {
      const have = this.prepared.get(spec) ?? this.loaded.get(this.locate(spec));
      if (have) return have.provides;
      const m = await this.readManifest(spec, this.locate(spec));
      this.checkApiVersion(m);
      this.prepared.set(spec, m);
      return m.provides;
    } catch (e) {
      throw e instanceof UnknownPlugin ? await this.unknown(e, want) : e;
    }
  }

  /**
   * The names a config may give for `kind` (every kind without it): the
   * built-ins by their plugin.json, and what the plugins loaded so far
   * registered or a sink named. @ref LLP 0032
   */
  async knownNames(kind?: Capability): Promise<string[]> {
    const fits = (provides: readonly string[]) => kind === undefined || provides.includes(kind);
    const names = new Set<string>();
    const dirs = await fsp.readdir(BUILTIN_DIR, { withFileTypes: true }).catch(() => []);
    for (const d of dirs.filter((x) => x.isDirectory()).sort((a, b) => a.name.localeCompare(b.name))) {
      const spec = `${BUILTIN_PREFIX}${d.name}`;
      const m = await this.readManifest(spec, join(BUILTIN_DIR, d.name)).catch(() => undefined);
      if (m && fits(m.provides)) names.add(m.name);
    }
    const registered: [Capability, Map<string, unknown>][] = [
      ['sink', this.registry.sinks],
      ['encoder', this.registry.encoders],
      ['destination', this.registry.destinations],
      ['transform', this.registry.transforms],
    ];
    for (const [k, map] of registered) if (fits([k])) for (const n of map.keys()) names.add(n);
    for (const [spec, m] of this.prepared) if (fits(m.provides)) names.add(spec);
    return [...names];
  }

  /** The unknown plugin's message with the names there are of its kind and the one most likely meant. */
  private async unknown(e: UnknownPlugin, want: Capability | undefined): Promise<HypsinkError> {
    // A path is the user's own: no list of names fits it.
    if (e.spec.startsWith('.') || isAbsolute(e.spec)) return e;
    const known = await this.knownNames(want);
    const unscoped = (s: string) => (s.startsWith(BUILTIN_PREFIX) ? s.slice(BUILTIN_PREFIX.length) : s);
    const guess = didYouMean(e.spec, known, unscoped);
    const what = want ? KIND_PLURAL[want] : 'plugins';
    const list = known.length ? `known ${what}: ${known.join(', ')}` : `no ${what} are known`;
    const why = e.why && !guess ? `: ${e.why}` : '';
    return new HypsinkError('HYPSINK_ERR_PLUGIN', `unknown plugin "${e.spec}"${guess ? `; did you mean "${guess}"?` : why} (${list})`, {
      cause: e,
      hint: 'Name one of the known plugins, or install the plugin (a package, or a path listed in "plugins").',
    });
  }

  /** Import and activate the plugin a sink names, once, when the sink is built. */
  async activateFor(spec: string, want: Capability): Promise<void> {
    if (!this.kindOf(spec)) await this.load(spec);
    const kind = this.kindOf(spec);
    if (kind !== want) {
      throw new HypsinkError('HYPSINK_ERR_PLUGIN', `plugin ${spec}: its plugin.json provides a ${want}, but activate registered ${kind ? `a ${kind}` : 'nothing'} named "${spec}"`);
    }
  }

  /** Load a plugin by built-in name (`@hypsink/x`), filesystem path, or package name. */
  async load(spec: string): Promise<PluginManifest> {
    try {
      return await this.loadOnce(spec);
    } catch (e) {
      throw e instanceof UnknownPlugin ? await this.unknown(e, undefined) : e;
    }
  }

  private async loadOnce(spec: string): Promise<PluginManifest> {
    const dir = this.locate(spec);
    const cached = this.loaded.get(dir);
    if (cached) return cached;
    if (this.loading.has(dir)) throw new HypsinkError('HYPSINK_ERR_PLUGIN', `plugin ${spec}: circular "requires"`);
    this.loading.add(dir);
    try {
      const manifest = await this.readManifest(spec, dir);
      this.checkApiVersion(manifest);
      for (const req of manifest.requires ?? []) await this.load(req);
      const activate = await this.importActivate(manifest, spec, dir);
      await this.activate(manifest, activate, dirname(dir) === BUILTIN_DIR);
      this.loaded.set(dir, manifest);
      return manifest;
    } finally {
      this.loading.delete(dir);
    }
  }

  private locate(spec: string): string {
    if (spec.startsWith(BUILTIN_PREFIX)) return join(BUILTIN_DIR, spec.slice(BUILTIN_PREFIX.length));
    if (spec.startsWith('.') || isAbsolute(spec)) return resolve(this.baseDir, spec);
    try {
      const req = createRequire(join(this.baseDir, 'package.json'));
      return dirname(req.resolve(`${spec}/plugin.json`));
    } catch {
      throw new UnknownPlugin(spec, `not a built-in (${BUILTIN_PREFIX}…), a path, or an installed package with a plugin.json`);
    }
  }

  private async readManifest(spec: string, dir: string): Promise<PluginManifest> {
    const path = join(dir, 'plugin.json');
    let text: string;
    try {
      text = await fsp.readFile(path, 'utf8');
    } catch {
      // A built-in that is not there is a name that does not exist; the folder it was looked for in is ours.
      throw new UnknownPlugin(spec, spec.startsWith(BUILTIN_PREFIX) ? undefined : `${shown(spec, 'plugin.json')} does not exist`);
    }
    let raw: unknown;
    try {
      raw = JSON.parse(text);
    } catch (e) {
      throw new HypsinkError('HYPSINK_ERR_PLUGIN', `plugin ${spec}: ${shown(spec, 'plugin.json')} is not valid JSON (${(e as Error).message})`);
    }
    const r = manifestSchema.safeParse(raw);
    if (!r.success) {
      const why = r.error.issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`).join('; ');
      throw new HypsinkError('HYPSINK_ERR_PLUGIN', `plugin ${spec}: ${shown(spec, 'plugin.json')}: ${why}`);
    }
    return r.data;
  }

  private checkApiVersion(m: PluginManifest): void {
    const want = PLUGIN_API_VERSION.split('.')[0];
    const have = (m.apiVersion ?? PLUGIN_API_VERSION).split('.')[0];
    if (want !== have) {
      throw new HypsinkError('HYPSINK_ERR_PLUGIN', `plugin ${m.name} targets plugin API ${m.apiVersion}; this hypsink implements ${PLUGIN_API_VERSION}`);
    }
  }

  private async importActivate(m: PluginManifest, spec: string, dir: string): Promise<ActivateFn> {
    // The CLI bundle carries the built-ins beside its chunks, sharing its one apache-arrow. @ref LLP 0025
    if (typeof __HYPSINK_PLUGINS_DIR__ === 'string' && dirname(dir) === BUILTIN_DIR) {
      return activateOf(m, `bundled plugin-${basename(dir)}.js`, await import(new URL(`./plugin-${basename(dir)}.js`, import.meta.url).href));
    }
    // Compiled, hypsink runs no TypeScript loader: a plugin's JavaScript comes first, and its
    // TypeScript only from sources (tests), where the loader is there. @ref LLP 0024
    const candidates = m.main ? [m.main] : FROM_SOURCES ? ['src/index.ts', 'src/index.js', 'index.js', 'dist/index.js'] : ['dist/index.js', 'index.js', 'src/index.js'];
    for (const rel of candidates) {
      const file = join(dir, rel);
      try {
        await fsp.access(file);
      } catch {
        continue;
      }
      let mod: { default?: unknown; activate?: unknown };
      try {
        mod = await import(pathToFileURL(file).href);
      } catch (e) {
        // A plugin's module that does not load is the plugin's failure, not one hypsink has no code for. @ref LLP 0070
        if (isHypsinkError(e)) throw e;
        if ((e as NodeJS.ErrnoException).code === 'ERR_UNKNOWN_FILE_EXTENSION' && TS_FILE.test(rel)) throw typescriptOnly(m, spec, [rel]);
        throw new HypsinkError('HYPSINK_ERR_PLUGIN', `plugin ${m.name}: ${shown(spec, rel)} does not load: ${(e as Error).message}`, {
          cause: e,
          hint: "Fix the plugin's module (or install what it imports), or ask its author; run with HYPSINK_LOG_LEVEL=debug for the stack.",
        });
      }
      return activateOf(m, shown(spec, rel), mod);
    }
    const ts: string[] = [];
    if (!FROM_SOURCES) for (const rel of ['src/index.ts', 'index.ts']) if (await fsp.access(join(dir, rel)).then(() => true, () => false)) ts.push(rel);
    if (ts.length > 0 && !m.main) throw typescriptOnly(m, spec, ts);
    throw new HypsinkError('HYPSINK_ERR_PLUGIN', `plugin ${m.name}: no module found in ${spec} (tried ${candidates.join(', ')})`);
  }

  private async activate(m: PluginManifest, activate: ActivateFn, builtin: boolean): Promise<void> {
    const register = <F extends { name: string }>(cap: Capability, map: Map<string, F>) => (f: F) => {
      if (this.activating !== m.name) throw new HypsinkError('HYPSINK_ERR_PLUGIN', `plugin ${m.name}: registration is closed once its activate has returned`);
      // Built-ins load on first use: a name of theirs taken earlier would silently replace them.
      if (!builtin && f.name.startsWith(BUILTIN_PREFIX)) {
        throw new HypsinkError('HYPSINK_ERR_PLUGIN', `plugin ${m.name}: "${f.name}" is in the reserved ${BUILTIN_PREFIX} scope of the built-in plugins; give it a name of your own`);
      }
      if (!m.provides.includes(cap)) throw new HypsinkError('HYPSINK_ERR_PLUGIN', `plugin ${m.name} registers a ${cap} but plugin.json "provides" lacks "${cap}"`);
      if (this.kindOf(f.name)) throw new HypsinkError('HYPSINK_ERR_PLUGIN', `plugin ${m.name}: "${f.name}" is already registered`);
      map.set(f.name, f);
    };
    const ctx: PluginContext = Object.freeze({
      manifest: m,
      log: this.log.child({ plugin: m.name }),
      hooks: taps(this.hooks),
      registerSink: register('sink', this.registry.sinks),
      registerEncoder: register('encoder', this.registry.encoders),
      registerDestination: register('destination', this.registry.destinations),
      registerTransform: register('transform', this.registry.transforms),
    });
    this.activating = m.name;
    try {
      await activate(ctx);
    } catch (e) {
      if (isHypsinkError(e)) throw e;
      throw new HypsinkError('HYPSINK_ERR_PLUGIN', `plugin ${m.name}: activate failed: ${(e as Error).message}`, { cause: e });
    } finally {
      this.activating = undefined;
    }
  }
}
