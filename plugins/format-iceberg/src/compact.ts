/**
 * Data file compaction (`hypsink maintain --tables`): in each partition, the
 * data files below the target size, once there are enough of them, are
 * rewritten into files of about the target size and committed as one Iceberg
 * `replace` snapshot, by the table's one commit rule (create `v<N+1>` if
 * absent), alongside live writers.
 *
 * The conflict rule: a replace commit is built on the head it creates the next
 * version of, and only when every file it removes is live in that head's
 * current snapshot. A lost race re-reads the head and checks again: a
 * rewritten file whose inputs are all still live is committed on the new
 * head (appends committed meanwhile carried on untouched); one with an input
 * no longer live (another maintainer compacted it) is dropped from the commit
 * and left an orphan. So a row is removed only together with the file that
 * holds it again, in the same version, and only from a snapshot where it was
 * live once: never lost, never twice.
 * @ref LLP 0078, LLP 0051 (the commit), LLP 0072 (manifests)
 */
import { randomUUID } from 'node:crypto';
import { Field, makeData, RecordBatch, Schema, Struct, tableFromIPC } from 'apache-arrow';
import type { BlobDestination, ColumnType } from 'hypsink/plugin';
import { HypsinkError } from 'hypsink/plugin';
import { type DataFile, decodeManifestList, encodeManifest, encodeManifestList, type ManifestEntry, type ManifestFile, manifestFileOf, type PartitionField } from './avro.js';
import { compareBytes, type DataFilePlan, parquet } from './datafile.js';
import { carried, liveEntries } from './merge.js';
import type { IcebergSchema, IcebergType, PartitionSpec } from './schema.js';
import { summaryOf } from './summary.js';
import { currentSchema, currentSnapshot, currentSpec, type Head, namedIn, nextVersion, type Snapshot, type TableStore } from './table.js';

/** Compaction's settings: Iceberg's table property for the target size wins over the sink's writerConfig. */
export interface CompactRule {
  readonly targetBytes: number;
  readonly minFiles: number;
}

/** Iceberg's name for the data file size its writers aim at. */
const TARGET_PROPERTY = 'write.target-file-size-bytes';

export function compactRule(m: { properties?: Readonly<Record<string, string>> }, cfg: { compactTargetBytes: number; compactMinFiles: number }): CompactRule {
  const n = Number(m.properties?.[TARGET_PROPERTY] ?? Number.NaN);
  return { targetBytes: Number.isSafeInteger(n) && n > 0 ? n : cfg.compactTargetBytes, minFiles: cfg.compactMinFiles };
}

export interface CompactInput {
  readonly store: TableStore;
  readonly destination: BlobDestination & Required<Pick<BlobDestination, 'get' | 'locate'>>;
  readonly cfg: { compactTargetBytes: number; compactMinFiles: number; commitAttempts: number; compression: DataFilePlan['compression']; rowGroupRows: number };
  readonly signal: AbortSignal;
  readonly fault: (point: string) => void;
  /** A fresh snapshot id (the writer's rule). */
  readonly snapshotId: () => number;
  readonly partitionFields: (spec: PartitionSpec) => PartitionField[];
}

/** The current snapshot's data manifests, each with its live entries (snapshot ids and sequence numbers written out). */
interface Live {
  readonly parent: Snapshot;
  readonly manifests: readonly { readonly file: ManifestFile; readonly entries: readonly ManifestEntry[] | null }[];
}

async function liveOf(store: TableStore, head: Head, spec: PartitionSpec, signal: AbortSignal): Promise<Live | null> {
  const parent = currentSnapshot(head.metadata);
  if (parent === undefined) return null;
  const list = parent['manifest-list'];
  const files = decodeManifestList(await store.avro(list, `${store.describe(head.version)} (snapshot ${parent['snapshot-id']})`, signal));
  const manifests = [];
  for (const file of files) {
    store.keyOf(file.manifestPath, `manifest list ${list}`);
    if (!carried(file)) continue; // an earlier compaction's leftovers: not read, not listed again @ref LLP 0084
    // Delete manifests and manifests of another spec are carried on unread: nothing in them is compacted.
    const mine = file.content === 0 && file.partitionSpecId === spec['spec-id'];
    manifests.push({ file, entries: mine ? await liveEntries(store, file, list, signal) : null });
  }
  return { parent, manifests };
}

