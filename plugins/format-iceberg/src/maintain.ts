/**
 * Snapshot expiry (`hypsink maintain`). A snapshot is kept when it is the
 * current one or a ref's, one of the newest `minSnapshotsToKeep`, younger than
 * `maxSnapshotAgeMs`, or the newest of its writer and partition: that is the
 * one a writer's open intent may need to find (its next unit is the one after
 * it, so no older snapshot of it is ever looked for). The rest leave the
 * metadata in one new version, committed as any other (create-if-absent,
 * re-based on a lost race). Only after that commit are files removed, and
 * only those no kept snapshot reaches: the expired snapshots' manifest lists,
 * manifests none of the kept lists names, data files none of the kept
 * manifests names. Metadata versions are never removed: a writer with a stale
 * head could otherwise create a removed version number again.
 * @ref LLP 0052
 */
import type { BlobDestination } from 'hypsink/plugin';
import { decodeManifest, decodeManifestList } from './avro.js';
import type { IcebergConfig } from './index.js';
import { currentSnapshot, markOf, nextVersion, type Snapshot, type TableMetadata, type TableStore } from './table.js';

/** The snapshots to keep, by id. */
export function keptSnapshots(m: TableMetadata, cfg: Pick<IcebergConfig, 'maxSnapshotAgeMs' | 'minSnapshotsToKeep'>, now: number): Set<number> {
  const keep = new Set<number>();
  const newestFirst = [...m.snapshots].sort((a, b) => b['timestamp-ms'] - a['timestamp-ms'] || b['sequence-number'] - a['sequence-number']);
  const current = currentSnapshot(m);
  if (current) keep.add(current['snapshot-id']);
  for (const r of Object.values(m.refs)) keep.add(r['snapshot-id']);
  for (const s of newestFirst.slice(0, cfg.minSnapshotsToKeep)) keep.add(s['snapshot-id']);
  for (const s of newestFirst) if (now - s['timestamp-ms'] < cfg.maxSnapshotAgeMs) keep.add(s['snapshot-id']);
  // The newest snapshot of every writer and partition: recovery of an open intent looks for it.
  const newestOf = new Map<string, Snapshot>();
  for (const s of m.snapshots) {
    const mark = markOf(s);
    if (mark === null) continue;
    const k = `${mark.writer}\n${mark.partition}`;
    const had = newestOf.get(k);
    if (had === undefined || BigInt(mark.until) > BigInt(markOf(had)!.until)) newestOf.set(k, s);
  }
  for (const s of newestOf.values()) keep.add(s['snapshot-id']);
  return keep;
}

export async function expireSnapshots(
  store: TableStore,
  destination: BlobDestination,
  cfg: IcebergConfig,
  opts: { signal: AbortSignal; now: number },
): Promise<string> {
  const { signal } = opts;
  for (let attempt = 0; ; attempt++) {
    const head = await store.head(signal);
    if (head === null) return `table ${store.tableKey}: none yet`;
    const m = head.metadata;
    const keep = keptSnapshots(m, cfg, opts.now);
    const expired = m.snapshots.filter((s) => !keep.has(s['snapshot-id']));
    if (expired.length === 0) return `table ${store.tableKey}: ${m.snapshots.length} snapshot(s), none expired`;
    const kept = m.snapshots.filter((s) => keep.has(s['snapshot-id']));
    const next = nextVersion(store.tableKey, head, (k) => destination.locate!(k), Date.now(), {
      snapshots: kept,
      'snapshot-log': m['snapshot-log'].filter((e) => keep.has(e['snapshot-id'])),
    });
    if (!(await store.commit(head.version + 1, next, signal))) {
      if (attempt + 1 >= cfg.commitAttempts) return `table ${store.tableKey}: every expiry lost its commit to a writer; run maintain again`;
      await store.backoff(attempt, signal);
      continue;
    }
    const removed = await removeUnreachable(store, destination, m, kept, expired, signal);
    return `table ${store.tableKey}: ${expired.length} snapshot(s) expired, ${kept.length} kept; ${removed} file(s) removed`;
  }
}

/** Remove what only the expired snapshots reached (the commit that dropped them is durable). */
async function removeUnreachable(store: TableStore, destination: BlobDestination, m: TableMetadata, kept: readonly Snapshot[], expired: readonly Snapshot[], signal: AbortSignal): Promise<number> {
  const manifestsOf = async (s: Snapshot) => decodeManifestList(await store.avro(m, s['manifest-list'], signal)).map((f) => f.manifestPath);
  const liveManifests = new Set<string>();
  for (const s of kept) for (const p of await manifestsOf(s)) liveManifests.add(p);
  const deadManifests = new Set<string>();
  for (const s of expired) for (const p of await manifestsOf(s)) if (!liveManifests.has(p)) deadManifests.add(p);
  const deadFiles = new Set<string>();
  if (deadManifests.size > 0) {
    const liveFiles = new Set<string>();
    for (const p of liveManifests) for (const e of decodeManifest(await store.avro(m, p, signal)).entries) liveFiles.add(e.dataFile.filePath);
    for (const p of deadManifests) for (const e of decodeManifest(await store.avro(m, p, signal)).entries) if (!liveFiles.has(e.dataFile.filePath)) deadFiles.add(e.dataFile.filePath);
  }
  const keys = [...deadFiles, ...deadManifests, ...expired.map((s) => s['manifest-list'])].map((loc) => store.keyOf(m, loc));
  for (const k of keys) await destination.remove!(k, { signal });
  return keys.length;
}
