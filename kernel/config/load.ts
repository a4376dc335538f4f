/**
 * Load, interpolate, validate and resolve a config. Relative paths resolve
 * against the config file's folder (the working folder for the embedded default).
 */
import { promises as fsp } from 'node:fs';
import { dirname, isAbsolute, resolve } from 'node:path';
import type { z } from 'zod';
import { HypsinkError } from '../../types/errors.js';
import { registerSecret } from '../log.js';
import { DEFAULT_CONFIG } from './defaults.js';
import { UNKNOWN_KEY_HINT, type UnknownKey, unknownKey, unknownKeysOf, withoutComments } from './keys.js';
import { blobSink, type Config, configSchema, requestSink, type SinkConfig } from './schema.js';

export interface LoadedConfig {
  readonly config: Config;
  /** The file it came from, or null for the embedded default. */
  readonly file: string | null;
  /** Relative paths resolve against this folder. */
  readonly baseDir: string;
  readonly cacheRoot: string;
  readonly stateDir: string;
}

/** `${NAME}` → the environment's value; a missing variable is a config error naming it. */
export function interpolate(value: unknown, where: string, env: NodeJS.ProcessEnv = process.env): unknown {
  if (typeof value === 'string') {
    return value.replace(/\$\{([A-Za-z_][A-Za-z0-9_]*)\}/g, (_m, key: string) => {
      const v = env[key];
      if (v === undefined) {
        throw new HypsinkError('HYPSINK_ERR_CONFIG', `${where}: environment variable ${key} is not set (referenced as \${${key}})`, {
          hint: `Set ${key} in the environment hypsink runs in, or change the config value that names it.`,
        });
      }
      registerSecret(v); // interpolated values are where secrets live: keep them out of logs
      return v;
    });
  }
  if (Array.isArray(value)) return value.map((v, i) => interpolate(v, `${where}[${i}]`, env));
  if (value && typeof value === 'object') {
    // "//" keys are comments (`hypsink init` writes them, and they may mention ${NAME}): not interpolated.
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, k === '//' ? v : interpolate(v, `${where}.${k}`, env)]));
  }
  return value;
}

/** The `${NAME}` references in `value` whose variable is not set. */
export function unsetVariables(value: unknown, env: NodeJS.ProcessEnv = process.env): string[] {
  if (typeof value === 'string') return [...value.matchAll(/\$\{([A-Za-z_][A-Za-z0-9_]*)\}/g)].map((m) => m[1]!).filter((k) => env[k] === undefined);
  if (Array.isArray(value)) return value.flatMap((v) => unsetVariables(v, env));
  if (value && typeof value === 'object') return Object.entries(value).flatMap(([k, v]) => (k === '//' ? [] : unsetVariables(v, env)));
  return [];
}

/**
 * Interpolate a config; an error names the file, then the key path. A sink's
 * `config` and `writerConfig` are left as written: they are resolved when that
 * sink is built (sinks/build.ts), so recording rows never needs an exporter's
 * credentials.
 */
function interpolateConfig(raw: unknown, where: string): unknown {
  if (!raw || typeof raw !== 'object' || Array.isArray(raw)) return raw;
  return Object.fromEntries(
    Object.entries(raw).map(([k, v]) => {
      if (k === '//') return [k, v];
      if (k !== 'sinks' || !v || typeof v !== 'object' || Array.isArray(v)) return [k, interpolate(v, `${where}: ${k}`)];
      const sinks = Object.entries(v).map(([name, sink]) => {
        if (!sink || typeof sink !== 'object' || Array.isArray(sink)) return [name, interpolate(sink, `${where}: sinks.${name}`)];
        const fields = Object.entries(sink).map(([f, x]) =>
          // `transforms` too: the engine resolves its `${NAME}` itself, to keep hash keys out of its identity (LLP 0046).
          f === 'config' || f === 'writerConfig' || f === 'transforms' || f === '//' ? [f, x] : [f, interpolate(x, `${where}: sink "${name}": ${f}`)],
        );
        return [name, Object.fromEntries(fields)];
      });
      return [k, Object.fromEntries(sinks)];
    }),
  );
}

function describePath(path: readonly PropertyKey[]): string {
  const [top, key, ...rest] = path.map(String);
  const tail = (parts: string[]) => parts.map((p) => (/^\d+$/.test(p) ? `[${p}]` : `.${p}`)).join('').replace(/^\./, '');
  if ((top === 'sinks' || top === 'datasets') && key !== undefined) {
    return `${top === 'sinks' ? 'sink' : 'dataset'} "${key}"${rest.length ? `: ${tail(rest)}` : ''}`;
  }
  return tail(path.map(String)) || '(root)';
}

function issuesError(file: string, issues: readonly z.core.$ZodIssue[], prefix: PropertyKey[] = []): HypsinkError {
  const lines = issues.map((i) => `${describePath([...prefix, ...i.path])}: ${i.message}`);
  return new HypsinkError('HYPSINK_ERR_CONFIG', `${file}: ${lines.join('; ')}`);
}

/**
 * Every key of the config that hypsink does not know, in one error, each with
 * the known key it most likely means; "//" keys are comments. A sink is
 * checked as a request sink when it names a "plugin", else as a blob sink.
 * @ref LLP 0032
 */
