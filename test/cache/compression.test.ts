/**
 * The cache's codec (`cache.compression`): LZ4 by default, zstd when asked,
 * for every data file the cache writes (a flush in place or in the flush
 * worker, compaction), each file read back by DuckDB, a reader we did not
 * write; a cache holding both codecs reads every row once.
 * @ref LLP 0103: cache files are LZ4 by default
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { DuckDBInstance } from '@duckdb/node-api';
import { ROW_ID_COLUMN } from '../../kernel/store/columns.js';
import { COLS, collect, openCache, rows } from '../support/datasets.js';
import { tempDir } from '../support/tmp.js';
import { currentManifest } from './helpers.js';

const S1 = { dataset: 'events', id: 's1' };

/** Per data file of the partition's current generation: its codec per column, and its rows, as DuckDB reads them. */
async function filesAsDuckDbReads(partitionDir: string): Promise<{ codecs: Record<string, string>; rows: number }[]> {
  const { generation, manifest } = await currentManifest(partitionDir);
  const db = await DuckDBInstance.create(':memory:');
  const c = await db.connect();
  try {
    const out = [];
    for (const f of manifest.files) {
      const path = `'${join(partitionDir, `table-${generation}`, f.name).replaceAll("'", "''")}'`;
      const meta = (await c.runAndReadAll(`SELECT DISTINCT path_in_schema AS col, compression FROM parquet_metadata(${path})`)).getRowObjects();
      const count = (await c.runAndReadAll(`SELECT count(*)::INTEGER AS n FROM read_parquet(${path})`)).getRowObjects()[0]!.n as number;
      out.push({ codecs: Object.fromEntries(meta.map((m) => [String(m.col), String(m.compression)])), rows: count });
    }
    return out;
  } finally {
    c.closeSync();
  }
}

/** Every column but the row id (always stored uncompressed) in `codec`. */
function assertCodec(file: { codecs: Record<string, string> }, codec: string, what: string): void {
  for (const [col, got] of Object.entries(file.codecs)) assert.equal(got, col === ROW_ID_COLUMN ? 'UNCOMPRESSED' : codec, `${what}: column ${col}`);
}

describe('cache compression', () => {
  for (const [where, workerMinBytes] of [
    ['in place', Number.MAX_SAFE_INTEGER],
    ['in the flush worker', 0],
  ] as const) {
    test(`a flush ${where} writes LZ4 by default and zstd when asked; a cache holding both reads every row once`, async () => {
      const root = tempDir();
      const dir = join(root, 'datasets/events/source=web');
      const lz4 = await openCache(root, { workerMinBytes });
      await lz4.appendRows(S1, COLS, rows('web', 1, 300));
      await lz4.flushTable(S1);
      await lz4.close();
      const [first] = await filesAsDuckDbReads(dir);
      assertCodec(first!, 'LZ4_RAW', 'the default');
      assert.equal(first!.rows, 300);

      const zstd = await openCache(root, { workerMinBytes, compression: 'zstd' });
      try {
        await zstd.appendRows(S1, COLS, rows('web', 301, 200));
        await zstd.flushTable(S1);
        const files = await filesAsDuckDbReads(dir);
        assert.equal(files.length, 2);
        assertCodec(files[0]!, 'LZ4_RAW', 'the file written before');
        assertCodec(files[1]!, 'ZSTD', 'compression: zstd');
        const read = await collect(zstd.storage.readRowsSince(zstd.partition('events', 'web')));
        assert.deepEqual(
          read.map((r) => r.row.id),
          Array.from({ length: 500 }, (_, i) => i + 1),
        );

        // Compaction writes in the cache's codec too: the LZ4 file is rewritten as zstd, every row kept.
        await zstd.compact();
        const compacted = await filesAsDuckDbReads(dir);
        for (const f of compacted) assertCodec(f, 'ZSTD', 'compacted');
        assert.equal(
          compacted.reduce((n, f) => n + f.rows, 0),
          500,
        );
        const after = await collect(zstd.storage.readRowsSince(zstd.partition('events', 'web')));
        assert.deepEqual(
          after.map((r) => [r.row.id, r.after.seq]),
          read.map((r) => [r.row.id, r.after.seq]),
        );
      } finally {
        await zstd.close();
      }
    });
  }
});
