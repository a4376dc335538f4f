/**
 * The Postgres sink as a UnitShipper. One unit is one transaction: its rows
 * go in by COPY, its refused rows into the dead-letter table, and the sink's
 * watermark row `(writer, sink, dataset, source) → until` moves from the
 * unit's `since` to its `until`, all committed together. The database is the
 * truth: every attempt first reads (and locks) the watermark row, so a unit
 * already committed (by this run before a lost answer, by a run that crashed
 * after COMMIT, or by a zombie exporter) is known as committed and not
 * written again. Which content it committed is in the unit's record (range,
 * digest, row counts), written in the same transaction: a label held with
 * another digest is other rows (a copied or restored cache), refused, never
 * called committed. @ref LLP 0041 (the transaction and the recovery rule),
 * LLP 0042 (refused rows), LLP 0054 (a unit is known by its content),
 * LLP 0056 (the units table)
 */
import { createHash } from 'node:crypto';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import type {
  ColumnSpec,
  ConnectionCheckOptions,
  Continuation,
  HeldUnit,
  PartitionRef,
  ShipResult,
  SinkBuildContext,
  Unit,
  UnitLimits,
  UnitShipper,
} from 'hypsink/plugin';
import { HypsinkError, neverConnected, unitConflict } from 'hypsink/plugin';
import pg from 'pg';
import copyStreams from 'pg-copy-streams';
import { type Connection, connection, type PostgresConfig } from './config.js';
import { type CopyPass, copyText } from './copy.js';
import { classify, copyLine, type FaultScope, Redactor, rowReason, toHypsinkError } from './errors.js';
import { ensureOwnTables, ensureTable, type Names, ownTables, q, SOURCE_COLUMN } from './table.js';
import { type ClientOptions, openClient, type Transport } from './transport.js';

/** Bump only with a migration note: recorded intents keep their ids either way. */
const ID_SCHEME = 'hypsink.postgres.unit.v1';

interface Refusal {
  reason: string;
  row: Record<string, unknown> | null;
}

/** A row of the units table: one committed unit (digest null: a range committed before unit records). @ref LLP 0056 */
export interface UnitRecord {
  readonly since: string | null;
  readonly until: string;
  readonly unit: string;
  readonly digest: string | null;
  /** Rows it put in the table and in the dead letter (null with the digest). */
  readonly rows: string | null;
  readonly rejected: number | null;
}

/**
 * What the watermark row and the unit records say of a unit: to ship;
 * committed (with its record, or null: by its label, for a range committed
 * before unit records); other content under its label (a copied or restored
 * cache: refused); or a watermark row that matches nothing (an error).
 */
export type Verdict =
  | { kind: 'ship' }
  | { kind: 'committed'; record: UnitRecord | null }
  | { kind: 'other'; record: UnitRecord }
  | { kind: 'conflict' };

/**
 * The unit against the database: `held` is the watermark row's until (null:
 * no row), `overlapping` the records of this writer's partition whose range
 * meets the unit's. A label is held when the row is at or past the unit's
 * until; it is this unit only if the record at its range has its digest. A
 * held range that does not line up with the unit's (a clone's unit (0, 5]
 * where (0, 12] was committed) is other content too. @ref LLP 0041, LLP 0056
 */
export function verdict(held: string | null, unit: Pick<Unit, 'since' | 'until' | 'prior' | 'digest'>, overlapping: readonly UnitRecord[]): Verdict {
  const since = unit.since?.seq ?? null;
  const prior = unit.prior?.seq ?? null;
  // Records without a digest (committed before unit records) say nothing of content: the label decides, as before.
  const known = overlapping.filter((r) => r.digest !== null);
  if (held !== null && BigInt(held) >= BigInt(unit.until.seq)) {
    const exact = known.find((r) => r.since === since && r.until === unit.until.seq);
    if (exact) return exact.digest === unit.digest ? { kind: 'committed', record: exact } : { kind: 'other', record: exact };
    if (known.length > 0) return { kind: 'other', record: known[0]! };
    return { kind: 'committed', record: null };
  }
  if (held === since || held === prior) return { kind: 'ship' };
  // The row is neither at the unit's start nor past its end, and other content of this cache's
  // seqs is recorded there: a copy of this cache got there first.
  if (known.length > 0) return { kind: 'other', record: known[0]! };
  return { kind: 'conflict' };
}

