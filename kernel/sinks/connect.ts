/**
 * `hypsink validate --connect`: each built sink's connection check
 * (`UnitShipper.check`), bounded by a timeout and the kernel's signal, every
 * sink checked whatever another's outcome. A check writes nothing visible at
 * the destination; that is each plugin's promise (types/sinks.ts).
 * @ref LLP 0036: what each connection check proves
 */
import { ERROR_CODES, HypsinkError, isHypsinkError } from '../../types/errors.js';
import type { SinkRuntime } from './exporter.js';

/** Long enough for a TLS handshake and two requests to a far store; short enough to wait for. */
export const CONNECTION_CHECK_TIMEOUT_MS = 10_000;

export const NO_CHECK = 'built (its plugin has no connection check)';

/** One sink's connection check: passed (with what was checked), or failed (with why). */
export type ConnectionCheck =
  | { readonly sink: string; readonly ok: true; readonly probed: boolean; readonly checked: string }
  | { readonly sink: string; readonly ok: false; readonly error: HypsinkError };

/** A check that neither answered nor stopped within the bound. */
function overdue(sink: string, ms: number): HypsinkError {
  return new HypsinkError('HYPSINK_ERR_RETRYABLE', `sink "${sink}": the connection check did not finish within ${ms} ms; the destination did not answer in time`, {
    retryable: true,
    hint: 'Check that the destination is up and reachable from here (address, firewall, proxy), then run "hypsink validate --connect" again.',
  });
}

/** Run one sink's check: never throws, never outlives `timeoutMs` (nor `signal`). */
export async function checkConnection(s: SinkRuntime, signal: AbortSignal, timeoutMs = CONNECTION_CHECK_TIMEOUT_MS): Promise<ConnectionCheck> {
  const check = s.shipper.check;
  if (check === undefined) return { sink: s.name, ok: true, probed: false, checked: NO_CHECK };
  const own = new AbortController();
  const abort = () => own.abort(signal.reason);
  if (signal.aborted) abort();
  else signal.addEventListener('abort', abort, { once: true });
  let timer: NodeJS.Timeout | undefined;
  // The race ends the wait even for a plugin that does not listen to its signal.
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      reject(overdue(s.name, timeoutMs));
      own.abort(new Error('timeout'));
    }, timeoutMs);
  });
  try {
    const checked = await Promise.race([check.call(s.shipper, { signal: own.signal }), late]);
    return { sink: s.name, ok: true, probed: true, checked: String(checked) };
  } catch (e) {
    if (isHypsinkError(e)) {
      // An abort at the bound surfaces as ABORTED from the plugin: it is the bound's failure.
      if (e.code === 'HYPSINK_ERR_ABORTED' && own.signal.aborted && !signal.aborted) return { sink: s.name, ok: false, error: overdue(s.name, timeoutMs) };
      return { sink: s.name, ok: false, error: e };
    }
    // A plugin's plain Error is reported like the driver reports one: a passing fault, named.
    const msg = e instanceof Error ? e.message : String(e);
    return { sink: s.name, ok: false, error: new HypsinkError('HYPSINK_ERR_RETRYABLE', `sink "${s.name}": ${msg}`, { cause: e, retryable: true }) };
  } finally {
    clearTimeout(timer);
    signal.removeEventListener('abort', abort);
  }
}

/**
 * The error `validate --connect` exits with: the first failure's code (and so
 * its exit status), naming every sink that failed.
 */
export function connectionFailure(checks: readonly ConnectionCheck[]): HypsinkError | null {
  const failed = checks.filter((c): c is Extract<ConnectionCheck, { ok: false }> => !c.ok);
  const first = failed[0];
  if (!first) return null;
  return new HypsinkError(
    first.error.code,
    `${failed.length} of ${checks.length} sink(s) failed the connection check: ${failed.map((c) => c.sink).join(', ')}`,
    { hint: checkHint(first.error) },
  );
}

/**
 * What to do after a failed check: the error's own hint, else one for the check
 * (a code's hint speaks of a unit and the next tick; here nothing is retried).
 */
export function checkHint(e: HypsinkError): string {
  if (e.hint !== ERROR_CODES[e.code].hint) return e.hint;
  if (e.code === 'HYPSINK_ERR_RETRYABLE') return 'Check that each destination named above is up and reachable from here, then run "hypsink validate --connect" again.';
  return 'Fix what each FAILED line above says, then run "hypsink validate --connect" again.';
}

/** One sink's line: its name once, then what was checked or what failed. */
export function checkLine(c: ConnectionCheck): string {
  if (c.ok) return `sink "${c.sink}": ok — ${c.checked}`;
  const own = `sink "${c.sink}": `;
  const msg = c.error.message.startsWith(own) ? c.error.message.slice(own.length) : c.error.message;
  return `${own}FAILED — ${c.error.code}: ${msg}`;
}

/**
 * What `validate --connect` prints: one line per sink, or `{sinks: [...]}` with
 * `--json`. `mask` hides secrets, applied to values before JSON escapes them (LLP 0031).
 */
export function checksText(checks: readonly ConnectionCheck[], json: boolean, mask: (s: string) => string): string {
  if (!json) return checks.length === 0 ? 'config OK: 0 sink(s), no destination to reach' : checks.map((c) => mask(checkLine(c))).join('\n');
  const sinks = checks.map((c) =>
    c.ok
      ? { name: c.sink, ok: true, probed: c.probed, checked: mask(c.checked) }
      : { name: c.sink, ok: false, code: c.error.code, error: mask(c.error.message), hint: mask(checkHint(c.error)) },
  );
  return JSON.stringify({ sinks });
}
