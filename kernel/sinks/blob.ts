/**
 * A blob sink is an encoder and a destination put together by the kernel. Its
 * unit identity is the blob key, `<dataset>/source=<src>/<dataset>.<since>-<until>.<ext>`
 * (a destination prefixes its own root), so a retried unit lands on the same key
 * and create-if-absent tells whether it already committed. The body the
 * destination stores ends only once the unit's reads were whole (UnitReads):
 * a damaged cache file fails the put, it never commits a short blob.
 *
 * With `keys.time` ("day" or "hour") the unit is one blob per day (hour) of its
 * rows' timestamps, under Hive-style segments: `<p.key>/dt=YYYY-MM-DD[/hour=HH]/<name>`,
 * each naming the whole unit's range, each create-if-absent, each guarded.
 * An encoder writes a column the unit declares NOT NULL as a required field;
 * the kernel hands it a unit whose rows keep that promise (`putDeclared`).
 * @ref LLP 0005: write-ahead intent
 * @ref LLP 0018: the two kernel rules
 * @ref LLP 0048: time-partitioned keys
 * @ref LLP 0069: types engines read right
 */
import type { RecordBatch } from 'apache-arrow';
import { rowsWithKey } from '../../types/arrow-rows.js';
import { unitConflict } from '../../types/content.js';
import { HypsinkError, isHypsinkError } from '../../types/errors.js';
import type { Row } from '../../types/schema.js';
import type { BlobDestination, ConnectionCheckOptions, Encoder, HeldUnit, NdjsonChunk, PutResult, ShipResult, TableFormat, Unit, UnitLimits, UnitShipper } from '../../types/sinks.js';
import type { Continuation, PartitionRef } from '../../types/storage.js';
import { fault } from '../fault.js';
import { encodeSegment } from '../store/segments.js';
import { NdjsonWriter } from './ndjson.js';
import type { UnitReads } from './unit.js';

/** A blob sink's key layout (`keys` in its config). */
export interface KeyLayout {
  readonly time?: TimeGrain;
}
export type TimeGrain = 'day' | 'hour';

/**
 * `tag`: '' for a cache never copied; a copy given its own identity (LLP 0055)
 * writes `~<tag>` after the range, so that its keys never meet the original's
 * at a shared destination (the same source, the same seqs).
 */
export function blobKey(p: PartitionRef, since: Continuation | null, until: Continuation, ext: string, segment?: string, tag = ''): string {
  const ds = encodeSegment(p.dataset);
  return `${p.key}/${segment ? `${segment}/` : ''}${ds}.${since?.seq ?? '0'}-${until.seq}${tag ? `~${tag}` : ''}.${ext}`;
}

/**
 * A time bucket: epoch ms floored to the grain, in UTC; null for a row whose
 * timestamp is null. Its segments name it as Hive does; a null bucket takes
 * Hive's default partition name, which Hive, Spark and Trino read as null.
 * @ref LLP 0048
 */
type Bucket = number | null;
const GRAIN_MS: Record<TimeGrain, number> = { day: 86_400_000, hour: 3_600_000 };
export const NULL_SEGMENT = '__HIVE_DEFAULT_PARTITION__';

export function timeSegment(grain: TimeGrain, bucket: Bucket): string {
  if (bucket === null) return grain === 'day' ? `dt=${NULL_SEGMENT}` : `dt=${NULL_SEGMENT}/hour=${NULL_SEGMENT}`;
  const iso = new Date(bucket * GRAIN_MS[grain]).toISOString();
  const t = iso.indexOf('T');
  return grain === 'day' ? `dt=${iso.slice(0, t)}` : `dt=${iso.slice(0, t)}/hour=${iso.slice(t + 1, t + 3)}`;
}

/** The unit id of a segmented unit: its blobs' keys with the segments as `*` (a pure function of the range). */
function segmentedId(p: PartitionRef, since: Continuation | null, until: Continuation, ext: string, grain: TimeGrain, tag: string): string {
  return blobKey(p, since, until, ext, grain === 'day' ? 'dt=*' : 'dt=*/hour=*', tag);
}

