/**
 * `hypsink ctl`: the daemon's API from the command line. An error the API
 * answers comes back as the same HypsinkError (code, message, hint), so ctl
 * exits as the command that failed would have.
 * @ref LLP 0067
 */
import { promises as fsp } from 'node:fs';
import { resolve } from 'node:path';
import { ERROR_CODES, type ErrorCode, HypsinkError } from '../../types/errors.js';
import { checkToken, DEFAULT_API, parseAddress } from './api.js';
import type { ControlStatus, ReloadResult, SinkControlStatus } from './state.js';

export interface CtlTarget {
  readonly url: string;
  readonly token: string | undefined;
}

/** The API's address (`--api`, else HYPSINK_API, else the default) and token (`--token-file`, else HYPSINK_API_TOKEN). */
export async function ctlTarget(o: { api?: string; tokenFile?: string }, env: NodeJS.ProcessEnv = process.env): Promise<CtlTarget> {
  const given = o.api ?? (env.HYPSINK_API || undefined) ?? DEFAULT_API;
  const a = parseAddress(given);
  if (!a) throw new HypsinkError('HYPSINK_ERR_USAGE', `--api ${JSON.stringify(given)} is not an address: give [host:]port, e.g. ${DEFAULT_API}`);
  let token = env.HYPSINK_API_TOKEN || undefined;
  if (o.tokenFile !== undefined) token = await readTokenFile(o.tokenFile, '--token-file');
  if (token !== undefined) checkToken(token, o.tokenFile !== undefined ? `--token-file ${resolve(o.tokenFile)}` : 'HYPSINK_API_TOKEN');
  const host = a.host.includes(':') ? `[${a.host}]` : a.host;
  return { url: `http://${host}:${a.port}`, token };
}

/** A token file: its first line, trimmed. */
export async function readTokenFile(file: string, flag: string): Promise<string> {
  const path = resolve(file);
  let text: string;
  try {
    text = await fsp.readFile(path, 'utf8');
  } catch (e) {
    throw new HypsinkError('HYPSINK_ERR_CONFIG', `${flag} ${path}: cannot read it (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`, {
      hint: `Name a readable file holding the API token on its first line, or set HYPSINK_API_TOKEN instead of ${flag}.`,
    });
  }
  return (text.split('\n')[0] ?? '').trim();
}

/** One call to the API: its JSON answer, or the error it answered as a HypsinkError. */
export async function callApi<T>(t: CtlTarget, method: 'GET' | 'POST', path: string, opts: { okStatuses?: number[] } = {}): Promise<{ status: number; body: T }> {
  let res: Response;
  try {
    res = await fetch(`${t.url}${path}`, { method, headers: t.token ? { authorization: `Bearer ${t.token}` } : {} });
  } catch (e) {
    const cause = (e as { cause?: { code?: string } }).cause?.code ?? (e as Error).message;
    throw new HypsinkError('HYPSINK_ERR_RETRYABLE', `no hypsink API answers at ${t.url} (${cause})`, {
      cause: e,
      hint: `Is "hypsink run --api" running there? Pass its address with --api or HYPSINK_API (default ${DEFAULT_API}).`,
    });
  }
  const text = await res.text();
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    throw new HypsinkError('HYPSINK_ERR_RETRYABLE', `${t.url}${path} answered HTTP ${res.status} with no JSON: it is not a hypsink API`, {
      hint: `Check the --api address (default ${DEFAULT_API}).`,
    });
  }
  if (res.ok || opts.okStatuses?.includes(res.status)) return { status: res.status, body: body as T };
  const b = body as { code?: string; message?: string; hint?: string };
  const code = (typeof b.code === 'string' && b.code in ERROR_CODES ? b.code : 'HYPSINK_ERR_UNEXPECTED') as ErrorCode;
  throw new HypsinkError(code, b.message ?? `HTTP ${res.status}`, b.hint ? { hint: b.hint } : {});
}

/** The state of a sink in words: "running", "paused", "FAILED — CODE: message". */
function stateText(s: SinkControlStatus): string {
  const error = s.error ? ` — ${s.error.code}: ${s.error.message}` : '';
  const state = s.state === 'failed' ? 'FAILED' : s.state;
  const ticking = s.ticking ? (s.state === 'paused' ? ' (its tick in flight is finishing its units)' : ' (exporting now)') : '';
  const last = s.lastTick ? `; last tick ${s.lastTick.at}: ${s.lastTick.rows} row(s)${s.lastTick.failed ? `, ${s.lastTick.failed} partition(s) failed` : ''}` : '';
  const thrown = s.lastTickError ? `; last tick failed: ${s.lastTickError.code}: ${s.lastTickError.message}` : '';
  return `sink "${s.name}": ${state}${error}${ticking}${last}${thrown}`;
}

export const ctlText = {
  sink: stateText,
  /** One line per sink, then the partitions' table. */
  status(s: ControlStatus, table: (s: ControlStatus) => string): string {
    const head = `hypsink run: ${s.daemon.state}, config ${s.daemon.config ?? 'embedded default'}, since ${s.daemon.startedAt}${s.daemon.reloadedAt ? `, reloaded ${s.daemon.reloadedAt}` : ''}; figures read ${s.readAt}`;
    return [head, ...s.sinks.map(stateText), '', table(s)].join('\n');
  },
  reload(r: ReloadResult): string {
    const parts = [r.added.length ? `added ${r.added.join(', ')}` : '', r.removed.length ? `removed ${r.removed.join(', ')}` : '', r.changed.length ? `changed ${r.changed.join(', ')}` : ''].filter(Boolean);
    return `config reloaded from ${r.config ?? 'the embedded default'}: sinks ${r.sinks.join(', ') || 'none'}${parts.length ? ` (${parts.join('; ')})` : ' (no sink changed)'}`;
  },
  health(live: boolean, ready: { ready: boolean; state: string; failed: string[] }): string {
    if (!live) return 'not live';
    if (ready.ready) return 'live; ready';
    const why = ready.state !== 'running' ? ready.state : `failed: ${ready.failed.map((f) => `"${f}"`).join(', ')}`;
    return `live; NOT ready (${why})`;
  },
};

/** `ctl health`'s failure (exit 1): the first failed sink's own error, or the daemon's state. */
export function notReady(ready: { state: string; failed: string[] }, sinks: readonly SinkControlStatus[]): HypsinkError {
  const first = sinks.find((s) => s.name === ready.failed[0] && s.error);
  if (first?.error) {
    const code = (first.error.code in ERROR_CODES ? first.error.code : 'HYPSINK_ERR_UNEXPECTED') as ErrorCode;
    return new HypsinkError(code, `hypsink run is not ready: sink "${first.name}" stopped until restarted: ${first.error.message}`, {
      hint: `${first.error.hint} Then "hypsink ctl restart ${first.name}".`,
    });
  }
  return new HypsinkError('HYPSINK_ERR_RETRYABLE', `hypsink run is not ready: ${ready.failed.length ? `sink(s) ${ready.failed.join(', ')} failed` : ready.state}`, {
    hint: 'Ask again in a moment; "hypsink ctl status" shows each sink.',
  });
}
