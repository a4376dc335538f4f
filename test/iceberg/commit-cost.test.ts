/**
 * Commit cost independent of history (issue 31): 1,000 one-row units (5,000
 * in `npm run test:soak`) to one table through the host API in one process, a
 * tick of 100 units at a time,
 * snapshots expired every 500 units (as `maintain --tables` does on the
 * daemon's schedule: what bounds the snapshot log, LLP 0072), and, from the
 * files on disk (not from anything the writer says of itself), what each
 * commit read and wrote, taken after each tick, before an expiry removes the
 * lists: the parent's manifest list and the manifests it merged away (read),
 * its own manifest list and the manifests it wrote (written). Flat from the
 * first fifth of the units to the last, as structural counts (bytes, entries),
 * never time: the commit latency over 5,000 units is the bench's (`iceberg`
 * group, `iceberg_commit_history_ratio`). Merged manifests keep every entry's
 * snapshot id and sequence numbers; icebird reads every row once, before and
 * after the last expiry. Data file compaction is off: it rewrites the units'
 * files, which compact.test.ts proves.
 * @ref LLP 0072, LLP 0083
 */
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'node:test';
import { decodeManifest, decodeManifestList, type ManifestFile } from '../../plugins/format-iceberg/src/avro.js';
import { encodeManifest, type ManifestEntry, manifestFileOf, type PartitionField } from '../../plugins/format-iceberg/src/avro.js';
import { carryOver, mergeRule } from '../../plugins/format-iceberg/src/merge.js';
import { TableStore, type TableMetadata } from '../../plugins/format-iceberg/src/table.js';
import { localFs } from '../support/local-fs.js';
import { eventLines, ingestText, type Json, openKernel, sampleConfig, writeConfig } from '../support/kernel.js';
import { avroFilesOf, checkAvroFiles, fileRoute, readIcebergTable, serveDir } from '../support/iceberg.js';
import { tempDir } from '../support/tmp.js';

/**
 * 1,000 in `npm test`; `npm run test:soak` runs 5,000 (the figure: ~4 min of CPU, too long for CI, LLP 0083).
 * Whole ticks, at least two expiries apart, so the windows compared hold units on both sides of expiries.
 */
const UNITS = Number(process.env.HYPSINK_COMMIT_COST_UNITS ?? 1000);
if (!Number.isInteger(UNITS) || UNITS < 1000 || UNITS % 500 !== 0) throw new Error(`HYPSINK_COMMIT_COST_UNITS=${process.env.HYPSINK_COMMIT_COST_UNITS}: a multiple of 500, at least 1000`);
/** The first and the last units compared: a fifth each. */
const WINDOW = UNITS / 5;
/** Units a tick (one ingest, one export). */
const TICK = 100;
/** Snapshots expired after every this many units. */
const EXPIRE_EVERY = 500;

interface Snap {
  'snapshot-id': number;
  'parent-snapshot-id'?: number;
  'sequence-number': number;
  'manifest-list': string;
  summary: Record<string, string>;
}

const pathOf = (location: string) => fileURLToPath(location);

async function setup(writerConfig: Json) {
  const dir = tempDir('hypsink-iceberg-cost-');
  const c = sampleConfig();
  delete (c.sinks as Record<string, unknown>).archive;
  c.sinks.lake = { writer: '@hypsink/format-iceberg', destination: '@hypsink/local-fs', datasets: ['events'], config: { dir: 'lake' }, unit: { maxRows: 1 }, writerConfig };
  return { dir, config: await writeConfig(dir, c), table: join(dir, 'lake', 'events') };
}

function head(table: string): { snapshots: Snap[] } {
  const v = Math.max(...readdirSync(join(table, 'metadata')).flatMap((n) => /^v(\d+)\.metadata\.json$/.exec(n)?.[1] ?? []).map(Number));
  return JSON.parse(readFileSync(join(table, 'metadata', `v${v}.metadata.json`), 'utf8'));
}

async function readIds(dir: string, table: string): Promise<number[]> {
  const srv = await serveDir(dir);
  try {
    const { rows } = await readIcebergTable({ tableUrl: `file://${table}`, route: fileRoute(dir, srv.url) });
    return rows.map((r) => Number(r.id)).sort((a, b) => a - b);
  } finally {
    await srv.close();
  }
}

const maxOf = (xs: readonly number[]) => Math.max(...xs);

