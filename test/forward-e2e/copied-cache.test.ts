/**
 * A cache copied to a second host, or restored from a backup, hands out the
 * same cache id and the same seqs again for other rows, so its forward batches
 * get the ids the receiver already holds. The receiver keeps each batch's unit
 * digest and refuses an id named with another one: the copy's export fails
 * with HYPSINK_ERR_CONFLICT, the receiver holds the first rows once and none
 * of the copy's, and the copy counts none of them exported. The real kernel,
 * the real CLI and the reference receiver over loopback; the copy is the whole
 * hypsink folder (cache and state) copied. The cache sees a copy at open and
 * exports nothing until told (LLP 0055); here it is told, wrongly, that the
 * original stopped (`hypsink identity --moved`), so the receiver's check of
 * the content is what must hold: the last line, when that first one is passed.
 * @ref LLP 0054: a unit is known by its content
 * @ref LLP 0055: copied and restored caches
 * @ref LLP 0060: the forward sink's unit digest
 */
import assert from 'node:assert/strict';
import { promises as fsp } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { LEDGER_FILE, readStored, startReceiver } from '../../fixtures/receiver/server.js';
import { assertExactlyOnce, e2eConfig, ids, ingestWith, logLines, partitionStatus, type ProcResult, runCli, statusOf, TOKEN, type Workspace, workspace } from './helpers.js';

/** The hypsink folder of a workspace: its config, cache and sink state (not the receiver's data). */
const HYPSINK = ['hypsink.config.json', 'cache', 'state'];

async function copyHypsink(from: string, to: string): Promise<void> {
  for (const name of HYPSINK) {
    await fsp.rm(join(to, name), { recursive: true, force: true });
    await fsp.cp(join(from, name), join(to, name), { recursive: true });
  }
}

/** The operator says (wrongly) that the original no longer runs: the cache's own check of a copy is passed. */
async function declareMoved(ws: Workspace): Promise<void> {
  const out = await runCli(['identity', '--moved', '--config', ws.configPath]);
  assert.equal(out.code, 0, out.stderr);
}

async function exportCli(ws: Workspace): Promise<ProcResult> {
  return runCli(['export', '--config', ws.configPath]);
}

/** The copy's export failed with the one refusal, naming the sink, partition, range and both digests. */
function assertConflict(out: ProcResult, range: string): void {
  assert.equal(out.code, 1, `the copy's export must fail:\n${out.stderr}`);
  assert.match(out.stderr, /HYPSINK_ERR_CONFLICT/, out.stderr);
  const m = new RegExp(
    `sink "central": unit \\(${range.replace(/[()[\]]/g, '\\$&')} of events/source=web \\(digest (u1-[\\w-]{43})\\) is not what the receiver at http://127\\.0\\.0\\.1:\\d+ \\(batch hfw1-[\\w-]+\\) holds under its name \\(the same range with digest (u1-[\\w-]{43})\\)`,
  ).exec(out.stderr);
  assert.ok(m, `the refusal names the sink, partition, range and both digests:\n${out.stderr}`);
  assert.notEqual(m[1], m[2]);
  assert.equal(
    logLines(out.stderr).some((l) => l.msg === 'batch delivered' && l.duplicate === true),
    false,
    'nothing of the copy was taken for delivered',
  );
}

