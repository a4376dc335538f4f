/**
 * A cache data file that fails to read in the middle of a unit the Postgres
 * sink is streaming into its COPY (its first unit is read as it is sent, not
 * ahead, LLP 0093): the transaction is rolled back whole, no row and no
 * watermark row is committed, the error names the file; once the file is
 * restored the unit ships whole, exactly once.
 * @ref LLP 0018: the two kernel rules
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { promises as fsp } from 'node:fs';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { zeroColumnPages } from '../support/damage.js';
import { eventLines, ingestText, range, walkFiles, writeConfig } from '../support/kernel.js';
import { testPg } from '../support/pg.js';
import { pgConfig, pgWorkspace } from './helpers.js';

after(async () => (await testPg()).stop());

test('a data file damaged under a unit being streamed: HYPSINK_ERR_CORRUPT naming it, nothing committed; restored, the unit ships once', async () => {
  const w = await pgWorkspace();
  // Two data files, one unit over both: the second fails after the first's rows, more than one
  // COPY chunk of them (256 KiB), went to the server.
  await writeConfig(w.dir, { ...pgConfig(w.url), cache: { root: 'cache', rowGroupRows: 50 } });
  const big = () => ({ msg: randomBytes(600).toString('base64') });
  {
    const { k } = await w.open();
    try {
      await ingestText(k, 'web', eventLines(1, 400, big));
      await ingestText(k, 'web', eventLines(401, 100, big));
    } finally {
      await k.close();
    }
  }
  const files = (await walkFiles(join(w.dir, 'cache/datasets'))).filter((f) => f.endsWith('.parquet')).sort();
  assert.equal(files.length, 2, 'two data files');
  const second = files[1]!;
  const original = await fsp.readFile(second);
  // Its footer, seq and row id pages whole: the unit is planned and digested, and fails where its body is read.
  await zeroColumnPages(second, 'msg');

  let { k } = await w.open();
  try {
    const [t] = await k.export('warehouse');
    const report = t!.partitions[0]!;
    assert.equal(report.error?.code, 'HYPSINK_ERR_CORRUPT', String(report.error));
    assert.ok(report.error!.message.includes(second), `the error names the damaged file: ${report.error!.message}`);
    assert.equal(report.rows, 0);
  } finally {
    await k.close();
  }
  assert.deepEqual(await w.query('SELECT count(*)::int AS n FROM events'), [{ n: 0 }], 'no row of the unit committed');
  assert.deepEqual(await w.query('SELECT * FROM hypsink_watermarks'), [], 'no watermark row');

  await fsp.writeFile(second, original);
  ({ k } = await w.open());
  try {
    const [t] = await k.export('warehouse');
    assert.equal(t!.partitions[0]!.error, null, String(t!.partitions[0]!.error));
  } finally {
    await k.close();
  }
  assert.deepEqual((await w.rows()).map((r) => Number(r.id)), range(1, 500));
});
