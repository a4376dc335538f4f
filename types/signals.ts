/**
 * Waiting on a signal without leaving anything on it. A unit's signal, and
 * the kernel's above it, live longer than any one wait: a listener added for
 * a wait and not removed when the wait ends stays until the signal aborts
 * (issue 28: Node's MaxListenersExceededWarning on every export to several
 * sinks). Every wait here removes its listener when it ends, either way.
 * @ref LLP 0069
 */

/** Resolves after `ms`, or rejects with `onAbort()` as soon as `signal` aborts. */
export function sleep(ms: number, signal: AbortSignal, onAbort: () => Error): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(onAbort());
    const done = () => {
      signal.removeEventListener('abort', abort);
      resolve();
    };
    const abort = () => {
      clearTimeout(timer);
      reject(onAbort());
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener('abort', abort, { once: true });
  });
}

/**
 * One signal that aborts when any of `signals` does, detached by dispose().
 * Not AbortSignal.any: combining with a long-lived signal (a shipper's close,
 * the kernel's shutdown) once per unit retains every combined signal on some
 * Node versions (nodejs/node#55351).
 */
export function linkSignals(...signals: AbortSignal[]): { signal: AbortSignal; dispose(): void } {
  const ac = new AbortController();
  const onAbort = (e: Event) => ac.abort((e.target as AbortSignal).reason);
  for (const s of signals) {
    if (s.aborted) {
      ac.abort(s.reason);
      break;
    }
    s.addEventListener('abort', onAbort, { once: true });
  }
  return {
    signal: ac.signal,
    dispose: () => {
      for (const s of signals) s.removeEventListener('abort', onAbort);
    },
  };
}
