/**
 * A copied cache (a cloned VM image) or a restored one (a backup put back)
 * hands out the same cache id and the same seqs again for other rows. The
 * Postgres sink's watermark row says those seqs are held; the unit record
 * written with the rows (`hypsink_units`, same transaction) says by which
 * content. Same label, other digest (or a held range that does not line up
 * with the unit's): HYPSINK_ERR_CONFLICT, nothing written, nothing counted.
 * Same label, same digest (a crash-retry, a copy that got the same rows):
 * a duplicate, as before.
 * @ref LLP 0054 (a unit is known by its content), LLP 0056 (the Postgres units table)
 */
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { cp, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { eventLines, ingestText, openKernel, partitionStatus, range, unseenCopy } from '../support/kernel.js';
import { testPg } from '../support/pg.js';
import { tempDir } from '../support/tmp.js';
import { type PgWorkspace, pgWorkspace } from './helpers.js';

after(async () => (await testPg()).stop());

const ids = async (w: PgWorkspace) => (await w.rows()).map((r) => Number(r.id));

/** Open the kernel of `config` once (the cache and its id are made), and close it. */
async function touch(config: string): Promise<void> {
  const { k } = await openKernel(config);
  await k.close();
}

async function ingestAt(config: string, from: number, n: number): Promise<void> {
  const { k } = await openKernel(config);
  try {
    const r = await ingestText(k, 'h', eventLines(from, n));
    assert.equal(r.accepted, n);
  } finally {
    await k.close();
  }
}

async function exportAt(config: string) {
  const { k } = await openKernel(config);
  try {
    const [t] = await k.export('warehouse');
    return { t: t!, error: t!.partitions[0]?.error ?? null, status: partitionStatus(await k.status(), 'warehouse', 'h') };
  } finally {
    await k.close();
  }
}

/** The backup put back over the workspace: its cache and sink state as they were (what was not there then is not there now). */
async function restore(w: PgWorkspace, backup: string): Promise<void> {
  for (const d of ['cache', 'state']) {
    await rm(join(w.dir, d), { recursive: true, force: true });
    if (existsSync(join(backup, d))) await cp(join(backup, d), join(w.dir, d), { recursive: true });
  }
  // A restore the cache does not see (the folder's inode kept): the database's check is what holds.
  await unseenCopy(w.config);
}

/** The refusal came from the sink's unit records, not from the kernel's own copy check. */
function fromUnitRecords(e: { code: string; message: string } | null): void {
  assert.equal(e?.code, 'HYPSINK_ERR_CONFLICT', String(e?.message));
  assert.match(e!.message, /is not what public\.hypsink_units at postgres:\/\/postgres@[^ ]+ holds under its name/, e!.message);
}

/**
 * A copy of the whole hypsink folder (cache and state) that the cache does not
 * see as one (a VM image keeps the folder, its inode and often the machine id),
 * so only the database's check stands between its rows and the original's; its config.
 */
async function copyOf(w: PgWorkspace): Promise<string> {
  const copy = tempDir('hypsink-pg-clone-');
  await cp(w.dir, copy, { recursive: true });
  const config = join(copy, 'hypsink.config.json');
  await unseenCopy(config);
  return config;
}

test('a cloned cache: A exports 12 rows, its clone B 5 other rows under the same seqs: B is refused (HYPSINK_ERR_CONFLICT), the table holds A\'s 12 rows, B counts nothing exported', async () => {
  const w = await pgWorkspace();
  await touch(w.config);
  const b = await copyOf(w);

  await ingestAt(w.config, 1, 12);
  const a = await exportAt(w.config);
  assert.equal(a.error, null, String(a.error));
  assert.equal(a.status.exportedRows, 12);

  await ingestAt(b, 101, 5);
  const got = await exportAt(b);
  assert.equal(got.error?.code, 'HYPSINK_ERR_CONFLICT', `B's export must be refused, not called committed: ${String(got.error)}`);
  fromUnitRecords(got.error);
  const msg = got.error!.message;
  assert.match(msg, /sink "warehouse": unit \(start, \d+\] of events\/source=h \(digest u1-[\w-]{43}\)/, msg);
  assert.match(msg, /unit \(start, \d+\] with digest u1-[\w-]{43}/, 'names the range and digest the database holds');
  assert.match(msg, /hypsink_units/, 'names where it was found');
  assert.deepEqual(await ids(w), range(1, 12), "exactly A's rows");
  assert.equal(got.status.exportedRows, 0, "B counts none of its 5 rows as exported");
  assert.equal(got.status.watermark, null, "B's watermark did not move");
  assert.ok(got.status.intent, 'the unit stays pending');

  // Asked again, the same answer: a refusal is not worn down by retries.
  const again = await exportAt(b);
  fromUnitRecords(again.error);
  assert.deepEqual(await ids(w), range(1, 12));
});

for (const [where, maxRows] of [
  ['ends inside A\'s first unit', 3],
  ['has the label of A\'s first unit', 4],
  ['ends past all A shipped', 8],
] as const) {
  test(`a cloned cache whose first unit ${where} (B cuts units at ${maxRows} rows, A at 4): refused (HYPSINK_ERR_CONFLICT), nothing written or counted`, async () => {
    const w = await pgWorkspace({ unit: { maxRows: 4 } });
    await touch(w.config);
    const b = await copyOf(w);
    const cfg = JSON.parse(await readFile(b, 'utf8'));
    cfg.sinks.warehouse.unit = { maxRows };
    await writeFile(b, JSON.stringify(cfg));
    await ingestAt(w.config, 1, 6); // A: (start, s4], (s4, s6]
    assert.equal((await exportAt(w.config)).error, null);
    await ingestAt(b, 101, 9);
    const got = await exportAt(b);
    assert.equal(got.error?.code, 'HYPSINK_ERR_CONFLICT', String(got.error));
    fromUnitRecords(got.error);
    assert.match(got.error!.message, /(unit \(start, \d+\]|the same range) with digest u1-/, 'names A\'s first unit');
    assert.deepEqual(await ids(w), range(1, 6));
    assert.equal(got.status.exportedRows, 0);
    assert.equal(got.status.watermark, null);
  });
}

test('a restored cache: rows exported, the backup put back, other rows ingested under the same seqs: refused (HYPSINK_ERR_CONFLICT), nothing lost silently', async () => {
  const w = await pgWorkspace();
  await touch(w.config);
  const backup = tempDir('hypsink-pg-backup-');
  await cp(w.dir, backup, { recursive: true });

  await ingestAt(w.config, 1, 5);
  const first = await exportAt(w.config);
  assert.equal(first.error, null, String(first.error));
  assert.equal(first.status.exportedRows, 5);

  // The backup put back: the cache and its sink state as they were before those rows.
  await restore(w, backup);
  await ingestAt(w.config, 201, 5);
  const got = await exportAt(w.config);
  assert.equal(got.error?.code, 'HYPSINK_ERR_CONFLICT', `the restored cache's unit must be refused: ${String(got.error)}`);
  fromUnitRecords(got.error);
  assert.deepEqual(await ids(w), range(1, 5), 'the rows of the first export, and no other');
  assert.equal(got.status.exportedRows, 0, 'the refused unit is not counted');
  assert.equal(got.status.watermark, null);
});

test('a restored cache that goes on past what it had shipped: refused as other content, not as a database restored', async () => {
  const w = await pgWorkspace();
  await ingestAt(w.config, 1, 5);
  const backup = tempDir('hypsink-pg-backup-');
  await cp(w.dir, backup, { recursive: true });
  assert.equal((await exportAt(w.config)).error, null);
  await restore(w, backup);
  await ingestAt(w.config, 6, 7); // one unit (start, s12] over the held (start, s5]
  const got = await exportAt(w.config);
  assert.equal(got.error?.code, 'HYPSINK_ERR_CONFLICT', String(got.error));
  fromUnitRecords(got.error);
  assert.match(got.error!.message, /unit \(start, \d+\] with digest u1-/);
  assert.deepEqual(await ids(w), range(1, 5));
  assert.equal(got.status.exportedRows, 0);
});

test('a clone that got the same rows under the same seqs: the same digest, a duplicate, not a conflict', async () => {
  const w = await pgWorkspace({ unit: { maxRows: 4 } });
  await touch(w.config);
  const b = await copyOf(w);
  await ingestAt(w.config, 1, 10);
  assert.equal((await exportAt(w.config)).error, null);
  await ingestAt(b, 1, 10);
  const got = await exportAt(b);
  assert.equal(got.error, null, String(got.error));
  assert.equal(got.t.units, 3, 'each unit found committed');
  assert.deepEqual(await ids(w), range(1, 10), 'every row once');
  assert.equal(got.status.exportedRows, 10);
});
