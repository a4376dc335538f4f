/**
 * Structured logs (pino). Secrets never reach a line: known secret-bearing keys
 * are redacted, and config values that came from `${ENV}` interpolation are
 * registered and masked wherever they appear in a message or a field. Masking
 * works on the values before they are serialised: in the JSON text a secret
 * holding `"` or `\` is escaped and would no longer match.
 * @ref LLP 0031
 */
import pino, { type Logger as Pino } from 'pino';
import type { Logger } from '../types/plugins.js';

const secrets = new Set<string>();

/** Mask this value in every later log line and error message printed by the CLI. */
export function registerSecret(value: string): void {
  if (value.length >= 4) secrets.add(value);
}

export function maskSecrets(text: string): string {
  let out = text;
  for (const s of secrets) out = out.split(s).join('***');
  return out;
}

/** JSON text of a value, every string in it masked before it is escaped. */
function textOf(value: object): string {
  try {
    return JSON.stringify(value, (_k, v: unknown) => (typeof v === 'string' ? maskSecrets(v) : typeof v === 'bigint' ? v.toString() : v)) ?? '';
  } catch {
    return '[unserialisable]';
  }
}

/** A log record's fields with every string masked (errors as their own fields, which pino would print). */
function maskFields(value: unknown, depth = 0): unknown {
  if (typeof value === 'string') return maskSecrets(value);
  if (typeof value !== 'object' || value === null) return value;
  // Deeper than any record of ours: kept as masked text, never passed on unmasked.
  if (depth > 8) return textOf(value);
  if (Array.isArray(value)) return value.map((v) => maskFields(v, depth + 1));
  const out: Record<string, unknown> = {};
  if (value instanceof Error) {
    out.type = value.name;
    out.message = maskSecrets(value.message);
    if (value.stack) out.stack = maskSecrets(value.stack);
  }
  for (const [k, v] of Object.entries(value)) out[k] = maskFields(v, depth + 1);
  return out;
}

export function createLogger(level = process.env.HYPSINK_LOG_LEVEL ?? 'info', dest: pino.DestinationStream | number = 2): Pino {
  return pino(
    {
      level,
      base: undefined,
      redact: {
        paths: ['token', '*.token', 'authorization', '*.authorization', 'secretAccessKey', '*.secretAccessKey', 'password'],
        censor: '***',
      },
      hooks: {
        logMethod(args, method) {
          method.apply(
            this,
            args.map((a) => (typeof a === 'string' ? maskSecrets(a) : a)) as Parameters<typeof method>,
          );
        },
      },
      formatters: {
        log(obj) {
          return secrets.size === 0 ? obj : (maskFields(obj) as Record<string, unknown>);
        },
      },
    },
    typeof dest === 'number' ? pino.destination({ fd: dest, sync: true }) : dest,
  );
}

export function child(log: Pino, bindings: Record<string, unknown>): Logger {
  return log.child(bindings);
}
