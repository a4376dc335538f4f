/**
 * The kernel's Parquet reader leaves nothing in wasm memory for the garbage
 * collector to free: a wasm object it makes is freed when it is done with it.
 * Wasm memory never shrinks, so what waits for the collector is paid as peak
 * RSS for the rest of the process. @ref LLP 0102
 */
import assert from 'node:assert/strict';
import { promises as fsp } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { Int64, Table, vectorFromArray } from 'apache-arrow';
import * as pw from 'parquet-wasm/node';
import { DEFAULT_LAYOUT, encodeParquet, ParquetReader, scratchCounters } from '../../kernel/store/parquet.js';
import { tempDir } from '../support/tmp.js';

test("a cache file's row groups are counted without leaving a copy of its metadata in wasm memory", async () => {
  const dir = tempDir('hypsink-row-groups-');
  const path = join(dir, 'groups.parquet');
  const ids = Array.from({ length: 40_000 }, (_, i) => BigInt(i));
  await fsp.writeFile(path, encodeParquet(new Table({ id: vectorFromArray(ids, new Int64()) }), { ...DEFAULT_LAYOUT, rowGroupRows: 100 }));
  const reader = await ParquetReader.open(path, scratchCounters());
  try {
    assert.equal(reader.numRowGroups, 400);
    const before = pw.wasmMemory().buffer.byteLength;
    // As compaction and retention ask it: once a row group.
    for (let g = 0; g < reader.numRowGroups; g++);
    for (let g = 0; g < reader.numRowGroups; g++);
    const grown = pw.wasmMemory().buffer.byteLength - before;
    assert.ok(grown <= 1 << 20, `wasm memory grew by ${grown} bytes counting 400 row groups twice`);
  } finally {
    reader.close();
  }
});
