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
