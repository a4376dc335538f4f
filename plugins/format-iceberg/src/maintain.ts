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
 * Every location read or removed is first turned into a key of this table by
 * its one rule (`TableStore.keyOf`): all of them are checked before the
 * expiry commits, so a table naming a file elsewhere is refused whole.
 * @ref LLP 0052, LLP 0063
 */
import type { BlobDestination } from 'hypsink/plugin';
import { decodeManifest, decodeManifestList } from './avro.js';
import type { IcebergConfig } from './index.js';
import { currentSnapshot, hintKey, markOf, namedIn, nextVersion, type Snapshot, type TableMetadata, type TableStore, writerTag } from './table.js';

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
    // Read, and checked against the table, before the commit: a refusal leaves the table as it was.
    let doomed: Map<string, string>;
    try {
      doomed = await unreachable(store, head.version, kept, expired, signal);
    } catch (e) {
      // Another maintainer expired files of this version meanwhile: re-based, as after a lost commit. @ref LLP 0078
      if (!(await store.movedPast(e, head.version, signal))) throw e;
      if (attempt + 1 >= cfg.commitAttempts) return `table ${store.tableKey}: the table moved on under every expiry (${attempt + 1} in a row); run maintain again`;
      continue;
    }
    const next = nextVersion(store.tableKey, head, (k) => destination.locate!(k), Date.now(), {
      snapshots: kept,
      'snapshot-log': m['snapshot-log'].filter((e) => keep.has(e['snapshot-id'])),
    });
    if (!(await store.commit(head.version + 1, next, signal))) {
      if (attempt + 1 >= cfg.commitAttempts) return `table ${store.tableKey}: every expiry lost its commit to a writer; run maintain again`;
      await store.backoff(attempt, signal);
      continue;
    }
    // The hint to the version just committed, then nothing removed that the version the hint names reaches:
    // a reader trusting the hint alone (DuckDB) opens that one, which may still be older (a writer died before
    // its hint, or its late hint landed in between). @ref LLP 0073
    const committed = head.version + 1;
    await store.hint(committed, signal);
    const hinted = await store.hintedVersion(signal);
    if (hinted !== null && hinted < committed) {
      const m = await store.version(hinted, signal);
      if (m !== null) for (const key of await reachable(store, hinted, m, signal)) doomed.delete(key);
    }
    for (const [key, namedBy] of doomed) {
      await destination.remove!(key, { signal }).catch((e: unknown) => {
        throw namedIn(e, `${namedBy}; expiry stopped there`);
      });
    }
    return `table ${store.tableKey}: ${expired.length} snapshot(s) expired, ${kept.length} kept; ${doomed.size} file(s) removed`;
  }
}

/**
 * What only the expired snapshots reach, by key, each with the file that
 * named it: their manifest lists, manifests no kept list names, data files no
 * kept manifest names. Compared by key, not by the location's text, so a
 * location spelled another way (`a//b`, `a/./b`) never removes a live file.
 */
async function unreachable(store: TableStore, version: number, kept: readonly Snapshot[], expired: readonly Snapshot[], signal: AbortSignal): Promise<Map<string, string>> {
  const where = (s: Snapshot) => `${store.describe(version)} (snapshot ${s['snapshot-id']})`;
  const manifestsOf = async (s: Snapshot) => {
    const named = `manifest list ${s['manifest-list']}`;
    return decodeManifestList(await store.avro(s['manifest-list'], where(s), signal)).map((f) => ({ location: f.manifestPath, key: store.keyOf(f.manifestPath, named) }));
  };
  const filesOf = async (manifest: string) => {
    const named = `manifest ${manifest}`;
    return decodeManifest(await store.avro(manifest, named, signal)).entries.map((e) => ({ key: store.keyOf(e.dataFile.filePath, named), named, deleted: e.status === 2 }));
  };
  const liveLists = new Set(kept.map((s) => store.keyOf(s['manifest-list'], where(s))));
  const liveManifests = new Map<string, string>();
  for (const s of kept) for (const f of await manifestsOf(s)) liveManifests.set(f.key, f.location);
  const deadManifests = new Map<string, { location: string; named: string }>();
  for (const s of expired) for (const f of await manifestsOf(s)) if (!liveManifests.has(f.key)) deadManifests.set(f.key, { location: f.location, named: `manifest list ${s['manifest-list']}` });
  const doomed = new Map<string, string>();
  if (deadManifests.size > 0) {
    const liveFiles = new Set<string>();
    // A DELETED entry (a compaction's replaced file) is read by no snapshot: it keeps nothing alive. @ref LLP 0078
    for (const location of liveManifests.values()) for (const f of await filesOf(location)) if (!f.deleted) liveFiles.add(f.key);
    for (const { location } of deadManifests.values()) for (const f of await filesOf(location)) if (!liveFiles.has(f.key)) doomed.set(f.key, f.named);
  }
  for (const [key, { named }] of deadManifests) doomed.set(key, named);
  for (const s of expired) {
    const key = store.keyOf(s['manifest-list'], where(s));
    if (!liveLists.has(key)) doomed.set(key, where(s));
  }
  return doomed;
}