/** `liveOf`, or 'moved' when a file it read was removed by a newer version's expiry meanwhile: a lost race, not damage. @ref LLP 0078 */
async function liveAt(store: TableStore, head: Head, spec: PartitionSpec, signal: AbortSignal): Promise<Live | null | 'moved'> {
  try {
    return await liveOf(store, head, spec, signal);
  } catch (e) {
    if (await store.movedPast(e, head.version, signal)) return 'moved';
    throw e;
  }
}

/** One rewritten file: its inputs (live entries of one partition) and, once written, the file. */
interface Rewrite {
  readonly inputs: readonly ManifestEntry[];
  readonly key: string;
  file?: DataFile;
}

/**
 * The bins to rewrite: per partition (and per set of columns, so one file has
 * one shape), the files below the target size once there are `minFiles` of
 * them, packed oldest first into bins of at most the target size; a bin of one
 * file is left as it is.
 */
function plan(store: TableStore, live: Live, rule: CompactRule): Rewrite[] {
  const groups = new Map<string, ManifestEntry[]>();
  for (const m of live.manifests) {
    for (const e of m.entries ?? []) {
      if (e.dataFile.fileSizeInBytes >= rule.targetBytes) continue;
      const k = JSON.stringify([e.dataFile.partition, [...e.dataFile.valueCounts.keys()].sort((a, b) => a - b)]);
      groups.set(k, [...(groups.get(k) ?? []), e]);
    }
  }
  const out: Rewrite[] = [];
  for (const small of groups.values()) {
    if (small.length < rule.minFiles) continue;
    small.sort((a, b) => (a.sequenceNumber ?? 0) - (b.sequenceNumber ?? 0) || (a.dataFile.filePath < b.dataFile.filePath ? -1 : 1));
    const bins: ManifestEntry[][] = [];
    let bin: ManifestEntry[] = [];
    let size = 0;
    for (const e of small) {
      if (bin.length > 0 && size + e.dataFile.fileSizeInBytes > rule.targetBytes) {
        bins.push(bin);
        bin = [];
        size = 0;
      }
      bin.push(e);
      size += e.dataFile.fileSizeInBytes;
    }
    bins.push(bin);
    for (const inputs of bins) {
      if (inputs.length < 2) continue;
      const first = store.keyOf(inputs[0]!.dataFile.filePath, `table ${store.tableKey}`);
      // Beside its inputs (their partition's folder), by a name no writer's unit has (LLP 0073's orphan rule keeps those).
      out.push({ inputs, key: `${first.slice(0, first.lastIndexOf('/'))}/compact-${randomUUID()}.parquet` });
    }
  }
  return out;
}

const COLUMN_TYPES: Record<IcebergType, ColumnType> = { long: 'INT64', double: 'DOUBLE', string: 'STRING', boolean: 'BOOLEAN', timestamptz: 'TIMESTAMP' };

/**
 * The rows of `inputs`, file by file, in one shape: the first file's column
 * order, each column nullable unless the table's current schema requires it
 * (a schema only ever relaxes a column, so that takes every older file's
 * values), the field ids kept. Counted against the manifests' record counts.
 */
async function* rowsOf(x: CompactInput, schema: IcebergSchema, r: Rewrite): AsyncIterable<RecordBatch> {
  let shape: Schema | null = null;
  let ids: number[] = [];
  let rows = 0;
  for (const e of r.inputs) {
    const named = `compaction of ${x.store.tableKey}`;
    const key = x.store.keyOf(e.dataFile.filePath, named);
    const bytes = await x.destination.get(key, { signal: x.signal }).catch((err: unknown) => {
      throw namedIn(err, named);
    });
    if (bytes === null) {
      throw new Gone(new HypsinkError('HYPSINK_ERR_DESTINATION', `iceberg: ${x.destination.describe(key)}, a live data file of table ${x.store.tableKey}, is not there; the table is damaged: restore it (nothing was compacted)`));
    }
    // Imported here, not with the plugin: only compaction decodes a data file. @ref LLP 0089
    const { readParquet } = await import('parquet-wasm/node');
    const table = tableFromIPC(readParquet(bytes).intoIPCStream());
    const idOf = (f: Field) => Number(f.metadata.get('PARQUET:field_id'));
    if (shape === null) {
      ids = table.schema.fields.map(idOf);
      shape = new Schema(
        table.schema.fields.map((f, j) => new Field(f.name, f.type, schema.fields.find((s) => s.id === ids[j])?.required !== true, f.metadata)),
      );
    }
    const at = ids.map((id) => table.schema.fields.findIndex((f) => idOf(f) === id));
    if (at.some((i) => i < 0) || table.schema.fields.length !== ids.length) {
      throw new HypsinkError('HYPSINK_ERR_DESTINATION', `iceberg: ${x.destination.describe(key)} has other columns than its manifest says (field ids ${table.schema.fields.map(idOf).join(', ')}, not ${ids.join(', ')}); nothing was compacted`);
    }
    const s = shape;
    for (const b of table.batches) {
      rows += b.numRows;
      yield new RecordBatch(s, makeData({ type: new Struct(s.fields), length: b.numRows, nullCount: 0, children: at.map((i) => b.data.children[i]!) }));
    }
  }
  const want = r.inputs.reduce((n, e) => n + e.dataFile.recordCount, 0);
  // Thrown inside the body: the put fails, no file is created under the key.
  if (rows !== want) throw new HypsinkError('HYPSINK_ERR_DESTINATION', `iceberg: the files compacted into ${r.key} hold ${rows} rows, their manifests say ${want}; nothing was compacted`);
}

