/**
 * The SDK's Parquet writer (`parquetBody`): a file of at least
 * OFF_THREAD_ROWS rows is encoded on the writer thread (unless
 * HYPSINK_PARQUET_THREAD=0), a smaller one on the calling thread,
 * and the two give the same bytes; DuckDB and parquet-wasm read every row. A
 * source error in the middle is thrown as it was and the body never ends
 * normally; a reader that stops early closes the source. After either, the
 * writer thread still writes whole files. A batch handed to the writer holds
 * its wasm memory alone (LLP 0102). @ref LLP 0079
 */
import assert from 'node:assert/strict';
import { promises as fsp } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { DuckDBInstance } from '@duckdb/node-api';
import { Field, Int64, makeData, RecordBatch, Schema, Struct, Table, tableFromIPC, tableToIPC, Utf8, vectorFromArray } from 'apache-arrow';
import * as pw from 'parquet-wasm/node';
import { HypsinkError } from '../../types/errors.js';
import { engineBatch } from '../../types/engine-types.js';
import { OFF_THREAD_ROWS, onWriterThread, type ParquetPlan, parquetBody } from '../../types/parquet-writer.js';
import type { ColumnSpec } from '../../types/schema.js';
import { tempDir } from '../support/tmp.js';

// The writer thread is on by default (LLP 0105) unless the environment says 0: this file's large files need it.
delete process.env.HYPSINK_PARQUET_THREAD;

const COLUMNS: ColumnSpec[] = [
  { name: 'id', type: 'INT64', nullable: false },
  { name: 'kind', type: 'STRING', nullable: true },
];
const PLAN: ParquetPlan = { columns: COLUMNS, compression: 'zstd', rowGroupRows: 20_000, keyValueMetadata: { 'test.key': 'a value' } };
const ROWS = OFF_THREAD_ROWS + 34_464; // 100,000: the writer thread's
const BATCH = 16_384;
const KINDS = ['click', 'login', 'view'];

function batch(from: number, n: number): RecordBatch {
  const id = vectorFromArray(Array.from({ length: n }, (_, i) => BigInt(from + i)), new Int64());
  const kind = vectorFromArray(
    Array.from({ length: n }, (_, i) => ((from + i) % 7 === 0 ? null : KINDS[(from + i) % 3]!)),
    new Utf8(),
  );
  const fields = [new Field('id', new Int64(), false), new Field('kind', new Utf8(), true)];
  const b = new RecordBatch(new Schema(fields), makeData({ type: new Struct(fields), length: n, nullCount: 0, children: [id.data[0]!, kind.data[0]!] }));
  return engineBatch(b, COLUMNS);
}

/** The rows [0, rows) in batches of BATCH; `fail` throws instead of the batch at that row, `closed` notes a return. */
async function* source(rows: number, opts: { fail?: { at: number; error: unknown }; closed?: { value: boolean } } = {}): AsyncIterable<RecordBatch> {
  try {
    for (let from = 0; from < rows; from += BATCH) {
      if (opts.fail && from >= opts.fail.at) throw opts.fail.error;
      yield batch(from, Math.min(BATCH, rows - from));
    }
  } finally {
    if (opts.closed) opts.closed.value = true;
  }
}

async function bytesOf(body: AsyncIterable<Uint8Array>): Promise<Uint8Array> {
  const chunks: Uint8Array[] = [];
  for await (const c of body) chunks.push(c);
  return Buffer.concat(chunks);
}

