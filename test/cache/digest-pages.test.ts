/**
 * A unit's digest read from the row ids' own pages (kernel/store/row-id-pages.ts)
 * is the digest LLP 0054 defines: computed here from the spec over every row
 * of the data files decoded straight by parquet-wasm, for ranges that start
 * and end inside row groups, on their edges, and across files. A file laid
 * out otherwise (the id column compressed, dictionary-encoded, with a null,
 * an id of another length, a page cut or changed) is not read from its pages:
 * the page reader declines it, and the decoder reads it (or reports it
 * damaged) as before.
 * @ref LLP 0098
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { promises as fsp } from 'node:fs';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { Int64, Table, tableToIPC, Utf8, vectorFromArray } from 'apache-arrow';
import * as pw from 'parquet-wasm/node';
import { unitDigest } from '../../kernel/sinks/digest.js';
import { seqRange } from '../../kernel/store/reader.js';
import { encodeParquet, scratchCounters } from '../../kernel/store/parquet.js';
import { chunkIds, idChunks, RowIdPages } from '../../kernel/store/row-id-pages.js';
import { eventLines, ingestText, openKernel, sampleConfig, writeConfig } from '../support/kernel.js';
import { readParquetRaw, walk } from './helpers.js';

const ROW_ID = '_hyp_cache_row_id';
const SEQ = '_hyp_ingest_seq';

/** LLP 0054's digest of `rows` (seq, id), from the spec: SHA-256 of the seqs (8 bytes LE each) and of the ids, under the scheme, key and count. */
function specDigest(key: string, rows: readonly { seq: bigint; id: string }[]): string {
  const seqs = createHash('sha256');
  const ids = createHash('sha256');
  for (const r of rows) {
    const b = Buffer.alloc(8);
    b.writeBigInt64LE(r.seq);
    seqs.update(b);
    ids.update(Buffer.from(r.id, 'utf8'));
  }
  const h = createHash('sha256');
  h.update(`hypsink-unit/u1\u0000${key}\u0000${rows.length}\u0000`);
  h.update(seqs.digest());
  h.update(ids.digest());
  return `u1-${h.digest('base64url')}`;
}

test("a digest read from the ids' pages is the spec's, for ranges inside, on the edges of, and across row groups and files", async () => {
  const dir = await mkdtemp(join(tmpdir(), 'hypsink-digest-pages-'));
  const config = await writeConfig(dir, { ...sampleConfig(), sinks: {} });
  const { k } = await openKernel(config);
  try {
    // Two ingests, two files: the first of three row groups (16,384 rows each, the last shorter).
    await ingestText(k, 'web', eventLines(1, 40_000));
    await ingestText(k, 'web', eventLines(40_001, 5_000));
    const p = (await k.cache.storage.listPartitions('events'))[0]!;
    const files = (await walk(join(dir, '.hypsink/cache'))).filter((f) => f.endsWith('.parquet')).map((f) => join(dir, '.hypsink/cache', f));
    assert.equal(files.length, 2, files.join(', '));
    const all: { seq: bigint; id: string }[] = [];
    for (const f of files) {
      const raw = await readParquetRaw(f);
      raw[SEQ]!.forEach((s, i) => {
        all.push({ seq: s as bigint, id: raw[ROW_ID]![i] as string });
      });
    }
    all.sort((a, b) => (a.seq < b.seq ? -1 : 1));
    assert.equal(all.length, 45_000);
    const first = all[0]!.seq;
    const last = all[all.length - 1]!.seq;
    const at = (i: number) => first + BigInt(i);
    const ranges: [bigint, bigint][] = [
      [-1n, last], // everything
      [first - 1n, at(16_383)], // the first row group exactly
      [at(16_383), at(32_767)], // the second exactly
      [at(100), at(101)], // one row
      [at(16_000), at(17_000)], // across a group's edge
      [at(30_000), at(41_000)], // across the files
      [at(39_999), last], // the second file, and the first file's last row
      [at(5), at(44_990)], // inside the first and last groups
    ];
    for (const [since, until] of ranges) {
      const want = specDigest(p.key, all.filter((r) => r.seq > since && r.seq <= until));
      assert.equal(await unitDigest(k.cache, p, since, until.toString()), want, `(${since}, ${until}]`);
    }
    // The pages were read: the decoder opened no file for these digests.
    const before = k.cache.storage.counters.rowGroupsRead;
    await unitDigest(k.cache, p, -1n, last.toString());
    assert.equal(k.cache.storage.counters.rowGroupsRead - before, 4, 'four row groups read');
  } finally {
    await k.close();
  }
});

/** This process's open descriptors of files under `dir` (Linux: /proc/self/fd). */
async function openUnder(dir: string): Promise<number> {
  let n = 0;
  for (const fd of await fsp.readdir('/proc/self/fd')) {
    const target = await fsp.readlink(join('/proc/self/fd', fd)).catch(() => '');
    if (target.startsWith(dir)) n += 1;
  }
  return n;
}

