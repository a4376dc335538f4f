/**
 * The forward sink's error: a HypsinkError plus what the kernel needs to act on it.
 */
import { type ErrorCode, HypsinkError, type HypsinkErrorOptions, isHypsinkError } from 'hypsink/plugin';

export interface ForwardErrorOptions extends HypsinkErrorOptions {
  readonly status?: number;
  readonly batchId?: string;
}

export class ForwardError extends HypsinkError {
  /** The receiver's HTTP status, when it answered. */
  readonly status: number | undefined;
  /** The unit id (X-Hyp-Batch-Id) this error is about. */
  readonly batchId: string | undefined;

  constructor(code: ErrorCode, message: string, opts: ForwardErrorOptions = {}) {
    super(code, message, opts);
    this.status = opts.status;
    this.batchId = opts.batchId;
  }
}

export function isTooLarge(e: unknown): boolean {
  return isHypsinkError(e) && e.tooLarge;
}

/**
 * What to do when the receiver could not be reached at all: the url is the
 * sink's own `config.url`, so the next step is the receiver or that url, not
 * only waiting. Undefined for a failure after the receiver answered (a 5xx).
 */
export function unreachableHint(code: string | undefined, base: string): string | undefined {
  const later = 'the partition is retried on a later tick meanwhile.';
  switch (code) {
    case 'ECONNREFUSED':
      return `nothing answers at ${base}: check that the receiver is running and that the sink's config.url is right; ${later}`;
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
      return `the host of ${base} is not known (${code}): check the sink's config.url and the DNS; ${later}`;
    case 'EHOSTUNREACH':
    case 'ENETUNREACH':
    case 'ETIMEDOUT':
      return `${base} cannot be reached (${code}): check that the receiver is up, that the network lets this host reach it, and the sink's config.url; ${later}`;
    default:
      return undefined;
  }
}