export function refuseUnknownKeys(raw: unknown, file: string): void {
  const found: UnknownKey[] = unknownKeysOf(configSchema, raw);
  const sinks = raw && typeof raw === 'object' ? (raw as { sinks?: unknown }).sinks : undefined;
  if (sinks && typeof sinks === 'object' && !Array.isArray(sinks)) {
    for (const [name, s] of Object.entries(sinks)) {
      if (name === '//' || !s || typeof s !== 'object' || Array.isArray(s)) continue;
      const request = 'plugin' in s;
      // Both kinds' keys at once is its own error (validateConfig), not an unknown key.
      const both = request && ('writer' in s || 'destination' in s);
      found.push(...unknownKeysOf(request && !both ? requestSink : blobSink, s, ['sinks', name], both ? ['plugin'] : []));
    }
  }
  if (found.length === 0) return;
  const lines = found.map((u) => unknownKey(describePath([...u.path, u.key]), u.key, u.known));
  throw new HypsinkError('HYPSINK_ERR_CONFIG', `${file}: ${lines.join('; ')}`, { hint: UNKNOWN_KEY_HINT });
}

/** Check a config as written (keys, then `${VAR}` values, then each field) and strip its comments. */
export function validateConfig(written: unknown, file: string): Config {
  refuseUnknownKeys(written, file);
  const raw = interpolateConfig(withoutComments(written), file);
  const parsed = configSchema.safeParse(raw);
  if (!parsed.success) throw issuesError(file, parsed.error.issues);
  const sinks: Record<string, SinkConfig> = {};
  for (const [name, s] of Object.entries(parsed.data.sinks)) {
    const isRequest = 'plugin' in s;
    if (isRequest && ('writer' in s || 'destination' in s)) {
      throw new HypsinkError('HYPSINK_ERR_CONFIG', `${file}: sink "${name}": give either "plugin" (a request sink) or "writer" + "destination" (a blob sink), not both`);
    }
    if (!isRequest && !('writer' in s) && !('destination' in s)) {
      throw new HypsinkError('HYPSINK_ERR_CONFIG', `${file}: sink "${name}": needs "plugin" (a request sink) or "writer" + "destination" (a blob sink)`);
    }
    const r = (isRequest ? requestSink : blobSink).safeParse(s);
    if (!r.success) throw issuesError(file, r.error.issues, ['sinks', name]);
    for (const [i, ds] of r.data.datasets.entries()) {
      if (!(ds in parsed.data.datasets)) {
        const known = Object.keys(parsed.data.datasets).join(', ') || 'none';
        throw new HypsinkError('HYPSINK_ERR_CONFIG', `${file}: sink "${name}": datasets[${i}]: unknown dataset "${ds}" (configured: ${known})`);
      }
      // Time keys put each row under the day (hour) of its dataset's timestamp column. @ref LLP 0048
      const time = 'keys' in r.data ? r.data.keys.time : undefined;
      if (time && parsed.data.datasets[ds]!.timestampColumn === undefined) {
        throw new HypsinkError(
          'HYPSINK_ERR_CONFIG',
          `${file}: sink "${name}": keys.time: dataset "${ds}" has no timestampColumn, so its rows have no ${time} to be keyed by; set datasets.${ds}.timestampColumn to one of its TIMESTAMP columns, or leave keys.time out`,
        );
      }
    }
    sinks[name] = r.data;
  }
  return { ...parsed.data, sinks };
}

function parseJson(text: string, file: string): unknown {
  try {
    return JSON.parse(text);
  } catch (e) {
    const msg = (e as Error).message;
    const pos = /position (\d+)/.exec(msg);
    let where = '';
    if (pos) {
      const before = text.slice(0, Number(pos[1]));
      where = ` at line ${before.split('\n').length}, column ${before.length - before.lastIndexOf('\n')}`;
    }
    throw new HypsinkError('HYPSINK_ERR_CONFIG', `${file}: not valid JSON${where} (${msg})`, {
      hint: 'Fix the JSON at the line and column named (a trailing comma, a missing quote or a comment are the usual causes; "//" keys hold comments), then run again.',
    });
  }
}

const abs = (base: string, p: string) => (isAbsolute(p) ? p : resolve(base, p));

/**
 * `explicit` is the --config path (must exist); without it `hypsink.config.json`
 * in `cwd` is used if present, else the embedded default.
 */
export async function loadConfig(explicit: string | undefined, cwd = process.cwd()): Promise<LoadedConfig> {
  let file: string | null = null;
  let raw: unknown = DEFAULT_CONFIG;
  const candidate = explicit ? abs(cwd, explicit) : resolve(cwd, 'hypsink.config.json');
  try {
    raw = parseJson(await fsp.readFile(candidate, 'utf8'), candidate);
    file = candidate;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
    if (explicit) {
      throw new HypsinkError('HYPSINK_ERR_CONFIG', `config file ${candidate} does not exist (run "hypsink init" to write one)`, {
        hint: `Give the path of a config file that exists, or write one with "hypsink init --config ${explicit}".`,
      });
    }
  }
  return configFrom(raw, file, file ? dirname(file) : cwd);
}

/**
 * A config given as an object (an embedding host's), validated as a file's
 * would be; relative paths resolve against `baseDir`. `name` stands in for the
 * file name in errors.
 */
export function configFromObject(raw: unknown, baseDir: string, name = 'config object'): LoadedConfig {
  return configFrom(raw, null, resolve(baseDir), name);
}

function configFrom(raw: unknown, file: string | null, baseDir: string, name?: string): LoadedConfig {
  const where = file ?? name ?? 'embedded default config';
  const config = validateConfig(raw, where);
  return {
    config,
    file,
    baseDir,
    cacheRoot: abs(baseDir, config.cache.root),
    stateDir: abs(baseDir, config.state.dir),
  };
}
