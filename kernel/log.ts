/**
 * Structured logs (pino). Secrets never reach a line: known secret-bearing keys
 * are redacted, and config values that came from `${ENV}` interpolation are
 * registered and masked wherever they appear in a message or a field. Masking
 * works on the values before they are serialised: in the JSON text a secret
 * holding `"` or `\` is escaped and would no longer match.
 * @ref LLP 0031
 */
import { createRequire } from 'node:module';
import { isatty } from 'node:tty';
import pino, { type Logger as Pino } from 'pino';
import type { Logger } from '../types/plugins.js';
import { colourful } from './cli/colour.js';

/**
 * How log lines look: `json` (pino's lines), `pretty` (pino-pretty, for a
 * person), `auto` (pretty when the lines go to a terminal). The CLI sets it
 * from `--log-format` (default auto); a host embedding hypsink keeps JSON.
 * @ref LLP 0035
 */
export type LogFormat = 'auto' | 'json' | 'pretty';
export const LOG_FORMATS: readonly LogFormat[] = ['auto', 'json', 'pretty'];
let logFormat: LogFormat = 'json';

export function setLogFormat(format: LogFormat): void {
  logFormat = format;
}

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

/** An error's stack is for debugging: above debug its record loses it. */
function withoutStack(e: unknown): unknown {
  if (typeof e !== 'object' || e === null) return e;
  const { stack: _stack, ...rest } = e as Record<string, unknown>;
  return rest;
}

export function createLogger(level = process.env.HYPSINK_LOG_LEVEL ?? 'info', dest: pino.DestinationStream | number = 2): Pino {
  const stacks = level === 'debug' || level === 'trace';
  return pino(
    {
      level,
      base: undefined,
      // No stack trace unless HYPSINK_LOG_LEVEL=debug, in a log line as on the terminal (docs/ERRORS.md).
      serializers: stacks ? {} : { err: (e: unknown) => withoutStack(pino.stdSerializers.err(e as Error)) },
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
    typeof dest === 'number' ? fdDestination(dest) : dest,
  );
}

/**
 * A file descriptor's stream: pino's JSON lines, or pino-pretty's text. Pretty
 * is a synchronous stream in this thread, not a worker transport: a line is
 * written before the next statement runs (and before an exit), as the JSON
 * lines are. It formats the JSON pino made, so redaction and masking above
 * hold for it too. Loaded only when used.
 */
function fdDestination(fd: number): pino.DestinationStream {
  const pretty = logFormat === 'pretty' || (logFormat === 'auto' && isatty(fd));
  if (!pretty) return pino.destination({ fd, sync: true });
  const pinoPretty = createRequire(import.meta.url)('pino-pretty') as typeof import('pino-pretty');
  return pinoPretty({
    sync: true,
    destination: fd,
    colorize: colourful({ isTTY: isatty(fd) }),
    translateTime: 'SYS:HH:MM:ss.l',
    ignore: 'pid,hostname',
  });
}

export function child(log: Pino, bindings: Record<string, unknown>): Logger {
  return log.child(bindings);
}