/** A key's time segments: `dt=<day>/`, then `hour=<HH>/` for hour keys. */
const DAY = `(?:[+-]?\\d{4,6}-\\d{2}-\\d{2}|${NULL_SEGMENT})`;
const SEGMENTS = new RegExp(`^dt=(${DAY})/(?:hour=(\\d{2}|${NULL_SEGMENT})/)?`);

/**
 * The unit a blob key names, if it is one of `p`'s: `<p.key>/<dataset>.<since>-<until>.<ext>`
 * (any one-word extension: a sink whose writer changed still holds its older units).
 * @ref LLP 0037
 */
export function parseBlobKey(p: PartitionRef, key: string): { since: string; until: string; ext: string; tag: string; grain?: TimeGrain } | null {
  if (!key.startsWith(`${p.key}/`)) return null;
  let rest = key.slice(p.key.length + 1);
  // Time segments (LLP 0048): `dt=<day>/`, then `hour=<HH>/` for hour keys.
  const seg = SEGMENTS.exec(rest);
  let grain: TimeGrain | undefined;
  if (seg) {
    grain = seg[2] === undefined ? 'day' : 'hour';
    rest = rest.slice(seg[0].length);
  }
  const name = `${encodeSegment(p.dataset)}.`;
  if (!rest.startsWith(name)) return null;
  const m = /^(0|[1-9]\d*)-(0|[1-9]\d*)(?:~([0-9a-f]{8}))?\.([a-z0-9]+)$/.exec(rest.slice(name.length));
  return m ? { since: m[1]!, until: m[2]!, ext: m[4]!, tag: m[3] ?? '', ...(grain ? { grain } : {}) } : null;
}

/**
 * What a blob sink holds of a partition, from its destination's listing; rows
 * counted by the encoder on demand. The blobs of one segmented unit (its days or
 * hours) are one held unit, its rows their sum: verify places units, not blobs.
 * @ref LLP 0048
 */
async function* blobInventory(encoder: Encoder, destination: BlobDestination, p: PartitionRef, signal: AbortSignal, tag: string): AsyncIterable<HeldUnit> {
  const segmented = new Map<string, { since: string; until: string; counts: (() => Promise<number>)[] | null; readDigest?: () => Promise<string | null> }>();
  for await (const b of destination.list!(`${p.key}/`, { signal })) {
    const k = parseBlobKey(p, b.key);
    if (!k) continue; // not a unit's name: nothing this sink wrote
    if (k.tag !== tag) continue; // the original's units, or another copy's (LLP 0055)
    const count =
      encoder.countRows && destination.read && k.ext === encoder.extension
        ? () => encoder.countRows!({ bytes: b.bytes, read: (offset, length) => destination.read!(b.key, { offset, length }, { signal }) })
        : undefined;
    // The digest recorded with the blob, read on demand (LLP 0054).
    const digest = destination.digestOf ? { readDigest: () => destination.digestOf!(b.key, { signal }) } : {};
    if (!k.grain) {
      yield { id: b.key, since: k.since, until: k.until, where: destination.describe(b.key), ...(count ? { countRows: count } : {}), ...digest };
      continue;
    }
    // The unit's id, as unitId made it; its blobs are gathered before it is handed out.
    const id = segmentedId(p, { v: 1, seq: k.since }, { v: 1, seq: k.until }, k.ext, k.grain, tag);
    // Every blob of a segmented unit records the unit's digest: the first one found stands for it.
    const u = segmented.get(id) ?? { since: k.since, until: k.until, counts: [], ...digest };
    u.counts = u.counts && count ? [...u.counts, count] : null;
    segmented.set(id, u);
  }
  for (const [id, u] of segmented) {
    const counts = u.counts;
    const countRows = counts
      ? async () => {
          let n = 0;
          for (const c of counts) n += await c();
          return n;
        }
      : undefined;
    yield { id, since: u.since, until: u.until, where: destination.describe(id), ...(countRows ? { countRows } : {}), ...(u.readDigest ? { readDigest: u.readDigest } : {}) };
  }
}

