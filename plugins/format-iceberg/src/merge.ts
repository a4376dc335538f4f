/**
 * Manifest merging on commit, so that a commit reads and writes a bounded
 * amount whatever the number of units the table holds: the parent's manifests
 * smaller than the target size are merged, in bins of at most the target size,
 * once there are `min-count-to-merge` of them (this unit's own counted); those
 * at the target size are carried on as they are. This unit's own manifest is
 * never merged in its own commit, so every unit's manifest is listed by its
 * own snapshot. Entries carried into a merged manifest keep the snapshot id
 * and the sequence numbers they were committed with, written out (no longer
 * inherited), as EXISTING; DELETED entries are dropped (they speak only for
 * the snapshot that deleted the file). A parent's data manifest with no live
 * entry (a compaction's leftovers, LLP 0078) is not carried at all, merge or
 * no merge: otherwise one at the target size would be listed forever.
 * @ref LLP 0072, LLP 0084
 */
import { randomUUID } from 'node:crypto';
import type { BlobDestination } from 'hypsink/plugin';
import { decodeManifest, encodeManifest, type ManifestEntry, type ManifestFile, manifestFileOf, type PartitionField } from './avro.js';
import type { IcebergSchema, PartitionSpec } from './schema.js';
import type { TableMetadata, TableStore } from './table.js';

/** The merge rule's settings: Iceberg's own table properties, then the sink's writerConfig. */
export interface MergeRule {
  readonly enabled: boolean;
  readonly minCountToMerge: number;
  readonly targetBytes: number;
}

/** Iceberg's names for the merge settings, honoured when the table's properties set them (another engine's writer reads them too). */
const PROPERTY = { enabled: 'commit.manifest-merge.enabled', minCount: 'commit.manifest.min-count-to-merge', target: 'commit.manifest.target-size-bytes' } as const;

export function mergeRule(m: TableMetadata, cfg: { manifestMerge: boolean; manifestMinCountToMerge: number; manifestTargetBytes: number }): MergeRule {
  const p = m.properties ?? {};
  const int = (k: string, dflt: number) => {
    const n = p[k] === undefined ? Number.NaN : Number(p[k]);
    return Number.isSafeInteger(n) && n > 0 ? n : dflt;
  };
  const on = p[PROPERTY.enabled];
  return {
    enabled: on === undefined ? cfg.manifestMerge : on.trim().toLowerCase() !== 'false',
    minCountToMerge: int(PROPERTY.minCount, cfg.manifestMinCountToMerge),
    targetBytes: int(PROPERTY.target, cfg.manifestTargetBytes),
  };
}

/** What one commit lists before its own manifest, and what it wrote to get there. */
export interface Merged {
  readonly manifests: ManifestFile[];
  /** The merged manifests' keys, written by this attempt. */
  readonly written: readonly string[];
  /** How many of the parent's manifests were read and merged away. */
  readonly read: number;
}

export interface MergeInput {
  readonly store: TableStore;
  readonly destination: BlobDestination & Required<Pick<BlobDestination, 'locate'>>;
  readonly rule: MergeRule;
  /** The parent snapshot's manifests, each already checked to lie under the table (LLP 0063). */
  readonly base: readonly ManifestFile[];
  /** Where the parent's list is, for messages. */
  readonly listLocation: string;
  readonly schema: IcebergSchema;
  readonly spec: PartitionSpec;
  readonly fields: readonly PartitionField[];
  readonly snapshotId: number;
  readonly sequenceNumber: number;
  readonly signal: AbortSignal;
}

/**
 * The manifests the new snapshot carries over from its parent: merged by the
 * rule when enough small ones have gathered, else the parent's as they are.
 * Only data manifests of the current spec merge (one spec per manifest).
 */