/** The id of a range committed before unit records: no unit of this sink has it (theirs start `hpg1-`). */
function legacyId(since: string | null, until: string): string {
  return `hpg-before-records-${since ?? 'start'}-${until}`;
}

export class PostgresShipper implements UnitShipper {
  readonly limits: UnitLimits;
  readonly destination: string;
  readonly reads = 'batches' as const;
  private readonly conn: Connection;
  private readonly redact: Redactor;
  private readonly names: Names;
  private pool: pg.Pool | null = null;
  /** The pool being opened (prefer and allow first find the transport that works). */
  private opening: Promise<pg.Pool> | null = null;
  /** The connection warm() is opening, until an attempt waits for it: null once open, or why it failed. */
  private warmed: Promise<{ failed: unknown } | null> | null = null;
  private ownTables: Promise<void> | null = null;
  /** Tables known to fit a column set (by dataset and columns), this run. */
  private readonly fitted = new Map<string, Promise<void>>();
  private readonly closer = new AbortController();

  constructor(
    private readonly cfg: PostgresConfig,
    private readonly ctx: SinkBuildContext,
  ) {
    this.conn = connection(cfg, ctx.sink, ctx.baseDir);
    this.redact = new Redactor(this.conn.password);
    this.limits = { maxRows: cfg.maxRows, maxBytes: cfg.maxBytes };
    this.names = { schema: cfg.schema, watermarks: cfg.watermarkTable, rejects: cfg.rejectTable, units: cfg.unitTable };
    this.destination = `postgres ${this.conn.shown} schema ${cfg.schema}${cfg.table ? ` table ${cfg.table}` : ''}`;
  }

  /** The table a dataset's rows go to. */
  tableOf(dataset: string): string {
    return this.cfg.table ?? dataset;
  }

  unitId(partition: PartitionRef, since: Continuation | null, until: Continuation): string {
    const from = since?.seq ?? 'start';
    const material = JSON.stringify([ID_SCHEME, this.ctx.cacheId, this.ctx.sink, partition.dataset, partition.key, from, until.seq]);
    return `hpg1-${from}-${until.seq}-${createHash('sha256').update(material).digest('hex').slice(0, 32)}`;
  }

  private scope(dataset: string): FaultScope {
    const n = this.names;
    const needs = { [this.tableOf(dataset)]: 'INSERT', [n.watermarks]: 'SELECT, INSERT, UPDATE', [n.rejects]: 'SELECT, INSERT', [n.units]: 'SELECT, INSERT, UPDATE' };
    return { sink: this.ctx.sink, user: this.conn.user, shown: this.conn.shown, table: `${this.cfg.schema}.${this.tableOf(dataset)}`, schema: n.schema, needs, sslMode: this.conn.sslMode, sslFrom: this.conn.sslFrom, redact: this.redact };
  }

  /**
   * What every connection of the sink is opened with, the pool's and the check's, but its
   * `ssl` (each try's own). Never a connection string: node-postgres's parser would read
   * sslmode its own way. @ref LLP 0064
   */
  private clientOptions(): ClientOptions {
    const c = this.conn;
    return {
      host: c.host,
      port: c.port,
      database: c.database,
      user: c.user,
      ...(c.password !== undefined ? { password: c.password } : {}),
      connectionTimeoutMillis: this.cfg.connectTimeoutMs,
      application_name: this.cfg.applicationName,
    };
  }

