/**
 * The forward sink as a UnitShipper: build the request once, POST it, and ride
 * out backpressure and passing faults in place under the same batch id. The
 * kernel owns the intent and the watermark; this file only guarantees that
 * every attempt for a unit carries the unit's id, so the receiver's ledger
 * makes the retries harmless.
 */
import { createHash } from 'node:crypto';
import {
  type ConnectionCheckOptions,
  type Continuation,
  type HeldUnit,
  type PartitionRef,
  type ShipResult,
  type SinkBuildContext,
  type Unit,
  type UnitLimits,
  type UnitShipper,
  linkSignals,
  neverConnected,
  unitConflict,
} from 'hypsink/plugin';
import { backoffMs, ladderStep, parkedWait, parseRetryAfter } from './backoff.js';
import { checkReceiver } from './check.js';
import type { ForwardConfig } from './config.js';
import { ForwardError, unreachableHint } from './errors.js';
import { ledgerUnits } from './ledger.js';
import { buildRequest } from './request-builder.js';
import { ForwardService, type Outcome } from './service.js';

/**
 * Bump only with a migration note: in-flight intents keep their recorded ids either way.
 * v2 mixes in the cache's id, so two caches never share a batch id (LLP 0021).
 */
const ID_SCHEME = 'hypsink.forward.batch.v2';

export class ForwardShipper implements UnitShipper {
  readonly limits: UnitLimits;
  /** The receiver (the config forbids credentials in the URL). */
  readonly destination: string;
  private readonly service: ForwardService;
  private readonly closer = new AbortController();
  /** Aborted by stopWaiting() (a drain): parked waits end, no unit starts; a POST on the wire goes on. */
  private readonly draining = new AbortController();
  private readonly onClose: (() => void)[] = [];

  constructor(
    private readonly cfg: ForwardConfig,
    private readonly ctx: SinkBuildContext,
  ) {
    this.limits = { maxRows: cfg.maxRows, maxBytes: cfg.maxBytes };
    this.destination = `forward ${cfg.url}`;
    this.service = new ForwardService(cfg.url, cfg.timeoutMs);
  }

  /**
   * @ref LLP 0008: the batch id is a pure function of (cache, sink instance,
   * logical partition, since, until). The kernel fixes it in the write-ahead intent
   * before the first POST, so a retry, a respool or a restart re-sends the
   * same range under the same id and the receiver's ledger stores it once.
   */
  unitId(partition: PartitionRef, since: Continuation | null, until: Continuation): string {
    const from = since?.seq ?? 'start';
    const material = JSON.stringify([
      ID_SCHEME,
      this.ctx.cacheId,
      this.cfg.idNamespace ?? null,
      this.ctx.sink,
      partition.dataset,
      partition.key,
      from,
      until.seq,
    ]);
    const digest = createHash('sha256').update(material).digest('hex').slice(0, 32);
    // The seq range up front so an id in a ledger or a log reads at a glance.
    return `hfw1-${from}-${until.seq}-${digest}`;
  }

  async ship(unit: Unit): Promise<ShipResult> {
    const link = linkSignals(unit.signal, this.closer.signal);
    try {
      return await this.shipLinked(unit, link.signal);
    } finally {
      link.dispose();
    }
  }