/** A rewrite's input not there when read; damage only if the current snapshot still reads it. */
class Gone extends Error {
  constructor(readonly error: HypsinkError) {
    super(error.message);
  }
}

async function stillLive(x: CompactInput, r: Rewrite): Promise<boolean> {
  const head = await x.store.head(x.signal);
  const live = head === null ? null : await liveOf(x.store, head, currentSpec(head.metadata), x.signal);
  const files = new Set(live?.manifests.flatMap((m) => (m.entries ?? []).map((e) => e.dataFile.filePath)) ?? []);
  return r.inputs.every((e) => files.has(e.dataFile.filePath));
}

/** One file's statistics from its inputs': counts summed, bounds the widest (left out when an input with values has none). */
function mergedFile(schema: IcebergSchema, inputs: readonly ManifestEntry[], filePath: string, bytes: number): DataFile {
  const sum = (pick: (d: DataFile) => ReadonlyMap<number, number> | undefined) => {
    const out = new Map<number, number>();
    for (const e of inputs) for (const [id, n] of pick(e.dataFile) ?? []) out.set(id, (out.get(id) ?? 0) + n);
    return out;
  };
  const valueCounts = sum((d) => d.valueCounts);
  const nullValueCounts = sum((d) => d.nullValueCounts);
  const nanValueCounts = sum((d) => d.nanValueCounts);
  const bound = (upper: boolean) => {
    const out = new Map<number, Uint8Array>();
    for (const [id] of valueCounts) {
      const type = schema.fields.find((f) => f.id === id)?.type;
      if (type === undefined) continue;
      let best: Uint8Array | undefined;
      let whole = true;
      for (const { dataFile: d } of inputs) {
        const b = (upper ? d.upperBounds : d.lowerBounds).get(id);
        const values = (d.valueCounts.get(id) ?? 0) - (d.nullValueCounts.get(id) ?? 0) - (d.nanValueCounts?.get(id) ?? 0);
        if (b === undefined) {
          if (values > 0) whole = false;
          continue;
        }
        if (best === undefined || (upper ? compareBound(type, b, best) > 0 : compareBound(type, b, best) < 0)) best = b;
      }
      if (whole && best !== undefined) out.set(id, best);
    }
    return out;
  };
  return {
    filePath,
    partition: inputs[0]!.dataFile.partition,
    recordCount: inputs.reduce((n, e) => n + e.dataFile.recordCount, 0),
    fileSizeInBytes: bytes,
    valueCounts,
    nullValueCounts,
    nanValueCounts,
    lowerBounds: bound(false),
    upperBounds: bound(true),
  };
}

/** Two bounds of one type, in Iceberg's single-value serialization, compared as values. */
function compareBound(type: IcebergType, a: Uint8Array, b: Uint8Array): number {
  const view = (x: Uint8Array) => new DataView(x.buffer, x.byteOffset, x.byteLength);
  switch (type) {
    case 'long':
    case 'timestamptz': {
      const d = view(a).getBigInt64(0, true) - view(b).getBigInt64(0, true);
      return d < 0n ? -1 : d > 0n ? 1 : 0;
    }
    case 'double':
      return view(a).getFloat64(0, true) - view(b).getFloat64(0, true);
    case 'boolean':
      return a[0]! - b[0]!;
    case 'string':
      return compareBytes(a, b);
  }
}