/**
 * A key found taken holds this unit only if the digest recorded with it is the
 * unit's: another digest is other rows under this unit's name (a copied or
 * restored cache), refused. A blob put without a digest (before digests, or a
 * destination that records none) is taken by its label, as before.
 * @ref LLP 0054
 */
function sameUnit(unit: Unit, put: PutResult, where: string): void {
  if (put.created || put.digest === undefined || put.digest === null || put.digest === unit.digest) return;
  const since = unit.since?.seq ?? null;
  throw unitConflict({
    sink: unit.sink,
    partition: unit.partition,
    since,
    until: unit.until.seq,
    digest: unit.digest,
    held: { since, until: unit.until.seq, digest: put.digest },
    where,
  });
}

/** A batch handed to an encoder held a null in columns the unit declares NOT NULL. */
class NullInNotNull extends Error {
  constructor(readonly columns: readonly string[]) {
    super(`a null in NOT NULL column(s) ${columns.join(', ')}`);
  }
}

/** The NullInNotNull an error is, or was caused by (a destination may wrap its body's error). */
function nullsIn(e: unknown): NullInNotNull | null {
  for (let x = e, depth = 0; x instanceof Error && depth < 8; x = x.cause, depth++) if (x instanceof NullInNotNull) return x;
  return null;
}

/**
 * The unit as an encoder gets it, `nullable` columns declared nullable: its
 * batches() stops at the first batch with a null in a column still declared
 * NOT NULL, before the encoder can write it.
 */
function declared(unit: Unit, nullable: ReadonlySet<string>): Unit {
  const columns = unit.schema.columns.map((c) => (nullable.has(c.name) ? { ...c, nullable: true } : c));
  const strict = columns.filter((c) => !c.nullable).map((c) => c.name);
  if (strict.length === 0 && nullable.size === 0) return unit;
  return {
    ...unit,
    schema: { ...unit.schema, columns },
    batches: () =>
      (async function* () {
        for await (const b of unit.batches()) {
          const broken = strict.filter((n) => (b.getChild(n)?.nullCount ?? 0) > 0);
          if (broken.length > 0) throw new NullInNotNull(broken);
          yield b;
        }
      })(),
  };
}

/**
 * Put a unit's blob (or table files) with the columns it declares NOT NULL
 * written as required. A dataset's NOT NULL is checked at ingest, but rows
 * cached before a column was declared so (added later, or made NOT NULL
 * since) may hold nulls; the intent fixes the columns with the unit, so the
 * unit can never be planned again under other ones. A batch with such a null
 * stops the put before it commits (the body fails), and the unit is put again
 * at once with those columns nullable: the file then says what its rows are.
 * The cost, one more read, falls only on units whose rows break their schema.
 * @ref LLP 0069
 */
async function putDeclared<T>(unit: Unit, put: (u: Unit) => Promise<T>): Promise<T> {
  const nullable = new Set<string>();
  for (;;) {
    try {
      return await put(declared(unit, nullable));
    } catch (e) {
      const found = nullsIn(e);
      const fresh = found?.columns.filter((c) => !nullable.has(c)) ?? [];
      if (fresh.length === 0) throw e;
      for (const c of fresh) nullable.add(c);
    }
  }
}

/**
 * A ship of several puts: a put that sent nothing does not make the unit
 * unsent, since another may have stored part of it. @ref LLP 0070
 */
async function sent<T>(ship: Promise<T>): Promise<T> {
  try {
    return await ship;
  } catch (e) {
    if (!isHypsinkError(e) || !e.unsent) throw e;
    throw new HypsinkError(e.code, e.message, { cause: e.cause, retryable: e.retryable, retryAfterMs: e.retryAfterMs, tooLarge: e.tooLarge, hint: e.hint });
  }
}

