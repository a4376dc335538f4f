/**
 * The CLI's side of the control API: `run --api`'s settings (checked before
 * anything opens) and `hypsink ctl`'s actions. @ref LLP 0067
 */
import { HypsinkError } from '../../types/errors.js';
import { registerSecret } from '../log.js';
import type { StatusReport } from '../runtime.js';
import { type ReplayResult, replayRangeArgs, replayText } from '../sinks/replay-args.js';
import { type ApiOptions, apiAddress, DEFAULT_API } from './api.js';
import { callApi, ctlText, ctlTarget, notReady, readTokenFile } from './client.js';
import type { ControlStatus, ReloadResult, SinkControlStatus } from './state.js';

/**
 * `run --api [address] [--api-token-file f]`: the address, and the token from
 * the file, else HYPSINK_API_TOKEN (never a flag's value: argv is visible to
 * every local user). Anywhere but loopback without a token is refused here.
 */
export async function apiSettings(o: { api?: string | true; apiTokenFile?: string }, env: NodeJS.ProcessEnv = process.env): Promise<ApiOptions> {
  if (o.api === undefined) throw new HypsinkError('HYPSINK_ERR_USAGE', '--api-token-file goes with --api: without --api no API is served');
  const token = o.apiTokenFile !== undefined ? await readTokenFile(o.apiTokenFile, '--api-token-file') : env.HYPSINK_API_TOKEN || undefined;
  if (token !== undefined) registerSecret(token); // masked in every log line and message
  const address = apiAddress(o.api === true ? DEFAULT_API : o.api, token);
  return { ...address, token };
}

const ACTIONS = ['status', 'pause', 'resume', 'restart', 'replay', 'reload', 'health'] as const;
type Action = (typeof ACTIONS)[number];

/** `hypsink ctl <action> [sink]`. */
export async function runCtl(
  action: string,
  sink: string | undefined,
  o: { api?: string; tokenFile?: string; wait: boolean; json?: boolean; dataset?: string; source?: string; since?: string; until?: string },
  out: (s: string) => void,
  table: () => Promise<(s: StatusReport) => string>,
): Promise<void> {
  if (!(ACTIONS as readonly string[]).includes(action)) {
    throw new HypsinkError('HYPSINK_ERR_USAGE', `ctl ${JSON.stringify(action)}: the actions are ${ACTIONS.join(', ')}`);
  }
  const a = action as Action;
  const needsSink = a === 'pause' || a === 'resume' || a === 'restart' || a === 'replay';
  if (needsSink && sink === undefined) throw new HypsinkError('HYPSINK_ERR_USAGE', `ctl ${a} needs the sink's name: hypsink ctl ${a} <sink>`);
  if ((a === 'reload' || a === 'health') && sink !== undefined) throw new HypsinkError('HYPSINK_ERR_USAGE', `ctl ${a} takes no sink (it was given "${sink}")`);
  const t = await ctlTarget(o);
  const print = (body: unknown, text: () => string) => out(o.json ? JSON.stringify(body) : text());
  const enc = encodeURIComponent;
  switch (a) {
    case 'status': {
      if (sink !== undefined) {
        const { body } = await callApi<SinkControlStatus>(t, 'GET', `/v1/sinks/${enc(sink)}`);
        const render = await table();
        return print(body, () => `${ctlText.sink(body)}\n\n${render({ sinks: [body], absent: [] })}`);
      }
      const { body } = await callApi<ControlStatus>(t, 'GET', '/v1/status');
      const render = await table();
      return print(body, () => ctlText.status(body, render));
    }
    case 'pause':
    case 'resume':
    case 'restart': {
      const wait = a === 'pause' && !o.wait ? '?wait=false' : '';
      const { body } = await callApi<SinkControlStatus>(t, 'POST', `/v1/sinks/${enc(sink!)}/${a}${wait}`);
      return print(body, () => ctlText.sink(body));
    }
    case 'replay': {
      // Checked here too: a mistake is named by its flag, before any request.
      const r = replayRangeArgs(o, (f) => `--${f}`);
      const q = new URLSearchParams({ dataset: r.dataset, source: r.source, until: r.until, ...(r.since !== null ? { since: r.since } : {}) });
      const { body } = await callApi<ReplayResult>(t, 'POST', `/v1/sinks/${enc(sink!)}/replay?${q}`);
      return print(body, () => replayText(body));
    }
    case 'reload': {
      const { body } = await callApi<ReloadResult>(t, 'POST', '/v1/reload');
      return print(body, () => ctlText.reload(body));
    }
    case 'health': {
      const live = await callApi<{ live: boolean }>(t, 'GET', '/v1/health/live');
      const ready = await callApi<{ ready: boolean; state: string; failed: string[] }>(t, 'GET', '/v1/health/ready', { okStatuses: [503] });
      print({ live: live.body.live, ...ready.body }, () => ctlText.health(live.body.live, ready.body));
      if (!ready.body.ready) {
        // Its error is the failed sink's own (a token for status is needed only here).
        const sinks = ready.body.failed.length ? (await callApi<ControlStatus>(t, 'GET', '/v1/status').catch(() => null))?.body.sinks ?? [] : [];
        throw notReady(ready.body, sinks);
      }
      return;
    }
  }
}
