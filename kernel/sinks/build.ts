/**
 * From a sink's config to what exports it. At load, the plugins it names must
 * provide what its role needs, by their plugin.json (`checkSinkPlugins`). The
 * sink is built when a command first needs it (`buildSink`: its plugins'
 * code loaded, its `${VAR}` values resolved, its shipper created, its own
 * config checked). A process that only records rows (`ingest`) or reads state
 * (`status`) never loads an exporter's code or needs its credentials.
 */
import type { Logger as Pino } from 'pino';
import { HypsinkError, isHypsinkError } from '../../types/errors.js';
import { configField } from '../../types/config.js';
import type { BlobDestination, PluginOptionsSpec, SinkBuildContext, UnitShipper } from '../../types/sinks.js';
import { parseDuration } from '../config/duration.js';
import { UNKNOWN_KEY_HINT, unknownOptions } from '../config/keys.js';
import { interpolate, type LoadedConfig } from '../config/load.js';
import { isBlobSink, type SinkConfig } from '../config/schema.js';
import { FAULT_POINTS, type FaultPoint, fault } from '../fault.js';
import { probed } from './probe.js';
import type { PluginHost } from '../plugins/host.js';
import { buildTransforms, canonicalJson, type TransformChain } from '../transform/index.js';
import { blobShipper } from './blob.js';
import type { SinkRuntime } from './exporter.js';
import type { SinkState } from './states.js';

/** Blob units default to large files; request sinks say their own bounds. */
const BLOB_LIMITS = { maxRows: 1_000_000, maxBytes: 256 * 1024 * 1024 };

/** "an encoder", "a sink". */
const a = (kind: string) => `${kind === 'encoder' ? 'an' : 'a'} ${kind}`;

const where = (loaded: LoadedConfig, name: string) => `${loaded.file ?? 'embedded default config'}: sink "${name}"`;

/**
 * Check that the plugins a sink names provide what its role needs, from their
 * plugin.json (their code loads when the sink is built). @ref LLP 0025
 */
export async function checkSinkPlugins(loaded: LoadedConfig, host: PluginHost, name: string, sc: SinkConfig): Promise<void> {
  const need = async (field: string, spec: string, want: 'sink' | 'encoder' | 'destination') => {
    let provides: readonly string[];
    try {
      provides = await host.prepare(spec, want);
    } catch (e) {
      const hint = isHypsinkError(e) ? { hint: e.hint } : {};
      throw new HypsinkError('HYPSINK_ERR_CONFIG', `${where(loaded, name)}: ${field}: ${(e as Error).message}`, { cause: e, ...hint });
    }
    if (!provides.includes(want)) {
      const kind = provides[0];
      const hint =
        want === 'destination' && kind === 'sink'
          ? `; a request sink is configured with "plugin": "${spec}", without "writer"`
          : want === 'sink' && kind !== undefined
            ? `; ${a(kind)} belongs in a blob sink ("writer" + "destination")`
            : '';
      throw new HypsinkError('HYPSINK_ERR_CONFIG', `${where(loaded, name)}: ${field}: "${spec}" is ${kind ? a(kind) : 'not registered by its plugin'}, not ${a(want)}${hint}`);
    }
  };
  if (isBlobSink(sc)) {
    await need('writer', sc.writer, 'encoder');
    await need('destination', sc.destination, 'destination');
  } else {
    await need('plugin', sc.plugin, 'sink');
  }
}

export interface BuildEnv {
  readonly loaded: LoadedConfig;
  readonly log: Pino;
  readonly host: PluginHost;
  /** The cache's id: known once the cache is open, after the sinks built at load. */
  readonly cacheId: () => string | undefined;
  /** The cache's copy tag for blob keys ('' for a cache never copied). @ref LLP 0055 */
  readonly copyTag: () => string;
  readonly requestTick: (sink: string) => void;
}

/** Where a destination puts its keys: its description of a key, less the key; undefined if it does not say. */
function destinationRoot(d: BlobDestination): string | undefined {
  const probe = 'hypsink-probe';
  const where = d.describe(probe);
  return where.endsWith(probe) ? where.slice(0, -probe.length) : undefined;
}

/**
 * Each plugin's options against the spec it declares, all in one error: the
 * unknown keys, else what its `validate` finds, one message per field.
 * @ref LLP 0032
 */