  private async shipLinked(unit: Unit, signal: AbortSignal): Promise<ShipResult> {
    // Draining: no unit starts; one already sending may finish.
    if (signal.aborted || this.draining.signal.aborted) throw this.aborted(unit);
    const req = await buildRequest(unit, this.cfg.token);
    // Every row of the range was pruned since planning: nothing to deliver, nothing to dedupe.
    if (req.rows === 0) return { rows: 0, bytes: 0, duplicate: false };

    const log = this.ctx.log;
    const where = `batch ${unit.id} of ${unit.partition.dataset}/source=${unit.partition.source}`;
    const fields = { sink: this.ctx.sink, dataset: unit.partition.dataset, partition: unit.partition.key, unit: unit.id };
    const budget = this.cfg.maxInlineWaitMs;
    let waited = 0;
    let ladder = 0;
    let failures = 0;
    let staleRetries = 0;
    /** An earlier POST of this unit may have been stored (no answer, a 5xx): a 413 now proves nothing. */
    let maybeStored = false;
    /** Some POST of this unit got an answer or may have reached the receiver; else nothing of it was sent (LLP 0070). */
    let reached = false;

    for (;;) {
      if (signal.aborted) throw this.aborted(unit);
      const out = await this.service.post(req, signal);
      if (!(out.kind === 'transient' && out.status === undefined && neverConnected(out))) reached = true;
      switch (out.kind) {
        case 'ok':
          log.debug({ ...fields, rows: req.rows, bytes: req.body.length, duplicate: out.duplicate }, 'batch delivered');
          return { rows: req.rows, bytes: req.body.length, duplicate: out.duplicate };

        case 'aborted':
          throw this.aborted(unit);

        case 'backpressure': {
          const hinted = parseRetryAfter(out.retryAfter);
          const delay = hinted ?? ladderStep(this.cfg.ladderMs, ladder++);
          if (waited + delay > budget) {
            // Parking longer would hold the tick; the kernel respools the partition instead.
            throw new ForwardError(
              'HYPSINK_ERR_RETRYABLE',
              this.redact(
                `sink "${this.ctx.sink}": the receiver is still busy (HTTP ${out.status}) for ${where}; ` +
                  `waited ${waited} ms, the next wait (${delay} ms) would pass config.maxInlineWaitMs (${budget} ms); ` +
                  'the partition is retried on a later tick',
              ),
              { retryable: true, retryAfterMs: delay, status: out.status, batchId: unit.id },
            );
          }
          log.warn(
            { ...fields, status: out.status, waitMs: delay, from: hinted === undefined ? 'ladder' : 'retry-after' },
            'receiver busy; waiting before re-sending the same batch',
          );
          await this.park(delay, signal, unit);
          waited += delay;
          continue;
        }

        case 'transient': {
          // A pooled socket the receiver closed while idle: the POST never reached it. Resend now.
          if (out.staleSocket && staleRetries < 2) {
            staleRetries++;
            continue;
          }
          maybeStored = true;
          failures++;
          const delay = backoffMs(failures, this.cfg.retry);
          if (failures >= this.cfg.retry.attempts || waited + delay > budget) {
            throw new ForwardError(
              'HYPSINK_ERR_RETRYABLE',
              this.redact(
                `sink "${this.ctx.sink}": could not deliver ${where} to ${this.service.describe(req.path)} ` +
                  `after ${failures} ${failures === 1 ? 'try' : 'tries'}: ${out.message}; the partition is retried on a later tick`,
              ),
              {
                retryable: true,
                status: out.status,
                batchId: unit.id,
                cause: this.causeOf(out.code, out.message),
                hint: unreachableHint(out.code, this.service.describe('')),
                unsent: !reached,
              },
            );
          }
          log.warn(
            { ...fields, status: out.status, code: out.code, attempt: failures, waitMs: delay, error: this.redact(out.message) },
            'delivery failed; retrying the same batch',
          );
          await this.park(delay, signal, unit);
          waited += delay;
          continue;
        }

        case 'tooLarge':
          throw new ForwardError(
            'HYPSINK_ERR_DESTINATION',
            this.redact(
              `sink "${this.ctx.sink}": the receiver refused ${where} as too large ` +
                `(HTTP 413, ${req.rows} rows, ${req.body.length} bytes): ${out.message}; ` +
                'the unit must be split (or config.maxBytes / config.maxRows lowered)',
            ),
            // @ref LLP 0018: only a refusal before anything of the unit may have been stored lets the kernel re-plan it.
            { status: out.status, tooLarge: !maybeStored, batchId: unit.id },
          );

        case 'auth':
          throw new ForwardError(
            'HYPSINK_ERR_AUTH',
            this.cfg.token === undefined
              ? `sink "${this.ctx.sink}": the receiver requires a token (HTTP ${out.status}); set config.token (e.g. "\${HYPSINK_TOKEN}")`
              : `sink "${this.ctx.sink}": the receiver rejected the token (HTTP ${out.status}); check config.token / HYPSINK_TOKEN`,
            { status: out.status, batchId: unit.id },
          );

        case 'conflict':
          throw this.conflict(unit, out, where);

        case 'rejected':
          throw new ForwardError(
            'HYPSINK_ERR_DESTINATION',
            this.redact(
              `sink "${this.ctx.sink}": the receiver rejected ${where} (HTTP ${out.status}): ${out.message}`,
            ),
            { status: out.status, batchId: unit.id },
          );
      }
    }
  }

