/**
 * One watermark record per (sink instance, logical partition), at
 * `<stateDir>/watermarks/<dataset>/source=<source>.json`. Keyed by the logical
 * partition, never the physical table folder: compaction swaps generations
 * under the partition, and the watermark reads straight through.
 * Written atomically (write-file-atomic, fsync). An unreadable record is an
 * error naming the file, never a reset to zero.
 * @ref LLP 0005: write-ahead intent
 */
import { promises as fsp } from 'node:fs';
import { dirname, join } from 'node:path';
import { HypsinkError } from '../../types/errors.js';
import { type ColumnSpec, COLUMN_TYPES } from '../../types/schema.js';
import type { Continuation, PartitionRef } from '../../types/storage.js';
import { isDecimalSeq, readJsonFile, writeJsonAtomic } from '../io/durable.js';
import { mkdirs } from '../io/mkdirs.js';

export interface Intent {
  /** Exclusive; null for a partition's first unit. */
  readonly since: string | null;
  readonly until: string;
  readonly unit: string;
  /**
   * The rows the unit holds, counted when it was planned: what it must ship to
   * advance. Absent in intents written before it existed (counted then).
   * @ref LLP 0018
   */
  readonly rows?: number;
  /**
   * The columns the unit carries, fixed when it was planned: a retry rebuilds the
   * unit byte for byte even if a column was added to the dataset since, so a
   * destination that checks a unit's body (the receiver's digest, local-fs's
   * read-back) finds the same unit. Absent in intents written before it existed
   * (the dataset's columns then).
   * @ref LLP 0030
   */
  readonly columns?: readonly ColumnSpec[];
  /**
   * The `until` of the last unit the sink shipped before this one, when the
   * watermark stepped over a gap in between (otherwise it is `since`, and absent).
   * @ref LLP 0041
   */
  readonly prior?: string | null;
  /**
   * The identity of the sink's transforms the unit is shipped through (LLP
   * 0046), fixed when it was planned; absent without transforms.
   * @ref LLP 0049
   */
  readonly transforms?: string;
  /**
   * The unit's digest (LLP 0054), fixed when it was planned: a retry that reads
   * other rows from the cache for this range is refused. Absent in intents
   * written before it existed (computed when the unit is finished).
   */
  readonly digest?: string;
}

export interface WatermarkRecord {
  readonly v: 1;
  readonly dataset: string;
  readonly source: string;
  readonly continuation: Continuation | null;
  readonly exportedRowCount: number;
  readonly updatedAt: string;
  readonly intent: Intent | null;
  /**
   * The unit after `intent`, recorded while `intent` is in flight so that it can
   * ship the moment `intent` is acknowledged (request sinks). Shipped only after
   * `intent`; both are finished, in order, before anything new is planned.
   * Absent in records written before it existed. @ref LLP 0014
   */
  readonly next?: Intent | null;
  /** Rows pruned (hard cap) before this sink exported them. */
  readonly gapRows: number;
  /**
   * The `until` of the last unit shipped, kept while the watermark has stepped
   * over a gap since (absent otherwise): the next intent's `prior`. @ref LLP 0041
   */
  readonly shippedUntil?: string | null;
  /** Rows the destination refused one by one, kept in the sink's dead letter (absent: 0). @ref LLP 0042 */
  readonly rejectedRows?: number;
  /**
   * Rows retention had pruned (exported by every sink then) before this record
   * was first written: never this sink's to deliver, so not part of what it
   * counts as committed. Absent in records written before it existed: 0.
   */
  readonly baseRows?: number;
  /**
   * The fork seq of a cache that was given its own identity (`hypsink identity
   * --copy`): rows at or below it are the original's to export, counted in
   * `baseRows`; this sink's units under the new identity start above it
   * (verify's chain starts here). Absent for a cache never copied. @ref LLP 0055
   */
  readonly handedOver?: string;
  readonly lastExportAt: string | null;
  readonly lastError: { code: string; message: string; at: string } | null;
}

const seqOf = (c: Continuation | null) => (c ? BigInt(c.seq) : -1n);

const badColumns = (i: Intent) =>
  i.columns !== undefined &&
  !(
    Array.isArray(i.columns) &&
    i.columns.length > 0 &&
    i.columns.every((c) => typeof c?.name === 'string' && COLUMN_TYPES.includes(c.type) && typeof c.nullable === 'boolean')
  );
/** A recorded unit's own fields (its count, columns, prior, transforms or digest) are malformed. */
const badPrior = (i: Intent) => i.prior !== undefined && i.prior !== null && !isDecimalSeq(i.prior);
const badTransforms = (i: Intent) => i.transforms !== undefined && (typeof i.transforms !== 'string' || i.transforms === '');
const badDigest = (i: Intent) => i.digest !== undefined && !(typeof i.digest === 'string' && /^u1-[A-Za-z0-9_-]{43}$/.test(i.digest));
const badUnit = (i: Intent) =>
  (i.rows !== undefined && !(Number.isSafeInteger(i.rows) && i.rows >= 0)) || badColumns(i) || badPrior(i) || badTransforms(i) || badDigest(i);