  /**
   * The pool. With one transport to try it is opened at once; with prefer or allow one
   * connection first finds the transport libpq's rule picks, and the pool keeps to it until
   * a connection of it fails (then the next one decides again). @ref LLP 0064
   */
  private getPool(): Promise<pg.Pool> {
    if (this.pool) return Promise.resolve(this.pool);
    this.opening ??= (async () => {
      let ssl = this.conn.tries[0]!;
      if (this.conn.tries.length > 1) {
        const { client, transport } = await openClient(this.conn, this.clientOptions());
        await client.end().catch(() => undefined);
        ssl = transport.ssl;
        if (transport.after !== null) {
          // prefer ending in plain text is what the operator allowed, but never silent.
          const fields = { sink: this.ctx.sink, sslmode: this.conn.sslMode, encrypted: transport.encrypted, firstTry: this.redact.text(transport.after) };
          if (transport.encrypted) this.ctx.log.info(fields, `PostgreSQL: sslmode ${this.conn.sslMode}: a plain connection failed; the sink's connections use TLS`);
          else this.ctx.log.warn(fields, `PostgreSQL: sslmode ${this.conn.sslMode}: TLS failed; the sink's connections are NOT encrypted`);
        }
      }
      if (this.closer.signal.aborted) throw new HypsinkError('HYPSINK_ERR_ABORTED', `sink "${this.ctx.sink}": closed`);
      const pool = new pg.Pool({
        ...this.clientOptions(),
        ssl,
        sslnegotiation: 'postgres',
        max: this.cfg.poolSize,
        idleTimeoutMillis: 30_000,
        statement_timeout: this.cfg.statementTimeoutMs,
      });
      // An idle connection the server closed: the pool drops it; it must not end the process.
      pool.on('error', (e) => this.ctx.log.debug({ sink: this.ctx.sink, error: this.redact.text(e.message) }, 'an idle PostgreSQL connection closed'));
      this.pool = pool;
      return pool;
    })().finally(() => {
      this.opening = null;
    });
    return this.opening;
  }

  /**
   * A connection opened ahead of the first unit and left idle in the pool (which hears an idle
   * connection's loss), for the next attempt; its failure is that attempt's, retried as any, so a
   * destination that is down is tried no more often than before. Opening it overlaps the unit's
   * digest. @ref LLP 0096
   */
  warm(): void {
    if (this.warmed || (this.pool && this.pool.idleCount > 0)) return;
    this.warmed = this.open().then(
      (client) => {
        client.release();
        return null;
      },
      (e: unknown) => ({ failed: e }),
    );
  }

  /** A connection for an attempt: the pool's, once the one warm() is opening is there (or failed: then this attempt fails so). */
  private async connect(): Promise<pg.PoolClient> {
    const warmed = this.warmed;
    this.warmed = null;
    const failure = warmed ? await warmed : null;
    if (failure) throw failure.failed;
    return this.open();
  }

  /** A connection of the pool; with prefer or allow, a failed one drops the pool, so the next decides the transport again. */
  private async open(): Promise<pg.PoolClient> {
    const pool = await this.getPool();
    try {
      return await pool.connect();
    } catch (e) {
      if (this.conn.tries.length > 1 && this.pool === pool) {
        this.pool = null;
        pool.end().catch(() => undefined);
      }
      throw e;
    }
  }

  async ship(unit: Unit): Promise<ShipResult> {
    const budget = this.cfg.retry;
    // Whether any try got a connection: until one does, nothing of the unit can be at the server. @ref LLP 0070
    let reached = false;
    for (let attempt = 1; ; attempt++) {
      if (unit.signal.aborted || this.closer.signal.aborted) throw this.aborted(unit);
      try {
        return await this.attempt(unit);
      } catch (e) {
        if (!neverConnected(e)) reached = true;
        const kind = classify(e);
        if (e instanceof HypsinkError || kind !== 'retry') throw toHypsinkError(e, this.scope(unit.partition.dataset), kind, undefined, !reached);
        if (unit.signal.aborted || this.closer.signal.aborted) throw this.aborted(unit);
        if (attempt >= budget.attempts) throw toHypsinkError(e, this.scope(unit.partition.dataset), 'retry', attempt, !reached);
        const wait = Math.round(Math.min(budget.maxMs, budget.baseMs * 2 ** (attempt - 1)) * (0.5 + Math.random() / 2));
        this.ctx.log.warn(
          { sink: this.ctx.sink, dataset: unit.partition.dataset, source: unit.partition.source, unit: unit.id, attempt, waitMs: wait, error: this.redact.text((e as Error).message ?? String(e)) },
          'PostgreSQL write failed; retrying the same unit (its watermark row decides whether it committed)',
        );
        await sleep(wait, undefined, { signal: unit.signal }).catch(() => {
          throw this.aborted(unit);
        });
      }
    }
  }

  /** Own tables, then the unit's table fitted to its columns: once per run each. */
  private async ready(client: pg.PoolClient, unit: Unit): Promise<void> {
    this.ownTables ??= ensureOwnTables(client, this.names).catch((e) => {
      this.ownTables = null;
      throw e;
    });
    await this.ownTables;
    const columns = unit.schema.columns;
    const key = JSON.stringify([unit.partition.dataset, columns]);
    let fit = this.fitted.get(key);
    if (!fit) {
      fit = ensureTable(client, { sink: this.ctx.sink, schema: this.cfg.schema, table: this.tableOf(unit.partition.dataset), create: this.cfg.createTable }, columns);
      this.fitted.set(key, fit);
      fit.catch(() => this.fitted.delete(key));
    }
    await fit;
  }

