/**
 * The Postgres sink as the simulation and the acceptance suite read it back:
 * plain SQL on the world's database (never through the sink), and the sink's
 * local watermark records as files. The `events` table is made by the world,
 * not the sink, for two things the sink would not add: a CHECK constraint that
 * refuses a row whose msg carries REFUSE_MARK (so seeds can make the server
 * refuse rows mid-COPY, which go to the dead letter), and an index on source
 * (every seed of a driver shares the table). @ref LLP 0043
 */
import { promises as fsp } from 'node:fs';
import { join } from 'node:path';
import { encodeSegment } from '../../kernel/store/segments.js';
import type { World } from './world.js';

/** The sink's name in scenario configs. */
export const PG_SINK = 'pg';

/** A row whose msg holds this is refused by the table's CHECK constraint (SQLSTATE 23514). */
export const REFUSE_MARK = '#refuse';

/** The sink's defaults: its own tables. */
const WATERMARKS = 'hypsink_watermarks';
const REJECTED = 'hypsink_rejected';

/** The table as the sink would create it from the dataset, plus the constraint and the index. */
export const PG_TABLE_DDL = [
  `CREATE TABLE events (source text NOT NULL, id bigint NOT NULL, ts timestamptz NOT NULL, msg text,
    CONSTRAINT sim_refuses_marked_rows CHECK (msg IS NULL OR strpos(msg, '${REFUSE_MARK}') = 0))`,
  'CREATE INDEX events_by_source ON events (source, id)',
];

export interface PgRow {
  readonly id: number;
  readonly msg: string | null;
  /** ISO 8601, UTC. */
  readonly ts: string;
}

/** The sink's own tables are made on its first export: before that, nothing is there. */
async function orNothing<T>(q: Promise<T[]>): Promise<T[]> {
  try {
    return await q;
  } catch (e) {
    if ((e as { code?: string }).code === '42P01') return [];
    throw e;
  }
}

/** Every row of the events table for a source (any writer). */
export async function pgRows(world: World, source: string): Promise<PgRow[]> {
  const rows = await world.pgQuery<{ id: string; msg: string | null; ts: Date }>('SELECT id::text AS id, msg, ts FROM events WHERE source = $1', [source]);
  return rows.map((r) => ({ id: Number(r.id), msg: r.msg, ts: r.ts.toISOString() }));
}

export interface PgRejected {
  readonly id: number;
  readonly msg: string | null;
  readonly unit: string;
  readonly ordinal: number;
}

/** A writer's dead-letter rows of a source: the rows the server refused, as the sink kept them (`row_json` as text: jsonb, or text in a table made before LLP 0069). */
export async function pgRejected(world: World, writer: string, source: string, sink = PG_SINK): Promise<PgRejected[]> {
  const rows = await orNothing(
    world.pgQuery<{ row_json: string; unit: string; ordinal: number }>(
      `SELECT row_json::text AS row_json, unit, ordinal FROM ${REJECTED} WHERE writer = $1 AND sink = $2 AND dataset = 'events' AND source = $3`,
      [writer, sink, source],
    ),
  );
  return rows.map((r) => {
    const row = JSON.parse(r.row_json) as { id: number; msg: string | null };
    return { id: Number(row.id), msg: row.msg, unit: r.unit, ordinal: r.ordinal };
  });
}

/** The writer's watermark row of a source: its `until`, or null when there is none. */
export async function pgWatermark(world: World, writer: string, source: string, sink = PG_SINK): Promise<string | null> {
  const rows = await orNothing(
    world.pgQuery<{ until: string }>(`SELECT until::text AS until FROM ${WATERMARKS} WHERE writer = $1 AND sink = $2 AND dataset = 'events' AND source = $3`, [
      writer,
      sink,
      source,
    ]),
  );
  return rows[0]?.until ?? null;
}

/** The cache's id, which the sink writes its rows and watermark rows as (`writer`). */
export async function cacheIdOf(cacheRoot: string): Promise<string | undefined> {
  try {
    return (JSON.parse(await fsp.readFile(join(cacheRoot, 'cache.json'), 'utf8')) as { id: string }).id;
  } catch {
    return undefined;
  }
}

interface LocalRecord {
  readonly continuation: { seq: string } | null;
  readonly shippedUntil?: string | null;
  readonly intent: { until: string } | null;
  readonly next?: { until: string } | null;
}

/** The sink's local watermark record of a partition (undefined: never written). */
export async function localRecord(stateDir: string, source: string, sink = PG_SINK): Promise<LocalRecord | undefined> {
  const path = join(stateDir, 'sinks', encodeSegment(sink), 'watermarks', 'events', `source=${encodeSegment(source)}.json`);
  try {
    return JSON.parse(await fsp.readFile(path, 'utf8')) as LocalRecord;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw e;
  }
}

/**
 * The watermark row against the local record, or what is wrong. The row is
 * where the last unit shipped ended (`shippedUntil` while the local watermark
 * stepped over a gap since, else the watermark), or the end of a unit still
 * recorded as in flight (committed, the local advance not yet written). With
 * `settled` (nothing in flight) only the first. @ref LLP 0041
 */
export function watermarkDisagrees(db: string | null, rec: LocalRecord | undefined, settled: boolean): string | null {
  const shipped = rec === undefined ? null : rec.shippedUntil !== undefined ? rec.shippedUntil : (rec.continuation?.seq ?? null);
  const inFlight = settled ? [] : [rec?.intent?.until, rec?.next?.until].filter((x): x is string => typeof x === 'string');
  if (db === shipped || inFlight.includes(db as string)) return null;
  const local = rec === undefined ? 'no local record' : `local watermark ${rec.continuation?.seq ?? 'none'}${rec.shippedUntil !== undefined ? `, last shipped ${rec.shippedUntil}` : ''}`;
  return `watermark row at ${db ?? 'nothing (no row)'}, but ${local}${inFlight.length ? `, in flight ${inFlight.join(', ')}` : ''}`;
}