async function refuseBadOptions(w: string, blocks: readonly [PluginOptionsSpec | undefined, Record<string, unknown>, string][]): Promise<void> {
  const unknown: string[] = [];
  const invalid = new Map<string, string>();
  for (const [spec, value, root] of blocks) {
    if (!spec) continue;
    const here = unknownOptions(spec.keys, value, root);
    unknown.push(...here);
    if (here.length > 0 || !spec.validate) continue;
    for (const issue of (await spec.validate(value)).issues ?? []) {
      const field = configField((issue.path ?? []).map((p) => (typeof p === 'object' ? p.key : p)), root);
      if (!invalid.has(field)) invalid.set(field, `${field}: ${issue.message}`); // a field's first problem is the one to fix
    }
  }
  const problems = [...unknown, ...invalid.values()];
  if (problems.length > 0) throw new HypsinkError('HYPSINK_ERR_CONFIG', `${w}: ${problems.join('; ')}`, unknown.length ? { hint: UNKNOWN_KEY_HINT } : {});
}

/** Load the sink's plugins, resolve its `${VAR}` values and create its shipper (plugins checked at load). */
export async function buildSink(env: BuildEnv, name: string, sc: SinkConfig, state: SinkState): Promise<SinkRuntime> {
  const w = where(env.loaded, name);
  try {
    if (isBlobSink(sc)) {
      await env.host.activateFor(sc.writer, 'encoder');
      await env.host.activateFor(sc.destination, 'destination');
    } else {
      await env.host.activateFor(sc.plugin, 'sink');
    }
  } catch (e) {
    throw new HypsinkError(isHypsinkError(e) ? e.code : 'HYPSINK_ERR_PLUGIN', `${w}: ${(e as Error).message}`, { cause: e });
  }
  const build: SinkBuildContext = {
    sink: name,
    stateDir: state.dir,
    baseDir: env.loaded.baseDir,
    get cacheId(): string {
      const id = env.cacheId();
      if (id === undefined) throw new HypsinkError('HYPSINK_ERR_INVARIANT', `sink "${name}": cacheId is known once the cache is open; read it when a unit id is made, not in create()`);
      return id;
    },
    log: env.log.child({ sink: name }),
    fault: (point: string) => {
      if (!(point in FAULT_POINTS)) throw new HypsinkError('HYPSINK_ERR_INVARIANT', `fault point "${point}" is not declared in kernel/fault.ts`);
      fault(point as FaultPoint);
    },
    requestTick: () => env.requestTick(name),
  };
  const registry = env.host.registry;
  let shipper: UnitShipper;
  let root: string | undefined;
  let destination: string | null;
  let transforms: TransformChain;
  try {
    // Before the shipper: a transform's config error leaves no connection or handle open.
    transforms = await sinkTransforms(env, name, sc);
    const config = interpolate(sc.config, `${w}: config`) as Record<string, unknown>;
    if (isBlobSink(sc)) {
      const writerConfig = interpolate(sc.writerConfig, `${w}: writerConfig`) as Record<string, unknown>;
      const encoderFactory = registry.encoders.get(sc.writer)!;
      const destFactory = registry.destinations.get(sc.destination)!;
      await refuseBadOptions(w, [
        [destFactory.options, config, 'config'],
        [encoderFactory.options, writerConfig, 'writerConfig'],
      ]);
      const encoder = encoderFactory.create(writerConfig, build);
      if (encoder.table && sc.keys.time !== undefined) {
        // A table partitions its own files (Iceberg's partition spec); key segments would be a second, unknown layout.
        throw new HypsinkError('HYPSINK_ERR_CONFIG', `${w}: keys.time does not apply to the table writer ${sc.writer}: it partitions the table by day itself (see its writerConfig); remove keys.time`);
      }
      const dest = destFactory.create(config, build);
      if (encoder.table && !(dest.get && dest.replace && dest.list && dest.locate)) {
        await dest.close();
        throw new HypsinkError('HYPSINK_ERR_CONFIG', `${w}: the table writer ${sc.writer} needs a destination that can get, replace, list and locate blobs, and ${sc.destination} cannot; use @hypsink/local-fs or @hypsink/s3`);
      }
      shipper = blobShipper(encoder, dest, BLOB_LIMITS, sc.keys, env.copyTag);
      root = destinationRoot(dest);
      destination = dest.destination ?? (root === undefined ? null : `${sc.destination} ${root}`);
    } else {
      const factory = registry.sinks.get(sc.plugin)!;
      await refuseBadOptions(w, [[factory.options, config, 'config']]);
      shipper = factory.create(config, build);
      destination = shipper.destination ?? null;
    }
  } catch (e) {
    // A plugin's own config check names the sink and field; add the file.
    if (isHypsinkError(e) && e.code === 'HYPSINK_ERR_CONFIG' && !e.message.includes(w)) {
      throw new HypsinkError('HYPSINK_ERR_CONFIG', `${env.loaded.file ?? 'embedded default config'}: ${e.message}`, { cause: e });
    }
    if (isHypsinkError(e)) throw e;
    throw new HypsinkError('HYPSINK_ERR_CONFIG', `${w}: ${(e as Error).message}`, { cause: e });
  }
  return {
    name,
    kind: isBlobSink(sc) ? 'blob' : 'request',
    datasets: sc.datasets,
    shipper: probed(shipper, name),
    state,
    watermarks: state.watermarks,
    root,
    destination,
    transforms,
    delivers: deliveredShape(transforms, isBlobSink(sc) ? sc.keys.time : undefined),
    policy: {
      minRows: sc.minRows,
      maxDelayMs: sc.maxDelay !== undefined ? (parseDuration(sc.maxDelay) ?? 0) : sc.minRows > 1 ? 3_600_000 : 0,
      limits: {
        maxRows: sc.unit.maxRows ?? shipper.limits.maxRows,
        maxBytes: sc.unit.maxBytes ?? shipper.limits.maxBytes,
      },
    },
  };
}