/** Paired assertion, checked before every write and on every read. */
export function checkRecord(v: unknown): string | null {
  const r = v as WatermarkRecord;
  if (r?.v !== 1) return 'not a v1 watermark record';
  if (r.continuation !== null && (r.continuation?.v !== 1 || !isDecimalSeq(r.continuation.seq))) return 'bad continuation';
  if (!Number.isInteger(r.exportedRowCount) || r.exportedRowCount < 0) return 'bad exportedRowCount';
  if (!Number.isInteger(r.gapRows) || r.gapRows < 0) return 'bad gapRows';
  if (r.baseRows !== undefined && !(Number.isSafeInteger(r.baseRows) && r.baseRows >= 0)) return 'bad baseRows';
  if (r.handedOver !== undefined && !isDecimalSeq(r.handedOver)) return 'bad handedOver';
  if (r.rejectedRows !== undefined && !(Number.isSafeInteger(r.rejectedRows) && r.rejectedRows >= 0)) return 'bad rejectedRows';
  if (r.shippedUntil !== undefined && r.shippedUntil !== null && !isDecimalSeq(r.shippedUntil)) return 'bad shippedUntil';
  if (r.intent !== null) {
    const i = r.intent;
    if (!i || (i.since !== null && !isDecimalSeq(i.since)) || !isDecimalSeq(i.until) || typeof i.unit !== 'string' || badUnit(i)) return 'bad intent';
    if (i.since !== null && BigInt(i.since) >= BigInt(i.until)) return `intent since ${i.since} is not below until ${i.until}`;
    if ((i.since === null ? -1n : BigInt(i.since)) !== seqOf(r.continuation)) return 'intent does not start at the watermark';
  }
  const n = r.next ?? null;
  if (n !== null) {
    if (!n || n.since === null || !isDecimalSeq(n.since) || !isDecimalSeq(n.until) || typeof n.unit !== 'string' || badUnit(n)) return 'bad next intent';
    if (r.intent === null || n.since !== r.intent.until) return 'next intent does not start where the intent ends';
    if (BigInt(n.since) >= BigInt(n.until)) return `next intent since ${n.since} is not below until ${n.until}`;
  }
  return null;
}

export class WatermarkStore {
  constructor(readonly stateDir: string) {}

  path(p: PartitionRef): string {
    return join(this.stateDir, 'watermarks', `${p.key}.json`);
  }

  async read(p: PartitionRef): Promise<WatermarkRecord> {
    return (await this.find(p)) ?? this.empty(p);
  }

  /** The record on disk, or undefined before this sink's first write for the partition. */
  find(p: PartitionRef): Promise<WatermarkRecord | undefined> {
    return readJsonFile<WatermarkRecord>(this.path(p), checkRecord, 'watermark');
  }

  /** The record of a partition this sink has never written. */
  empty(p: PartitionRef): WatermarkRecord {
    return {
      v: 1,
      dataset: p.dataset,
      source: p.source,
      continuation: null,
      exportedRowCount: 0,
      updatedAt: new Date(0).toISOString(),
      intent: null,
      gapRows: 0,
      lastExportAt: null,
      lastError: null,
    };
  }

  /** Write a record; the watermark never moves backwards (paired assertion). */
  async write(p: PartitionRef, prev: WatermarkRecord, next: WatermarkRecord): Promise<WatermarkRecord> {
    const problem = checkRecord(next);
    if (problem) throw new HypsinkError('HYPSINK_ERR_INVARIANT', `refusing to write watermark ${this.path(p)}: ${problem}`);
    if (seqOf(next.continuation) < seqOf(prev.continuation)) {
      throw new HypsinkError(
        'HYPSINK_ERR_INVARIANT',
        `refusing to move watermark ${this.path(p)} backwards (${prev.continuation?.seq} → ${next.continuation?.seq})`,
      );
    }
    const rec = { ...next, updatedAt: new Date().toISOString() };
    await mkdirs(dirname(this.path(p)));
    await writeJsonAtomic(this.path(p), rec);
    return rec;
  }

  /** Every record this sink has, for status (including partitions that no longer exist). */
  async list(): Promise<{ key: string; record: WatermarkRecord }[]> {
    const root = join(this.stateDir, 'watermarks');
    const out: { key: string; record: WatermarkRecord }[] = [];
    let dirs: string[] = [];
    try {
      dirs = await fsp.readdir(root);
    } catch {
      return out;
    }
    for (const d of dirs.sort()) {
      if (d.startsWith('.')) continue; // a forgotten dataset's watermarks on their way out
      for (const f of (await fsp.readdir(join(root, d))).sort()) {
        if (!f.endsWith('.json')) continue;
        const path = join(root, d, f);
        const record = await readJsonFile<WatermarkRecord>(path, checkRecord, 'watermark');
        if (record) out.push({ key: `${d}/${f.slice(0, -5)}`, record });
      }
    }
    return out;
  }
}