// A one-row unit costs ~35-50 ms of CPU through the kernel (LLP 0083); 5,000 timed out at 15 min under load
// average 15-20. The bound is a hang guard, not a speed claim (nothing here is timed).
test(`${UNITS} one-row units: manifest list, bytes and manifests read and written per commit flat from the first ${WINDOW} units to the last; every row once, sequence numbers kept through merges and expiry`, { timeout: UNITS * 480 }, async () => {
  // A small target manifest size, so the test's history crosses it many times (the default, 8 MiB, is Iceberg's).
  const s = await setup({ manifestTargetBytes: 16_384, manifestMinCountToMerge: 50, maxSnapshotAgeMs: 1, minSnapshotsToKeep: 1, compact: false });
  const snaps: Snap[] = [];
  const lists = new Map<number, { bytes: number; manifests: ManifestFile[] }>();
  const { k } = await openKernel(s.config);
  try {
    for (let done = 0; done < UNITS; done += TICK) {
      const r = await ingestText(k, 'web', eventLines(done + 1, TICK));
      assert.equal(r.rejected, 0);
      const e = await k.export('lake');
      for (const p of e[0]!.partitions) assert.equal(p.error, null, JSON.stringify(p.error));
      assert.equal(e[0]!.units, TICK, `a tick shipped ${e[0]!.units} units after ${done}`);
      // This tick's snapshots and their lists, read now: an expiry removes them.
      const seen = snaps.at(-1)?.['sequence-number'] ?? 0;
      const fresh = head(s.table).snapshots.filter((x) => x['sequence-number'] > seen).sort((a, b) => a['sequence-number'] - b['sequence-number']);
      assert.equal(fresh.length, TICK, `${fresh.length} snapshots for a tick of ${TICK} units after ${done}`);
      for (const x of fresh) {
        const bytes = readFileSync(pathOf(x['manifest-list']));
        lists.set(x['snapshot-id'], { bytes: bytes.length, manifests: decodeManifestList(bytes) });
        snaps.push(x);
      }
      if ((done + TICK) % EXPIRE_EVERY === 0 && done + TICK < UNITS) {
        const m = await k.maintain({ tables: true });
        assert.match(m.tables[0]!.done, /snapshot\(s\) expired/);
      }
    }
  } finally {
    await k.close();
  }

  assert.deepEqual(snaps.map((x) => x['sequence-number']), Array.from({ length: UNITS }, (_, i) => i + 1), 'one snapshot a unit, in order');
  // Per commit, from disk: read = the parent's list and each manifest it no longer lists; written = its list and each manifest it added.
  const cost = snaps.map((x) => {
    const mine = lists.get(x['snapshot-id'])!;
    const parent = x['parent-snapshot-id'] === undefined ? undefined : lists.get(x['parent-snapshot-id']);
    if (x['sequence-number'] > 1) assert.ok(parent, `snapshot ${x['snapshot-id']}: its parent's list was not read`);
    const now = new Set(mine.manifests.map((m) => m.manifestPath));
    const dropped = (parent?.manifests ?? []).filter((m) => !now.has(m.manifestPath));
    const added = mine.manifests.filter((m) => m.addedSnapshotId === x['snapshot-id']);
    return {
      listBytes: mine.bytes,
      listEntries: mine.manifests.length,
      readBytes: (parent?.bytes ?? 0) + dropped.reduce((a, m) => a + m.manifestLength, 0),
      manifestsRead: dropped.length,
      writtenBytes: mine.bytes + added.reduce((a, m) => a + m.manifestLength, 0),
    };
  });
  const first = cost.slice(0, WINDOW);
  const last = cost.slice(-WINDOW);
  for (const k of ['listBytes', 'listEntries', 'readBytes', 'manifestsRead', 'writtenBytes'] as const) {
    const a = maxOf(first.map((c) => c[k]));
    const b = maxOf(last.map((c) => c[k]));
    assert.ok(b <= 1.5 * a, `${k}: at most ${b} per commit over the last ${WINDOW} units against ${a} over the first ${WINDOW}: it grows with history`);
  }
  // Manifests were merged (some commit read manifests), and the table's manifests now hold many units each.
  assert.ok(maxOf(cost.map((c) => c.manifestsRead)) > 0, 'no commit merged manifests');
  const current = lists.get(snaps.at(-1)!['snapshot-id'])!.manifests;
  assert.ok(current.length < UNITS / 5, `the current snapshot lists ${current.length} manifests for ${UNITS} units`);

  // Every data file once in the current snapshot, with the snapshot id and sequence number of the commit that added it.
  const addedBy = new Map<string, Snap>();
  for (const x of snaps) addedBy.set(`${x.summary['hypsink.since']}-${x.summary['hypsink.until']}-`, x);
  const seen = new Set<string>();
  for (const mf of current) {
    const { entries } = decodeManifest(readFileSync(pathOf(mf.manifestPath)));
    for (const e of entries) {
      assert.notEqual(e.status, 2, 'a DELETED entry in an append-only table');
      const path = e.dataFile.filePath;
      assert.ok(!seen.has(path), `${path} listed twice`);
      seen.add(path);
      const range = /-(\d+-\d+-)u1-[^/]*\.parquet$/.exec(path)?.[1];
      const by = range === undefined ? undefined : addedBy.get(range);
      assert.ok(by, `${path}: no snapshot of its range`);
      assert.equal(e.snapshotId ?? mf.addedSnapshotId, by['snapshot-id'], `${path}: snapshot id`);
      assert.equal(e.sequenceNumber ?? mf.sequenceNumber, by['sequence-number'], `${path}: data sequence number`);
      assert.equal(e.fileSequenceNumber ?? mf.sequenceNumber, by['sequence-number'], `${path}: file sequence number`);
      if (mf.addedSnapshotId !== by['snapshot-id']) assert.equal(e.status, 0, `${path}: carried into a merged manifest, it is EXISTING`);
    }
  }
  assert.equal(seen.size, UNITS);
  const all = Array.from({ length: UNITS }, (_, i) => i + 1);
  assert.deepEqual(await readIds(s.dir, s.table), all);

  // Expiry: the older snapshots go, with the manifests only they listed; every data file a merged manifest holds stays.
  const { k: k2 } = await openKernel(s.config);
  try {
    const r = await k2.maintain({ tables: true });
    assert.match(r.tables[0]!.done, /snapshot\(s\) expired/);
  } finally {
    await k2.close();
  }
  assert.ok(head(s.table).snapshots.length < 5);
  for (const path of seen) assert.ok(existsSync(pathOf(path)) && statSync(pathOf(path)).size > 0, `${path} removed by expiry though live`);
  assert.deepEqual(await readIds(s.dir, s.table), all);
  // Merged manifests too: column_sizes and nan_value_counts decode with avsc as maps, never null (pyiceberg's inspect.entries() needs maps).
  const { manifests } = await checkAvroFiles(await avroFilesOf(s.table));
  const merged = manifests.filter((m) => m.entries.some((e) => e.status === 0));
  assert.ok(merged.length > 0, 'no merged manifest left to check');
  for (const m of manifests) {
    for (const e of m.entries) {
      const d = e.data_file as unknown as Record<string, unknown>;
      assert.ok(Array.isArray(d.column_sizes) && Array.isArray(d.nan_value_counts), `${m.name}: column_sizes ${JSON.stringify(d.column_sizes)}, nan_value_counts ${JSON.stringify(d.nan_value_counts)}`);
    }
  }
});