/** A shipper whose every ship is checked against the unit's reads: the kernel's own blob sinks. */
export interface GuardedShipper extends UnitShipper {
  shipGuarded(unit: Unit, reads: UnitReads): Promise<ShipResult>;
  /** A table writer's maintenance (`hypsink maintain`). @ref LLP 0052 */
  maintain?(opts: { signal: AbortSignal; now: number; datasets: readonly string[] }): Promise<string>;
  /** A table writer's catalog registration (`hypsink iceberg register`). @ref LLP 0077 */
  register?(opts: { signal: AbortSignal; datasets: readonly string[] }): Promise<string>;
}

export function blobShipper(
  encoder: Encoder,
  destination: BlobDestination,
  limits: UnitLimits,
  layout: KeyLayout = {},
  /** The cache's copy tag (LLP 0055), read when a key is made: the cache opens after its sinks are built. */
  copyTag: () => string = () => '',
): GuardedShipper {
  if (encoder.table) return tableShipper(encoder.table, destination, limits);
  const grain = layout.time;
  return {
    limits,
    unitId: (p, since, until) =>
      grain ? segmentedId(p, since, until, encoder.extension, grain, copyTag()) : blobKey(p, since, until, encoder.extension, undefined, copyTag()),
    ship(unit: Unit): Promise<ShipResult> {
      return Promise.reject(new HypsinkError('HYPSINK_ERR_INVARIANT', `blob unit ${unit.id}: shipped without the kernel's read guard`));
    },
    async shipGuarded(unit: Unit, reads: UnitReads): Promise<ShipResult> {
      // One blob per period: an earlier one may be stored when a later put sends nothing.
      if (grain) return sent(shipByTime(encoder, destination, unit, reads, grain, copyTag()));
      const put = await putDeclared(unit, (u) =>
        destination.putIfAbsent(unit.id, reads.guard(encoder.encode(u)), { contentType: encoder.contentType, signal: unit.signal, digest: unit.digest }),
      );
      sameUnit(unit, put, destination.describe(unit.id));
      return { rows: reads.planned, bytes: put.bytes, duplicate: !put.created };
    },
    close: () => destination.close(),
    // The blob sink's connection check is its destination's (an encoder reaches nothing). @ref LLP 0036
    ...(destination.check ? { check: (opts: ConnectionCheckOptions) => destination.check!(opts) } : {}),
    ...(destination.list ? { inventory: (p: PartitionRef, opts: { signal: AbortSignal }) => blobInventory(encoder, destination, p, opts.signal, copyTag()) } : {}),
  };
}

/**
 * A blob sink whose writer is a table format (Iceberg): the format names the
 * unit and ships it over the destination, under the kernel's read guard; the
 * kernel's intent and watermark work as for any blob. @ref LLP 0051
 */
function tableShipper(table: TableFormat, destination: BlobDestination, limits: UnitLimits): GuardedShipper {
  return {
    limits,
    unitId: (p, since, until) => table.unitId(p, since, until),
    ship(unit: Unit): Promise<ShipResult> {
      return Promise.reject(new HypsinkError('HYPSINK_ERR_INVARIANT', `table unit ${unit.id}: shipped without the kernel's read guard`));
    },
    // A table's unit is several objects and a commit: the format, not one put, knows what was stored.
    shipGuarded: (unit, reads) => sent(putDeclared(unit, (u) => table.ship(u, destination, reads))),
    close: () => destination.close(),
    ...(destination.check ? { check: (opts: ConnectionCheckOptions) => destination.check!(opts) } : {}),
    ...(table.inventory ? { inventory: (p: PartitionRef, opts: { signal: AbortSignal }) => table.inventory!(p, destination, opts) } : {}),
    ...(table.maintain ? { maintain: (opts: { signal: AbortSignal; now: number; datasets: readonly string[] }) => table.maintain!(destination, opts) } : {}),
    ...(table.register ? { register: (opts: { signal: AbortSignal; datasets: readonly string[] }) => table.register!(destination, opts) } : {}),
  };
}

