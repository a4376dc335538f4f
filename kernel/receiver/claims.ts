/**
 * The claim table several aggregators share (`hypsink receiver --claims`): one
 * row per (client, id) in PostgreSQL, `hyp_claims`, saying which aggregator
 * stores that batch. An aggregator claims a batch before it spools it, marks
 * the claim `stored` before it lets the batch's rows commit, and answers a
 * batch another aggregator stored as a duplicate: a client whose answer was
 * lost and whose retry reaches another aggregator is stored once.
 * @ref LLP 0080
 */
import type pg from 'pg';
import { HypsinkError, type Logger } from '../../types/index.js';
import { openPgClient, type PgConnection, pgConnection } from '../../types/postgres.js';

export const CLAIMS_TABLE = 'hyp_claims';

/** An aggregator's name: what the table records as the claim's holder. */
export const AGGREGATOR_NAME = /^[A-Za-z0-9._-]{1,128}$/;

const DDL = `CREATE TABLE IF NOT EXISTS ${CLAIMS_TABLE} (
  client text NOT NULL,
  id text NOT NULL,
  dataset text NOT NULL,
  source text NOT NULL,
  digest text NOT NULL,
  aggregator text NOT NULL,
  state text NOT NULL CHECK (state IN ('claimed', 'stored')),
  lease_until timestamptz NOT NULL,
  PRIMARY KEY (client, id)
)`;

/** What a claim attempt found. */
export type ClaimOutcome =
  /** This aggregator holds the claim now (new, taken over from a lease that passed, or its own): spool, then mark stored. */
  | { readonly kind: 'claimed' }
  /** This aggregator stored it (same body): its spool is settled; release it, ledger it. */
  | { readonly kind: 'storedHere' }
  /** Another aggregator stored it (same body): a duplicate, nothing spooled. */
  | { readonly kind: 'storedElsewhere'; readonly aggregator: string }
  /** Stored with another partition or body: 409, as the ledger would answer. */
  | { readonly kind: 'conflict'; readonly why: 'partition' | 'body' }
  /** Another aggregator's lease has not passed: it may be storing it now. */
  | { readonly kind: 'busy'; readonly aggregator: string };

export interface ClaimBatch {
  readonly client: string;
  readonly id: string;
  readonly dataset: string;
  readonly source: string;
  /** sha256 of the request body. */
  readonly digest: string;
}

/** The database could not be asked (or its answer was lost): the caller answers 503 and spools nothing new. */
export class ClaimsUnreachable extends HypsinkError {
  constructor(shown: string, cause: unknown) {
    super('HYPSINK_ERR_RETRYABLE', `the claim database ${shown} could not be reached: ${(cause as Error)?.message ?? String(cause)}`, {
      cause,
      retryable: true,
      hint: 'Check that PostgreSQL at that address is up and reachable from this aggregator; batches are answered 503 until it is.',
    });
  }
}

export interface ClaimsOptions {
  /** postgres://user:password@host:port/database[?sslmode=…]; the password is never shown. */
  readonly url: string;
  /** This aggregator's name, the same across its restarts. */
  readonly aggregator: string;
  /** How long a claim is this aggregator's before another may take it over. */
  readonly leaseMs: number;
  readonly log?: Logger;
}

export class ClaimTable {
  private client: Promise<pg.Client> | null = null;
  private live: pg.Client | null = null;
  private ready = false;

  private constructor(
    private readonly conn: PgConnection,
    readonly aggregator: string,
    private readonly leaseMs: number,
    private readonly log: Logger | undefined,
  ) {}

  /** Checks the URL and the name; connects on first use (a database down at start is a 503 per batch, not a refusal to start). */
  static open(o: ClaimsOptions): ClaimTable {
    if (!AGGREGATOR_NAME.test(o.aggregator)) {
      throw new HypsinkError('HYPSINK_ERR_CONFIG', `receiver: aggregator name ${JSON.stringify(o.aggregator)} must be 1-128 letters, digits, '.', '_' or '-'`, {
        hint: 'Pass --aggregator-name <name>, one per aggregator, the same across its restarts.',
      });
    }
    const conn = pgConnection({ url: o.url }, 'receiver claims', process.cwd(), '--claims');
    return new ClaimTable(conn, o.aggregator, o.leaseMs, o.log);
  }

  /** Where the claims are, without the password. */
  get shown(): string {
    return this.conn.shown;
  }

  private async connect(): Promise<pg.Client> {
    const { client } = await openPgClient(this.conn, {
      host: this.conn.host,
      port: this.conn.port,
      database: this.conn.database,
      user: this.conn.user,
      password: this.conn.password,
      connectionTimeoutMillis: 5000,
      query_timeout: 10_000,
      application_name: `hypsink receiver ${this.aggregator}`,
    });
    // A connection lost between statements is dropped now, so the next statement opens another rather than fail on it.
    client.on('error', () => {
      if (this.live === client) {
        this.live = null;
        this.client = null;
      }
      void client.end().catch(() => undefined);
    });
    this.live = client;
    if (!this.ready) {
      try {
        await client.query(DDL);
      } catch (e) {
        // Two aggregators creating it at once: one wins, the other finds it there.
        if (!['23505', '42P07'].includes((e as { code?: string }).code ?? '')) {
          await client.end().catch(() => undefined);
          throw e;
        }
      }
      this.ready = true;
    }
    return client;
  }

