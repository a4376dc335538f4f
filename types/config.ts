/**
 * Validating a plugin's own config block. Every plugin reports config errors
 * the same way: HYPSINK_ERR_CONFIG naming the sink and each bad field
 * (`sink "lake": config.bucket: …`), unknown fields included.
 */
import { HypsinkError } from './errors.js';

/** The part of a zod schema this needs (any zod 4 schema fits). */
export interface ConfigSchema<T> {
  safeParse(
    raw: unknown,
  ):
    | { success: true; data: T }
    | { success: false; error: { issues: readonly { code: string; path: readonly PropertyKey[]; message: string; keys?: readonly string[] }[] } };
}

/** `config.a.b[2]` for an issue path. */
export function configField(path: readonly PropertyKey[], root = 'config'): string {
  return [root, ...path.map((p) => (typeof p === 'number' ? `[${p}]` : String(p)))].join('.').replace(/\.\[/g, '[');
}

/** Parse `raw` with `schema`, or throw one HYPSINK_ERR_CONFIG listing the first problem of each field. */
export function parseSinkConfig<T>(schema: ConfigSchema<T>, raw: unknown, sink: string, root = 'config'): T {
  const parsed = schema.safeParse(raw ?? {});
  if (parsed.success) return parsed.data;
  const problems: string[] = [];
  const seen = new Set<string>();
  for (const issue of parsed.error.issues) {
    if (issue.code === 'unrecognized_keys' && issue.keys) {
      for (const k of issue.keys) problems.push(`${configField([...issue.path, k], root)}: unknown field`);
      continue;
    }
    // One problem per field: the first is the one to fix.
    const field = configField(issue.path, root);
    if (seen.has(field)) continue;
    seen.add(field);
    problems.push(`${field}: ${issue.message}`);
  }
  throw new HypsinkError('HYPSINK_ERR_CONFIG', `sink "${sink}": ${problems.join('; ')}`);
}
