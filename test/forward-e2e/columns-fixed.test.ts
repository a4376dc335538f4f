/**
 * A unit's columns are fixed when its intent is written: the exporter is killed
 * after the receiver stored a unit, a nullable column is added to the dataset,
 * and the retry must rebuild that unit byte for byte. The receiver keeps each
 * stored body's digest and answers another body under a stored id with 409
 * (LLP 0027), so a rebuilt unit carrying the new column as nulls would be stuck.
 * @ref LLP 0030: a unit's columns are fixed with its intent
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { readStored, startReceiver } from '../../fixtures/receiver/server.js';
import { e2eConfig, EVENTS, ids, ingestWith, type Json, logLines, runCli, statusOf, TOKEN, workspace } from './helpers.js';

test('a column added while a shipped unit awaits its advance: the retry re-sends the unit as it was planned', { timeout: 60_000 }, async () => {
  const ws = await workspace('columns-fixed');
  const r = await startReceiver({ port: 0, dataDir: ws.recv, token: TOKEN });
  try {
    await ws.writeConfig(e2eConfig(r.url, { driver: { concurrency: 1 } }));
    await ingestWith(ws.configPath, { alpha: [1, 5] });
    const crashed = await runCli(['export', '--config', ws.configPath, '--json'], { HYPSINK_FAULT: 'export.afterShip' });
    assert.equal(crashed.signal, 'SIGKILL', `the exporter died by SIGKILL: ${crashed.stderr}`);
    const st0 = await statusOf(ws.configPath);
    const unit = st0.sinks[0]!.partitions[0]!.intent?.unit;
    assert.ok(unit, 'the unit is still open');
    assert.deepEqual(
      (await readStored(ws.recv)).ledger.map((e) => e.id),
      [unit],
      'the receiver stored the unit before the crash',
    );

    // The dataset gains a nullable column: rows of the open unit read it as null.
    const cfg = e2eConfig(r.url, { driver: { concurrency: 1 } }) as { datasets: Record<string, Json> };
    cfg.datasets.events = { ...EVENTS, columns: [...EVENTS.columns, { name: 'extra', type: 'STRING', nullable: true }] };
    await ws.writeConfig(cfg as Json);
    await ingestWith(ws.configPath, { alpha: [6, 3] });

    const retry = await runCli(['export', '--config', ws.configPath, '--json']);
    assert.equal(retry.code, 0, retry.stderr);
    const resent = logLines(retry.stderr).find((l) => l.msg === 'batch delivered' && l.unit === unit);
    assert.ok(resent, `the retry re-sent ${unit}`);
    assert.equal(resent.duplicate, true, 'the receiver recognised the same body under its id');
    const stored = await readStored(ws.recv);
    const rows = stored.rows.events!.alpha!;
    assert.deepEqual(
      rows.map((x) => Number(x.id)),
      ids(1, 8),
      'every row stored once',
    );
    // The unit planned before the column came has no key for it; the rows after it read it as null.
    assert.deepEqual(
      rows.map((x) => (Object.hasOwn(x, 'extra') ? x.extra : 'absent')),
      ['absent', 'absent', 'absent', 'absent', 'absent', null, null, null],
    );
  } finally {
    await r.close();
    await ws.cleanup();
  }
});
