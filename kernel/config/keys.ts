/**
 * Unknown keys and names, and the known one most likely meant. One rule for
 * the config's own keys, a plugin's options and plugin names. @ref LLP 0032
 */
import { distance } from 'fastest-levenshtein';
import type { z } from 'zod';

/** A comment: allowed as a key at every level of a config, never read. */
export const COMMENT_KEY = '//';

/** Edits from `a` to `b`, a swap of two neighbouring characters counting as one (`scheduel`). */
function edits(a: string, b: string): number {
  if (a.length === b.length && a.length >= 2) {
    const diff = [...a].flatMap((c, i) => (c === b[i] ? [] : [i]));
    if (diff.length === 2 && diff[1] === diff[0]! + 1 && a[diff[0]!] === b[diff[1]!] && a[diff[1]!] === b[diff[0]!]) return 1;
  }
  return distance(a, b);
}

/**
 * The known name `name` most likely misspells: the closest one, ignoring case,
 * when it is at most a third of the name's length away (one edit at least, three
 * at most), else undefined. `form` compares another form of each (a plugin name
 * without its scope).
 */
export function didYouMean(name: string, known: Iterable<string>, form: (s: string) => string = (s) => s): string | undefined {
  const wanted = form(name).toLowerCase();
  const limit = Math.min(3, Math.max(1, Math.floor(wanted.length / 3)));
  let best: { name: string; d: number } | undefined;
  for (const k of known) {
    const d = edits(wanted, form(k).toLowerCase());
    if (d <= limit && (best === undefined || d < best.d)) best = { name: k, d };
  }
  return best?.name;
}

/** `<key>: unknown key; did you mean "x"?`, or the known keys when none is close. */
export function unknownKey(field: string, key: string, known: readonly string[]): string {
  const guess = didYouMean(key, known);
  if (guess !== undefined) return `${field}: unknown key; did you mean "${guess}"?`;
  return `${field}: unknown key (${known.length ? `known keys: ${known.join(', ')}` : 'this takes no keys'})`;
}

export const UNKNOWN_KEY_HINT = 'Fix or remove each key the message names ("//" keys are comments), then run again.';

/** The value with every "//" key removed, at every level. */
export function withoutComments(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(withoutComments);
  if (value && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).flatMap(([k, v]) => (k === COMMENT_KEY ? [] : [[k, withoutComments(v)]])));
  }
  return value;
}

export interface UnknownKey {
  /** Where the object is, from the config's root. */
  readonly path: readonly PropertyKey[];
  readonly key: string;
  readonly known: readonly string[];
}

type Def = { type: string; shape?: Record<string, z.ZodType>; innerType?: z.ZodType; in?: z.ZodType; valueType?: z.ZodType; element?: z.ZodType };
const defOf = (s: z.ZodType) => (s as unknown as { _zod: { def: Def } })._zod.def;

const isPlain = (v: unknown): v is Record<string, unknown> => !!v && typeof v === 'object' && !Array.isArray(v);

/**
 * Every key of `value` that `schema` has no place for, at every level the
 * schema describes: objects by their shape, records and arrays by their
 * values' schema. A record of unknown values (a plugin's options) is not
 * looked into; the plugin declares its own. `extra` are keys known at the top.
 */
export function unknownKeysOf(schema: z.ZodType, value: unknown, path: readonly PropertyKey[] = [], extra: readonly string[] = []): UnknownKey[] {
  const def = defOf(schema);
  switch (def.type) {
    case 'optional':
    case 'nullable':
    case 'default':
    case 'prefault':
    case 'readonly':
    case 'catch':
      return unknownKeysOf(def.innerType!, value, path, extra);
    case 'pipe':
      return unknownKeysOf(def.in!, value, path, extra);
    case 'object': {
      if (!isPlain(value)) return [];
      const shape = def.shape!;
      const known = [...Object.keys(shape), ...extra];
      return Object.entries(value).flatMap(([k, v]) => {
        if (k === COMMENT_KEY) return [];
        if (Object.hasOwn(shape, k)) return unknownKeysOf(shape[k]!, v, [...path, k]);
        return known.includes(k) ? [] : [{ path, key: k, known: Object.keys(shape) }];
      });
    }
    case 'record':
      if (!isPlain(value)) return [];
      return Object.entries(value).flatMap(([k, v]) => (k === COMMENT_KEY ? [] : unknownKeysOf(def.valueType!, v, [...path, k])));
    case 'array':
      return Array.isArray(value) ? value.flatMap((v, i) => unknownKeysOf(def.element!, v, [...path, i])) : [];
    default:
      return [];
  }
}

/**
 * A plugin's options against the keys it declares (`PluginOptionsSpec.keys`,
 * nested ones as `parent.child`): one message per unknown key, its field as
 * `<root>.<path>`.
 */
export function unknownOptions(declared: readonly string[], value: unknown, root: string): string[] {
  const walk = (v: unknown, prefix: string): string[] => {
    if (!isPlain(v)) return [];
    const here = declared.filter((k) => k.startsWith(prefix) && !k.slice(prefix.length).includes('.')).map((k) => k.slice(prefix.length));
    return Object.entries(v).flatMap(([k, x]) => {
      if (k === COMMENT_KEY) return [];
      if (!here.includes(k)) return [unknownKey(`${root}.${prefix}${k}`, k, here)];
      const nested = `${prefix}${k}.`;
      return declared.some((d) => d.startsWith(nested)) ? walk(x, nested) : [];
    });
  };
  return walk(value, '');
}