  private async attempt(unit: Unit): Promise<ShipResult> {
    const client = await this.connect();
    let broken: unknown;
    // The pool hears a client's 'error' only while it is idle. Checked out, a lost connection is
    // emitted on the client too (besides failing the statement in flight): unheard, it would end
    // the process. Heard, the attempt fails and is retried, and the client is not reused. @ref LLP 0043
    const lost = (e: Error) => {
      broken ??= e;
    };
    client.on('error', lost);
    try {
      await this.ready(client, unit);
      return await this.transaction(client, unit);
    } catch (e) {
      // The session may be mid-COPY or mid-transaction: never hand it back to the pool.
      broken = e;
      const code = (e as { code?: string }).code;
      // The table or a column went away under us (dropped by hand): fit the tables again next time.
      if (code === '42P01' || code === '42703') {
        this.fitted.clear();
        this.ownTables = null;
      }
      throw e;
    } finally {
      client.off('error', lost);
      client.release(broken === undefined ? undefined : (broken as Error));
    }
  }

  private async transaction(client: pg.PoolClient, unit: Unit): Promise<ShipResult> {
    const p = unit.partition;
    const writer = this.ctx.cacheId;
    const { wm, rj, un } = ownTables(this.names);
    const target = `${this.cfg.schema}.${this.tableOf(p.dataset)}`;
    const key = [writer, this.ctx.sink, p.dataset, p.source];
    const since = unit.since?.seq ?? null;
    await client.query('BEGIN');
    try {
      const found = await client.query<{ until: string }>(`SELECT until::text AS until FROM ${wm} WHERE writer = $1 AND sink = $2 AND dataset = $3 AND source = $4 FOR UPDATE`, key);
      const held = found.rows[0]?.until ?? null;
      // Read after the row lock: the records of every unit committed up to the row's until are visible.
      const overlapping = held === null || BigInt(held) === BigInt(unit.since?.seq ?? -1) ? [] : await this.overlapping(client, unit);
      const v = verdict(held, unit, overlapping);
      if (v.kind === 'committed') {
        let rejected = v.record?.rejected ?? null;
        if (rejected === null) {
          const r = await client.query<{ n: string }>(`SELECT count(*)::text AS n FROM ${rj} WHERE writer = $1 AND sink = $2 AND unit = $3`, [writer, this.ctx.sink, unit.id]);
          rejected = Number(r.rows[0]?.n ?? 0);
        }
        await client.query('ROLLBACK');
        return { rows: unit.plannedRows, bytes: 0, duplicate: true, rejected };
      }
      if (v.kind === 'other') {
        throw unitConflict({
          sink: this.ctx.sink,
          partition: p,
          since,
          until: unit.until.seq,
          digest: unit.digest,
          held: { since: v.record.since, until: v.record.until, digest: v.record.digest },
          where: `${this.names.schema}.${this.names.units} at ${this.conn.shown}`,
        });
      }
      if (v.kind === 'conflict') throw this.conflict(unit, held);
      // Units committed before unit records (an older version of the sink) up to the row: one record
      // without a digest says so, so that verify reads that range as shipped, not as a hole.
      if (held !== null) await this.recordLegacy(client, key, held, target);

      const { refusals, bytes, rows } = await this.copy(client, unit);
      if (refusals.size > 0) await this.deadLetter(client, unit, refusals, target);
      const moved =
        held === null
          ? await client.query(`INSERT INTO ${wm} (writer, sink, dataset, source, until, unit, target) VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING`, [
              ...key,
              unit.until.seq,
              unit.id,
              target,
            ])
          : await client.query(`UPDATE ${wm} SET until = $5, unit = $6, target = $7, updated_at = now() WHERE writer = $1 AND sink = $2 AND dataset = $3 AND source = $4 AND until = $8`, [
              ...key,
              unit.until.seq,
              unit.id,
              target,
              held,
            ]);
      if (moved.rowCount !== 1) {
        // Another exporter with this identity inserted the first row meanwhile: roll back, and let the
        // next attempt read what it committed.
        throw Object.assign(new Error(`the watermark row of ${p.dataset}/source=${p.source} was written by another session meanwhile`), { code: '40001' });
      }
      // Only the session that moved the row gets here, so a record is written once per commit. A record
      // already at this until is one the row was set back over by hand (the operator said to go on): replaced.
      await client.query(
        `INSERT INTO ${un} (writer, sink, dataset, source, since, until, unit, digest, rows, rejected, target) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
         ON CONFLICT (writer, sink, dataset, source, until) DO UPDATE SET since = EXCLUDED.since, unit = EXCLUDED.unit, digest = EXCLUDED.digest,
           rows = EXCLUDED.rows, rejected = EXCLUDED.rejected, target = EXCLUDED.target, committed_at = now()`,
        [...key, since, unit.until.seq, unit.id, unit.digest, rows + refusals.size, refusals.size, target],
      );
      this.ctx.fault?.('postgres.afterCopy');
      await client.query('COMMIT');
      this.ctx.fault?.('postgres.afterCommit');
      return { rows: unit.plannedRows, bytes, duplicate: false, rejected: refusals.size };
    } catch (e) {
      await client.query('ROLLBACK').catch(() => undefined);
      throw e;
    }
  }