test("the merge settings: the sink's writerConfig, unless the table's properties set Iceberg's own names", () => {
  const cfg = { manifestMerge: true, manifestMinCountToMerge: 100, manifestTargetBytes: 8 << 20 };
  const table = (properties: Record<string, string>) => ({ properties }) as unknown as TableMetadata;
  assert.deepEqual(mergeRule(table({}), cfg), { enabled: true, minCountToMerge: 100, targetBytes: 8 << 20 });
  assert.deepEqual(
    mergeRule(table({ 'commit.manifest-merge.enabled': 'FALSE', 'commit.manifest.min-count-to-merge': '7', 'commit.manifest.target-size-bytes': '4096' }), cfg),
    { enabled: false, minCountToMerge: 7, targetBytes: 4096 },
  );
  // A value that is no count is not taken: the sink's setting holds.
  assert.deepEqual(mergeRule(table({ 'commit.manifest.min-count-to-merge': 'many', 'commit.manifest.target-size-bytes': '-1' }), cfg), { enabled: true, minCountToMerge: 100, targetBytes: 8 << 20 });
});

test('carryOver: EXISTING entries keep the inherited snapshot id and sequence numbers, DELETED ones are dropped, a bin left with nothing is no manifest, below the count nothing is read', async () => {
  const dir = tempDir('hypsink-iceberg-merge-');
  const dest = localFs(dir);
  const store = new TableStore('t', dest, 'lake', { debug() {}, info() {}, warn() {}, error() {} } as never);
  const schema = { type: 'struct', 'schema-id': 0, fields: [{ id: 1, name: 'source', required: true, type: 'string' }] } as const;
  const spec = { 'spec-id': 0, fields: [{ 'source-id': 1, 'field-id': 1000, name: 'source', transform: 'identity' }] } as const;
  const fields: PartitionField[] = [{ name: 'source', fieldId: 1000, type: 'string' }];
  const file = (n: string) => ({ filePath: dest.locate!(`t/data/${n}.parquet`), partition: { source: 'a' }, recordCount: 1, fileSizeInBytes: 10, valueCounts: new Map(), nullValueCounts: new Map(), lowerBounds: new Map(), upperBounds: new Map() });
  // Four manifests as four earlier commits wrote them (sequence numbers 1-4); the last two only delete.
  const base: ManifestFile[] = [];
  const written: [number, ManifestEntry[]][] = [
    [1, [{ status: 1, snapshotId: null, sequenceNumber: null, fileSequenceNumber: null, dataFile: file('a') }]],
    [2, [{ status: 1, snapshotId: null, sequenceNumber: null, fileSequenceNumber: null, dataFile: file('b') }, { status: 2, snapshotId: 2, sequenceNumber: 1, fileSequenceNumber: 1, dataFile: file('a0') }]],
    [3, [{ status: 2, snapshotId: 3, sequenceNumber: 2, fileSequenceNumber: 2, dataFile: file('b0') }]],
    [4, [{ status: 2, snapshotId: 4, sequenceNumber: 2, fileSequenceNumber: 2, dataFile: file('c0') }]],
  ];
  for (const [seq, entries] of written) {
    const bytes = encodeManifest({ schemaJson: JSON.stringify(schema), schemaId: 0, specId: 0, partitionFields: fields, partitionSpecJson: JSON.stringify(spec.fields), entries });
    const key = `t/metadata/m${seq}.avro`;
    await dest.putIfAbsent(key, (async function* () { yield bytes; })(), { contentType: 'application/avro', signal: AbortSignal.timeout(10_000), exclusive: true });
    base.push(manifestFileOf({ manifestPath: dest.locate!(key), manifestLength: bytes.length, specId: 0, snapshotId: 100 + seq, sequenceNumber: seq, partitionFields: fields, entries }));
  }
  const input = (minCountToMerge: number, targetBytes = 1 << 20) => ({
    store, destination: dest as never, rule: { enabled: true, minCountToMerge, targetBytes }, base, listLocation: 'the parent list',
    schema: schema as never, spec: spec as never, fields, snapshotId: 200, sequenceNumber: 9, signal: AbortSignal.timeout(10_000),
  });
  // Below the count (4 small and this unit's own make 5): carried as they are, nothing read.
  const none = await carryOver(input(6));
  assert.deepEqual({ read: none.read, written: none.written.length, paths: none.manifests.map((m) => m.manifestPath) }, { read: 0, written: 0, paths: base.map((m) => m.manifestPath) });
  // Manifests already at the target size are never merged.
  const full = await carryOver(input(2, 1));
  assert.equal(full.read, 0);
  const got = await carryOver(input(5));
  assert.equal(got.read, 4);
  assert.equal(got.manifests.length, 1, 'one merged manifest');
  const mf = got.manifests[0]!;
  assert.deepEqual([mf.addedSnapshotId, mf.sequenceNumber, mf.minSequenceNumber, mf.addedFilesCount, mf.existingFilesCount, mf.deletedFilesCount], [200, 9, 1, 0, 2, 0]);
  const { entries } = decodeManifest(readFileSync(pathOf(mf.manifestPath)));
  assert.deepEqual(
    entries.map((e) => [e.dataFile.filePath.replace(/.*\//, ''), e.status, e.snapshotId, e.sequenceNumber, e.fileSequenceNumber]),
    [['a.parquet', 0, 101, 1, 1], ['b.parquet', 0, 102, 2, 2]],
  );
  // A bin whose entries are all DELETED leaves no manifest.
  const onlyDeletes = await carryOver({ ...input(2), base: base.slice(2) });
  assert.deepEqual([onlyDeletes.read, onlyDeletes.manifests.length, onlyDeletes.written.length], [2, 0, 0]);
});