test('a cloned cache: the copy exports other rows under the same batch ids and is refused with HYPSINK_ERR_CONFLICT', { timeout: 120_000 }, async (t) => {
  const a = await workspace('copied-a');
  const b = await workspace('copied-b');
  t.after(() => a.cleanup());
  t.after(() => b.cleanup());
  const r = await startReceiver({ port: 0, dataDir: a.recv, token: TOKEN });
  t.after(() => r.close());
  await a.writeConfig(e2eConfig(r.url));

  // A history both will share: exported before the copy.
  await ingestWith(a.configPath, { web: [1, 3] });
  assert.equal((await exportCli(a)).code, 0);
  await copyHypsink(a.dir, b.dir);
  await declareMoved(b);

  // Each host ingests its own rows: the same seqs (4..7) on both.
  await ingestWith(a.configPath, { web: [101, 4] });
  await ingestWith(b.configPath, { web: [201, 4] });
  const first = await exportCli(a);
  assert.equal(first.code, 0, first.stderr);
  const held = (await readStored(a.recv)).ledger.map((e) => e.id);

  const copy = await exportCli(b);
  assertConflict(copy, '3, 7]');
  await assertExactlyOnce(a.recv, { web: [...ids(1, 3), ...ids(101, 4)] });
  assert.deepEqual(
    (await readStored(a.recv)).ledger.map((e) => e.id),
    held,
    'the receiver stored nothing of the copy',
  );
  const sb = partitionStatus(await statusOf(b.configPath), 'web');
  assert.equal(sb.exportedRows, 3, "the copy counts only the shared rows exported, none of its own");
  assert.equal(sb.pendingRows, 4);
  assert.match(String(sb.lastError), /^HYPSINK_ERR_CONFLICT: sink "central": unit \(3, 7\] of events\/source=web/);

  // A second try changes nothing: refused again, never skipped.
  assertConflict(await exportCli(b), '3, 7]');
  assert.equal(partitionStatus(await statusOf(b.configPath), 'web').exportedRows, 3);
  // The original goes on: its next rows are stored once.
  await ingestWith(a.configPath, { web: [105, 2] });
  assert.equal((await exportCli(a)).code, 0);
  await assertExactlyOnce(a.recv, { web: [...ids(1, 3), ...ids(101, 4), ...ids(105, 2)] });

  // verify reads each batch's unit digest back from the receiver's ledger and compares it with the cache.
  const va = await runCli(['verify', '--config', a.configPath]);
  assert.equal(va.code, 0, va.stdout + va.stderr);
  assert.match(va.stdout, /3 units over 1 partition, chain whole to the watermark; 3 units whose content matches the cache/);
  const vb = await runCli(['verify', '--config', b.configPath]);
  assert.equal(vb.code, 1, vb.stdout + vb.stderr);
  assert.match(vb.stdout, /hfw1-3-7-[0-9a-f]{32}: holds other rows than the cache holds for its range \(3, 7\]: recorded digest u1-[\w-]{43}, the cache's u1-[\w-]{43}/);
});

test('a restored cache: the backup hands out exported seqs again for other rows and is refused with HYPSINK_ERR_CONFLICT', { timeout: 120_000 }, async (t) => {
  const ws = await workspace('restored');
  const backup = await workspace('restored-backup');
  t.after(() => ws.cleanup());
  t.after(() => backup.cleanup());
  const r = await startReceiver({ port: 0, dataDir: ws.recv, token: TOKEN });
  t.after(() => r.close());
  await ws.writeConfig(e2eConfig(r.url));

  await ingestWith(ws.configPath, { web: [1, 4] });
  assert.equal((await exportCli(ws)).code, 0);
  await copyHypsink(ws.dir, backup.dir); // the backup
  await ingestWith(ws.configPath, { web: [11, 3] });
  assert.equal((await exportCli(ws)).code, 0);
  await copyHypsink(backup.dir, ws.dir); // restored over it
  await declareMoved(ws);
  // Seqs 5..7 again, for other rows.
  await ingestWith(ws.configPath, { web: [21, 3] });

  assertConflict(await exportCli(ws), '4, 7]');
  await assertExactlyOnce(ws.recv, { web: [...ids(1, 4), ...ids(11, 3)] });
  const st = partitionStatus(await statusOf(ws.configPath), 'web');
  assert.equal(st.exportedRows, 4, 'the restored cache counts none of its new rows exported');
  assert.equal(st.pendingRows, 3);
  assert.match(String(st.lastError), /^HYPSINK_ERR_CONFLICT: sink "central": unit \(4, 7\] of events\/source=web/);
  // Every ledger entry carries the unit digest its batch was sent with.
  const lines = (await fsp.readFile(join(ws.recv, LEDGER_FILE), 'utf8')).trim().split('\n');
  assert.equal(lines.length, 2);
  for (const l of lines) assert.match(String((JSON.parse(l) as { unitDigest?: unknown }).unitDigest), /^u1-[\w-]{43}$/);
  const v = await runCli(['verify', '--config', ws.configPath]);
  assert.equal(v.code, 1, v.stdout + v.stderr);
  assert.match(v.stdout, /hfw1-4-7-[0-9a-f]{32}: holds other rows than the cache holds for its range \(4, 7\]: recorded digest u1-[\w-]{43}, the cache's u1-[\w-]{43}/);
  assert.match(v.stdout, /2 units over 1 partition, 1 finding; 1 unit whose content matches the cache/);
});
