/**
 * Commit cost independent of history (issue 31): 1,000 one-row units (5,000
 * in `npm run test:soak`) to one table through the host API in one process, a
 * tick of 100 units at a time, `maintain --tables` every 500 units as the
 * daemon's schedule runs it (data files compacted, then snapshots expired:
 * what bounds the live files and the snapshot log, LLP 0072, LLP 0078), and,
 * from the files on disk (not from anything the writer says of itself), what
 * each unit's commit read and wrote, taken after each tick and each
 * maintenance, before an expiry removes the lists: the parent's manifest list
 * and the manifests it no longer lists (read), its own manifest list and the
 * manifests it wrote (written). Flat from the first fifth of the units to the
 * last, as structural counts (bytes, entries), never time: the commit latency
 * over 5,000 units is the bench's (`iceberg` group,
 * `iceberg_commit_history_ratio`). Merged manifests keep every entry's
 * snapshot id and sequence numbers; a compaction's leftover manifests (only
 * DELETED entries) are listed by no later snapshot (LLP 0084); icebird reads
 * every row once, before and after the last maintenance.
 * @ref LLP 0072, LLP 0083, LLP 0084
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
 * Whole ticks, at least two maintenances apart, so the windows compared hold units on both sides of them.
 */
const UNITS = Number(process.env.HYPSINK_COMMIT_COST_UNITS ?? 1000);
if (!Number.isInteger(UNITS) || UNITS < 1000 || UNITS % 500 !== 0) throw new Error(`HYPSINK_COMMIT_COST_UNITS=${process.env.HYPSINK_COMMIT_COST_UNITS}: a multiple of 500, at least 1000`);
/** The first and the last units compared: a fifth each. */
const WINDOW = UNITS / 5;
/** Units a tick (one ingest, one export). */
const TICK = 100;
/** `maintain --tables` (compaction, expiry) after every this many units. */
const MAINTAIN_EVERY = 500;

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

function head(table: string): { snapshots: Snap[]; 'current-snapshot-id': number } {
  const v = Math.max(...readdirSync(join(table, 'metadata')).flatMap((n) => /^v(\d+)\.metadata\.json$/.exec(n)?.[1] ?? []).map(Number));
  return JSON.parse(readFileSync(join(table, 'metadata', `v${v}.metadata.json`), 'utf8'));
}