function once(bytes: Uint8Array): AsyncIterable<Uint8Array> {
  return (async function* () {
    yield bytes;
  })();
}

/**
 * Compact one table: plan on the head, write the rewritten files, commit them
 * as a `replace` snapshot under the conflict rule above. Returns what it did.
 */
export async function compactTable(x: CompactInput): Promise<string> {
  const { store, destination, signal } = x;
  const where = `table ${store.tableKey}`;
  const first = await store.head(signal);
  if (first === null) return `${where}: nothing to compact`;
  const spec = currentSpec(first.metadata);
  const schema = currentSchema(first.metadata);
  const rule = compactRule(first.metadata, x.cfg);
  const planned = await liveAt(store, first, spec, signal);
  if (planned === 'moved') return `${where}: another maintainer expired files this run was reading; nothing compacted, run maintain again`;
  const rewrites = planned === null ? [] : plan(store, planned, rule);
  if (rewrites.length === 0) return `${where}: no partition has ${rule.minFiles} data files below ${rule.targetBytes} bytes, nothing compacted`;

  const columns = schema.fields.map((f) => ({ name: f.name, type: COLUMN_TYPES[f.type], nullable: !f.required }));
  for (const r of rewrites) {
    const body = parquet(rowsOf(x, schema, r), { schema, columns, compression: x.cfg.compression, rowGroupRows: x.cfg.rowGroupRows });
    try {
      const put = await destination.putIfAbsent(r.key, body, { contentType: 'application/vnd.apache.parquet', signal, exclusive: true });
      r.file = mergedFile(schema, r.inputs, destination.locate(r.key), put.bytes);
    } catch (e) {
      // An input gone while it was read: another maintainer compacted it and expired it. Not damage: this rewrite is dropped.
      if (!(e instanceof Gone) || (await stillLive(x, r))) throw e instanceof Gone ? e.error : e;
    }
  }
  const written = rewrites.filter((r) => r.file !== undefined);
  if (written.length === 0) return `${where}: another commit removed the files this compaction read (another maintainer?); nothing compacted`;
  x.fault('iceberg.afterCompactFiles');

  const fields = x.partitionFields(spec);
  const table = store.tableKey;
  const ours = new Set<number>();
  let head = first;
  let live = planned!;
  for (let attempt = 0; ; attempt++) {
    if (attempt > 0) {
      const h = await store.head(signal);
      if (h === null) throw new HypsinkError('HYPSINK_ERR_DESTINATION', `${where} vanished while its compaction was committed; run maintain again`);
      head = h;
      // A create whose answer was lost (a retried PUT that found its own version): committed already.
      const mine = head.metadata.snapshots.find((s) => ours.has(s['snapshot-id']));
      if (mine) {
        await store.hint(head.version, signal);
        return `${where}: compacted (snapshot ${mine['snapshot-id']})`;
      }
      if (currentSpec(head.metadata)['spec-id'] !== spec['spec-id']) return `${where}: its partition spec changed during compaction; nothing compacted, run maintain again`;
      const l = await liveAt(store, head, spec, signal);
      if (l === null) return `${where}: its current snapshot is gone; nothing compacted`;
      if (l === 'moved') {
        if (attempt + 1 >= x.cfg.commitAttempts) return `${where}: the table moved on under every compaction commit (${attempt + 1} in a row); nothing compacted, run maintain again`;
        continue;
      }
      live = l;
    }
    // The conflict rule: only rewrites whose every input is live in the snapshot this commit replaces.
    const liveFiles = new Set<string>();
    for (const m of live.manifests) for (const e of m.entries ?? []) liveFiles.add(store.keyOf(e.dataFile.filePath, where));
    const keep = written.filter((r) => r.inputs.every((e) => liveFiles.has(store.keyOf(e.dataFile.filePath, where))));
    if (keep.length === 0) return `${where}: another commit removed the files this compaction rewrote (another maintainer?); nothing compacted, its ${written.length} file(s) left to orphan cleanup`;
    const removed = new Set(keep.flatMap((r) => r.inputs.map((e) => store.keyOf(e.dataFile.filePath, where))));

    const m = head.metadata;
    const id = x.snapshotId();
    ours.add(id);
    const seq = m['last-sequence-number'] + 1;
    // Manifests naming a removed file are rewritten: it DELETED by this snapshot, the others EXISTING as they were committed.
    const manifests: ManifestFile[] = [];
    for (const { file, entries } of live.manifests) {
      if (entries === null || !entries.some((e) => removed.has(store.keyOf(e.dataFile.filePath, where)))) {
        manifests.push(file);
        continue;
      }
      const rewritten: ManifestEntry[] = entries.map((e) => (removed.has(store.keyOf(e.dataFile.filePath, where)) ? { ...e, status: 2, snapshotId: id } : e));
      manifests.push(await writeManifest(x, schema, spec, fields, rewritten, id, seq));
    }
    const added: ManifestEntry[] = keep.map((r) => ({ status: 1, snapshotId: null, sequenceNumber: null, fileSequenceNumber: null, dataFile: r.file! }));
    manifests.push(await writeManifest(x, schema, spec, fields, added, id, seq));
    const bytes = encodeManifestList({ snapshotId: id, parentSnapshotId: live.parent['snapshot-id'], sequenceNumber: seq, manifests });
    const listKey = `${table}/metadata/snap-${id}-${attempt + 1}-${randomUUID()}.avro`;
    await destination.putIfAbsent(listKey, once(bytes), { contentType: 'application/avro', signal, exclusive: true });

    const inputs = keep.flatMap((r) => r.inputs);
    const partitions = new Set(keep.map((r) => JSON.stringify(r.file!.partition))).size;
    const now = Date.now();
    const snapshot: Snapshot = {
      'snapshot-id': id,
      'parent-snapshot-id': live.parent['snapshot-id'],
      'sequence-number': seq,
      'timestamp-ms': now,
      'manifest-list': destination.locate(listKey),
      summary: {
        operation: 'replace',
        ...summaryOf(live.parent, {
          addedFiles: keep.length,
          addedRows: keep.reduce((n, r) => n + r.file!.recordCount, 0),
          addedBytes: keep.reduce((n, r) => n + r.file!.fileSizeInBytes, 0),
          deletedFiles: inputs.length,
          deletedRows: inputs.reduce((n, e) => n + e.dataFile.recordCount, 0),
          deletedBytes: inputs.reduce((n, e) => n + e.dataFile.fileSizeInBytes, 0),
          partitions,
        }),
      },
      'schema-id': schema['schema-id'],
    };
    const next = nextVersion(table, head, (k) => destination.locate(k), now, {
      'last-sequence-number': seq,
      'current-snapshot-id': id,
      refs: { ...m.refs, main: { 'snapshot-id': id, type: 'branch' } },
      snapshots: [...m.snapshots, snapshot],
      'snapshot-log': [...m['snapshot-log'], { 'timestamp-ms': now, 'snapshot-id': id }],
    });
    if (await store.commit(head.version + 1, next, signal)) {
      x.fault('iceberg.afterReplaceCommit');
      await store.hint(head.version + 1, signal);
      const dropped = rewrites.length - keep.length; // dropped before or at the commit: their inputs were compacted elsewhere
      return `${where}: ${inputs.length} data file(s) in ${partitions} partition(s) compacted into ${keep.length}${dropped > 0 ? ` (${dropped} rewrite(s) dropped: their files were compacted by another commit)` : ''}`;
    }
    if (attempt + 1 >= x.cfg.commitAttempts) return `${where}: every compaction commit lost to another writer (${attempt + 1} in a row); nothing compacted, run maintain again`;
    await store.backoff(attempt, signal);
  }
}

/** A manifest of `entries`, named afresh (it depends on the head this attempt builds on), and its list entry. */
async function writeManifest(x: CompactInput, schema: IcebergSchema, spec: PartitionSpec, fields: readonly PartitionField[], entries: readonly ManifestEntry[], id: number, seq: number): Promise<ManifestFile> {
  const bytes = encodeManifest({ schemaJson: JSON.stringify(schema), schemaId: schema['schema-id'], specId: spec['spec-id'], partitionFields: fields, partitionSpecJson: JSON.stringify(spec.fields), entries });
  const key = `${x.store.tableKey}/metadata/${randomUUID()}-m0.avro`;
  await x.destination.putIfAbsent(key, once(bytes), { contentType: 'application/avro', signal: x.signal, exclusive: true });
  return manifestFileOf({ manifestPath: x.destination.locate(key), manifestLength: bytes.length, specId: spec['spec-id'], snapshotId: id, sequenceNumber: seq, partitionFields: fields, entries });
}
