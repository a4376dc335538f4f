/**
 * How long to wait: Retry-After parsing, the backpressure ladder, network backoff.
 */
import { setTimeout as sleep } from 'node:timers/promises';

const IMF_FIXDATE = /^[A-Z][a-z]{2}, \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} GMT$/;
const RFC850_DATE = /^[A-Z][a-z]+, \d{2}-[A-Z][a-z]{2}-\d{2} \d{2}:\d{2}:\d{2} GMT$/;
const ASCTIME_DATE = /^[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2} \d{4}$/;

/**
 * A positive Retry-After in ms (delta-seconds or an HTTP-date), or undefined when
 * the header is absent, garbage, zero or in the past: the caller then climbs its ladder.
 * Strict formats on purpose: Date.parse alone reads "1.5" as a date in 2001.
 */
export function parseRetryAfter(value: string | undefined, now: number = Date.now()): number | undefined {
  if (value === undefined) return undefined;
  const v = value.trim();
  if (/^\d+$/.test(v)) {
    const ms = Number(v) * 1000;
    return ms > 0 && Number.isFinite(ms) ? ms : undefined;
  }
  let at = Number.NaN;
  if (IMF_FIXDATE.test(v) || RFC850_DATE.test(v)) at = Date.parse(v);
  else if (ASCTIME_DATE.test(v)) at = Date.parse(`${v} GMT`); // asctime carries no zone; HTTP means UTC
  if (Number.isNaN(at)) return undefined;
  const ms = at - now;
  return ms > 0 ? ms : undefined;
}

/** The ladder step for the n-th fallback wait (0-based); the last step repeats. */
export function ladderStep(ladderMs: readonly number[], n: number): number {
  return ladderMs[Math.min(n, ladderMs.length - 1)]!;
}

/** Exponential backoff with equal jitter, for the n-th failure (1-based). */
export function backoffMs(n: number, budget: { readonly baseMs: number; readonly maxMs: number }): number {
  const ceiling = Math.min(budget.maxMs, budget.baseMs * 2 ** Math.min(n - 1, 30));
  return Math.round(ceiling / 2 + Math.random() * (ceiling / 2));
}

/** Wait `ms`, or reject at once when `signal` aborts. */
export async function parkedWait(ms: number, signal: AbortSignal): Promise<void> {
  await sleep(ms, undefined, { signal });
}
