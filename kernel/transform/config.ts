/**
 * A sink's `transforms`, as written: a list of entries, each one transform,
 * `{ "<kind>": <its config> }` for a built-in (select, drop, rename, redact,
 * hash) or `{ "plugin": "<name>", "config": { … } }` for a plugin's. Every
 * built-in's config is a zod schema with strict keys; an error names the
 * entry and the field (`transforms[2].redact.columns[0]: …`). "//" keys are
 * comments, at every level. @ref LLP 0046, LLP 0032 (strict config)
 */
import { z } from 'zod';
import { PARTITION_COLUMN, INTERNAL_PREFIX } from '../../types/schema.js';
import { configField } from '../../types/config.js';
import { didYouMean, unknownKey, withoutComments } from '../config/keys.js';
import { parseJsonPath } from './json.js';
import { compileUserRegex, PATTERN_NAMES } from './patterns.js';

export const BUILTIN_KINDS = ['select', 'drop', 'rename', 'redact', 'hash'] as const;
export type BuiltinKind = (typeof BUILTIN_KINDS)[number];

export const DEFAULT_MASK = '[redacted]';
/** `${NAME}`, the whole value: a key comes from the environment, never from the file. */
export const ENV_REF = /^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$/;

const columnName = z.string().min(1, 'a column name is empty');

/** A list of column names, each once. */
const columnList = z
  .array(columnName)
  .min(1, 'name at least one column')
  .superRefine((names, ctx) => {
    names.forEach((n, i) => {
      if (names.indexOf(n) !== i) ctx.addIssue({ code: 'custom', path: [i], message: `"${n}" is listed twice` });
    });
  });

/** A name a rename may give: the config's rule for column names. */
const newName = z
  .string()
  .min(1, 'a column name is empty')
  .refine((n) => !n.startsWith(INTERNAL_PREFIX) && n !== PARTITION_COLUMN, {
    message: `names starting with ${INTERNAL_PREFIX} and the name "${PARTITION_COLUMN}" are reserved`,
  });

const redactSchema = z
  .strictObject({
    columns: columnList,
    patterns: z
      .array(z.string())
      .superRefine((names, ctx) => {
        names.forEach((n, i) => {
          if ((PATTERN_NAMES as readonly string[]).includes(n)) {
            if (names.indexOf(n) !== i) ctx.addIssue({ code: 'custom', path: [i], message: `"${n}" is listed twice` });
            return;
          }
          const guess = didYouMean(n, PATTERN_NAMES);
          ctx.addIssue({
            code: 'custom',
            path: [i],
            message: `unknown pattern "${n}"${guess ? `; did you mean "${guess}"?` : ''} (built-in patterns: ${PATTERN_NAMES.join(', ')}; give your own in "regex")`,
          });
        });
      })
      .default([]),
    regex: z
      .array(z.string())
      .superRefine((sources, ctx) => {
        sources.forEach((s, i) => {
          try {
            compileUserRegex(s);
          } catch (e) {
            ctx.addIssue({ code: 'custom', path: [i], message: (e as Error).message });
          }
        });
      })
      .default([]),
    paths: z
      .array(z.string())
      .min(1, 'give at least one JSON path, or leave "paths" out to redact every string in the value')
      .superRefine((paths, ctx) => {
        paths.forEach((p, i) => {
          try {
            parseJsonPath(p);
          } catch (e) {
            ctx.addIssue({ code: 'custom', path: [i], message: (e as Error).message });
          }
        });
      })
      .optional(),
    mask: z.string().max(256, 'a mask of at most 256 characters').default(DEFAULT_MASK),
  })
  .superRefine((r, ctx) => {
    if (r.patterns.length === 0 && r.regex.length === 0) {
      ctx.addIssue({ code: 'custom', path: ['patterns'], message: `give what to redact: "patterns" (${PATTERN_NAMES.join(', ')}) or "regex", or both` });
    }
  });

const hashSchema = z.strictObject({
  columns: columnList,
  key: z.string().regex(ENV_REF, `give the key as "\${NAME}", an environment variable holding it; a key written in the config file is a secret in a file`),
});

export const BUILTIN_SCHEMAS = {
  select: columnList,
  drop: columnList,
  rename: z
    .record(columnName, newName)
    .refine((m) => Object.keys(m).length > 0, { message: 'give at least one "old": "new" pair' })
    .superRefine((m, ctx) => {
      const seen = new Map<string, string>();
      for (const [from, to] of Object.entries(m)) {
        const other = seen.get(to);
        if (other !== undefined) ctx.addIssue({ code: 'custom', path: [from], message: `"${other}" is renamed to "${to}" too` });
        seen.set(to, from);
      }
    }),
  redact: redactSchema,
  hash: hashSchema,
} as const;

