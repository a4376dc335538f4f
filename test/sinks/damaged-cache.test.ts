/**
 * Hole 1 of issue 12: a cache data file that fails to read after the first
 * batch of a unit. A unit advances only when the rows shipped equal the rows
 * planned for (since, until]: a blob sink must commit no blob, keep its
 * watermark, and report the file; once the file is restored the unit ships
 * whole, exactly once. Damage is real (a truncated file, a zeroed range, EIO
 * injected under parquet-wasm's reads), through the CLI as an operator meets it.
 * @ref LLP 0018: the two kernel rules
 */
import assert from 'node:assert/strict';
import { promises as fsp } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { randomBytes } from 'node:crypto';
import { assertExactlyOnce, cliStatus, runBin, eventLines, ingestText, openKernel, partitionStatus, range, readExports, sampleConfig, walkFiles, writeConfig } from '../support/kernel.js';
import { flipColumnBit, zeroColumnPages } from '../support/damage.js';
import { tempDir } from '../support/tmp.js';

/** Two data files in one partition, one unit over both: the second file is the damaged one. */
async function twoFiles(writer = '@hypsink/format-parquet'): Promise<{ dir: string; config: string; second: string }> {
  const dir = tempDir();
  const c = sampleConfig();
  c.cache = { root: '.hypsink/cache', rowGroupRows: 4 };
  c.sinks.archive!.writer = writer;
  const config = await writeConfig(dir, c);
  const { k } = await openKernel(config);
  try {
    // Incompressible messages: the row groups' pages, not the footer, fill most of each file.
    const big = () => ({ msg: randomBytes(600).toString('base64') });
    await ingestText(k, 'web', eventLines(1, 10, big));
    await ingestText(k, 'web', eventLines(11, 10, big));
  } finally {
    await k.close();
  }
  const files = (await walkFiles(join(dir, '.hypsink/cache/datasets'))).filter((f) => f.endsWith('.parquet'));
  assert.equal(files.length, 2, 'two data files');
  return { dir, config, second: files.sort()[1]! };
}

type Damage = (file: string) => Promise<void>;

const truncate: Damage = async (f) => {
  const { size } = await fsp.stat(f);
  await fsp.truncate(f, Math.floor(size / 2));
};
/** Zeros over the middle of the file: the footer is intact, a row group's pages are not. */
const zeroMiddle: Damage = async (f) => {
  const bytes = await fsp.readFile(f);
  bytes.fill(0, Math.floor(bytes.length * 0.4), Math.floor(bytes.length * 0.5));
  await fsp.writeFile(f, bytes);
};

async function damagedThenRestored(damage: Damage, writer?: string, env: Record<string, string> = {}): Promise<void> {
  const { dir, config, second } = await twoFiles(writer);
  const original = await fsp.readFile(second);
  await damage(second);
  // A real process: a decoder trap on damaged pages must be reported, not end it.
  const r = await runBin(['export', '--config', config], { env });
  assert.equal(r.code, 1, `the export must fail, not ship part of the unit: ${r.stdout}${r.stderr}`);
  assert.match(r.stderr, /HYPSINK_ERR_CORRUPT/);
  assert.ok(r.stderr.includes(second), `the error names the damaged file: ${r.stderr}`);
  assert.match(r.stderr, /events\/source=web/, 'the error names the partition');
  assert.deepEqual(await walkFiles(join(dir, 'exports'), '.hypsink-tmp'), [], 'no blob committed');
  let s = partitionStatus(await cliStatus(config), 'archive', 'web');
  assert.equal(s.watermark, null, 'the watermark did not move');
  assert.equal(s.pendingRows, 20);
  assert.match(s.lastError ?? '', /HYPSINK_ERR_CORRUPT/, 'status shows the error');

  // The operator restores the file from a backup: the unit ships whole, once.
  await fsp.writeFile(second, original);
  const again = await runBin(['export', '--config', config]);
  assert.equal(again.code, 0, again.stderr);
  if (writer === '@hypsink/format-jsonl') {
    const files = await walkFiles(join(dir, 'exports'), '.hypsink-tmp');
    const ids = (await Promise.all(files.map((f) => fsp.readFile(f, 'utf8'))))
      .flatMap((t) => t.split('\n').filter(Boolean))
      .map((l) => (JSON.parse(l) as { id: number }).id);
    assert.deepEqual(ids.sort((a, b) => a - b), range(1, 20));
  } else assertExactlyOnce(await readExports(join(dir, 'exports')), { web: range(1, 20) });
  s = partitionStatus(await cliStatus(config), 'archive', 'web');
  assert.deepEqual([s.exportedRows, s.pendingRows, s.gapRows, s.lastError], [20, 0, 0, null]);
}

test('Parquet sink: a truncated second file fails the unit, no blob, watermark kept; restored, it ships once', () => damagedThenRestored(truncate));
test('Parquet sink: a zeroed range in the second file fails the unit, no blob, watermark kept', () => damagedThenRestored(zeroMiddle));
// Truncation and EIO fail the unit at its digest, which reads every seq and row id page of the
// range before the intent (LLP 0054); damage to a user column's pages alone is met only in the
// body, after the unit's first batches were encoded: the rule must hold there too.
test('Parquet sink: the msg pages of the second file damaged (seq and row id pages whole) fail the unit in its body, no blob, watermark kept', () =>
  damagedThenRestored((f) => zeroColumnPages(f, 'msg')));
test('JSONL sink: the same damage fails the unit the same way', () => damagedThenRestored((f) => zeroColumnPages(f, 'msg'), '@hypsink/format-jsonl'));
// One flipped bit: the decoder reads most such pages as other values without an error; the
// chunk's checksum in the manifest finds it, in the body for a user column and at the digest
// for the row ids (whose pages the digest reads itself, LLP 0098). @ref LLP 0104
test('Parquet sink: one bit flipped in the msg pages of the second file fails the unit (its chunk checksum), no blob, watermark kept', () =>
  damagedThenRestored((f) => flipColumnBit(f, 'msg')));
test('JSONL sink: one bit flipped in the row id pages fails the unit the same way', () =>
  damagedThenRestored((f) => flipColumnBit(f, '_hyp_cache_row_id'), '@hypsink/format-jsonl'));
test('Parquet sink: EIO at read (HYPSINK_FAULT_READ) fails the unit, no blob, watermark kept', async () => {
  await damagedThenRestored(async () => undefined, undefined, { HYPSINK_FAULT_READ: '-11-' });
});
test('JSONL sink: a truncated second file fails the unit the same way', () => damagedThenRestored(truncate, '@hypsink/format-jsonl'));