/** The current snapshot's live data files (path → row count), each listed once. */
function liveFiles(table: string): Map<string, number> {
  const h = head(table);
  const cur = h.snapshots.find((x) => x['snapshot-id'] === h['current-snapshot-id'])!;
  const live = new Map<string, number>();
  for (const mf of decodeManifestList(readFileSync(pathOf(cur['manifest-list'])))) {
    for (const e of decodeManifest(readFileSync(pathOf(mf.manifestPath))).entries) {
      if (e.status === 2) continue;
      assert.ok(!live.has(e.dataFile.filePath), `${e.dataFile.filePath} listed twice`);
      live.set(e.dataFile.filePath, e.dataFile.recordCount);
    }
  }
  return live;
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
const sum = (xs: Iterable<number>) => [...xs].reduce((a, b) => a + b, 0);

// A one-row unit costs ~35-50 ms of CPU through the kernel (LLP 0083); 5,000 timed out at 15 min under load
// average 15-20. The bound is a hang guard, not a speed claim (nothing here is timed).
test(`${UNITS} one-row units, compacted and expired every ${MAINTAIN_EVERY}: manifest list, bytes and manifests read and written per commit flat from the first ${WINDOW} units to the last; every row once, sequence numbers kept through merges, compaction and expiry`, { timeout: UNITS * 480 }, async (t) => {
  // A small target manifest size, so the test's history crosses it many times (the default, 8 MiB, is Iceberg's).
  const s = await setup({ manifestTargetBytes: 16_384, manifestMinCountToMerge: 50, maxSnapshotAgeMs: 1, minSnapshotsToKeep: 1 });
  /** Every snapshot, in commit order: a unit's appends and maintenance's replaces. */
  const snaps: Snap[] = [];
  const lists = new Map<number, { bytes: number; manifests: ManifestFile[] }>();
  // The snapshots committed since the last look, and their lists, read now: an expiry removes them.
  const look = () => {
    const seen = snaps.at(-1)?.['sequence-number'] ?? 0;
    const fresh = head(s.table).snapshots.filter((x) => x['sequence-number'] > seen).sort((a, b) => a['sequence-number'] - b['sequence-number']);
    for (const x of fresh) {
      const bytes = readFileSync(pathOf(x['manifest-list']));
      lists.set(x['snapshot-id'], { bytes: bytes.length, manifests: decodeManifestList(bytes) });
      snaps.push(x);
    }
    return fresh;
  };
  let compactions = 0;
  const { k } = await openKernel(s.config);
  try {
    for (let done = 0; done < UNITS; done += TICK) {
      const r = await ingestText(k, 'web', eventLines(done + 1, TICK));
      assert.equal(r.rejected, 0);
      const e = await k.export('lake');
      for (const p of e[0]!.partitions) assert.equal(p.error, null, JSON.stringify(p.error));
      assert.equal(e[0]!.units, TICK, `a tick shipped ${e[0]!.units} units after ${done}`);
      const fresh = look();
      assert.deepEqual(fresh.map((x) => x.summary.operation), Array(TICK).fill('append'), `a tick of ${TICK} units after ${done}: one append each`);
      if ((done + TICK) % MAINTAIN_EVERY === 0 && done + TICK < UNITS) {
        const m = await k.maintain({ tables: true });
        assert.match(m.tables[0]!.done, /compacted into/);
        assert.match(m.tables[0]!.done, /snapshot\(s\) expired/);
        const replaced = look();
        assert.deepEqual(replaced.map((x) => x.summary.operation), ['replace'], `maintenance after ${done + TICK} units`);
        compactions += 1;
      }
    }
  } finally {
    await k.close();
  }

  assert.deepEqual(snaps.map((x) => x['sequence-number']), Array.from({ length: snaps.length }, (_, i) => i + 1), 'one snapshot a commit, in order');
  const units = snaps.filter((x) => x.summary.operation === 'append');
  assert.equal(units.length, UNITS, 'one append a unit');
  assert.equal(compactions, UNITS / MAINTAIN_EVERY - 1);
  // Per unit's commit, from disk: read = the parent's list and each manifest it no longer lists; written = its list and each manifest it added.
  const cost = units.map((x) => {
    const mine = lists.get(x['snapshot-id'])!;
    const parent = x['parent-snapshot-id'] === undefined ? undefined : lists.get(x['parent-snapshot-id']);
    if (x['sequence-number'] > 1) assert.ok(parent, `snapshot ${x['snapshot-id']}: its parent's list was not read`);
    const now = new Set(mine.manifests.map((m) => m.manifestPath));
    const dropped = (parent?.manifests ?? []).filter((m) => !now.has(m.manifestPath));
    const added = mine.manifests.filter((m) => m.addedSnapshotId === x['snapshot-id']);
    // A compaction's leftovers (nothing live) are never listed again after the compaction's own snapshot (LLP 0084).
    for (const m of mine.manifests) assert.ok(m.addedFilesCount + m.existingFilesCount > 0, `snapshot ${x['snapshot-id']} lists ${m.manifestPath}, which holds nothing live`);
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
    t.diagnostic(`${k}: at most ${a} per commit over the first ${WINDOW} units, ${b} over the last`);
    assert.ok(b <= 1.5 * a, `${k}: at most ${b} per commit over the last ${WINDOW} units against ${a} over the first ${WINDOW}: it grows with history`);
  }
  // Manifests were merged (some commit read manifests), and the table's manifests now hold many units each.
  assert.ok(maxOf(cost.map((c) => c.manifestsRead)) > 0, 'no commit merged manifests');
  const current = lists.get(snaps.at(-1)!['snapshot-id'])!.manifests;
  assert.ok(current.length < MAINTAIN_EVERY / 5, `the current snapshot lists ${current.length} manifests`);

  // Every live data file once in the current snapshot, with the snapshot id and sequence numbers of the commit that
  // added it: a unit's append (its own range in the name), or a compaction's replace (a compact- file).
  const bySeq = new Map(snaps.map((x) => [x['snapshot-id'], x]));
  const addedBy = new Map<string, Snap>();
  for (const x of units) addedBy.set(`${x.summary['hypsink.since']}-${x.summary['hypsink.until']}-`, x);
  const seen = new Map<string, number>();
  for (const mf of current) {
    const { entries } = decodeManifest(readFileSync(pathOf(mf.manifestPath)));
    for (const e of entries) {
      const path = e.dataFile.filePath;
      const sid = e.snapshotId ?? mf.addedSnapshotId;
      if (e.status === 2) {
        assert.equal(bySeq.get(sid)?.summary.operation, 'replace', `${path}: DELETED by ${sid}, not a compaction`);
        continue;
      }
      assert.ok(!seen.has(path), `${path} listed twice`);
      seen.set(path, e.dataFile.recordCount);
      const range = /-(\d+-\d+-)u1-[^/]*\.parquet$/.exec(path)?.[1];
      const by = range === undefined ? bySeq.get(sid) : addedBy.get(range);
      assert.ok(by, `${path}: no snapshot added it`);
      if (range === undefined) assert.ok(/\/compact-[^/]*\.parquet$/.test(path) && by.summary.operation === 'replace', `${path}: neither a unit's file nor a compaction's`);
      assert.equal(sid, by['snapshot-id'], `${path}: snapshot id`);
      assert.equal(e.sequenceNumber ?? mf.sequenceNumber, by['sequence-number'], `${path}: data sequence number`);
      assert.equal(e.fileSequenceNumber ?? mf.sequenceNumber, by['sequence-number'], `${path}: file sequence number`);
      if (mf.addedSnapshotId !== by['snapshot-id']) assert.equal(e.status, 0, `${path}: carried into a merged manifest, it is EXISTING`);
    }
  }
  assert.equal(sum(seen.values()), UNITS, 'the live files hold every unit\'s row');
  assert.ok(seen.size <= MAINTAIN_EVERY + 1, `${seen.size} live data files: compaction keeps them bounded`);
  const all = Array.from({ length: UNITS }, (_, i) => i + 1);
  assert.deepEqual(await readIds(s.dir, s.table), all);

  // The last maintenance: compacted, the older snapshots expired with the files only they listed; every live file stays.
  const { k: k2 } = await openKernel(s.config);
  try {
    const r = await k2.maintain({ tables: true });
    assert.match(r.tables[0]!.done, /snapshot\(s\) expired/);
  } finally {
    await k2.close();
  }
  assert.ok(head(s.table).snapshots.length < 5);
  const after = liveFiles(s.table);
  assert.equal(sum(after.values()), UNITS);
  for (const path of after.keys()) assert.ok(existsSync(pathOf(path)) && statSync(pathOf(path)).size > 0, `${path} removed by expiry though live`);
  assert.deepEqual(await readIds(s.dir, s.table), all);
  // Merged manifests too: column_sizes and nan_value_counts decode with avsc as maps, never null (pyiceberg's inspect.entries() needs maps).
  const { manifests } = await checkAvroFiles(await avroFilesOf(s.table));
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

test('carryOver: EXISTING entries keep the inherited snapshot id and sequence numbers, DELETED ones are dropped, a manifest with nothing live is not carried (merge or no merge, at the target size or not), below the count nothing is read', async () => {
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
  const paths = (m: { manifests: readonly ManifestFile[] }) => m.manifests.map((f) => f.manifestPath);
  const live = base.slice(0, 2).map((m) => m.manifestPath);
  // Below the count (2 with live files and this unit's own make 3): the live ones carried as they are, nothing read;
  // the two with only DELETED entries are not carried at all (their counts say so, unread).
  const none = await carryOver(input(4));
  assert.deepEqual({ read: none.read, written: none.written.length, paths: paths(none) }, { read: 0, written: 0, paths: live });
  // Manifests at the target size are never merged; one with no live entry is dropped all the same (else it is listed forever, LLP 0084).
  const full = await carryOver(input(2, 1));
  assert.deepEqual({ read: full.read, paths: paths(full) }, { read: 0, paths: live });
  const off = await carryOver({ ...input(2, 1), rule: { enabled: false, minCountToMerge: 2, targetBytes: 1 } });
  assert.deepEqual(paths(off), live, 'merging off: still not carried');
  const got = await carryOver(input(3));
  assert.equal(got.read, 2);
  assert.equal(got.manifests.length, 1, 'one merged manifest');
  const mf = got.manifests[0]!;
  assert.deepEqual([mf.addedSnapshotId, mf.sequenceNumber, mf.minSequenceNumber, mf.addedFilesCount, mf.existingFilesCount, mf.deletedFilesCount], [200, 9, 1, 0, 2, 0]);
  const { entries } = decodeManifest(readFileSync(pathOf(mf.manifestPath)));
  // The DELETED entry of manifest 2 (a0) is dropped; a and b are EXISTING with what they were committed with.
  assert.deepEqual(
    entries.map((e) => [e.dataFile.filePath.replace(/.*\//, ''), e.status, e.snapshotId, e.sequenceNumber, e.fileSequenceNumber]),
    [['a.parquet', 0, 101, 1, 1], ['b.parquet', 0, 102, 2, 2]],
  );
  // Only manifests with nothing live: none carried, none read, none written.
  const onlyDeletes = await carryOver({ ...input(2), base: base.slice(2) });
  assert.deepEqual([onlyDeletes.read, onlyDeletes.manifests.length, onlyDeletes.written.length], [0, 0, 0]);
});
