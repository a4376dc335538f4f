/**
 * Sinks: where rows go. The kernel owns the exactly-once protocol (watermark,
 * write-ahead intent, advance); a sink only says how big a unit may be, what its
 * stable identity is, and how to ship it idempotently under that identity.
 * @ref LLP 0005 (write-ahead intent)
 */
import type { RecordBatch } from 'apache-arrow';
import type { DatasetSchema, Row } from './schema.js';
import type { Continuation, PartitionRef } from './storage.js';

/** One unit of export: exactly the rows of a partition in `(since, until]`. */
export interface Unit {
  readonly sink: string;
  readonly partition: PartitionRef;
  readonly schema: DatasetSchema;
  /** Exclusive lower bound; null for the partition's first unit. */
  readonly since: Continuation | null;
  readonly until: Continuation;
  /** The unit's stable identity (blob key, batch id), fixed in the intent before shipping. */
  readonly id: string;
  /**
   * The digest of exactly what ships (its rows in order, with the columns and
   * transforms fixed by the intent), fixed in the intent with `id`: `u1-` and
   * 43 base64url characters. Record it with the unit where the destination
   * keeps its ledger, and when a unit with this id (or range) is already there,
   * call it committed only if its recorded digest is this one: the same label
   * with another digest is other rows (a copied or restored cache), to be
   * refused with `unitConflict`, never counted as delivered. @ref LLP 0054
   */
  readonly digest: string;
  /**
   * Rows planned for this unit, counted before the ship: a unit advances only
   * when exactly these rows were read whole (the kernel checks). @ref LLP 0018
   */
  readonly plannedRows: number;
  /**
   * Re-readable: each call reads the unit's rows again, in seq order. The last
   * read a sink starts must run to its end: a read that fails or stops early
   * fails the unit (a blob's body is refused before it commits).
   */
  rows(): AsyncIterable<Row>;
  batches(): AsyncIterable<RecordBatch>;
  /**
   * The same rows as NDJSON (UTF-8 bytes), serialized by the kernel column by
   * column straight from the cache's Arrow buffers: exactly the bytes of the
   * lines `JSON.stringify` of each row would give. Faster than `rows()` for
   * request sinks; units the kernel builds always have it.
   */
  ndjson?(): AsyncIterable<NdjsonChunk>;
  /** Aborted on shutdown: a shipper stops waiting and throws. */
  readonly signal: AbortSignal;
  /**
   * The `until` of the last unit of this partition the sink shipped (null
   * before the first): `since`, unless the watermark stepped over a gap after
   * it (rows retention pruned before this sink had them). A destination that
   * keeps its own watermark (a database) finds it there. @ref LLP 0041
   */
  readonly prior: Continuation | null;
}

/** Complete NDJSON lines and how many rows they hold. */
export interface NdjsonChunk {
  /** The lines as UTF-8 bytes: `rows` complete lines, each ending in `\n`. */
  readonly bytes: Uint8Array;
  readonly rows: number;
}

/** What a unit cost once shipped. `duplicate` says the destination already had it. */
export interface ShipResult {
  readonly rows: number;
  readonly bytes: number;
  readonly duplicate: boolean;
  /**
   * Rows of the unit the destination refused one by one and that the sink
   * kept in its own dead letter instead, committed with the unit's other rows
   * (a duplicate unit reports the count it was committed with). The kernel
   * counts them in status; they are accounted for, not lost. @ref LLP 0042
   */
  readonly rejected?: number;
}

export interface UnitLimits {
  /** Cut a unit at this many rows. */
  readonly maxRows: number;
  /** Cut a unit near this many bytes (estimated from cache statistics). */
  readonly maxBytes: number;
}

/**
 * A shipper ships units idempotently: shipping the same `unit.id` twice must
 * leave the destination as if it had been shipped once.
 * Throw HypsinkError with `retryable` for passing faults, a non-retryable code otherwise.
 */