test('a large file is written on the writer thread, byte for byte what the calling thread writes, and every reader reads every row', async () => {
  assert.equal(onWriterThread(ROWS), true, 'on by default');
  assert.equal(onWriterThread(0), false);
  process.env.HYPSINK_PARQUET_THREAD = '0';
  assert.equal(onWriterThread(ROWS), false, 'HYPSINK_PARQUET_THREAD=0 turns it off');
  delete process.env.HYPSINK_PARQUET_THREAD;
  const threaded = await bytesOf(parquetBody(source(ROWS), PLAN, ROWS));
  const inline = await bytesOf(parquetBody(source(ROWS), PLAN, 0));
  assert.ok(Buffer.from(threaded).equals(Buffer.from(inline)), 'the same file on either thread');

  const t = tableFromIPC(pw.readParquet(threaded).intoIPCStream());
  assert.equal(t.numRows, ROWS);
  assert.equal(t.getChild('id')!.get(ROWS - 1), BigInt(ROWS - 1));

  const path = join(tempDir(), 'f.parquet');
  await fsp.writeFile(path, threaded);
  const db = await DuckDBInstance.create(':memory:');
  const c = await db.connect();
  try {
    const [agg] = (await c.runAndReadAll(`SELECT count(*) AS n, sum(id) AS s, count(kind) AS k FROM '${path}'`)).getRowObjects();
    assert.equal(Number(agg!.n), ROWS);
    assert.equal(BigInt(String(agg!.s)), (BigInt(ROWS) * BigInt(ROWS - 1)) / 2n);
    assert.equal(Number(agg!.k), ROWS - Math.ceil(ROWS / 7));
    const kv = (await c.runAndReadAll(`SELECT decode(key) AS k, decode(value) AS v FROM parquet_kv_metadata('${path}')`)).getRowObjects();
    assert.ok(kv.some((r) => r.k === 'test.key' && r.v === 'a value'), JSON.stringify(kv));
    const groups = (await c.runAndReadAll(`SELECT DISTINCT row_group_id FROM parquet_metadata('${path}')`)).getRowObjects();
    assert.equal(groups.length, Math.ceil(ROWS / PLAN.rowGroupRows));
  } finally {
    c.closeSync();
    db.closeSync();
  }
});

test("a source error in the middle of a threaded file is thrown as it was, the body never ends, and the writer thread still writes whole files", async () => {
  const error = new HypsinkError('HYPSINK_ERR_CORRUPT', 'data file x.parquet: row group 3 cannot be decoded');
  const got: Uint8Array[] = [];
  await assert.rejects(
    (async () => {
      for await (const c of parquetBody(source(ROWS, { fail: { at: 3 * BATCH, error } }), PLAN, ROWS)) got.push(c);
    })(),
    (e) => e === error,
  );
  // What came out is never a whole file: it ends short of the footer.
  const seen = Buffer.concat(got);
  assert.notEqual(seen.subarray(seen.length - 4).toString('latin1'), 'PAR1');

  const after = await bytesOf(parquetBody(source(ROWS), PLAN, ROWS));
  assert.equal(tableFromIPC(pw.readParquet(after).intoIPCStream()).numRows, ROWS);
});

test('a reader that stops early closes the source, and the writer thread still writes whole files', async () => {
  const closed = { value: false };
  for await (const c of parquetBody(source(ROWS, { closed }), PLAN, ROWS)) {
    assert.ok(c.length > 0);
    break;
  }
  assert.equal(closed.value, true, "the source's return ran");
  const after = await bytesOf(parquetBody(source(ROWS), PLAN, ROWS));
  assert.equal(tableFromIPC(pw.readParquet(after).intoIPCStream()).numRows, ROWS);
});

test("a batch handed to the wasm writer holds its rows' wasm memory alone: nothing is left for the garbage collector to free", async () => {
  const { wasmBatches } = await import('../../types/parquet-encode.js');
  const rows = 50_000;
  const wide = new RecordBatch(
    new Schema([new Field('id', new Int64(), false), new Field('text', new Utf8(), false)]),
    makeData({
      type: new Struct([new Field('id', new Int64(), false), new Field('text', new Utf8(), false)]),
      length: rows,
      nullCount: 0,
      children: [
        vectorFromArray(Array.from({ length: rows }, (_, i) => BigInt(i)), new Int64()).data[0]!,
        vectorFromArray(Array.from({ length: rows }, (_, i) => `row ${i} ${'x'.repeat(40)}`), new Utf8()).data[0]!,
      ],
    }),
  );
  const ipc = tableToIPC(new Table(wide), 'stream');
  const memory = () => pw.wasmMemory().buffer.byteLength;
  // The first round grows wasm memory to what one batch needs; the rounds after it must reuse it.
  for (const b of wasmBatches(ipc)) b.free();
  const before = memory();
  for (let round = 0; round < 30; round++) for (const b of wasmBatches(ipc)) b.free();
  const grown = memory() - before;
  assert.ok(grown <= 2 * ipc.byteLength, `wasm memory grew by ${grown} bytes over 30 batches of ${ipc.byteLength} IPC bytes each, freed as the writer frees them`);
});