  /** One statement; any failure drops the connection (the next statement opens another) and is ClaimsUnreachable. */
  private async query<R extends pg.QueryResultRow>(sql: string, values: unknown[]): Promise<pg.QueryResult<R>> {
    try {
      this.client ??= this.connect();
      const c = await this.client;
      return await c.query<R>(sql, values);
    } catch (e) {
      const dead = this.client;
      this.client = null;
      void dead?.then((c) => c.end()).catch(() => undefined);
      throw new ClaimsUnreachable(this.conn.shown, e);
    }
  }

  /**
   * Claim a batch for this aggregator: a new row, or a row left `claimed` by
   * this aggregator or by one whose lease passed (taken over). Otherwise what
   * the row says. Throws ClaimsUnreachable.
   */
  async claim(b: ClaimBatch): Promise<ClaimOutcome> {
    const lease = `now() + ($7::double precision * interval '1 millisecond')`;
    for (let tries = 0; tries < 3; tries++) {
      const inserted = await this.query(
        `INSERT INTO ${CLAIMS_TABLE} (client, id, dataset, source, digest, aggregator, state, lease_until)
         VALUES ($1, $2, $3, $4, $5, $6, 'claimed', ${lease}) ON CONFLICT DO NOTHING`,
        [b.client, b.id, b.dataset, b.source, b.digest, this.aggregator, this.leaseMs],
      );
      if (inserted.rowCount === 1) return { kind: 'claimed' };
      // Never stored, so whatever body it was claimed with is nobody's yet: the claim takes this one's.
      const taken = await this.query(
        `UPDATE ${CLAIMS_TABLE} SET dataset = $3, source = $4, digest = $5, aggregator = $6, lease_until = ${lease}
         WHERE client = $1 AND id = $2 AND state = 'claimed' AND (aggregator = $6 OR lease_until < now())`,
        [b.client, b.id, b.dataset, b.source, b.digest, this.aggregator, this.leaseMs],
      );
      if (taken.rowCount === 1) return { kind: 'claimed' };
      const row = await this.row(b.client, b.id);
      if (!row) continue; // given up between the two statements: claim it anew
      if (row.state === 'claimed') return { kind: 'busy', aggregator: row.aggregator };
      if (row.dataset !== b.dataset || row.source !== b.source) return { kind: 'conflict', why: 'partition' };
      if (row.digest !== b.digest) return { kind: 'conflict', why: 'body' };
      return row.aggregator === this.aggregator ? { kind: 'storedHere' } : { kind: 'storedElsewhere', aggregator: row.aggregator };
    }
    // Claimed and given up three times over in a moment: someone else is busy with it.
    return { kind: 'busy', aggregator: '(another)' };
  }

  /**
   * The claim becomes `stored` if it is still this aggregator's and still
   * `claimed` with this body: true. False: it was taken over (the lease
   * passed). Throws ClaimsUnreachable, also when the statement may have been
   * applied (its answer lost): the caller keeps the batch held.
   */
  async markStored(b: ClaimBatch): Promise<boolean> {
    const r = await this.query(
      `UPDATE ${CLAIMS_TABLE} SET state = 'stored' WHERE client = $1 AND id = $2 AND aggregator = $3 AND state = 'claimed' AND digest = $4`,
      [b.client, b.id, this.aggregator, b.digest],
    );
    return r.rowCount === 1;
  }

  /**
   * Settle a held batch: give up this aggregator's claim if it is still only
   * `claimed` (so no late `stored` update of this aggregator can land after),
   * then say whether this aggregator stored it. Throws ClaimsUnreachable.
   */
  async settle(client: string, id: string): Promise<'storedHere' | 'notHere'> {
    await this.giveUp(client, id);
    const row = await this.row(client, id);
    return row?.state === 'stored' && row.aggregator === this.aggregator ? 'storedHere' : 'notHere';
  }

  /** Give up a claim this aggregator holds and will not store (its spool dropped): another may take it at once. */
  async giveUp(client: string, id: string): Promise<void> {
    await this.query(`DELETE FROM ${CLAIMS_TABLE} WHERE client = $1 AND id = $2 AND aggregator = $3 AND state = 'claimed'`, [client, id, this.aggregator]);
  }

  private async row(client: string, id: string) {
    const r = await this.query<{ dataset: string; source: string; digest: string; aggregator: string; state: string }>(
      `SELECT dataset, source, digest, aggregator, state FROM ${CLAIMS_TABLE} WHERE client = $1 AND id = $2`,
      [client, id],
    );
    return r.rows[0];
  }

  async close(): Promise<void> {
    const c = this.client;
    this.client = null;
    await c?.then((x) => x.end()).catch(() => undefined);
    this.log?.debug({ claims: this.conn.shown }, 'claim table closed');
  }
}