export interface UnitShipper {
  readonly limits: UnitLimits;
  /** Identity for the unit of `partition` covering `(since, until]`: a pure function. */
  unitId(partition: PartitionRef, since: Continuation | null, until: Continuation): string;
  ship(unit: Unit): Promise<ShipResult>;
  /**
   * Where the units go, stably and without secrets (e.g. the receiver's URL).
   * The kernel records it with the sink's watermarks and refuses to go on when
   * it changes, until the operator says whether the destination moved or is new.
   * Without it, a move goes unnoticed. @ref LLP 0022
   */
  readonly destination?: string;
  /** Abort parked waits and release connections. */
  close(): Promise<void>;
  /**
   * How the shipper reads a unit: the kernel reads the next unit that way
   * while the current one ships, so the read answers at once. `'ndjson'` (the
   * default): its NDJSON, for `ndjson()`. `'batches'`: its decoded batches,
   * which `batches()` hands out on every pass. @ref LLP 0047
   */
  readonly reads?: 'ndjson' | 'batches';
  /**
   * Optional: a unit of `partition` was planned and is about to be digested
   * (its rows' seqs and ids read from the cache) before it ships. Open what the
   * first `ship` needs meanwhile (a connection from a pool), so that the two
   * overlap. Called without waiting for it, before a partition's first unit of
   * an export (so only when there is one to ship); it may be called again and
   * must not throw nor write anything anyone can see: a failure here is met
   * again, and reported, by `ship`.
   * @ref LLP 0096
   */
  warm?(partition: PartitionRef): void;
  /**
   * Optional connection check (`hypsink validate --connect`): reach the
   * destination as an export would, WITHOUT writing anything anyone can see
   * there, and resolve with a short line of what was checked (e.g. "receiver
   * http://h:8080: health check passed, token accepted"). Throw a HypsinkError
   * naming the sink and what failed, never a secret: HYPSINK_ERR_AUTH for
   * refused credentials, HYPSINK_ERR_DESTINATION for what will not pass on its
   * own, HYPSINK_ERR_RETRYABLE when the destination did not answer. The kernel
   * bounds the check (10 s) and then aborts `signal`; stop there. A database
   * sink checks here that the database accepts the login (connect, run a
   * read-only statement, disconnect). Without it the sink is reported built,
   * unchecked. @ref LLP 0036
   */
  check?(opts: ConnectionCheckOptions): Promise<string>;
  /**
   * Read back what the destination holds of `partition`: every unit this sink
   * instance shipped there, in any order (`hypsink verify` checks the chain
   * against the watermark and the cache). Units of other writers at the same
   * place are left out. Without it, the sink cannot be verified. A blob sink
   * gets it from its destination's `list` (the kernel parses the keys).
   * @ref LLP 0037
   */
  inventory?(partition: PartitionRef, opts: { signal: AbortSignal }): AsyncIterable<HeldUnit>;
}

/** A unit a destination holds, as its reader sees it (`UnitShipper.inventory`). @ref LLP 0037 */
export interface HeldUnit {
  /** Its identity at the destination, as `unitId` made it: the blob key, the batch id. */
  readonly id: string;
  /** Exclusive lower bound, a decimal seq; null for a partition's first unit ("0" reads the same there). */
  readonly since: string | null;
  /** Inclusive upper bound, a decimal seq. */
  readonly until: string;
  /** The rows it holds, when the reader knows them without reading the unit (a ledger entry). */
  readonly rows?: number;
  /** The rows it holds, read on demand (a blob's footer): asked only where the cache can compare. */
  countRows?(): Promise<number>;
  /** Where it is, for messages (a path, an s3:// URL), without secrets. */
  readonly where?: string;
  /**
   * The unit digest recorded with it when it was shipped (`Unit.digest`), when
   * the reader knows it without another request (a ledger row, a table's
   * snapshot summary); null: recorded without one. `hypsink verify` compares it
   * with the cache's rows. @ref LLP 0054
   */
  readonly digest?: string | null;
  /** The recorded digest, read on demand (an object's metadata); null: none recorded. */
  readDigest?(): Promise<string | null>;
}

/** A stored blob as a listing shows it: its key (as given to `putIfAbsent`) and size. @ref LLP 0037 */
export interface ListedBlob {
  readonly key: string;
  readonly bytes: number;
  /**
   * When the blob was last written (ms since the epoch: a file's mtime, an
   * object's LastModified), when the listing says. A table's orphan cleanup
   * removes only blobs older than its safety age, and none without this.
   * @ref LLP 0073
   */
  readonly modifiedMs?: number;
}

/** One stored blob for an encoder to read back: its size and bytes at any offset. @ref LLP 0037 */
export interface StoredBlob {
  readonly bytes: number;
  /** Bytes `[offset, offset + length)`; fewer only past the end. */
  read(offset: number, length: number): Promise<Uint8Array>;
}

/** What a connection check gets. */
export interface ConnectionCheckOptions {
  /** Aborted at the kernel's bound on the check, or when the kernel closes. */
  readonly signal: AbortSignal;
}

/** A body for a blob: chunks in order. */
export type BlobBody = AsyncIterable<Uint8Array>;

export interface PutResult {
  /** false when the key already existed: the unit had committed before. */
  readonly created: boolean;
  readonly bytes: number;
  /**
   * With `created: false`: the unit digest recorded with the blob already at
   * the key (null: it was put without one). The blob sink refuses a key that
   * holds another unit's digest. Absent: the destination records none.
   * @ref LLP 0054
   */
  readonly digest?: string | null;
}