test("a digest's read opens the next file while it reads this one, and closes what it opened ahead when stopped early", async () => {
  const dir = await mkdtemp(join(tmpdir(), 'hypsink-digest-ahead-'));
  const config = await writeConfig(dir, { ...sampleConfig(), sinks: {} });
  const { k } = await openKernel(config);
  try {
    // Three ingests, three files of one row group each.
    for (let i = 0; i < 3; i++) await ingestText(k, 'web', eventLines(1 + i * 1_000, 1_000));
    const p = (await k.cache.storage.listPartitions('events'))[0]!;
    const cache = join(dir, '.hypsink/cache');
    const counters = k.cache.storage.counters;
    const opened = counters.filesOpened;
    const scan = k.cache.storage.scan(k.cache.store(p), undefined, [], false, true)[Symbol.asyncIterator]();
    const first = await scan.next();
    assert.equal(first.done, false);
    assert.equal(first.value.seqs.length, 1_000);
    // The second file was opened (its footer read) while the first one's ids were read and handed out.
    for (let i = 0; i < 100 && counters.filesOpened - opened < 2; i++) await new Promise((r) => setTimeout(r, 10));
    assert.equal(counters.filesOpened - opened, 2, 'the next file opened ahead');
    // Stopped after the first file: the second, opened ahead and never read, is closed too.
    await scan.return?.();
    let left = await openUnder(cache);
    for (let i = 0; i < 100 && left > 0; i++) {
      await new Promise((r) => setTimeout(r, 10));
      left = await openUnder(cache);
    }
    assert.equal(left, 0, 'no cache file left open');
  } finally {
    await k.close();
  }
});

/** A file of `ids` (and seqs 1..n) as the cache writes one, or with the writer's properties changed. */
function fileOf(ids: (string | null)[], props?: (b: pw.WriterPropertiesBuilder) => pw.WriterPropertiesBuilder): Uint8Array {
  const table = new Table({ [SEQ]: vectorFromArray(ids.map((_, i) => BigInt(i + 1)), new Int64()), [ROW_ID]: vectorFromArray(ids, new Utf8()) });
  if (!props) return encodeParquet(table);
  const b = props(new pw.WriterPropertiesBuilder().setMaxRowGroupSize(16_384));
  return pw.writeParquet(pw.Table.fromIPCStream(tableToIPC(table, 'stream')), b.build());
}

/** The file's id pages as the page reader reads them, or null when it declines the file. */
async function pageIds(file: Uint8Array): Promise<Uint8Array[] | null> {
  const len = new DataView(file.buffer, file.byteOffset, file.byteLength).getUint32(file.length - 8, true);
  const layout = idChunks(file.subarray(file.length - 8 - len, file.length - 8), await rowGroupRows(file));
  if (!layout) return null;
  const out: Uint8Array[] = [];
  for (const c of layout.chunks) {
    // A copy: the reader moves the ids to the front of the chunk it is handed.
    const ids = chunkIds(file.slice(c.offset, c.offset + c.size), c.values, layout.optional);
    if (!ids) return null;
    out.push(ids);
  }
  return out;
}

/** Each row group's rows, as the decoder reads the file's footer. */
async function rowGroupRows(file: Uint8Array): Promise<number[]> {
  const f = await pw.ParquetFile.fromFile(new Blob([file.slice()]));
  const m = f.metadata();
  const out = Array.from({ length: m.numRowGroups() }, (_, i) => m.rowGroup(i).numRows());
  f.free();
  return out;
}

const idsOf = (n: number, at = 0) => Array.from({ length: n }, (_, i) => `id${String(i + at).padStart(20, '0')}`);

test('the page reader reads a cache-written file, and declines every other layout of the id column', async () => {
  const ids = idsOf(20_000);
  const got = await pageIds(fileOf(ids));
  assert.ok(got, 'a file as the cache writes it is read from its pages');
  assert.equal(Buffer.concat(got).toString('utf8'), ids.join(''));

  assert.equal(await pageIds(fileOf(ids, (b) => b.setCompression(pw.Compression.ZSTD))), null, 'compressed');
  assert.equal(await pageIds(fileOf(ids, (b) => b.setDictionaryEnabled(true).setCompression(pw.Compression.UNCOMPRESSED))), null, 'dictionary-encoded');
  assert.equal(await pageIds(fileOf([...ids.slice(0, 10), null, ...ids.slice(11)], (b) => b.setDictionaryEnabled(false).setCompression(pw.Compression.UNCOMPRESSED))), null, 'a null');
  assert.equal(await pageIds(fileOf([...ids.slice(0, 10), 'short', ...ids.slice(11)])), null, 'an id of another length');

  // A file it declines is not counted as opened: the decoder that reads it next counts it, once.
  const dir = await mkdtemp(join(tmpdir(), 'hypsink-digest-declined-'));
  const counters = scratchCounters();
  await fsp.writeFile(join(dir, 'zstd.parquet'), fileOf(ids, (b) => b.setCompression(pw.Compression.ZSTD)));
  assert.equal(await RowIdPages.open(join(dir, 'zstd.parquet'), [16_384, 3_616], counters), null);
  assert.equal(counters.filesOpened, 0, 'a declined file is counted by the decoder, not here');
  await fsp.writeFile(join(dir, 'plain.parquet'), fileOf(ids));
  const pages = await RowIdPages.open(join(dir, 'plain.parquet'), [16_384, 3_616], counters);
  assert.ok(pages);
  pages.close();
  assert.equal(counters.filesOpened, 1, 'a file read from its pages is counted');
});