export async function carryOver(x: MergeInput): Promise<Merged> {
  const { rule } = x;
  const base = x.base.filter(carried);
  const small = (f: ManifestFile) => f.content === 0 && f.partitionSpecId === x.spec['spec-id'] && f.manifestLength < rule.targetBytes;
  const candidates = base.filter(small);
  // This unit's own manifest counts towards the threshold, as in Iceberg's writers, though it is not merged itself.
  if (!rule.enabled || candidates.length + 1 < rule.minCountToMerge) return { manifests: [...base], written: [], read: 0 };
  // Bins of consecutive small manifests up to the target size: a bin of one is carried on unread.
  const bins: ManifestFile[][] = [];
  let bin: ManifestFile[] = [];
  let size = 0;
  for (const f of candidates) {
    if (bin.length > 0 && size + f.manifestLength > rule.targetBytes) {
      bins.push(bin);
      bin = [];
      size = 0;
    }
    bin.push(f);
    size += f.manifestLength;
  }
  if (bin.length > 0) bins.push(bin);
  const replaced = new Map<ManifestFile, ManifestFile | null>();
  const written: string[] = [];
  let read = 0;
  for (const b of bins) {
    if (b.length < 2) continue;
    const entries: ManifestEntry[] = [];
    for (const f of b) {
      entries.push(...(await liveEntries(x.store, f, x.listLocation, x.signal)));
      read += 1;
    }
    // Only DELETED entries (a replace's leftovers): nothing is live there, so no manifest takes their place.
    if (entries.length === 0) {
      for (const f of b) replaced.set(f, null);
      continue;
    }
    const bytes = encodeManifest({
      schemaJson: JSON.stringify(x.schema),
      schemaId: x.schema['schema-id'],
      specId: x.spec['spec-id'],
      partitionFields: x.fields,
      partitionSpecJson: JSON.stringify(x.spec.fields),
      entries,
    });
    // Named afresh each attempt, as every file a commit writes: it depends on the head it was merged from.
    const key = `${x.store.tableKey}/metadata/${randomUUID()}-m1.avro`;
    await x.destination.putIfAbsent(key, once(bytes), { contentType: 'application/avro', signal: x.signal, exclusive: true });
    written.push(key);
    const merged = manifestFileOf({
      manifestPath: x.destination.locate(key),
      manifestLength: bytes.length,
      specId: x.spec['spec-id'],
      snapshotId: x.snapshotId,
      sequenceNumber: x.sequenceNumber,
      partitionFields: x.fields,
      entries,
    });
    replaced.set(b[0]!, merged);
    for (const f of b.slice(1)) replaced.set(f, null);
  }
  // The parent's order kept, each merged manifest where its first input was.
  const manifests: ManifestFile[] = [];
  for (const f of base) {
    const r = replaced.get(f);
    if (r === undefined) manifests.push(f);
    else if (r !== null) manifests.push(r);
  }
  return { manifests, written, read };
}

/**
 * Whether a parent's manifest goes into a later snapshot's list: not a data
 * manifest whose every entry is DELETED (its counts say so, unread). Its
 * deletes were the snapshot's that wrote it, which still lists it; a later
 * list names the table's live files, and no reader or expiry needs a DELETED
 * entry there (Iceberg's writers drop these manifests likewise).
 * @ref LLP 0084
 */
export function carried(f: ManifestFile): boolean {
  return f.content !== 0 || f.addedFilesCount + f.existingFilesCount > 0;
}

/**
 * A parent manifest's live entries as EXISTING, each with the snapshot id and
 * sequence numbers it was committed with: a null one is inherited from the
 * manifest list's entry (the spec's inheritance), then written out, since the
 * manifest they are written into names another commit. Shared by the merge
 * and compaction's rewrite of a manifest (LLP 0078).
 */
export async function liveEntries(store: TableStore, f: ManifestFile, listLocation: string, signal: AbortSignal): Promise<ManifestEntry[]> {
  const named = `manifest list ${listLocation}`;
  const { entries } = decodeManifest(await store.avro(f.manifestPath, named, signal));
  const out: ManifestEntry[] = [];
  for (const e of entries) {
    if (e.status === 2) continue;
    // Every data file a rewritten manifest will name must be the table's own, as every manifest's (LLP 0063).
    store.keyOf(e.dataFile.filePath, `manifest ${f.manifestPath}`);
    out.push({
      status: 0,
      snapshotId: e.snapshotId ?? f.addedSnapshotId,
      sequenceNumber: e.sequenceNumber ?? f.sequenceNumber,
      fileSequenceNumber: e.fileSequenceNumber ?? f.sequenceNumber,
      dataFile: e.dataFile,
    });
  }
  return out;
}

function once(bytes: Uint8Array): AsyncIterable<Uint8Array> {
  return (async function* () {
    yield bytes;
  })();
}