/** The timestamp column the unit's rows are bucketed by: looked up by name in the columns the shipper is handed. */
function timeColumn(unit: Unit): string {
  const p = unit.partition;
  const name = unit.schema.timestampColumn;
  if (name === undefined) {
    throw new HypsinkError('HYPSINK_ERR_CONFIG', `sink "${unit.sink}": keys.time: dataset "${p.dataset}" has no timestampColumn to put its rows under a day or hour`);
  }
  const c = unit.schema.columns.find((x) => x.name === name);
  if (c?.type !== 'TIMESTAMP') {
    throw new HypsinkError(
      'HYPSINK_ERR_CONFIG',
      `sink "${unit.sink}": keys.time: the rows of dataset "${p.dataset}" handed to the writer have ${c ? `"${name}" as ${c.type}, not TIMESTAMP` : `no column "${name}" (its timestampColumn)`}; a transform that drops, renames or rewrites it leaves keys.time nothing to read`,
    );
  }
  return name;
}

/** The bucket of each row of a batch (its timestamp column, epoch ms). */
function batchBuckets(b: RecordBatch, col: string, grain: TimeGrain): Bucket[] {
  const v = b.getChild(col);
  const ms = GRAIN_MS[grain];
  const out: Bucket[] = new Array(b.numRows);
  for (let i = 0; i < b.numRows; i++) {
    const t = v?.get(i) as number | bigint | null | undefined;
    out[i] = t === null || t === undefined ? null : Math.floor(Number(t) / ms);
  }
  return out;
}

function rowBucket(r: Row, col: string, grain: TimeGrain): Bucket {
  const t = r[col];
  if (t === null || t === undefined) return null;
  const ms = typeof t === 'string' ? Date.parse(t) : Number(t);
  if (!Number.isFinite(ms)) throw new HypsinkError('HYPSINK_ERR_INVARIANT', `keys.time: a row's ${col} is ${JSON.stringify(t)}, not a timestamp`);
  return Math.floor(ms / GRAIN_MS[grain]);
}

const order = (a: Bucket, b: Bucket) => (a === b ? 0 : a === null ? 1 : b === null ? -1 : a - b);

/**
 * The unit as one bucket's blob sees it: each read is a whole read of the unit
 * (counted and checked by UnitReads as before), filtered after the counting.
 * `learned` holds every bucket of the unit once a read ran to its end; with
 * `expect`, a row of a bucket not in it fails the read (the unit's rows are
 * not the ones its first read saw).
 */
function bucketView(unit: Unit, col: string, grain: TimeGrain, want: Bucket, expect: ReadonlySet<Bucket> | null): { unit: Unit; learned: () => Set<Bucket> | null } {
  let learned: Set<Bucket> | null = null;
  const seen = (b: Bucket, all: Set<Bucket>) => {
    if (all.has(b)) return;
    if (expect && !expect.has(b)) {
      throw new HypsinkError(
        'HYPSINK_ERR_INVARIANT',
        `sink "${unit.sink}": unit ${unit.id}: a row under ${timeSegment(grain, b)} that the unit's first read did not hold; nothing of it was advanced`,
      );
    }
    all.add(b);
  };
  async function* batches(): AsyncIterable<RecordBatch> {
    const all = new Set<Bucket>();
    for await (const b of unit.batches()) {
      const buckets = batchBuckets(b, col, grain);
      for (const x of buckets) seen(x, all);
      // This bucket's rows as one batch, however the buckets interleave. @ref LLP 0108
      const mine = rowsWithKey(b, buckets, want);
      if (mine) yield mine;
    }
    learned = all;
  }
  const view: Unit = {
    ...unit,
    rows: () =>
      (async function* () {
        const all = new Set<Bucket>();
        for await (const r of unit.rows()) {
          const x = rowBucket(r, col, grain);
          seen(x, all);
          if (x === want) yield r;
        }
        learned = all;
      })(),
    batches,
    ndjson: () =>
      (async function* (): AsyncIterable<NdjsonChunk> {
        // One chunk per batch of the unit: the bucket's rows, never the whole unit in memory.
        for await (const b of batches()) {
          const w = new NdjsonWriter(unit.schema.columns, b.numRows);
          w.append(b);
          if (w.rows > 0) yield { bytes: w.bytes(), rows: w.rows };
        }
      })(),
  };
  return { unit: view, learned: () => learned };
}