/**
 * Every key version `v` (its metadata `m`) reaches: its snapshots' manifest
 * lists, the manifests they name and the data files those name, each mapped
 * by the table's one rule (LLP 0063).
 */
export async function reachable(store: TableStore, v: number, m: TableMetadata, signal: AbortSignal): Promise<Set<string>> {
  const keys = new Set<string>();
  const manifests = new Map<string, string>();
  for (const s of m.snapshots) {
    const where = `${store.describe(v)} (snapshot ${s['snapshot-id']})`;
    const listKey = store.keyOf(s['manifest-list'], where);
    if (keys.has(listKey)) continue;
    keys.add(listKey);
    const named = `manifest list ${s['manifest-list']}`;
    for (const f of decodeManifestList(await store.avro(s['manifest-list'], where, signal))) {
      const key = store.keyOf(f.manifestPath, named);
      if (!manifests.has(key)) manifests.set(key, f.manifestPath);
    }
  }
  for (const [key, location] of manifests) {
    keys.add(key);
    const named = `manifest ${location}`;
    for (const e of decodeManifest(await store.avro(location, named, signal)).entries) keys.add(store.keyOf(e.dataFile.filePath, named));
  }
  return keys;
}

/** A data file hypsink wrote: `<writer tag>-<since>-<until>-<digest>.parquet`. */
const DATA_FILE = /^([0-9a-f]{16})-(\d+)-(\d+)-[^/]*\.parquet$/;

/**
 * Orphan cleanup: files under the table's `data/` and `metadata/` that neither
 * the head nor the version the hint names reaches, and that are older than
 * `orphanMinAgeMs`, are removed; metadata versions and the hint never are.
 * Why that never removes a file a writer could still commit:
 * - manifests and manifest lists get a fresh name each attempt, and are
 *   committed within one commit's time of being written: while a writer
 *   commits them they are younger than the safety age;
 * - a data file's name is the unit's, and a unit's retry reuses a file an
 *   earlier attempt left (create-if-absent), however old: so a data file of a
 *   writer the head names is kept while its `since` is not below that
 *   writer's newest committed `until` (the only unit it can still commit is
 *   after its newest), and one of a writer the head does not name at all is
 *   kept (its first unit may still come);
 * - everything else a new version can reach was reached by the head read
 *   first (a commit carries its parent's manifests), or is new.
 * Keys come from the destination's listing under the table's own folder (a
 * sibling `events-old/` is not `events/`), and a key with an empty, `.` or
 * `..` name is never removed.
 * @ref LLP 0073, LLP 0063
 */
export async function removeOrphans(store: TableStore, destination: BlobDestination, cfg: Pick<IcebergConfig, 'orphanMinAgeMs'>, opts: { signal: AbortSignal; now: number }): Promise<string> {
  const { signal } = opts;
  const head = await store.head(signal);
  if (head === null) return 'no orphans';
  const live = await reachable(store, head.version, head.metadata, signal);
  const hinted = await store.hintedVersion(signal);
  if (hinted !== null && hinted !== head.version) {
    const m = await store.version(hinted, signal);
    if (m !== null) for (const k of await reachable(store, hinted, m, signal)) live.add(k);
  }
  // The newest committed `until` of each writer and partition; per writer tag, the lowest of them.
  const newest = new Map<string, bigint>();
  for (const s of head.metadata.snapshots) {
    const mark = markOf(s);
    if (mark === null) continue;
    const k = `${mark.writer}\n${mark.partition}`;
    const until = BigInt(mark.until);
    if ((newest.get(k) ?? -1n) < until) newest.set(k, until);
  }
  const floor = new Map<string, bigint>();
  for (const [k, until] of newest) {
    const tag = writerTag(k.slice(0, k.indexOf('\n')));
    const had = floor.get(tag);
    if (had === undefined || until < had) floor.set(tag, until);
  }
  const mayCommit = (name: string) => {
    const m = DATA_FILE.exec(name);
    if (m === null) return false;
    const f = floor.get(m[1]!);
    return f === undefined || BigInt(m[2]!) >= f;
  };
  const root = `${store.tableKey}/`;
  const hint = hintKey(store.tableKey);
  let removed = 0;
  let young = 0;
  for await (const b of destination.list!(root, { signal })) {
    const names = b.key.slice(root.length).split('/');
    if (!b.key.startsWith(root) || names.some((n) => n === '' || n === '.' || n === '..')) continue;
    if (names[0] !== 'data' && names[0] !== 'metadata') continue;
    if (b.key === hint || store.keepsVersion(b.key, head)) continue;
    if (live.has(b.key)) continue;
    if (names[0] === 'data' && mayCommit(names.at(-1)!)) continue;
    // Without a time in the listing its age is unknown: it may be a commit's on its way.
    if (b.modifiedMs === undefined || opts.now - b.modifiedMs < cfg.orphanMinAgeMs) {
      young++;
      continue;
    }
    await destination.remove!(b.key, { signal }).catch((e: unknown) => {
      throw namedIn(e, `orphan cleanup of ${destination.describe(root)}; it stopped there`);
    });
    removed++;
  }
  return `${removed} orphan file(s) removed${young > 0 ? `, ${young} younger than ${cfg.orphanMinAgeMs} ms kept` : ''}`;
}