  /**
   * COPY the unit's rows. A row the server refuses (the error names its line)
   * is taken out and the COPY runs again from a savepoint, so the unit's other
   * rows still commit. @ref LLP 0042
   */
  private async copy(client: pg.PoolClient, unit: Unit): Promise<{ refusals: Map<number, Refusal>; bytes: number; rows: number }> {
    const columns: readonly ColumnSpec[] = unit.schema.columns;
    const table = `${q(this.cfg.schema)}.${q(this.tableOf(unit.partition.dataset))}`;
    const sql = `COPY ${table} (${[SOURCE_COLUMN, ...columns.map((c) => c.name)].map(q).join(', ')}) FROM STDIN`;
    const refusals = new Map<number, Refusal>();
    for (;;) {
      const pass: CopyPass = { sent: [], bytes: 0 };
      const skip = new Set(refusals.keys());
      const body = copyText(
        unit.batches(),
        {
          columns,
          source: unit.partition.source,
          skip,
          onRefused: (ordinal, reason, row) => refusals.set(ordinal, { reason, row }),
          onSkipped: (ordinal, row) => {
            const r = refusals.get(ordinal);
            if (r && r.row === null) r.row = row();
          },
        },
        pass,
      );
      await client.query('SAVEPOINT hypsink_copy');
      try {
        await pipeline(Readable.from(body), client.query(copyStreams.from(sql)), { signal: unit.signal });
        if ([...refusals.values()].some((r) => r.row === null)) {
          throw new HypsinkError('HYPSINK_ERR_INVARIANT', `sink "${this.ctx.sink}": a refused row of unit ${unit.id} was not seen again on the next pass`);
        }
        return { refusals, bytes: pass.bytes, rows: pass.sent.length };
      } catch (e) {
        if (unit.signal.aborted) throw this.aborted(unit);
        const line = classify(e) === 'row' ? copyLine(e as object) : null;
        const ordinal = line === null ? undefined : pass.sent[line - 1];
        if (ordinal === undefined) throw e;
        await client.query('ROLLBACK TO SAVEPOINT hypsink_copy');
        refusals.set(ordinal, { reason: this.redact.text(rowReason(e as object)), row: null });
        if (refusals.size > this.cfg.maxRejectedRows) {
          throw new HypsinkError(
            'HYPSINK_ERR_DESTINATION',
            `sink "${this.ctx.sink}": ${this.scope(unit.partition.dataset).table} refused more than ${this.cfg.maxRejectedRows} rows of unit ${unit.id} (the last: ${refusals.get(ordinal)!.reason}); ` +
              'that is likely the table, not the rows: check its columns and constraints, or raise config.maxRejectedRows',
          );
        }
      }
    }
  }

