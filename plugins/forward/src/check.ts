/**
 * The forward sink's connection check (`hypsink validate --connect`): two GETs,
 * nothing sent that a receiver stores. `GET /v1/health` proves the receiver
 * answers at config.url; `GET /v1/whoami` with the token proves the token is
 * accepted, through the receiver's own token check. A receiver without
 * /v1/whoami (404) passes on its health alone, saying the token was not checked.
 * @ref LLP 0036: what each connection check proves
 */
import { HypsinkError } from 'hypsink/plugin';
import type { ForwardConfig } from './config.js';
import type { ForwardService, GetOutcome } from './service.js';

const AGAIN = 'then run "hypsink validate --connect" again';

export async function checkReceiver(service: ForwardService, cfg: ForwardConfig, sink: string, signal: AbortSignal): Promise<string> {
  const at = `sink "${sink}": the receiver at ${cfg.url}`;
  // A receiver could echo anything back; the token never leaves in a message.
  const redact = (s: string) => (cfg.token === undefined ? s : s.split(cfg.token).join('[redacted]'));
  const noAnswer = (what: string, o: Extract<GetOutcome, { kind: 'failed' }>) =>
    new HypsinkError('HYPSINK_ERR_RETRYABLE', redact(`${at} did not answer ${what} (${o.message}); check config.url and that the receiver runs there`), {
      retryable: true,
      hint: `Start the receiver, or set config.url of sink "${sink}" to where it listens; ${AGAIN}.`,
    });
  const unwell = (what: string, status: number, message: string) =>
    new HypsinkError('HYPSINK_ERR_RETRYABLE', redact(`${at} answered ${what} with HTTP ${status} (${message}): it runs but cannot serve now`), {
      retryable: true,
      hint: `Look at the receiver's own log; ${AGAIN}.`,
    });
  const stopped = () => new HypsinkError('HYPSINK_ERR_ABORTED', `${at}: the connection check was stopped before the receiver answered`);
  const passing = (status: number) => status === 408 || status === 429 || status >= 500;

  const health = await service.get('/v1/health', {}, signal);
  if (health.kind === 'aborted') throw stopped();
  if (health.kind === 'failed') throw noAnswer('its health check (GET /v1/health)', health);
  const guarded = health.status === 401 || health.status === 403; // a receiver may guard its health too: the token decides
  if (!guarded && (health.status < 200 || health.status >= 300)) {
    if (passing(health.status)) throw unwell('its health check (GET /v1/health)', health.status, health.message);
    const why =
      health.status >= 300 && health.status < 400
        ? 'a redirect; set config.url to the final address'
        : `HTTP ${health.status} (${health.message}): config.url does not point at a hypsink receiver's base URL`;
    throw new HypsinkError('HYPSINK_ERR_DESTINATION', redact(`${at}: GET /v1/health answered ${why}`), {
      hint: `Set config.url of sink "${sink}" to the receiver's base URL (what comes before /v1/ingest/<dataset>); ${AGAIN}.`,
    });
  }

  const who = await service.get('/v1/whoami', cfg.token === undefined ? {} : { authorization: `Bearer ${cfg.token}` }, signal);
  if (who.kind === 'aborted') throw stopped();
  if (who.kind === 'failed') throw noAnswer('GET /v1/whoami', who);
  const healthy = guarded ? 'answered' : 'health check passed';
  if (who.status === 404 && !guarded) return `receiver ${cfg.url}: health check passed; the token could not be checked (the receiver has no GET /v1/whoami), the first export will tell`;
  if (who.status === 401 || who.status === 403) {
    throw new HypsinkError(
      'HYPSINK_ERR_AUTH',
      cfg.token === undefined
        ? `${at} requires a token (GET /v1/whoami: HTTP ${who.status}); set config.token (e.g. "\${HYPSINK_TOKEN}")`
        : `${at} rejected the token (GET /v1/whoami: HTTP ${who.status}); check config.token / HYPSINK_TOKEN`,
    );
  }
  if (who.status >= 200 && who.status < 300) {
    const client = clientName(who.text);
    const as = client === null ? '' : ` (client "${client}")`;
    return cfg.token === undefined ? `receiver ${cfg.url}: ${healthy}; it asks for no token${as}` : `receiver ${cfg.url}: ${healthy}, token accepted${as}`;
  }
  if (passing(who.status)) throw unwell('GET /v1/whoami', who.status, who.message);
  throw new HypsinkError('HYPSINK_ERR_DESTINATION', redact(`${at}: GET /v1/whoami answered HTTP ${who.status} (${who.message}); it is not a hypsink receiver, or not one this version knows`), {
    hint: `Set config.url of sink "${sink}" to the receiver's base URL; ${AGAIN}.`,
  });
}

/** The client a whoami answer names: a short plain name, else none. */
function clientName(text: string): string | null {
  try {
    const c = (JSON.parse(text) as { client?: unknown }).client;
    return typeof c === 'string' && /^[A-Za-z0-9._-]{1,64}$/.test(c) ? c : null;
  } catch {
    return null;
  }
}
