/**
 * Reading back what the receiver stored for this sink, for `hypsink verify`:
 * `GET <url>/v1/ledger?dataset=…&source=…` pages through the calling client's
 * ledger entries of one partition (the reference receiver's endpoint). A batch
 * id carries its unit's range (`hfw1-<since|start>-<until>-<digest>`, LLP
 * 0008), so the ledger needs no more than the id and its rows; an entry is this
 * sink's only when its id is the one this sink derives for that range (scheme
 * v2, or v1 of ledgers written before the cache's id was mixed in): another
 * sink or cache under the same client is passed over. Each entry's unit digest
 * (what the sink sent as `X-Hyp-Unit-Digest`) is the held unit's digest: one
 * batch is one unit.
 * @ref LLP 0037: the reader contract
 * @ref LLP 0038: the receiver's ledger endpoint
 * @ref LLP 0060: the unit digest in the ledger
 */
import { createHash } from 'node:crypto';
import type { Continuation, HeldUnit, PartitionRef, SinkBuildContext } from 'hypsink/plugin';
import { backoffMs, parkedWait } from './backoff.js';
import type { ForwardConfig } from './config.js';
import { ForwardError } from './errors.js';
import { encodePartitionValue, encodeSegment } from './request-builder.js';
import type { ForwardService } from './service.js';

/** A page of ledger entries is at most 10 000 short lines: anything much bigger is not one. */
const MAX_PAGE_BYTES = 32 * 1024 * 1024;
const BATCH_ID = /^hfw1-(start|0|[1-9]\d*)-(0|[1-9]\d*)-[0-9a-f]{32}$/;

interface Entry {
  readonly id: string;
  readonly rows: number;
  /** null: stored without one, or a receiver that does not show it. */
  readonly unitDigest: string | null;
}

interface Page {
  readonly entries: Entry[];
  readonly next: number | null;
}

/** A unit digest as the receiver keeps it (its X-Hyp-Unit-Digest rule); anything else is not one. */
const UNIT_DIGEST = /^[\x21-\x7e]{1,128}$/;

/** The ids the first scheme gave (LLP 0008 §2), before the cache's id was mixed in. */
function idV1(cfg: ForwardConfig, sink: string, p: PartitionRef, from: string, until: string): string {
  const material = JSON.stringify(['hypsink.forward.batch.v1', cfg.idNamespace ?? null, sink, p.dataset, p.key, from, until]);
  return `hfw1-${from}-${until}-${createHash('sha256').update(material).digest('hex').slice(0, 32)}`;
}

function parsePage(text: string): Page | null {
  try {
    const j = JSON.parse(text) as { entries?: unknown; next?: unknown };
    if (!Array.isArray(j.entries) || !(j.next === null || Number.isSafeInteger(j.next))) return null;
    const entries: Entry[] = [];
    for (const e of j.entries as { id?: unknown; rows?: unknown; unitDigest?: unknown }[]) {
      if (typeof e?.id !== 'string' || !Number.isSafeInteger(e.rows)) return null;
      const d = e.unitDigest;
      // Absent: a receiver from before unit digests (LLP 0060); it recorded none.
      if (!(d === undefined || d === null || (typeof d === 'string' && UNIT_DIGEST.test(d)))) return null;
      entries.push({ id: e.id, rows: e.rows as number, unitDigest: d ?? null });
    }
    return { entries, next: j.next as number | null };
  } catch {
    return null;
  }
}

/** This sink's batches of `p` the receiver's ledger holds. */
export async function* ledgerUnits(
  service: ForwardService,
  cfg: ForwardConfig,
  ctx: SinkBuildContext,
  p: PartitionRef,
  unitId: (since: Continuation | null, until: Continuation) => string,
  signal: AbortSignal,
): AsyncGenerator<HeldUnit> {
  const where = `${cfg.url}/v1/ledger`;
  let after = 0;
  for (;;) {
    const path = `/v1/ledger?dataset=${encodeSegment(p.dataset)}&source=${encodePartitionValue(p.source)}&after=${after}`;
    const auth: Record<string, string> = cfg.token === undefined ? {} : { authorization: `Bearer ${cfg.token}` };
    let page: Page | null = null;
    for (let failures = 1; page === null; failures++) {
      const got = await service.get(path, auth, signal, MAX_PAGE_BYTES);
      if (got.kind === 'aborted' || signal.aborted) throw new ForwardError('HYPSINK_ERR_ABORTED', `sink "${ctx.sink}": reading ${where} was stopped`);
      let passing: string;
      if (got.kind === 'failed') passing = got.message;
      else if (got.status === 200) {
        if (got.cut) throw new ForwardError('HYPSINK_ERR_DESTINATION', `sink "${ctx.sink}": ${where} answered a page of more than ${MAX_PAGE_BYTES} bytes; a ledger page is far smaller`);
        page = parsePage(got.text);
        if (page === null) throw new ForwardError('HYPSINK_ERR_DESTINATION', `sink "${ctx.sink}": ${where} answered 200 with no ledger page ({"entries":[…],"next":…})`);
        break;
      } else if (got.status === 401 || got.status === 403) {
        throw new ForwardError('HYPSINK_ERR_AUTH', `sink "${ctx.sink}": the receiver refused the token reading its ledger (HTTP ${got.status}); check config.token / HYPSINK_TOKEN`, { status: got.status });
      } else if (got.status === 404 || got.status === 405) {
        throw new ForwardError(
          'HYPSINK_ERR_DESTINATION',
          `sink "${ctx.sink}": the receiver at ${cfg.url} does not show its ledger (GET /v1/ledger answered ${got.status}); verify needs a receiver that does, like "hypsink receiver"`,
          { status: got.status },
        );
      } else if (got.status === 429 || got.status === 503 || got.status >= 500) passing = `HTTP ${got.status}`;
      else {
        // A receiver could echo anything back; the token never leaves in a message.
        const text = cfg.token === undefined ? got.text : got.text.split(cfg.token).join('[redacted]');
        throw new ForwardError('HYPSINK_ERR_DESTINATION', `sink "${ctx.sink}": ${where} answered HTTP ${got.status}: ${text.slice(0, 300)}`, { status: got.status });
      }
      if (failures >= cfg.retry.attempts) {
        throw new ForwardError('HYPSINK_ERR_RETRYABLE', `sink "${ctx.sink}": could not read ${where} after ${failures} tries: ${passing}`, { retryable: true });
      }
      await parkedWait(backoffMs(failures, cfg.retry), signal).catch(() => undefined);
    }
    for (const e of page.entries) {
      const m = BATCH_ID.exec(e.id);
      if (!m) continue; // not an id of this plugin
      const since = m[1] === 'start' ? null : m[1]!;
      const until = m[2]!;
      const mine = unitId(since === null ? null : { v: 1, seq: since }, { v: 1, seq: until }) === e.id || idV1(cfg, ctx.sink, p, m[1]!, until) === e.id;
      // A receiver could echo anything back; the token never leaves in a digest.
      const digest = cfg.token !== undefined && e.unitDigest?.includes(cfg.token) ? null : e.unitDigest;
      if (mine) yield { id: e.id, since, until, rows: e.rows, where: `batch ${e.id} at ${cfg.url}`, digest };
    }
    if (page.next === null) return;
    after = page.next;
  }
}