  /**
   * Records of this writer's units of the partition whose range meets the unit's: the one at its exact
   * range first, then those with a digest (the verdict needs no more than the first of each), bounded.
   */
  private async overlapping(client: pg.PoolClient, unit: Unit): Promise<UnitRecord[]> {
    const p = unit.partition;
    const un = ownTables(this.names).un;
    const r = await client.query<UnitRecord>(
      `SELECT since::text AS since, until::text AS until, unit, digest, rows::text AS rows, rejected FROM ${un}
        WHERE writer = $1 AND sink = $2 AND dataset = $3 AND source = $4 AND ${un}.until > $5 AND (${un}.since IS NULL OR ${un}.since < $6)
        ORDER BY (${un}.until = $6 AND COALESCE(${un}.since, -1) = $5) DESC, ${un}.digest IS NULL, ${un}.until LIMIT 16`,
      [this.ctx.cacheId, this.ctx.sink, p.dataset, p.source, unit.since?.seq ?? '-1', unit.until.seq],
    );
    return r.rows;
  }

  /**
   * The row is at `held` but no record reaches it: the units up to there were committed before unit
   * records existed. Record that range once, without a digest or counts. @ref LLP 0056
   */
  private async recordLegacy(client: pg.PoolClient, key: string[], held: string, target: string): Promise<void> {
    const un = ownTables(this.names).un;
    const top = await client.query<{ until: string | null }>(`SELECT max(until)::text AS until FROM ${un} WHERE writer = $1 AND sink = $2 AND dataset = $3 AND source = $4`, key);
    const last = top.rows[0]?.until ?? null;
    if (last !== null && BigInt(last) >= BigInt(held)) return;
    await client.query(`INSERT INTO ${un} (writer, sink, dataset, source, since, until, unit, digest, rows, rejected, target) VALUES ($1, $2, $3, $4, $5, $6, $7, NULL, NULL, NULL, $8)`, [
      ...key,
      last,
      held,
      legacyId(last, held),
      target,
    ]);
  }

  /**
   * Every unit of this writer the database holds of `partition`, from the unit records; a range the
   * watermark row holds beyond every record (units committed before unit records, by a partition
   * not shipped since) as one unit without a digest or counts. Reads only: nothing is created.
   * @ref LLP 0037, LLP 0056
   */
  async *inventory(partition: PartitionRef, opts: { signal: AbortSignal }): AsyncIterable<HeldUnit> {
    const { wm, un } = ownTables(this.names);
    const key = [this.ctx.cacheId, this.ctx.sink, partition.dataset, partition.source];
    let records: UnitRecord[] = [];
    let held: string | null = null;
    if (opts.signal.aborted) throw new HypsinkError('HYPSINK_ERR_ABORTED', `sink "${this.ctx.sink}": stopped before its unit records were read`);
    let client: pg.PoolClient | null = null;
    try {
      client = await this.connect();
      await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
      const there = (await client.query<{ wm: boolean; un: boolean }>('SELECT to_regclass($1) IS NOT NULL AS wm, to_regclass($2) IS NOT NULL AS un', [wm, un])).rows[0]!;
      if (there.un) {
        records = (
          await client.query<UnitRecord>(
            `SELECT since::text AS since, until::text AS until, unit, digest, rows::text AS rows, rejected FROM ${un} WHERE writer = $1 AND sink = $2 AND dataset = $3 AND source = $4 ORDER BY ${un}.until`,
            key,
          )
        ).rows;
      }
      if (there.wm) held = (await client.query<{ until: string }>(`SELECT until::text AS until FROM ${wm} WHERE writer = $1 AND sink = $2 AND dataset = $3 AND source = $4`, key)).rows[0]?.until ?? null;
      await client.query('COMMIT');
      client.release();
      client = null;
    } catch (e) {
      client?.release(e as Error);
      throw toHypsinkError(e, { ...this.scope(partition.dataset), table: `${this.names.schema}.${this.names.units}` }, classify(e));
    }
    const where = `${this.names.schema}.${this.names.units} at ${this.conn.shown}`;
    for (const r of records) {
      yield { id: r.unit, since: r.since, until: r.until, ...(r.rows !== null ? { rows: Number(r.rows) } : {}), digest: r.digest, where };
    }
    const top = records.at(-1)?.until ?? null;
    if (held !== null && (top === null || BigInt(held) > BigInt(top))) {
      yield { id: legacyId(top, held), since: top, until: held, digest: null, where: `${this.names.schema}.${this.names.watermarks} at ${this.conn.shown} (committed before unit records)` };
    }
  }