test("a small file's ids are read with its footer and its id pages, not the whole file first", async () => {
  // 1,000 rows: a tick's new rows, some 26 KB of ids, a file under the 64 KB once read whole as its "tail".
  const ids = idsOf(1_000);
  const file = fileOf(ids);
  const dir = await mkdtemp(join(tmpdir(), 'hypsink-digest-small-'));
  await fsp.writeFile(join(dir, 'small.parquet'), file);
  const counters = scratchCounters();
  const pages = await RowIdPages.open(join(dir, 'small.parquet'), [1_000], counters);
  assert.ok(pages);
  try {
    const got = await pages.ids(0);
    assert.equal(Buffer.from(got!).toString('utf8'), ids.join(''));
  } finally {
    pages.close();
  }
  const len = new DataView(file.buffer, file.byteOffset, file.byteLength).getUint32(file.length - 8, true);
  const [chunk] = idChunks(file.subarray(file.length - 8 - len, file.length - 8), [1_000])!.chunks;
  // The tail read holds the footer; beside it only the id chunk is read, never the rest of the file.
  assert.ok(counters.bytesRead <= 8192 + chunk!.size, `read ${counters.bytesRead} bytes of a ${file.length}-byte file whose id chunk is ${chunk!.size}`);
});

test('a changed or cut page is declined by the page reader; the digest then reads it through the decoder', async () => {
  const ids = idsOf(1_000);
  const file = fileOf(ids);
  const good = await pageIds(file);
  assert.ok(good);
  // The first value's length prefix (the 4 bytes before the first id), changed.
  const at = Buffer.from(file).indexOf(Buffer.from(ids[0]!, 'utf8'));
  assert.ok(at > 4);
  const changed = file.slice();
  changed[at - 4] = 21;
  assert.equal(await pageIds(changed), null, 'a length prefix changed');
  // A page cut short: the chunk handed over ends before its page does.
  const dv = new DataView(file.buffer, file.byteOffset, file.byteLength);
  const len = dv.getUint32(file.length - 8, true);
  const layout = idChunks(file.subarray(file.length - 8 - len, file.length - 8), [1_000])!;
  const c = layout.chunks[0]!;
  assert.equal(chunkIds(file.slice(c.offset, c.offset + c.size - 1), c.values, layout.optional), null, 'a page cut short');
  // A footer cut short.
  assert.equal(idChunks(file.subarray(file.length - 8 - len, file.length - 8 - 3), [1_000]), null, 'a footer cut short');
  // A footer whose row counts are not the manifest's.
  assert.equal(idChunks(file.subarray(file.length - 8 - len, file.length - 8), [999]), null, 'other row counts');
});

test('a data file cut behind the cache: the digest fails naming the file, HYPSINK_ERR_CORRUPT, as it did through the decoder', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'hypsink-digest-cut-'));
  const config = await writeConfig(dir, { ...sampleConfig(), sinks: {} });
  const { k } = await openKernel(config);
  try {
    await ingestText(k, 'web', eventLines(1, 40_000));
    const p = (await k.cache.storage.listPartitions('events'))[0]!;
    const [file] = (await walk(join(dir, '.hypsink/cache'))).filter((f) => f.endsWith('.parquet')).map((f) => join(dir, '.hypsink/cache', f));
    const size = (await fsp.stat(file!)).size;
    await fsp.truncate(file!, Math.floor(size / 2));
    await assert.rejects(unitDigest(k.cache, p, -1n, '40000'), (e: Error & { code?: string }) => {
      assert.equal(e.code, 'HYPSINK_ERR_CORRUPT');
      assert.ok(e.message.includes(file!), e.message);
      return true;
    });
  } finally {
    await k.close();
  }
});

test("a group's seqs made from its manifest entry are its seqs, across a 2^32 boundary too", () => {
  for (const min of [1n, 4_294_967_000n, 4_294_967_296n, 2n ** 52n]) {
    const rows = 1_000;
    const got = seqRange({ minSeq: String(min) }, 3, rows - 2);
    assert.deepEqual([...got], Array.from({ length: rows - 5 }, (_, i) => min + 3n + BigInt(i)), String(min));
  }
});
