/**
 * One table of error codes. Every error hypsink raises carries a code, a message
 * that names the file / line / sink / field involved, and what to do next.
 * CLI exit codes and `status` show the code.
 */
export const ERROR_CODES = {
  HYPSINK_ERR_CONFIG: { exit: 2, hint: 'Fix the named field in the config file and run again.' },
  HYPSINK_ERR_INPUT: { exit: 2, hint: 'Fix the named row or file; valid rows were kept.' },
  HYPSINK_ERR_PLUGIN: { exit: 2, hint: 'Check the plugin name or path and its plugin.json.' },
  HYPSINK_ERR_CORRUPT: {
    exit: 1,
    hint: 'The named file is damaged: restore it from a backup or move it aside; hypsink will not guess its contents.',
  },
  HYPSINK_ERR_CONFLICT: {
    exit: 1,
    hint: 'The destination holds other rows under this unit\'s name: the cache was likely copied or restored. Run "hypsink status" for the evidence and "hypsink identity --help" to decide; nothing was counted as delivered.',
  },
  HYPSINK_ERR_LOCKED: { exit: 1, hint: 'Another process holds the lock named; wait for it or stop it.' },
  HYPSINK_ERR_DESTINATION: { exit: 1, hint: 'The destination refused the unit; see the message, fix, and export again.' },
  HYPSINK_ERR_RETRYABLE: { exit: 1, hint: 'A passing fault; the partition will be retried on the next tick.' },
  HYPSINK_ERR_AUTH: { exit: 1, hint: 'Check the credentials or token of the named sink.' },
  HYPSINK_ERR_INVARIANT: { exit: 1, hint: 'An internal invariant broke; this is a bug: keep the state dir and report it.' },
  HYPSINK_ERR_ABORTED: { exit: 1, hint: 'Shutdown interrupted the work; it resumes on the next run.' },
  HYPSINK_ERR_VERIFY: {
    exit: 1,
    hint: 'Each finding names the object: a hole or another row count means the destination lost or changed rows (restore that object from a backup); an overlap or a unit beyond the watermark is an object too many (move it aside). Then run verify again.',
  },
  /** `hypsink test` found a sink's output at odds with the expected file. @ref LLP 0071 */
  HYPSINK_ERR_TEST: {
    exit: 1,
    hint: 'Each difference names the row, its input and expected lines, the field, expected and got: fix the transforms, or the expected file if the new output is right; then run the test again.',
  },
  /** Permission or read-only: permanent, exit 1 (the batch is not durable: a host retries it once fixed). @ref LLP 0033 */
  HYPSINK_ERR_ACCESS: { exit: 1, hint: 'Give the user hypsink runs as access to the named path, or choose another path; then run again.' },
  HYPSINK_ERR_USAGE: { exit: 2, hint: 'Fix the command line: see the usage above, or "hypsink <command> --help".' },
  /** An error hypsink has no code for: one line on the terminal, its stack with HYPSINK_LOG_LEVEL=debug. */
  HYPSINK_ERR_UNEXPECTED: {
    exit: 1,
    hint: 'hypsink has no code for this failure: run again with HYPSINK_LOG_LEVEL=debug to see where it came from, and report it.',
  },
} as const;

export type ErrorCode = keyof typeof ERROR_CODES;

export interface HypsinkErrorOptions {
  readonly cause?: unknown;
  /** A failure that may pass on its own (network, throttling, 5xx). */
  readonly retryable?: boolean;
  /** The destination asked to wait this long before retrying (Retry-After). */
  readonly retryAfterMs?: number;
  /**
   * The destination refused the unit as too large, and no earlier attempt of
   * this ship may have stored any of it. The kernel then re-plans the range as
   * smaller units, but only a unit it planned in this run: a unit recorded
   * before (it may have been shipped before a crash) keeps its identity, and
   * the export fails asking for a larger limit. @ref LLP 0018
   */
  readonly tooLarge?: boolean;
  /**
   * No attempt of this ship reached the destination: every one failed before
   * a connection was made (`neverConnected`), and nothing of the unit was
   * stored. The kernel then withdraws the unit (its intent clears, the range
   * is planned again), but only a unit it planned in this tick: one recorded
   * before may have been sent then. A sink that sets it where a byte may have
   * left breaks exactly once. @ref LLP 0070
   */
  readonly unsent?: boolean;
  /** What to do next when the code's own hint does not fit the case (a flag, not a config field). */
  readonly hint?: string;
}

/**
 * The mark every hypsink error carries, shared by every copy of hypsink in a
 * process (`Symbol.for` is process-wide): a plugin installed with its own copy
 * throws errors the kernel still knows by their code. @ref LLP 0024
 */
const BRAND = Symbol.for('hypsink.error');

export class HypsinkError extends Error {
  readonly [BRAND] = true;
  readonly code: ErrorCode;
  readonly retryable: boolean;
  readonly retryAfterMs: number | undefined;
  readonly tooLarge: boolean;
  readonly unsent: boolean;
  private readonly ownHint: string | undefined;

  constructor(code: ErrorCode, message: string, opts: HypsinkErrorOptions = {}) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = 'HypsinkError';
    this.code = code;
    this.retryable = opts.retryable ?? code === 'HYPSINK_ERR_RETRYABLE';
    this.retryAfterMs = opts.retryAfterMs;
    this.tooLarge = opts.tooLarge ?? false;
    this.unsent = opts.unsent ?? false;
    this.ownHint = opts.hint;
  }

  /** What to do next: the error's own, else its code's. */
  get hint(): string {
    return this.ownHint ?? ERROR_CODES[this.code].hint;
  }

  get exitCode(): number {
    return ERROR_CODES[this.code].exit;
  }

  /**
   * `e instanceof HypsinkError` is true for an error of any hypsink copy with a
   * code this one knows; a subclass keeps class identity.
   */
  static override [Symbol.hasInstance](e: unknown): boolean {
    // biome-ignore lint/complexity/noThisInStatic: `this` is the class instanceof was asked about, a subclass too
    return this === HypsinkError ? isHypsinkError(e) : Function.prototype[Symbol.hasInstance].call(this, e);
  }
}

/**
 * A hypsink error, known by its mark and code, not by class identity: any
 * number of hypsink copies agree. @ref LLP 0024
 */
export function isHypsinkError(e: unknown): e is HypsinkError {
  return (
    typeof e === 'object' &&
    e !== null &&
    (e as { [BRAND]?: unknown })[BRAND] === true &&
    typeof (e as { code?: unknown }).code === 'string' &&
    Object.hasOwn(ERROR_CODES, (e as { code: string }).code)
  );
}

/**
 * Socket error codes raised before a connection exists (refused, host unknown,
 * no route): a request that failed so sent nothing. A reset, a timeout or a
 * broken pipe are not among them: the request may have been received.
 * @ref LLP 0070
 */
const NEVER_CONNECTED = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH', 'ENETDOWN']);

/** The error (or a cause of it, to a few levels) says its request never reached a connection. */
export function neverConnected(e: unknown): boolean {
  for (let x = e, depth = 0; x !== null && typeof x === 'object' && depth < 8; x = (x as { cause?: unknown }).cause, depth++) {
    const code = (x as { code?: unknown }).code;
    if (typeof code === 'string' && NEVER_CONNECTED.has(code)) return true;
    const errors = (x as { errors?: unknown }).errors; // an AggregateError of every address tried
    if (Array.isArray(errors) && errors.length > 0 && errors.every((y) => neverConnected(y))) return true;
  }
  return false;
}
