/**
 * Time-partitioned keys for blob sinks (issue 17): `"keys": { "time": "day" | "hour" }`
 * puts each unit's rows under Hive-style `dt=YYYY-MM-DD[/hour=HH]` segments of
 * the dataset's timestamp column, in UTC, one blob per day (hour) of the unit,
 * each naming the unit's whole range. Real local-fs on real disk, Parquet and
 * JSONL read back directly; a failure between two blobs of a unit, then a retry
 * that writes only the missing blob with the bytes a clean export writes; null
 * timestamps; config errors; `verify` over segmented keys; one s3rver run.
 * @ref LLP 0048
 */
import assert from 'node:assert/strict';
import { promises as fsp, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { test } from 'node:test';
import { loadConfig } from '../../kernel/config/load.js';
import { resetFaultHits } from '../../kernel/fault.js';
import { cli, cliStatus, decodeParquet, FIXTURE_PLUGINS, ingestText, type Json, openKernel, partitionStatus, runBin, sampleConfig, walkFiles, writeConfig } from '../support/kernel.js';
import { tempDir } from '../support/tmp.js';

const DAY = 86_400_000;
const T0 = Date.UTC(2026, 2, 30, 22, 0, 0); // 2026-03-30T22:00Z

/** Rows `id` at `ts(id)` (ms, or null for a null timestamp). */
function lines(ids: readonly number[], ts: (id: number) => number | null): string {
  return ids.map((id) => `${JSON.stringify({ id, ts: ts(id) === null ? null : new Date(ts(id)!).toISOString(), msg: `m${id}` })}\n`).join('');
}

const ids = (from: number, n: number) => Array.from({ length: n }, (_, i) => from + i);

/** A config: `archive` (Parquet) with the given keys; ts nullable so null timestamps can be ingested. */
async function setup(keys: Json | undefined, extra: (c: ReturnType<typeof sampleConfig>) => void = () => undefined) {
  const dir = tempDir('hypsink-timekeys-');
  const c = sampleConfig();
  (c.datasets.events!.columns as Json[])[1]!.nullable = true;
  if (keys) c.sinks.archive!.keys = keys;
  extra(c);
  return { dir, config: await writeConfig(dir, c), exports: join(dir, 'exports') };
}

async function ingestRows(config: string, source: string, text: string): Promise<void> {
  const { k } = await openKernel(config);
  try {
    const r = await ingestText(k, source, text);
    assert.equal(r.rejected, 0, JSON.stringify(r));
  } finally {
    await k.close();
  }
}

async function exportAll(config: string, sink?: string) {
  const { k } = await openKernel(config);
  try {
    return await k.export(sink);
  } finally {
    await k.close();
  }
}

/** Committed blobs under an export dir, relative, sorted. */
async function blobs(exports: string): Promise<string[]> {
  return (await walkFiles(exports, '.hypsink-tmp')).map((p) => p.slice(exports.length + 1));
}

const idsOf = (path: string) => decodeParquet(path).rows.map((r) => r.id as number);

test('day keys: a unit spanning three days is one blob per day, each holding exactly its day\'s rows in seq order', async () => {
  const { config, exports } = await setup({ time: 'day' });
  // Rows out of time order within the unit: 1..10 on day 1, 11..20 on day 2, 21..30 back and forth.
  const ts = (id: number) => (id <= 10 ? T0 : id <= 20 ? T0 + DAY : id % 2 === 0 ? T0 + 2 * DAY : T0 + 3_600_000);
  await ingestRows(config, 'web', lines(ids(1, 30), ts));
  const [r] = await exportAll(config);
  assert.equal(r?.failed, 0);
  assert.deepEqual(await blobs(exports), [
    'events/source=web/dt=2026-03-30/events.0-30.parquet',
    'events/source=web/dt=2026-03-31/events.0-30.parquet',
    'events/source=web/dt=2026-04-01/events.0-30.parquet',
  ]);
  const day = (d: string) => idsOf(join(exports, `events/source=web/dt=${d}/events.0-30.parquet`));
  assert.deepEqual(day('2026-03-30'), [...ids(1, 10), 21, 23, 25, 27, 29]);
  assert.deepEqual(day('2026-03-31'), ids(11, 10));
  assert.deepEqual(day('2026-04-01'), [22, 24, 26, 28, 30]);
  const p = partitionStatus(await cliStatus(config), 'archive', 'web');
  assert.deepEqual([p.exportedRows, p.pendingRows, p.watermark, p.intent], [30, 0, '30', null]);
});

test('hour keys with the JSONL writer: dt=/hour= segments in UTC, each blob its hour\'s lines', async () => {
  const { config, exports } = await setup({ time: 'hour' }, (c) => {
    c.sinks.archive!.writer = '@hypsink/format-jsonl';
  });
  // 22:00Z, 22:59:59.999Z, 23:00Z, and across midnight to 00:30Z.
  const at = [T0, T0 + 3_599_999, T0 + 3_600_000, T0 + 2 * 3_600_000 + 1_800_000];
  await ingestRows(config, 'web', lines(ids(1, 8), (id) => at[(id - 1) % 4]!));
  await exportAll(config);
  assert.deepEqual(await blobs(exports), [
    'events/source=web/dt=2026-03-30/hour=22/events.0-8.jsonl',
    'events/source=web/dt=2026-03-30/hour=23/events.0-8.jsonl',
    'events/source=web/dt=2026-03-31/hour=00/events.0-8.jsonl',
  ]);
  const read = (rel: string) =>
    readFileSync(join(exports, rel), 'utf8')
      .trim()
      .split('\n')
      .map((l) => (JSON.parse(l) as { id: number }).id);
  assert.deepEqual(read('events/source=web/dt=2026-03-30/hour=22/events.0-8.jsonl'), [1, 2, 5, 6]);
  assert.deepEqual(read('events/source=web/dt=2026-03-30/hour=23/events.0-8.jsonl'), [3, 7]);
  assert.deepEqual(read('events/source=web/dt=2026-03-31/hour=00/events.0-8.jsonl'), [4, 8]);
});

test("an encoder reading the unit's NDJSON gets one day's lines per blob", async () => {
  const { dir, config, exports } = await setup({ time: 'day' }, (c) => {
    c.sinks.archive!.writer = 'test-ndjson-encoder';
  });
  const c = JSON.parse(readFileSync(config, 'utf8')) as Json;
  c.plugins = [relative(dir, join(FIXTURE_PLUGINS, 'ndjson-encoder'))];
  await writeConfig(dir, c);
  await ingestRows(config, 'web', lines(ids(1, 9), (id) => (id % 3 === 0 ? null : T0 + (id % 3) * DAY)));
  const [r] = await exportAll(config);
  assert.equal(r?.failed, 0, JSON.stringify(r));
  const read = (seg: string) =>
    readFileSync(join(exports, `events/source=web/${seg}/events.0-9.ndjson`), 'utf8')
      .trim()
      .split('\n')
      .map((l) => (JSON.parse(l) as { id: number }).id);
  assert.deepEqual(await blobs(exports), ['dt=2026-03-31', 'dt=2026-04-01', 'dt=__HIVE_DEFAULT_PARTITION__'].map((s) => `events/source=web/${s}/events.0-9.ndjson`));
  assert.deepEqual(read('dt=2026-03-31'), [1, 4, 7]);
  assert.deepEqual(read('dt=2026-04-01'), [2, 5, 8]);
  assert.deepEqual(read('dt=__HIVE_DEFAULT_PARTITION__'), [3, 6, 9]);
});

test('without keys.time the keys are as before; a single-day unit under day keys is one blob', async () => {
  const plain = await setup(undefined);
  await ingestRows(plain.config, 'web', lines(ids(1, 4), () => T0));
  await exportAll(plain.config);
  assert.deepEqual(await blobs(plain.exports), ['events/source=web/events.0-4.parquet']);
  const day = await setup({ time: 'day' }, (c) => {
    c.sinks.archive!.unit = { maxRows: 3 };
  });
  await ingestRows(day.config, 'web', lines(ids(1, 5), () => T0));
  await exportAll(day.config);
  assert.deepEqual(await blobs(day.exports), ['events/source=web/dt=2026-03-30/events.0-3.parquet', 'events/source=web/dt=2026-03-30/events.3-5.parquet']);
});

test('null timestamps go under Hive\'s default partition, after the days, per hour too', async () => {
  for (const [grain, seg] of [
    ['day', 'dt=__HIVE_DEFAULT_PARTITION__'],
    ['hour', 'dt=__HIVE_DEFAULT_PARTITION__/hour=__HIVE_DEFAULT_PARTITION__'],
  ] as const) {
    const { config, exports } = await setup({ time: grain });
    await ingestRows(config, 'web', lines(ids(1, 6), (id) => (id % 3 === 0 ? null : T0)));
    await exportAll(config);
    const mine = grain === 'day' ? 'dt=2026-03-30' : 'dt=2026-03-30/hour=22';
    assert.deepEqual(await blobs(exports), [`events/source=web/${seg}/events.0-6.parquet`, `events/source=web/${mine}/events.0-6.parquet`].sort());
    assert.deepEqual(idsOf(join(exports, `events/source=web/${seg}/events.0-6.parquet`)), [3, 6]);
    const held = decodeParquet(join(exports, `events/source=web/${seg}/events.0-6.parquet`)).rows.map((r) => r.ts);
    assert.deepEqual(held, [null, null]);
    assert.deepEqual(idsOf(join(exports, `events/source=web/${mine}/events.0-6.parquet`)), [1, 2, 4, 5]);
  }
});

test('a failure between two blobs of a unit: the retry writes only the missing blobs, with the bytes a clean export writes', async () => {
  // `archive` fails after its first blob; `clean` (its own dir) exports the same rows without a failure.
  const { dir, config, exports } = await setup({ time: 'day' }, (c) => {
    c.sinks.clean = { ...c.sinks.archive!, config: { dir: 'clean' } };
  });
  const ts = (id: number) => T0 + Math.floor((id - 1) / 4) * DAY; // 4 rows a day, 3 days
  await ingestRows(config, 'web', lines(ids(1, 12), ts));
  const first = 'events/source=web/dt=2026-03-30/events.0-12.parquet';
  process.env.HYPSINK_FAULT = 'blob.afterDayBlob';
  process.env.HYPSINK_FAULT_ACTION = 'throw';
  resetFaultHits();
  try {
    const [r] = await exportAll(config, 'archive');
    assert.equal(r?.failed, 1, JSON.stringify(r));
  } finally {
    delete process.env.HYPSINK_FAULT;
    delete process.env.HYPSINK_FAULT_ACTION;
  }
  assert.deepEqual(await blobs(exports), [first], 'one blob of the unit stored, the others not');
  const p = partitionStatus(await cliStatus(config), 'archive', 'web');
  assert.deepEqual([p.watermark, p.exportedRows], [null, 0], 'the unit did not advance');
  assert.match(p.lastError ?? '', /injected failure at fault point blob\.afterDayBlob/);
  // verify: the open intent's unit stored in part is not a finding (the export finishes it).
  const v = await cli('verify', '--json', '--sink', 'archive', '--config', config);
  assert.equal(v.code, 0, v.out + v.err);
  const part = (JSON.parse(v.out) as { sinks: { partitions: { source: string; units: number; intents: number }[] }[] }).sinks[0]!.partitions[0]!;
  assert.deepEqual([part.units, part.intents], [1, 1]);
  const before = await fsp.stat(join(exports, first));
  const [retry] = await exportAll(config, 'archive');
  assert.equal(retry?.failed, 0);
  assert.deepEqual(await blobs(exports), [first, 'events/source=web/dt=2026-03-31/events.0-12.parquet', 'events/source=web/dt=2026-04-01/events.0-12.parquet']);
  const after = await fsp.stat(join(exports, first));
  assert.deepEqual([after.ino, after.mtimeMs], [before.ino, before.mtimeMs], 'the blob stored before the failure is not written again');
  await exportAll(config, 'clean');
  const clean = join(dir, 'clean');
  assert.deepEqual(await blobs(clean), await blobs(exports));
  for (const rel of await blobs(exports)) assert.ok(readFileSync(join(exports, rel)).equals(readFileSync(join(clean, rel))), `${rel}: the same bytes as a clean export`);
  const all = (await blobs(exports)).flatMap((rel) => idsOf(join(exports, rel))).sort((a, b) => a - b);
  assert.deepEqual(all, ids(1, 12), 'every row exactly once');
  const s = partitionStatus(await cliStatus(config), 'archive', 'web');
  assert.deepEqual([s.watermark, s.exportedRows, s.pendingRows, s.lastError], ['12', 12, 0, null]);
});

test('a retry that finds every blob of the unit stored advances it as a duplicate', async () => {
  const { config, exports } = await setup({ time: 'day' });
  await ingestRows(config, 'web', lines(ids(1, 6), (id) => T0 + (id % 2) * DAY));
  process.env.HYPSINK_FAULT = 'export.afterShip';
  process.env.HYPSINK_FAULT_ACTION = 'throw';
  resetFaultHits();
  try {
    const [r] = await exportAll(config);
    assert.equal(r?.failed, 1);
  } finally {
    delete process.env.HYPSINK_FAULT;
    delete process.env.HYPSINK_FAULT_ACTION;
  }
  const stored = await blobs(exports);
  assert.equal(stored.length, 2);
  const mtimes = await Promise.all(stored.map(async (rel) => (await fsp.stat(join(exports, rel))).mtimeMs));
  const [r] = await exportAll(config);
  assert.equal(r?.failed, 0);
  assert.deepEqual(await blobs(exports), stored);
  assert.deepEqual(await Promise.all(stored.map(async (rel) => (await fsp.stat(join(exports, rel))).mtimeMs)), mtimes);
  const p = partitionStatus(await cliStatus(config), 'archive', 'web');
  assert.deepEqual([p.watermark, p.exportedRows], ['6', 6]);
});

test('the read guard covers every blob: a damaged second cache file fails even the blob of a day whose rows all lie in the first; restored, the unit ships once', async () => {
  const { dir, config, exports } = await setup({ time: 'day' }, (c) => {
    c.cache = { root: '.hypsink/cache', rowGroupRows: 4 };
  });
  // Day 1's rows in the first data file, day 2's in the second; one unit over both.
  const big = (id: number) => `${JSON.stringify({ id, ts: new Date(T0 + (id > 10 ? DAY : 0)).toISOString(), msg: `${id}:${'x'.repeat(10)}${Math.random().toString(36).repeat(20)}` })}\n`;
  await ingestRows(config, 'web', ids(1, 10).map(big).join(''));
  await ingestRows(config, 'web', ids(11, 10).map(big).join(''));
  const files = (await walkFiles(join(dir, '.hypsink/cache/datasets'))).filter((f) => f.endsWith('.parquet')).sort();
  assert.equal(files.length, 2, 'two data files');
  const original = await fsp.readFile(files[1]!);
  await fsp.truncate(files[1]!, Math.floor(original.length / 2));
  const r = await runBin(['export', '--config', config]);
  assert.equal(r.code, 1, `the export must fail: ${r.stdout}${r.stderr}`);
  assert.match(r.stderr, /HYPSINK_ERR_CORRUPT/);
  assert.deepEqual(await blobs(exports), [], "no blob committed, not even the first day's");
  assert.equal(partitionStatus(await cliStatus(config), 'archive', 'web').watermark, null);
  await fsp.writeFile(files[1]!, original);
  assert.equal((await runBin(['export', '--config', config])).code, 0);
  assert.deepEqual(await blobs(exports), ['events/source=web/dt=2026-03-30/events.0-20.parquet', 'events/source=web/dt=2026-03-31/events.0-20.parquet']);
  assert.deepEqual(idsOf(join(exports, 'events/source=web/dt=2026-03-30/events.0-20.parquet')), ids(1, 10));
  assert.deepEqual(idsOf(join(exports, 'events/source=web/dt=2026-03-31/events.0-20.parquet')), ids(11, 10));
});

test('config errors: keys.time on a dataset without timestampColumn names the file, sink and dataset; bad values name the field', async () => {
  const dir = tempDir('hypsink-timekeys-');
  const c = sampleConfig();
  c.datasets.logs = { columns: [{ name: 'line', type: 'STRING' }] };
  c.sinks.archive!.datasets = ['events', 'logs'];
  c.sinks.archive!.keys = { time: 'day' };
  const path = await writeConfig(dir, c);
  await assert.rejects(loadConfig(path), (e: Error) => {
    assert.equal((e as { code?: string }).code, 'HYPSINK_ERR_CONFIG');
    assert.ok(e.message.includes(path), e.message);
    assert.match(e.message, /sink "archive": keys\.time: dataset "logs" has no timestampColumn/);
    return true;
  });
  c.sinks.archive!.datasets = ['events'];
  c.sinks.archive!.keys = { time: 'week' };
  await assert.rejects(loadConfig(await writeConfig(dir, c)), /sink "archive": keys\.time/);
  c.sinks.archive!.keys = { time: 'day', zone: 'Europe/Paris' };
  await assert.rejects(loadConfig(await writeConfig(dir, c)), /sink "archive": keys.*zone/);
});

test('verify over day keys: the blobs of a unit are one unit, rows summed; a missing day blob is a row-count finding', async () => {
  const { config, exports } = await setup({ time: 'day' }, (c) => {
    c.sinks.archive!.unit = { maxRows: 5 };
  });
  await ingestRows(config, 'web', lines(ids(1, 12), (id) => T0 + Math.floor(id / 4) * DAY));
  await ingestRows(config, 'app', lines(ids(1, 3), () => T0));
  await exportAll(config);
  const stored = await blobs(exports);
  assert.ok(stored.length > 4, `units of web span days: ${stored.join(', ')}`);
  const ok = await cli('verify', '--config', config);
  assert.equal(ok.code, 0, ok.out + ok.err);
  assert.match(ok.out, /sink "archive": 4 units over 2 partitions, chain whole to the watermark/);
  const json = JSON.parse((await cli('verify', '--json', '--config', config)).out) as { sinks: { partitions: { source: string; units: number; rowsChecked: number }[] }[] };
  const web = json.sinks[0]!.partitions.find((p) => p.source === 'web')!;
  assert.deepEqual([web.units, web.rowsChecked], [3, 3]);
  // One day's blob of the unit (0, 5] deleted: that unit holds fewer rows than the cache.
  const victim = stored.find((rel) => rel.startsWith('events/source=web/') && rel.endsWith('/events.0-5.parquet'))!;
  const lost = idsOf(join(exports, victim)).length;
  await fsp.rm(join(exports, victim));
  const bad = await cli('verify', '--config', config);
  assert.equal(bad.code, 1, bad.out + bad.err);
  assert.match(bad.out, new RegExp(`events/source=web/dt=\\*/events\\.0-5\\.parquet: holds ${5 - lost} rows, the cache holds 5`));
});

test('day keys to S3 (s3rver): the segmented keys, then verify over its listing', { timeout: 60_000 }, async (t) => {
  const { startStack, useCredentials, listKeys, lakeSink, EVENTS_DATASET } = await import('../s3-e2e/helpers.js');
  useCredentials();
  const { s3, dir } = await startStack(t);
  const lake = { ...lakeSink(s3.endpoint), keys: { time: 'day' } };
  const config = await writeConfig(dir, { cache: { root: 'cache' }, state: { dir: 'state' }, datasets: { events: EVENTS_DATASET }, sinks: { lake } });
  await ingestRows(config, 'web', lines(ids(1, 6), (id) => T0 + (id > 3 ? DAY : 0)));
  const [r] = await exportAll(config);
  assert.equal(r?.failed, 0);
  assert.deepEqual(await listKeys(s3, 'hyp/'), ['hyp/events/source=web/dt=2026-03-30/events.0-6.parquet', 'hyp/events/source=web/dt=2026-03-31/events.0-6.parquet']);
  const v = await cli('verify', '--config', config);
  assert.equal(v.code, 0, v.out + v.err);
  assert.match(v.out, /sink "lake": 1 unit over 1 partition, chain whole to the watermark/);
});
