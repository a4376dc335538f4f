/**
 * Hole 6 of issue 12: the first hop is exactly once. A host retries an ingest
 * that failed or whose process was killed, with the same batch id: no row is
 * committed twice, and none is lost. Real processes (`bin/hypsink.js`), killed
 * by SIGKILL at fault points, as a host meets them.
 * @ref LLP 0021: idempotent ingest
 */
import assert from 'node:assert/strict';
import { promises as fsp } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { cli, cliStatus, eventLines, partitionStatus, readExports, runBin, sampleConfig, writeConfig } from '../support/kernel.js';
import { tempDir } from '../support/tmp.js';

async function setup(): Promise<{ dir: string; config: string }> {
  const dir = tempDir();
  return { dir, config: await writeConfig(dir, sampleConfig()) };
}

/** Every id the archive sink exported (after one export), sorted, duplicates kept. */
async function exported(dir: string, config: string): Promise<number[]> {
  const r = await cli('export', '--config', config);
  assert.equal(r.code, 0, r.err);
  return (await readExports(join(dir, 'exports'))).flatMap((f) => f.rows.map((row) => Number(row.id))).sort((a, b) => a - b);
}

const ids = (from: number, n: number) => Array.from({ length: n }, (_, i) => from + i);

test('the same batch id twice: acknowledged again, nothing added', async () => {
  const { dir, config } = await setup();
  const file = join(dir, 'rows.ndjson');
  await fsp.writeFile(file, eventLines(1, 5));
  const first = await runBin(['ingest', 'events', '--source', 'web', '--file', file, '--batch-id', 'host-42', '--config', config]);
  assert.equal(first.code, 0, first.stderr);
  assert.match(first.stdout, /ingested 5 row\(s\) into events\/source=web \(batch host-42\)/);
  const again = await runBin(['ingest', 'events', '--source', 'web', '--file', file, '--batch-id', 'host-42', '--config', config]);
  assert.equal(again.code, 0, again.stderr);
  assert.match(again.stdout, /batch host-42 was ingested before \(5 row\(s\)\): acknowledged again, nothing added/);
  assert.deepEqual(await exported(dir, config), ids(1, 5));
  // The same id with other rows is refused, naming the batch: nothing added.
  await fsp.writeFile(file, eventLines(100, 5));
  const other = await runBin(['ingest', 'events', '--source', 'web', '--file', file, '--batch-id', 'host-42', '--config', config]);
  assert.equal(other.code, 2);
  assert.match(other.stderr, /batch host-42 was ingested before with other content/);
  assert.equal(partitionStatus(await cliStatus(config), 'archive', 'web').committedRows, 5);
});

test('a host killed after the commit, before the answer, retries with the same batch id: rows once', async () => {
  const { dir, config } = await setup();
  const file = join(dir, 'rows.ndjson');
  await fsp.writeFile(file, eventLines(1, 7));
  const args = ['ingest', 'events', '--source', 'web', '--file', file, '--batch-id', 'b-7', '--config', config];
  // The last: a try that found the batch committed is killed as it moves the batch's spool away (LLP 0085).
  for (const point of ['flush.afterManifest', 'flush.afterBatchRecord', 'batch.afterSpoolMovedAway']) {
    const killed = await runBin(args, { env: { HYPSINK_FAULT: point } });
    assert.equal(killed.signal, 'SIGKILL', `${point}: ${killed.stderr}`);
  }
  const spools = join(dir, '.hypsink/cache/spools/events');
  assert.match((await fsp.readdir(spools)).join(' '), /^\.trash-\S+$/, 'the crash left the spool moved away, not removed');
  const retry = await runBin(args);
  assert.equal(retry.code, 0, retry.stderr);
  assert.match(retry.stdout, /acknowledged again, nothing added/);
  assert.deepEqual(await exported(dir, config), ids(1, 7));
  // Maintenance removes what the crash left; no spool of the batch is left behind.
  assert.equal((await runBin(['maintain', '--config', config])).code, 0);
  assert.deepEqual(await fsp.readdir(spools), []);
  assert.deepEqual(await exported(dir, config), ids(1, 7));
});

test('a host killed mid-ingest retries with the same batch id: it goes on after the durable lines, rows once', async () => {
  const { dir, config } = await setup();
  const file = join(dir, 'rows.ndjson');
  // Long lines: several 1 MiB blocks, each its own frame.
  const pad = 'x'.repeat(400);
  await fsp.writeFile(file, eventLines(1, 9000, () => ({ msg: pad })));
  const args = ['ingest', 'events', '--source', 'web', '--file', file, '--batch-id', 'big', '--config', config];
  const killed = await runBin(args, { env: { HYPSINK_FAULT: 'spool.afterAppend', HYPSINK_FAULT_AT: '2' } });
  assert.equal(killed.signal, 'SIGKILL', killed.stderr);
  // A retry with other content is refused before it adds anything.
  const changed = join(dir, 'changed.ndjson');
  await fsp.writeFile(changed, eventLines(2, 9000, () => ({ msg: pad })));
  const wrong = await runBin(['ingest', 'events', '--source', 'web', '--file', changed, '--batch-id', 'big', '--config', config]);
  assert.equal(wrong.code, 2, wrong.stderr);
  assert.match(wrong.stderr, /other content/);
  const retry = await runBin(args);
  assert.equal(retry.code, 0, retry.stderr);
  const m = /ingested (\d+) row\(s\) .*resumed after line (\d+)\)/.exec(retry.stdout);
  assert.ok(m, `the retry says where it went on: ${retry.stdout}`);
  assert.equal(Number(m[1]) + Number(m[2]), 9000, 'it added exactly the lines after the durable ones');
  const got = await exported(dir, config);
  assert.equal(got.length, 9000);
  assert.deepEqual(got, ids(1, 9000));
  // Acknowledged again later, the batch counts every row, the first try's included.
  const again = await runBin(args);
  assert.match(again.stdout, /batch big was ingested before \(9000 row\(s\)\)/);
});

test('an ingest whose flush fails says its rows are durable and names the batch; the retry it asks for adds nothing', async () => {
  const { dir, config } = await setup();
  const file = join(dir, 'rows.ndjson');
  await fsp.writeFile(file, eventLines(1, 4));
  // Create the cache, then damage the seq allocator's file: the flush cannot take seqs.
  assert.equal((await runBin(['status', '--config', config])).code, 0);
  const seqFile = join(dir, '.hypsink/cache/_hyp_ingest_seq.json');
  await fsp.writeFile(seqFile, '{"v":1,"reservedThrough":"garbage"}');
  const failed = await runBin(['ingest', 'events', '--source', 'web', '--file', file, '--config', config]);
  assert.equal(failed.code, 1, failed.stderr);
  assert.match(failed.stderr, /HYPSINK_ERR_CORRUPT/);
  const said = /every row of batch (\S+) is durable in its spool and commits with the next flush; do not send it again, or retry with --batch-id \1 /.exec(failed.stderr);
  assert.ok(said, `the error says what is durable and how to retry: ${failed.stderr}`);
  // The operator repairs the file; the host retries as the message says.
  await fsp.rm(seqFile);
  const retry = await runBin(['ingest', 'events', '--source', 'web', '--file', file, '--batch-id', said[1]!, '--config', config]);
  assert.equal(retry.code, 0, retry.stderr);
  assert.match(retry.stdout, /acknowledged again, nothing added/);
  assert.deepEqual(await exported(dir, config), ids(1, 4));
});