/** How a blob is put (`BlobDestination.putIfAbsent`). */
export interface PutOptions {
  readonly contentType: string;
  readonly signal: AbortSignal;
  /**
   * A key already there is answered `created: false` whatever it holds, never
   * compared with the body (a table commit that lost the race for a name to
   * another writer reads what is there itself). Without it a destination that
   * can compare may refuse a key holding other bytes.
   */
  readonly exclusive?: boolean;
  /**
   * The unit digest to record with the blob (`Unit.digest`), kept where the
   * destination keeps what it committed (an object's metadata, a commit
   * record) and returned as `PutResult.digest` when the key is found taken.
   * @ref LLP 0054
   */
  readonly digest?: string;
}

/**
 * Where blobs are put. A key is committed at most once: `putIfAbsent` never
 * overwrites, and a partial upload is never visible under the key.
 */
export interface BlobDestination {
  putIfAbsent(key: string, body: BlobBody, opts: PutOptions): Promise<PutResult>;
  /** Human-readable location of a key, for logs and status (no secrets). */
  describe(key: string): string;
  /**
   * The URI an engine opens the key at (`file:///…`, `s3://bucket/…`): what a
   * table format writes into its metadata. Without it a destination cannot
   * hold a table. @ref LLP 0051
   */
  locate?(key: string): string;
  /**
   * Where the blobs go, stably and without secrets (a folder, a bucket and
   * prefix at an endpoint): see `UnitShipper.destination`. Without it the
   * kernel uses `describe`'s root. @ref LLP 0022
   */
  readonly destination?: string;
  close(): Promise<void>;
  /**
   * Optional connection check, as `UnitShipper.check`: the root exists or can
   * be made, and the credentials may write there, proven without anything
   * becoming visible under the root (an upload begun and aborted, a temp file
   * in the destination's own folder). The blob sink forwards its check here;
   * an encoder needs none. @ref LLP 0036
   */
  check?(opts: ConnectionCheckOptions): Promise<string>;
  /**
   * Every committed blob whose key starts with `prefix` (keys as given to
   * `putIfAbsent`, the destination's own root or prefix left off), in any
   * order; never a partial upload, a temp file or anything reached through a
   * link. With `read`, it makes the sink verifiable. @ref LLP 0037
   */
  list?(prefix: string, opts: { signal: AbortSignal }): AsyncIterable<ListedBlob>;
  /** The unit digest recorded with a committed blob (`PutOptions.digest`); null: none. @ref LLP 0054 */
  digestOf?(key: string, opts: { signal: AbortSignal }): Promise<string | null>;
  /** Bytes `[offset, offset + length)` of a committed blob (fewer only past its end). @ref LLP 0037 */
  read?(key: string, range: { offset: number; length: number }, opts: { signal: AbortSignal }): Promise<Uint8Array>;
  /**
   * A small committed blob whole (a table's metadata file), or null when no
   * blob is at the key. A table format needs it, with `replace` and `remove`.
   * @ref LLP 0051
   */
  get?(key: string, opts: { signal: AbortSignal }): Promise<Uint8Array | null>;
  /**
   * Write a small blob whole, replacing what is at the key: only for a pointer
   * a reader may find stale and must not trust alone (Iceberg's version hint),
   * never for a unit. A reader sees the old bytes or the new, never a mix.
   */
  replace?(key: string, bytes: Uint8Array, opts: { contentType: string; signal: AbortSignal }): Promise<void>;
  /** Remove a committed blob (table maintenance); a key not there is no error. */
  remove?(key: string, opts: { signal: AbortSignal }): Promise<void>;
}

/** Turns a unit's rows into bytes. Streams: a large unit never sits in memory whole. */
export interface Encoder {
  readonly extension: string;
  readonly contentType: string;
  encode(unit: Unit): BlobBody;
  /**
   * The rows a blob this encoder wrote holds, read back for `hypsink verify`
   * with as few bytes as the format allows (a Parquet footer). Throws when the
   * bytes are not such a blob. Without it, a blob's count is not checked.
   * @ref LLP 0037
   */
  countRows?(blob: StoredBlob): Promise<number>;
  /**
   * A table format (Iceberg): the encoder keeps a table over the destination
   * and ships each unit itself, its data files and then a commit of the
   * table's metadata. The blob sink hands it the unit, the destination and the
   * unit's read guard. @ref LLP 0051
   */
  readonly table?: TableFormat;
}

/**
 * The read guard of a unit: a body made from the unit's reads ends only once
 * those reads were whole (`guard`), and `check` throws unless the last read
 * was whole (for a read that writes nothing, e.g. statistics).
 */
export interface UnitGuard {
  guard(body: BlobBody): BlobBody;
  check(): void;
}