/**
 * The sink's transforms, built and bound to each of its datasets now, so a
 * column a transform names that a dataset lacks is a config error before
 * any export. `hypsink test` builds a sink's chain here too, and nothing else
 * of the sink. @ref LLP 0046, LLP 0071
 */
export async function sinkTransforms(env: Pick<BuildEnv, 'loaded' | 'log' | 'host'>, name: string, sc: SinkConfig): Promise<TransformChain> {
  const chain = await buildTransforms(sc.transforms, {
    sink: name,
    baseDir: env.loaded.baseDir,
    log: env.log.child({ sink: name }),
    plugin: async (spec) => {
      await env.host.activateFor(spec, 'transform');
      return env.host.registry.transforms.get(spec)!;
    },
  });
  if (chain.length === 0) return chain;
  for (const ds of sc.datasets) {
    const schema = env.loaded.config.datasets[ds]!;
    const out = chain.bind(schema.columns, ds).columns;
    const ts = schema.timestampColumn;
    // Time keys read the timestamp column from the rows as shipped. @ref LLP 0048
    if (isBlobSink(sc) && sc.keys.time && ts !== undefined && !out.some((c) => c.name === ts && c.type === 'TIMESTAMP')) {
      throw new HypsinkError(
        'HYPSINK_ERR_CONFIG',
        `sink "${name}": keys.time needs dataset "${ds}"'s timestamp column "${ts}" in the rows it ships, and its transforms remove or rename it; keep "${ts}" through the transforms, or leave keys.time out`,
      );
    }
  }
  return chain;
}

/**
 * What a sink delivers beyond where: its transforms' identity and its key
 * layout, '' for neither (so a sink state written before either existed
 * reads as it was). @ref LLP 0049
 */
function deliveredShape(transforms: TransformChain, time: string | undefined): string {
  if (!transforms.identity && time === undefined) return '';
  return canonicalJson({ ...(transforms.identity ? { transforms: JSON.parse(transforms.identity) as unknown } : {}), ...(time ? { keys: { time } } : {}) });
}

/**
 * Two blob sinks sharing a root and a dataset would put their units under the
 * same keys: the second would find the first's blob and count its own rows
 * delivered, or add the same rows again under other unit bounds.
 */
export function refuseSharedRoots(loaded: LoadedConfig, sinks: Iterable<SinkRuntime>): void {
  const seen: SinkRuntime[] = [];
  for (const s of sinks) {
    if (s.root === undefined) continue;
    const other = seen.find((o) => o.root === s.root && o.datasets.some((d) => s.datasets.includes(d)));
    if (other) {
      const shared = other.datasets.filter((d) => s.datasets.includes(d));
      throw new HypsinkError(
        'HYPSINK_ERR_CONFIG',
        `${loaded.file ?? 'embedded default config'}: sinks "${other.name}" and "${s.name}" both write dataset ${shared.map((d) => `"${d}"`).join(', ')} to ${s.root}; give each sink its own dir or prefix`,
      );
    }
    seen.push(s);
  }
}
