/**
 * The retry budget for one S3 request. The SDK's own retry is off
 * (`maxAttempts: 1`) so that this budget is the only one: bounded, testable,
 * honouring Retry-After, and abortable by the unit's signal while it sleeps.
 */
import { type HypsinkError, type Logger, neverConnected, sleep } from 'hypsink/plugin';
import type { RetryBudget } from './config.js';
import { type ErrorContext, type Fault, classify, toHypsinkError } from './errors.js';

export interface RetryScope {
  readonly sink: string;
  readonly bucket: string;
  readonly where: string;
  readonly budget: RetryBudget;
  readonly signal: AbortSignal;
  readonly log: Logger;
  /**
   * A unit's put: set once any request of it is answered, or fails in a way
   * that may have reached the store. Still unset when the put fails, nothing
   * of the unit was sent (`HypsinkError.unsent`). @ref LLP 0070
   */
  readonly contact?: { answered: boolean };
}

/** Full-jitter-ish exponential backoff: half fixed, half random, capped. */
export function backoffMs(attempt: number, budget: RetryBudget, random = Math.random): number {
  const exp = Math.min(budget.maxMs, budget.baseMs * 2 ** (attempt - 1));
  return Math.round(exp / 2 + (exp / 2) * random());
}

export function errorFor(fault: Fault, scope: RetryScope, op: string, attempts: number): HypsinkError {
  const ctx: ErrorContext = { sink: scope.sink, bucket: scope.bucket, where: scope.where, op, attempts, unsent: scope.contact !== undefined && !scope.contact.answered };
  return toHypsinkError(fault, ctx);
}

/**
 * Runs `fn` until it succeeds, a fault is not retryable, or the budget is spent;
 * then throws a classified HypsinkError. `fn` handles the answers it expects
 * (404 on HEAD, 412 on a conditional write) itself.
 */
export async function withRetry<T>(op: string, scope: RetryScope, fn: (attempt: number) => Promise<T>): Promise<T> {
  const { budget, signal, log } = scope;
  for (let attempt = 1; ; attempt++) {
    if (signal.aborted) throw errorFor(classify(signal.reason, signal), scope, op, attempt - 1);
    try {
      const r = await fn(attempt);
      if (scope.contact) scope.contact.answered = true;
      return r;
    } catch (e) {
      if (scope.contact && !neverConnected(e)) scope.contact.answered = true;
      const fault = classify(e, signal);
      if (fault.kind !== 'retryable' || attempt >= budget.attempts) throw errorFor(fault, scope, op, attempt);
      // A Retry-After beyond our cap ends the budget: the kernel's outbox waits instead of a parked request.
      if (fault.retryAfterMs !== undefined && fault.retryAfterMs > budget.maxMs) throw errorFor(fault, scope, op, attempt);
      const waitMs = fault.retryAfterMs ?? backoffMs(attempt, budget);
      log.warn(
        { sink: scope.sink, location: scope.where, op, attempt, of: budget.attempts, fault: fault.summary, waitMs },
        's3: retrying after a passing fault',
      );
      await sleep(waitMs, signal, () => errorFor({ ...fault, kind: 'aborted' }, scope, op, attempt));
    }
  }
}