/** The bucket of the unit's first row (in seq order), from its first batch alone; undefined for no row. */
async function firstBucket(unit: Unit, col: string, grain: TimeGrain): Promise<Bucket | undefined> {
  for await (const b of unit.batches()) {
    if (b.numRows > 0) return batchBuckets(b.slice(0, 1), col, grain)[0];
  }
  return undefined;
}

/** Every bucket of the unit: one whole read, checked. */
async function bucketsOf(unit: Unit, reads: UnitReads, col: string, grain: TimeGrain): Promise<Set<Bucket>> {
  const all = new Set<Bucket>();
  for await (const b of unit.batches()) for (const x of batchBuckets(b, col, grain)) all.add(x);
  reads.check();
  return all;
}

/**
 * A unit under time keys: one blob per bucket of its rows, each holding that
 * bucket's rows in seq order, each at a key naming the whole unit's range, each
 * create-if-absent and ended only after its read was whole. The first row's
 * bucket is written first; its read learns the other buckets, written after it
 * in time order (null last). When that blob was already there (a retry), one
 * read learns them instead. The unit advances only once every blob exists.
 * A destination that records unit digests is first asked about every key,
 * after one read learns the buckets, so a unit refused as other rows stores
 * none of its blobs.
 * @ref LLP 0048
 */
async function shipByTime(encoder: Encoder, destination: BlobDestination, unit: Unit, reads: UnitReads, grain: TimeGrain, copyTag: string): Promise<ShipResult> {
  const col = timeColumn(unit);
  let bytes = 0;
  let created = 0;
  const since = unit.since;
  const put = async (b: Bucket, expect: ReadonlySet<Bucket> | null) => {
    const key = blobKey(unit.partition, since, unit.until, encoder.extension, timeSegment(grain, b), copyTag);
    let view!: ReturnType<typeof bucketView>;
    const r = await putDeclared(unit, (u) => {
      view = bucketView(u, col, grain, b, expect);
      return destination.putIfAbsent(key, reads.guard(encoder.encode(view.unit)), { contentType: encoder.contentType, signal: unit.signal, digest: unit.digest });
    });
    sameUnit(unit, r, destination.describe(key));
    bytes += r.bytes;
    if (r.created) created++;
    return view.learned();
  };
  // A destination that records digests is asked about every key of the unit before any is written:
  // a taken key holding other rows refuses the whole unit, with nothing of it stored. @ref LLP 0054
  let checked: Set<Bucket> | null = null;
  if (destination.digestOf) {
    checked = await bucketsOf(unit, reads, col, grain);
    for (const b of checked) {
      const key = blobKey(unit.partition, since, unit.until, encoder.extension, timeSegment(grain, b), copyTag);
      sameUnit(unit, { created: false, bytes: 0, digest: await destination.digestOf(key, { signal: unit.signal }) }, destination.describe(key));
    }
  }
  const first = await firstBucket(unit, col, grain);
  let known: Set<Bucket> | null = checked;
  if (first !== undefined) {
    const learned = await put(first, known);
    if (learned) {
      reads.check(); // what the read learned counts only if it was whole
      known = learned;
    }
  }
  known ??= await bucketsOf(unit, reads, col, grain);
  if (first === undefined || !known.has(first)) {
    // The first read found no row, or another first row than the whole read: the unit's rows moved under it.
    throw new HypsinkError('HYPSINK_ERR_INVARIANT', `sink "${unit.sink}": unit ${unit.id}: its reads disagree on its rows; nothing of it was advanced`);
  }
  const rest = [...known].filter((b) => b !== first).sort(order);
  for (const b of rest) {
    // One blob of the unit is stored, others not yet.
    fault('blob.afterDayBlob');
    await put(b, known);
  }
  return { rows: reads.planned, bytes, duplicate: created === 0 };
}