  private async deadLetter(client: pg.PoolClient, unit: Unit, refusals: Map<number, Refusal>, target: string): Promise<void> {
    const rj = `${q(this.names.schema)}.${q(this.names.rejects)}`;
    const p = unit.partition;
    const ordinals = [...refusals.keys()].sort((a, b) => a - b);
    // jsonb since LLP 0069; a dead letter created before it has row_json as text, written as before.
    const jsonb =
      (await client.query<{ t: string }>("SELECT format_type(atttypid, atttypmod) AS t FROM pg_attribute WHERE attrelid = $1::regclass AND attname = 'row_json'", [rj])).rows[0]?.t === 'jsonb';
    await client.query(
      `INSERT INTO ${rj} (writer, sink, dataset, source, unit, ordinal, reason, row_json, target)
       SELECT $1, $2, $3, $4, $5, o, r, ${jsonb ? 'j::jsonb' : 'j'}, $9 FROM unnest($6::integer[], $7::text[], $8::text[]) AS x(o, r, j)`,
      [
        this.ctx.cacheId,
        this.ctx.sink,
        p.dataset,
        p.source,
        unit.id,
        ordinals,
        ordinals.map((o) => refusals.get(o)!.reason),
        // JSON.stringify writes U+0000 as the escape \u0000: text holds it, jsonb refuses it.
        ordinals.map((o) => JSON.stringify(jsonb ? withoutNul(refusals.get(o)!.row) : refusals.get(o)!.row)),
        target,
      ],
    );
    this.ctx.log.warn(
      { sink: this.ctx.sink, dataset: p.dataset, source: p.source, unit: unit.id, rejected: ordinals.length, reason: refusals.get(ordinals[0]!)!.reason },
      `PostgreSQL refused ${ordinals.length} row(s) of the unit; they are kept in ${this.names.schema}.${this.names.rejects} with the reason, and the unit's other rows commit`,
    );
  }

  private conflict(unit: Unit, held: string | null): HypsinkError {
    const p = unit.partition;
    const since = unit.since?.seq ?? 'the start';
    return new HypsinkError(
      'HYPSINK_ERR_DESTINATION',
      `sink "${this.ctx.sink}": the watermark row of ${p.dataset}/source=${p.source} in ${this.names.schema}.${this.names.watermarks} at ${this.conn.shown} ` +
        `is at ${held ?? 'nothing (no row)'}, but this cache's unit ${unit.id} runs from ${since} to ${unit.until.seq}: the database does not hold what this cache says it exported. ` +
        "Was the database restored from a backup, or the sink's tables changed by hand? Nothing was written",
      {
        hint: `Compare the row with "hypsink status"; once the table holds what you want, set the row's until to ${since === 'the start' ? 'the seq where the table ends (or delete the row)' : since} to go on from here.`,
      },
    );
  }

  private aborted(unit: Unit): HypsinkError {
    return new HypsinkError('HYPSINK_ERR_ABORTED', `sink "${this.ctx.sink}": stopped before unit ${unit.id} committed; its watermark row decides on the next run whether it is written again`);
  }