/** What a table format does for the blob sink it is the writer of. @ref LLP 0051 */
export interface TableFormat {
  /** The unit's identity in the table (a pure function, as `UnitShipper.unitId`). */
  unitId(partition: PartitionRef, since: Continuation | null, until: Continuation): string;
  /**
   * Ship the unit: its data files create-if-absent, then one commit of the
   * table that adds them, made at most once (a retry finds its own commit and
   * answers `duplicate`).
   */
  ship(unit: Unit, destination: BlobDestination, reads: UnitGuard): Promise<ShipResult>;
  /** What the table holds of `partition` from this writer (`hypsink verify`). */
  inventory?(partition: PartitionRef, destination: BlobDestination, opts: { signal: AbortSignal }): AsyncIterable<HeldUnit>;
  /**
   * Table maintenance (`hypsink maintain`) of the tables of `datasets`: resolves
   * with a short line of what was done. The kernel holds the sink's export lock.
   */
  maintain?(destination: BlobDestination, opts: { signal: AbortSignal; now: number; datasets: readonly string[] }): Promise<string>;
  /**
   * Add the tables of `datasets` to the catalog the writer is configured with
   * (`hypsink iceberg register`): resolves with a short line of what was done.
   * The kernel holds the sink's export lock. @ref LLP 0077
   */
  register?(destination: BlobDestination, opts: { signal: AbortSignal; datasets: readonly string[] }): Promise<string>;
}

/** What a plugin's factory gets when a sink is built from config. */
export interface SinkBuildContext {
  /** The sink instance name from the config. */
  readonly sink: string;
  /** The sink instance's own state dir (watermarks live here too). */
  readonly stateDir: string;
  /** The folder relative config paths resolve against. */
  readonly baseDir: string;
  /**
   * A stable id of this cache, kept with it: mix it into unit ids that a shared
   * destination dedupes by, so two caches never share one. Read it when a unit
   * id is made, not in `create` (the cache opens after its sinks are built).
   * @ref LLP 0021
   */
  readonly cacheId: string;
  readonly log: import('./plugins.js').Logger;
  /**
   * A named fault point (declared in the kernel's list): inert unless a crash
   * test selects it, then the process dies on the spot. Put one at every
   * durable boundary a plugin owns.
   */
  fault?(point: string): void;
  /**
   * Ask for a tick of this sink soon, e.g. from a `cacheFlushed` tap, to export
   * new rows promptly instead of at the next scheduled tick. `hypsink run`
   * honours it: requests made before the tick starts coalesce into one, and a
   * tick never overlaps another of the same sink. Elsewhere it does nothing.
   */
  requestTick?(): void;
}

/**
 * The options a factory takes, declared so the host checks them when the sink
 * is built, before `create`: a key not declared is an error naming the file,
 * the sink and `config.<key>` (or `writerConfig.<key>` for an encoder), with
 * the declared key it most likely means. "//" keys are comments: allowed at
 * every level, never passed to `create`. Without a spec, the host checks
 * nothing and `create` alone validates. @ref LLP 0032
 */
export interface PluginOptionsSpec {
  /**
   * Every option `create` reads. An option holding an object with keys of its
   * own lists them as `parent.child` (`"retry"`, `"retry.attempts"`), and
   * those are checked too; an object option without such entries is free-form.
   */
  readonly keys: readonly string[];
  /**
   * Optional: check the values too, once the keys are known. Standard Schema's
   * `validate` (https://standardschema.dev): a zod 4, valibot or ArkType
   * schema's `["~standard"].validate` fits as it is, and a hand-written
   * function returns `{ issues: [{ message, path }] }` or `{ value }`. Each issue
   * is reported as `config.<path>: <message>`: keep values (a token) out of messages.
   */
  validate?(options: Record<string, unknown>): PluginOptionsResult | Promise<PluginOptionsResult>;
}

/** What `PluginOptionsSpec.validate` returns: Standard Schema's result. */
export type PluginOptionsResult =
  | { readonly value?: unknown; readonly issues?: undefined }
  | { readonly issues: readonly { readonly message: string; readonly path?: readonly (PropertyKey | { readonly key: PropertyKey })[] | undefined }[] };

export interface EncoderFactory {
  readonly name: string;
  /** The options it takes (the sink's `writerConfig`), checked by the host before `create`. */
  readonly options?: PluginOptionsSpec;
  create(config: Record<string, unknown>, ctx: SinkBuildContext): Encoder;
}

export interface DestinationFactory {
  readonly name: string;
  /** The options it takes (the sink's `config`), checked by the host before `create`. */
  readonly options?: PluginOptionsSpec;
  create(config: Record<string, unknown>, ctx: SinkBuildContext): BlobDestination;
}

/** A request sink (like forward) ships units itself. */
export interface SinkFactory {
  readonly name: string;
  /** The options it takes (the sink's `config`), checked by the host before `create`. */
  readonly options?: PluginOptionsSpec;
  create(config: Record<string, unknown>, ctx: SinkBuildContext): UnitShipper;
}
