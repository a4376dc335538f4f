/**
 * `hypsink replay`: the way back when `verify` finds a hole. One named range
 * `(since, until]` of one partition, at or below the sink's watermark, is
 * shipped again as one unit under the identity `unitId` gives that range,
 * with the digest of its rows: a destination that still holds a unit of that
 * name and digest answers "duplicate" and nothing is written twice; one that
 * lost it (a deleted file, a removed object) gets it back exactly once. A
 * range the destination holds any other unit across is refused: a replay
 * fills a hole, it never lays a unit over rows already there. The
 * watermark does not move. The range is recorded before it ships
 * (`replays/<partition>.json`) and logged, so a crash leaves a record naming
 * what to run again, and an operator reading the log sees every replay.
 * @ref LLP 0061: replaying a range
 */
import { promises as fsp } from 'node:fs';
import { dirname, join } from 'node:path';
import { HypsinkError } from '../../types/errors.js';
import type { PartitionRef } from '../../types/storage.js';
import { isDecimalSeq, readJsonFile, writeJsonAtomic } from '../io/durable.js';
import { mkdirs } from '../io/mkdirs.js';
import type { ExportEnv, SinkRuntime } from './exporter.js';
import { cont, UnitPlanner } from './plan.js';
import { shipUnit } from './ship.js';
import { rangeText } from './unit.js';
import type { ReplayResult } from './replay-args.js';

export type { ReplayResult } from './replay-args.js';


interface ReplayRecord {
  readonly v: 1;
  readonly since: string | null;
  readonly until: string;
  readonly unit: string;
  readonly digest: string;
  readonly at: string;
}

const checkReplay = (v: unknown) => {
  const r = v as ReplayRecord;
  return r?.v === 1 && (r.since === null || isDecimalSeq(r.since)) && isDecimalSeq(r.until) && typeof r.unit === 'string' && typeof r.digest === 'string'
    ? null
    : 'expected {"v":1,"since","until","unit","digest"}';
};

export function replayPath(sink: SinkRuntime, p: PartitionRef): string {
  return join(sink.state.dir, 'replays', `${p.key}.json`);
}

/** Replay `(since, until]` of `p` to `sink`. The caller holds the sink's export lock. */
export async function replayRange(env: ExportEnv, sink: SinkRuntime, p: PartitionRef, since: string | null, until: string): Promise<ReplayResult> {
  const where = rangeText(p, since, until);
  const lo = since === null ? -1n : BigInt(since);
  if (BigInt(until) <= lo) throw new HypsinkError('HYPSINK_ERR_USAGE', `${where}: until must be above since`);
  const rec = await sink.watermarks.find(p);
  const w = rec?.continuation ? BigInt(rec.continuation.seq) : -1n;
  if (BigInt(until) > w) {
    throw new HypsinkError(
      'HYPSINK_ERR_USAGE',
      `sink "${sink.name}": ${where} reaches above its watermark ${rec?.continuation?.seq ?? '(none)'}: rows there are not exported yet, and "hypsink export" ships them; replay only re-sends what was exported`,
    );
  }
  const stats = await env.cache.storage.stats(p);
  if (stats.prunedThroughSeq !== null && BigInt(stats.prunedThroughSeq) > lo) {
    throw new HypsinkError(
      'HYPSINK_ERR_USAGE',
      `sink "${sink.name}": ${where}: retention pruned this partition through seq ${stats.prunedThroughSeq}, so the cache no longer holds every row of the range and cannot send it again whole`,
    );
  }
  await refuseOverlaps(sink, p, lo, BigInt(until), where, env.signal);
  const path = replayPath(sink, p);
  const left = await readJsonFile<ReplayRecord>(path, checkReplay, 'replay record');
  if (left && (left.since !== since || left.until !== until)) {
    throw new HypsinkError(
      'HYPSINK_ERR_USAGE',
      `sink "${sink.name}": a replay of ${rangeText(p, left.since, left.until)} (${path}) was started ${left.at} and not finished; run that one again first`,
    );
  }
  const plan = new UnitPlanner(env.cache, sink, p);
  const digest = await plan.digest(lo, until);
  if (left && left.digest !== digest) {
    throw new HypsinkError('HYPSINK_ERR_CONFLICT', `sink "${sink.name}": ${where}: the cache now holds other rows for the range than when its replay was started (${path}); nothing was sent`);
  }
  const from = since === null ? null : cont(since);
  const rows = await plan.count(from, cont(until));
  const intent = plan.intent(from, cont(until), rows, digest);
  if (!left) {
    await mkdirs(dirname(path));
    await writeJsonAtomic(path, { v: 1, since, until, unit: intent.unit, digest, at: new Date().toISOString() } satisfies ReplayRecord);
  }
  env.log.warn({ sink: sink.name, dataset: p.dataset, source: p.source, since, until, unit: intent.unit, digest, rows }, 'replaying an exported range (hypsink replay)');
  const chain = sink.transforms.length > 0 ? sink.transforms.bind(plan.schema.columns, p.dataset) : null;
  const shipped = await shipUnit(env, sink, plan, { cache: env.cache, p, schema: plan.schema, chain }, intent, false);
  await fsp.rm(path, { force: true });
  env.log.warn({ sink: sink.name, dataset: p.dataset, source: p.source, since, until, duplicate: shipped.result.duplicate }, shipped.result.duplicate ? 'replay: the destination already holds the range' : 'replay: the range was sent again');
  return { sink: sink.name, partition: p.key, since, until, unit: intent.unit, digest, rows, duplicate: shipped.result.duplicate, resumed: left !== undefined };
}

/** The destination holds no unit across `(lo, hi]` but one of exactly that range: read back through the sink's inventory. */
async function refuseOverlaps(sink: SinkRuntime, p: PartitionRef, lo: bigint, hi: bigint, where: string, signal: AbortSignal): Promise<void> {
  if (!sink.shipper.inventory) {
    throw new HypsinkError(
      'HYPSINK_ERR_USAGE',
      `sink "${sink.name}": its plugin cannot read back what its destination holds (no inventory), so a replay of ${where} could lay rows over rows already there; nothing was sent`,
    );
  }
  for await (const u of sink.shipper.inventory(p, { signal })) {
    const a = u.since === null ? -1n : BigInt(u.since);
    const b = BigInt(u.until);
    const first = (x: bigint) => (x <= 0n ? -1n : x); // a blob key writes the start as 0
    if (first(a) === first(lo) && b === hi) continue;
    if (b > lo && a < hi) {
      throw new HypsinkError(
        'HYPSINK_ERR_USAGE',
        `sink "${sink.name}": the destination holds ${u.where ?? u.id} ((${u.since ?? 'start'}, ${u.until}]) across ${where}: a replay fills a hole and never lays rows over rows already there; replay exactly the hole "hypsink verify" names`,
      );
    }
  }
}