  /** Log in, run a read-only statement, and look at the privileges on the table; nothing written. @ref LLP 0036 */
  async check(opts: ConnectionCheckOptions): Promise<string> {
    const c = this.conn;
    const table = this.cfg.table ?? null;
    let client: pg.Client | null = null;
    const stop = () => client?.end().catch(() => undefined);
    opts.signal.addEventListener('abort', stop, { once: true });
    try {
      const opened = await openClient(c, this.clientOptions(), opts.signal);
      client = opened.client;
      if (opts.signal.aborted) throw new HypsinkError('HYPSINK_ERR_ABORTED', `sink "${this.ctx.sink}": the connection check was stopped`);
      const r = await client.query<{ who: string; v: string; can_create: boolean }>(
        "SELECT current_user AS who, current_setting('server_version') AS v, has_schema_privilege($1, 'CREATE') AS can_create",
        [this.cfg.schema],
      );
      const row = r.rows[0]!;
      const role = `"${row.who.replace(/"/g, '""')}"`;
      // What the first export would meet, said now: the sink's own tables it may not make. @ref LLP 0045
      const own = [this.names.watermarks, this.names.rejects, this.names.units].map((t) => `${q(this.cfg.schema)}.${q(t)}`);
      const missing = (await client.query<{ t: string | null }>('SELECT to_regclass(t)::text AS t FROM unnest($1::text[]) AS t', [own])).rows.some((x) => x.t === null);
      if (!row.can_create && missing) {
        throw new HypsinkError(
          'HYPSINK_ERR_AUTH',
          `sink "${this.ctx.sink}": role "${row.who}" may not create tables in schema ${this.cfg.schema} at ${c.shown}, and the sink's tables ${this.cfg.schema}.${this.names.watermarks}, ${this.cfg.schema}.${this.names.rejects} and ${this.cfg.schema}.${this.names.units} are not all there; GRANT CREATE ON SCHEMA ${q(this.cfg.schema)} TO ${role}, or let a role that may make them run the first export`,
        );
      }
      let what = `schema ${this.cfg.schema}: ${row.can_create ? 'CREATE allowed' : 'no CREATE (the sink cannot make its tables)'}`;
      if (table !== null) {
        const t = await client.query<{ ok: boolean | null }>(
          "SELECT CASE WHEN to_regclass($1) IS NULL THEN NULL ELSE has_table_privilege($1, 'INSERT') AND has_table_privilege($1, 'SELECT') END AS ok",
          [`${q(this.cfg.schema)}.${q(table)}`],
        );
        const ok = t.rows[0]?.ok;
        if (ok === false) {
          throw new HypsinkError('HYPSINK_ERR_AUTH', `sink "${this.ctx.sink}": role "${row.who}" may not INSERT into or SELECT from ${this.cfg.schema}.${table} at ${c.shown}; GRANT INSERT, SELECT ON ${this.cfg.schema}.${table} TO "${row.who}"`);
        }
        if (ok === null && !this.cfg.createTable) {
          throw new HypsinkError(
            'HYPSINK_ERR_DESTINATION',
            `sink "${this.ctx.sink}": table ${this.cfg.schema}.${table} does not exist and config.createTable is false, at ${c.shown}; create it or set config.createTable to true`,
          );
        }
        what += `; table ${this.cfg.schema}.${table}: ${ok === null ? 'not there yet (created on the first export)' : 'INSERT and SELECT allowed'}`;
      }
      if (!row.can_create && table === null) what += '; the tables must exist before the first export';
      return `${c.shown}: login accepted as ${row.who} (PostgreSQL ${row.v}); ${this.transportText(opened.transport)}; ${what}`;
    } catch (e) {
      if (e instanceof HypsinkError) throw e;
      throw toHypsinkError(e, { ...this.scope(table ?? '(dataset)'), table: table ? `${this.cfg.schema}.${table}` : `schema ${this.cfg.schema}` }, classify(e));
    } finally {
      opts.signal.removeEventListener('abort', stop);
      await stop();
    }
  }

  /**
   * What the check's connection ran over, as its socket says: encrypted or not, and
   * whether the certificate and the host name were verified (both need TLS, and the
   * mode to ask for them). @ref LLP 0064
   */
  private transportText(t: Transport): string {
    const c = this.conn;
    const mode = `sslmode ${c.sslMode}${c.sslFrom === 'the default' ? ', the default' : ''}${c.sslMode === 'require' && c.tlsCheck === 'ca' ? ' with config.ssl.ca, checked as verify-ca' : ''}`;
    const why = t.after === null ? '' : `; ${t.ssl === false ? 'TLS' : 'a plain connection'} failed first: ${this.redact.text(t.after)}`;
    if (!t.encrypted) return `not encrypted (${mode}${why}): certificate and host name not verified`;
    const cert = c.tlsCheck !== 'none' && t.authorized ? 'certificate verified' : 'certificate not verified';
    const name = c.tlsCheck === 'full' && t.authorized ? 'host name verified' : 'host name not verified';
    return `encrypted (${t.protocol ?? 'TLS'}, ${mode}${why}): ${cert}, ${name}`;
  }

  async close(): Promise<void> {
    if (this.closer.signal.aborted) return;
    this.closer.abort();
    const pool = this.pool;
    this.pool = null;
    await pool?.end().catch(() => undefined);
  }
}

/**
 * A row as jsonb can hold it: U+0000, which no jsonb string takes, written as
 * the six characters `\u0000` (in keys too); the row's reason names the NUL
 * byte. @ref LLP 0069
 */
export function withoutNul(v: unknown): unknown {
  if (typeof v === 'string') return v.includes('\u0000') ? v.replaceAll('\u0000', '\\u0000') : v;
  if (Array.isArray(v)) return v.map(withoutNul);
  if (v !== null && typeof v === 'object') return Object.fromEntries(Object.entries(v).map(([k, x]) => [withoutNul(k) as string, withoutNul(x)]));
  return v;
}
