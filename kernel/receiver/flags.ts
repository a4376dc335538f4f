/**
 * The receiver's command-line flags, shared by fixtures/receiver/main.ts and
 * `hypsink receiver`: each value is checked like a config value (a typo such
 * as `--rate abc` must not switch a limit off), and an error names the flag.
 */
import { HypsinkError } from '../../types/errors.js';
import type { ReceiverOptions } from './server.js';

type LimitKey =
  | 'maxInflight'
  | 'rate'
  | 'burst'
  | 'retryAfterSeconds'
  | 'maxBodyBytes'
  | 'maxLineBytes'
  | 'maxDepth'
  | 'maxConnections'
  | 'reservedConnections'
  | 'maxConnectionsPerAddress'
  | 'keepAliveTimeoutMs'
  | 'headersTimeoutMs'
  | 'bodyTimeoutMs'
  | 'idleTimeoutMs'
  | 'requestTimeoutMs'
  | 'unauthorizedDelayMs';

export interface LimitFlag {
  readonly flag: string;
  readonly key: LimitKey;
  /** 'int': a whole number >= min; 'rate': a number > 0. */
  readonly kind: 'int' | 'rate';
  readonly min: number;
  readonly help: string;
}

export const LIMIT_FLAGS: readonly LimitFlag[] = [
  { flag: 'max-inflight', key: 'maxInflight', kind: 'int', min: 1, help: 'per client: answer 503 past this many requests in flight (default 64)' },
  { flag: 'rate', key: 'rate', kind: 'rate', min: 0, help: 'per client: answer 429 past this many requests per second (default: unlimited)' },
  { flag: 'burst', key: 'burst', kind: 'int', min: 1, help: 'per client: token-bucket size for --rate (default max(1, rate))' },
  { flag: 'retry-after', key: 'retryAfterSeconds', kind: 'int', min: 0, help: 'Retry-After seconds sent with 429 and 503 (default 1)' },
  { flag: 'max-body-bytes', key: 'maxBodyBytes', kind: 'int', min: 1, help: 'answer 413 to bodies larger than this (default 16 MiB)' },
  { flag: 'max-line-bytes', key: 'maxLineBytes', kind: 'int', min: 1, help: 'answer 400 to an NDJSON line longer than this (default 1 MiB)' },
  { flag: 'max-depth', key: 'maxDepth', kind: 'int', min: 1, help: 'answer 400 to JSON nested deeper than this (default 64)' },
  { flag: 'max-connections', key: 'maxConnections', kind: 'int', min: 1, help: 'open connections at most, over all clients (default 512)' },
  {
    flag: 'reserved-connections',
    key: 'reservedConnections',
    kind: 'int',
    min: 0,
    help: 'connections kept for clients with a token: past the rest, a new connection without one takes the oldest such one\'s place (default a quarter of --max-connections)',
  },
  { flag: 'max-connections-per-address', key: 'maxConnectionsPerAddress', kind: 'int', min: 1, help: 'open connections at most from one remote address (default 64)' },
  {
    flag: 'keep-alive-timeout-ms',
    key: 'keepAliveTimeoutMs',
    kind: 'int',
    min: 1,
    help: 'close a connection that carried a valid token when idle this long between requests (default 5000); one without a token is not kept alive',
  },
  { flag: 'header-timeout-ms', key: 'headersTimeoutMs', kind: 'int', min: 1, help: "cut a connection whose request headers take longer (default 10000)" },
  { flag: 'body-timeout-ms', key: 'bodyTimeoutMs', kind: 'int', min: 1, help: 'answer 408 to a body that takes longer to arrive (default 60000)' },
  { flag: 'idle-timeout-ms', key: 'idleTimeoutMs', kind: 'int', min: 1, help: 'cut a connection that sends nothing this long mid-request (default 30000)' },
  { flag: 'request-timeout-ms', key: 'requestTimeoutMs', kind: 'int', min: 1, help: 'cut a request that takes longer in all (default 120000)' },
  { flag: 'unauthorized-delay-ms', key: 'unauthorizedDelayMs', kind: 'int', min: 0, help: 'hold each 401 this long before answering (default 200)' },
];

function bad(flag: string, want: string, v: string): HypsinkError {
  return new HypsinkError('HYPSINK_ERR_CONFIG', `--${flag} must be ${want}, not ${JSON.stringify(v)}`, { hint: 'Fix the named flag and run again.' });
}

/** A whole number >= min (digits only: no '1e3', no '0x10', no ' 5'). */
export function intFlag(flag: string, v: string, min: number, max = Number.MAX_SAFE_INTEGER): number {
  const n = /^[0-9]{1,16}$/.test(v) ? Number(v) : Number.NaN;
  if (!Number.isSafeInteger(n) || n < min || n > max) {
    throw bad(flag, `a whole number${max < Number.MAX_SAFE_INTEGER ? ` from ${min} to ${max}` : ` >= ${min}`}`, v);
  }
  return n;
}

/** The limits given as flags; `get` answers a flag's raw value (undefined: not given). Throws naming the flag. */
export function limitsFromFlags(get: (flag: string) => string | undefined): Partial<Pick<ReceiverOptions, LimitKey>> {
  const out: Partial<Record<LimitKey, number>> = {};
  for (const f of LIMIT_FLAGS) {
    const v = get(f.flag);
    if (v === undefined) continue;
    if (f.kind === 'rate') {
      const n = /^[0-9]+(\.[0-9]+)?$/.test(v) ? Number(v) : Number.NaN;
      if (!(Number.isFinite(n) && n > 0)) throw bad(f.flag, 'a number of requests per second > 0', v);
      out[f.key] = n;
    } else out[f.key] = intFlag(f.flag, v, f.min);
  }
  return out;
}