const pluginSchema = z.strictObject({
  plugin: z.string().min(1, 'name the plugin that registered the transform'),
  config: z.record(z.string(), z.unknown()).default({}),
});

export type SelectConfig = z.infer<typeof BUILTIN_SCHEMAS.select>;
export type RenameConfig = z.infer<typeof BUILTIN_SCHEMAS.rename>;
export type RedactConfig = z.infer<typeof redactSchema>;
export type HashConfig = z.infer<typeof hashSchema>;

export type StepConfig =
  | { readonly kind: 'select' | 'drop'; readonly config: SelectConfig }
  | { readonly kind: 'rename'; readonly config: RenameConfig }
  | { readonly kind: 'redact'; readonly config: RedactConfig }
  | { readonly kind: 'hash'; readonly config: HashConfig }
  | { readonly kind: 'plugin'; readonly plugin: string; readonly config: Record<string, unknown> };

const KNOWN = `known: ${BUILTIN_KINDS.join(', ')}, or "plugin" with "config"`;

const isPlain = (v: unknown): v is Record<string, unknown> => !!v && typeof v === 'object' && !Array.isArray(v);

type Issue = { code: string; path: readonly PropertyKey[]; message: string; keys?: readonly string[] };

/** One message per field (the first problem of each), unknown keys each with the key most likely meant. */
function messages(issues: readonly Issue[], root: readonly PropertyKey[], known: (path: readonly PropertyKey[]) => readonly string[]): string[] {
  const out: string[] = [];
  const seen = new Set<string>();
  for (const issue of issues) {
    const path = [...root, ...issue.path];
    if (issue.code === 'unrecognized_keys' && issue.keys) {
      for (const k of issue.keys) out.push(unknownKey(configField([...path, k], 'transforms'), k, known(issue.path)));
      continue;
    }
    const field = configField(path, 'transforms');
    if (seen.has(field)) continue;
    seen.add(field);
    out.push(`${field}: ${issue.code === 'invalid_type' && issue.message.endsWith('received undefined') ? 'required' : issue.message}`);
  }
  return out;
}

/** The keys a strict object of the schema at `path` (inside a step's config) takes, for "did you mean". */
function keysAt(schema: z.ZodType, path: readonly PropertyKey[]): readonly string[] {
  if (path.length > 0) return [];
  const shape = (schema as unknown as { _zod: { def: { shape?: Record<string, unknown>; in?: z.ZodType } } })._zod.def;
  const s = shape.shape ?? (shape.in ? (shape.in as unknown as { _zod: { def: { shape?: Record<string, unknown> } } })._zod.def.shape : undefined);
  return s ? Object.keys(s) : [];
}

/**
 * The entries of `transforms` (comments stripped), each checked against its
 * kind's schema; every problem of every entry in one list of messages
 * (empty when all are fine).
 */
export function parseSteps(raw: unknown): { steps: StepConfig[]; problems: string[] } {
  const steps: StepConfig[] = [];
  const problems: string[] = [];
  const value = withoutComments(raw);
  if (value === undefined) return { steps, problems };
  if (!Array.isArray(value)) return { steps, problems: ['transforms: expected a list of transforms, like [{ "drop": ["debug"] }]'] };
  value.forEach((entry, i) => {
    const at = `transforms[${i}]`;
    if (!isPlain(entry)) {
      problems.push(`${at}: expected an object with one transform, like { "drop": ["debug"] } (${KNOWN})`);
      return;
    }
    const keys = Object.keys(entry);
    if ('plugin' in entry) {
      const r = pluginSchema.safeParse(entry);
      if (!r.success) problems.push(...messages(r.error.issues, [i], () => ['plugin', 'config']));
      else steps.push({ kind: 'plugin', plugin: r.data.plugin, config: r.data.config });
      return;
    }
    if (keys.length !== 1) {
      problems.push(
        keys.length === 0
          ? `${at}: an empty entry; give one transform (${KNOWN})`
          : `${at}: one transform per entry, found ${keys.map((k) => `"${k}"`).join(' and ')}; give each its own entry`,
      );
      return;
    }
    const kind = keys[0]!;
    if (!(BUILTIN_KINDS as readonly string[]).includes(kind)) {
      const guess = didYouMean(kind, [...BUILTIN_KINDS, 'plugin']);
      problems.push(`${at}: unknown transform "${kind}"${guess ? `; did you mean "${guess}"?` : ''} (${KNOWN})`);
      return;
    }
    const schema = BUILTIN_SCHEMAS[kind as BuiltinKind] as z.ZodType;
    const r = schema.safeParse(entry[kind]);
    if (!r.success) {
      problems.push(...messages(r.error.issues as readonly Issue[], [i, kind], (p) => keysAt(schema, p)));
      return;
    }
    steps.push({ kind, config: r.data } as StepConfig);
  });
  return { steps, problems };
}
