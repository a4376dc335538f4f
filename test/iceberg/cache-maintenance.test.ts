/**
 * The Iceberg table across the cache's own maintenance (issue 14): compaction
 * rewrites the cache's files under the sink between exports, ack-coupled
 * retention prunes exported rows, and a hard cap prunes rows the sink had not
 * exported — a counted gap, never a duplicate or a silent loss. The table is
 * read back by icebird.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import { eventLines, ingestText, openKernel, sampleConfig, writeConfig } from '../support/kernel.js';
import { fileRoute, readIcebergTable, serveDir } from '../support/iceberg.js';
import { tempDir } from '../support/tmp.js';

test('compaction and retention in the cache: every exported row once in the table, the pruned-before-export rows a counted gap', async () => {
  const dir = tempDir('hypsink-iceberg-cache-');
  const c = sampleConfig();
  delete (c.sinks as Record<string, unknown>).archive;
  c.sinks.lake = { writer: '@hypsink/format-iceberg', destination: '@hypsink/local-fs', datasets: ['events'], config: { dir: 'lake' }, unit: { maxRows: 25 } };
  (c as Record<string, unknown>).maintenance = { retention: { maxRows: 40, hardMaxRows: 60 }, compaction: { minFiles: 2 } };
  const config = await writeConfig(dir, c);
  const exported = new Set<number>();
  const { k } = await openKernel(config);
  let gap = 0;
  try {
    let id = 1;
    for (let round = 0; round < 4; round++) {
      // Several small ingests: several cache files for compaction to merge.
      for (let i = 0; i < 3; i++) {
        await ingestText(k, 'web', eventLines(id, 10));
        id += 10;
      }
      const compacted = await k.maintain({ compact: true });
      assert.ok(compacted.compaction.length > 0, `round ${round}: nothing compacted`);
      await k.export('lake');
      for (let x = 1; x < id; x++) exported.add(x);
      await k.maintain({ retention: true }); // ack-coupled: only exported rows go
    }
    // Rows the sink never sees: 80 ingested without an export, past the hard cap of 60.
    await ingestText(k, 'web', eventLines(id, 80));
    const r = await k.maintain({ retention: true });
    const forced = r.retention.reduce((n, x) => n + x.forcedRows, 0);
    assert.ok(forced > 0, 'the hard cap pruned rows the sink had not exported');
    await k.export('lake');
    const st = await k.status();
    const part = st.sinks.find((s) => s.name === 'lake')!.partitions.find((p) => p.source === 'web')!;
    gap = part.gapRows;
    assert.equal(gap, forced);
    for (let x = id + forced; x < id + 80; x++) exported.add(x);
  } finally {
    await k.close();
  }
  const srv = await serveDir(dir);
  try {
    const { rows } = await readIcebergTable({ tableUrl: `file://${join(dir, 'lake', 'events')}`, route: fileRoute(dir, srv.url) });
    const ids = rows.map((r) => Number(r.id)).sort((a, b) => a - b);
    assert.equal(new Set(ids).size, ids.length, 'a row twice in the table');
    assert.deepEqual(ids, [...exported].sort((a, b) => a - b));
  } finally {
    await srv.close();
  }
});