  /**
   * A 409: the receiver holds this batch id with something else. Other content
   * under the unit's label (another unit digest; another body where the stored
   * batch has no unit digest, or the receiver names no reason) is the one
   * refusal every sink gives: unitConflict, HYPSINK_ERR_CONFLICT, nothing
   * counted. @ref LLP 0054, LLP 0060
   */
  private conflict(unit: Unit, out: Extract<Outcome, { kind: 'conflict' }>, where: string): Error {
    const partition = out.conflict === 'partition' || (out.conflict === undefined && /another dataset or source/.test(out.message));
    const sameRows = out.conflict === 'body' && out.unitDigest === unit.digest;
    if (partition || sameRows) {
      return new ForwardError(
        'HYPSINK_ERR_DESTINATION',
        this.redact(
          `sink "${this.ctx.sink}": the receiver refused ${where} (HTTP 409): ${out.message}` +
            (sameRows
              ? '; it holds this unit (the same unit digest) under the id, sent as other bytes: this hypsink serializes the unit otherwise than the one that sent it. Its rows are at the receiver once; compare the two versions before going on'
              : ''),
        ),
        { status: out.status, batchId: unit.id },
      );
    }
    const since = unit.since?.seq ?? null;
    const held = out.unitDigest ?? null;
    return unitConflict({
      sink: this.ctx.sink,
      partition: unit.partition,
      since,
      until: unit.until.seq,
      digest: unit.digest,
      // A receiver could echo anything back; the token never leaves in a message.
      held: { since, until: unit.until.seq, digest: held === null || this.redact(held) !== held ? null : held },
      where: `the receiver at ${this.cfg.url} (batch ${unit.id})`,
    });
  }

  /** Abort parked waits and in-flight POSTs, drop pooled connections. Idempotent. */
  async close(): Promise<void> {
    if (this.closer.signal.aborted) return;
    this.closer.abort();
    this.service.close();
    for (const f of this.onClose.splice(0)) f();
  }

  /** The connection check: the receiver's health, then the token, by two GETs; nothing stored. @ref LLP 0036 */
  async check(opts: ConnectionCheckOptions): Promise<string> {
    const link = linkSignals(opts.signal, this.closer.signal);
    try {
      return await checkReceiver(this.service, this.cfg, this.ctx.sink, link.signal);
    } finally {
      link.dispose();
    }
  }

  /** A drain began: end parked waits now and start no further unit; a POST already on the wire may finish (close() aborts it). Idempotent. */
  stopWaiting(): void {
    this.draining.abort();
  }

  /** Called once when the shipper closes (the plugin forgets it). */
  whenClosed(f: () => void): void {
    if (this.closer.signal.aborted) f();
    else this.onClose.push(f);
  }

  private async park(ms: number, signal: AbortSignal, unit: Unit): Promise<void> {
    const link = linkSignals(signal, this.draining.signal);
    try {
      await parkedWait(ms, link.signal);
    } catch {
      throw this.aborted(unit);
    } finally {
      link.dispose();
    }
  }

  private aborted(unit: Unit): ForwardError {
    return new ForwardError(
      'HYPSINK_ERR_ABORTED',
      `sink "${this.ctx.sink}": stopped before batch ${unit.id} was confirmed; it is re-sent under the same id on the next run`,
      { batchId: unit.id },
    );
  }

  /** This sink's batches of `partition` the receiver's ledger holds (GET /v1/ledger). @ref LLP 0037, LLP 0038 */
  inventory(partition: PartitionRef, opts: { signal: AbortSignal }): AsyncIterable<HeldUnit> {
    return ledgerUnits(this.service, this.cfg, this.ctx, partition, (since, until) => this.unitId(partition, since, until), opts.signal);
  }

  /** A receiver could echo anything back; the token never leaves in a message. */
  private redact(s: string): string {
    const t = this.cfg.token;
    return t === undefined ? s : s.split(t).join('[redacted]');
  }

  /** A plain cause (code and redacted text), never the raw socket error object. */
  private causeOf(code: string | undefined, message: string): Error {
    return Object.assign(new Error(this.redact(message)), { code });
  }
}
