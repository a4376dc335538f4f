/**
 * `hypsink verify` against real exports on disk (local-fs, Parquet and JSONL):
 * a whole chain passes; each kind of damage to the destination (a blob deleted,
 * a copy under an overlapping key, a blob beyond the watermark, a blob with
 * another row count) is a finding naming the object, exit 1; an open intent's
 * blob beyond the watermark and units whose rows retention pruned are not
 * findings. Also `--sink` and the `--json` shape.
 * @ref LLP 0037
 */
import assert from 'node:assert/strict';
import { promises as fsp } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { cli, eventLines, ingestText, openKernel, runBin, sampleConfig, unitRange, walkFiles, writeConfig } from '../support/kernel.js';
import { tempDir } from '../support/tmp.js';

interface Finding {
  problem: string;
  dataset: string;
  source: string;
  partition: string;
  object: string;
  message: string;
}
interface VerifyJson {
  ok: boolean;
  sinks: {
    name: string;
    kind: string;
    verified: boolean;
    units: number;
    partitions: { dataset: string; source: string; watermark: string | null; units: number; rowsChecked: number; contentChecked: number; notChecked: { pruned: number; uncounted: number; undigested: number }; intents: number }[];
    findings: Finding[];
  }[];
}

/** Two sinks: `archive` (Parquet) and `lines` (JSONL), units of at most 10 rows. */
async function setup(): Promise<{ dir: string; config: string; archive: string; lines: string }> {
  const dir = tempDir('hypsink-verify-');
  const c = sampleConfig();
  c.state = { dir: 'state' };
  c.sinks.archive = { ...c.sinks.archive, unit: { maxRows: 10 } };
  c.sinks.lines = { writer: '@hypsink/format-jsonl', destination: '@hypsink/local-fs', datasets: ['events'], unit: { maxRows: 10 }, config: { dir: 'lines' } };
  const config = await writeConfig(dir, c);
  const { k } = await openKernel(config);
  try {
    await ingestText(k, 'web', eventLines(1, 35));
    await ingestText(k, 'app', eventLines(100, 12));
  } finally {
    await k.close();
  }
  const e = await cli('export', '--config', config);
  assert.equal(e.code, 0, e.err);
  return { dir, config, archive: join(dir, 'exports'), lines: join(dir, 'lines') };
}

/** The blobs of one partition folder, in chain order. */
async function blobs(root: string, source: string): Promise<string[]> {
  const files = (await walkFiles(join(root, 'events', `source=${source}`))).filter((f) => !f.includes('.hypsink-tmp'));
  return files.sort((a, b) => unitRange(a.slice(a.lastIndexOf('/') + 1)).since - unitRange(b.slice(b.lastIndexOf('/') + 1)).since);
}

const name = (path: string) => path.slice(path.lastIndexOf('/') + 1);

async function verifyJson(config: string, ...args: string[]): Promise<{ code: number; j: VerifyJson; err: string }> {
  const r = await cli('verify', '--json', '--config', config, ...args);
  return { code: r.code, j: JSON.parse(r.out) as VerifyJson, err: r.err };
}

test('a whole chain verifies: exit 0, one summary line per sink (through bin/hypsink.js)', async () => {
  const { dir, config } = await setup();
  const r = await runBin(['verify', '--config', config], { cwd: dir });
  assert.equal(r.code, 0, r.stderr + r.stdout);
  assert.match(r.stdout, /sink "archive": 6 units over 2 partitions, chain whole to the watermark; 6 units whose content matches the cache/);
  assert.match(r.stdout, /sink "lines": 6 units over 2 partitions, chain whole to the watermark/);
  const { code, j } = await verifyJson(config);
  assert.equal(code, 0);
  assert.equal(j.ok, true);
  const archive = j.sinks.find((s) => s.name === 'archive')!;
  assert.deepEqual([archive.kind, archive.verified, archive.units, archive.findings], ['blob', true, 6, []]);
  const web = archive.partitions.find((p) => p.source === 'web')!;
  assert.deepEqual([web.dataset, web.units, web.rowsChecked, web.contentChecked, web.notChecked, web.intents], ['events', 4, 4, 4, { pruned: 0, uncounted: 0, undigested: 0 }, 0]);
  assert.match(web.watermark ?? '', /^\d+$/);
});

test('a deleted middle blob is a hole naming its neighbours; --sink picks the sink verified', async () => {
  const { config, archive } = await setup();
  const web = await blobs(archive, 'web');
  assert.equal(web.length, 4);
  await fsp.unlink(web[1]!);
  const r = await cli('verify', '--config', config);
  assert.equal(r.code, 1, r.out + r.err);
  const { since, until } = unitRange(name(web[1]!));
  assert.match(r.out, new RegExp(`sink "archive": events/source=web: hole \\(${since}, ${until}\\]: no unit holds these seqs.*${name(web[0]!)}.*${name(web[2]!)}`));
  assert.match(r.out, /sink "archive": .*1 finding/);
  assert.match(r.out, /sink "lines": 6 units over 2 partitions, chain whole to the watermark/);
  assert.match(r.err, /HYPSINK_ERR_VERIFY/);

  const only = await cli('verify', '--sink', 'lines', '--config', config);
  assert.equal(only.code, 0, only.out + only.err);
  assert.doesNotMatch(only.out, /archive/);
  const j = await verifyJson(config, '--sink', 'archive');
  assert.equal(j.code, 1);
  assert.deepEqual(j.j.sinks.map((s) => s.name), ['archive']);
  const f = j.j.sinks[0]!.findings;
  assert.equal(f.length, 1);
  assert.deepEqual([f[0]!.problem, f[0]!.dataset, f[0]!.source, f[0]!.partition], ['hole', 'events', 'web', 'events/source=web']);

  const none = await cli('verify', '--sink', 'nope', '--config', config);
  assert.equal(none.code, 2);
  assert.match(none.err, /no sink named "nope"/);
});

test('a copy under an overlapping key and a blob beyond the watermark are findings naming the key', async () => {
  const { config, archive } = await setup();
  const web = await blobs(archive, 'web');
  const second = unitRange(name(web[1]!));
  const last = unitRange(name(web[3]!));
  const overlapping = join(archive, 'events/source=web', `events.${second.since + 1}-${second.until}.parquet`);
  await fsp.copyFile(web[1]!, overlapping);
  const beyond = join(archive, 'events/source=web', `events.${last.until}-${last.until + 50}.parquet`);
  await fsp.copyFile(web[3]!, beyond);
  const r = await cli('verify', '--config', config);
  assert.equal(r.code, 1, r.out + r.err);
  assert.match(r.out, new RegExp(`sink "archive": events/source=web/${name(overlapping).replace(/\./g, '\\.')}: overlaps events/source=web/${name(web[1]!).replace(/\./g, '\\.')}`));
  assert.match(r.out, new RegExp(`sink "archive": events/source=web/${name(beyond).replace(/\./g, '\\.')}: beyond the watermark ${last.until}`));
  const j = await verifyJson(config, '--sink', 'archive');
  assert.deepEqual(j.j.sinks[0]!.findings.map((f) => [f.problem, f.object]).sort(), [
    ['beyond-watermark', `events/source=web/${name(beyond)}`],
    ['overlap', `events/source=web/${name(overlapping)}`],
    // A copy of a 10-row unit named for a range of 9 rows: its count is off too.
    ['row-count', `events/source=web/${name(overlapping)}`],
  ]);
});

test('a blob holding another row count is a finding (Parquet from another partition; JSONL cut short)', async () => {
  const { config, archive, lines } = await setup();
  const web = await blobs(archive, 'web');
  const app = await blobs(archive, 'app');
  // app's last unit holds 2 rows, a real Parquet file: put it where web's first (10 rows) was.
  await fsp.copyFile(app[1]!, web[0]!);
  const jl = await blobs(lines, 'app');
  const text = await fsp.readFile(jl[0]!, 'utf8');
  await fsp.writeFile(jl[0]!, text.split('\n').slice(0, 7).join('\n') + '\n');
  const r = await cli('verify', '--config', config);
  assert.equal(r.code, 1, r.out + r.err);
  assert.match(r.out, new RegExp(`sink "archive": events/source=web/${name(web[0]!).replace(/\./g, '\\.')}: holds 2 rows, the cache holds 10`));
  assert.match(r.out, new RegExp(`sink "lines": events/source=app/${name(jl[0]!).replace(/\./g, '\\.')}: holds 7 rows, the cache holds 10`));
  const j = await verifyJson(config);
  assert.deepEqual(
    j.j.sinks.flatMap((s) => s.findings.map((f) => [s.name, f.problem])),
    [
      ['archive', 'row-count'],
      ['lines', 'row-count'],
    ],
  );
  // Bytes that are no Parquet file at all: unreadable, named.
  await fsp.writeFile(web[2]!, 'not parquet');
  const bad = await cli('verify', '--sink', 'archive', '--config', config);
  assert.equal(bad.code, 1);
  assert.match(bad.out, new RegExp(`events/source=web/${name(web[2]!).replace(/\./g, '\\.')}: cannot be read back`));
});

test("an open intent's blob beyond the watermark is no finding; units whose rows were pruned are not checked", async () => {
  const { config, archive } = await setup();
  const { k } = await openKernel(config);
  try {
    await ingestText(k, 'web', eventLines(36, 4));
  } finally {
    await k.close();
  }
  // The blob commits, then the export fails before the watermark moves: the intent stays open.
  process.env.HYPSINK_FAULT = 'export.afterShip';
  process.env.HYPSINK_FAULT_ACTION = 'throw';
  let e: Awaited<ReturnType<typeof cli>>;
  try {
    e = await cli('export', '--sink', 'archive', '--config', config);
  } finally {
    delete process.env.HYPSINK_FAULT;
    delete process.env.HYPSINK_FAULT_ACTION;
  }
  assert.equal(e.code, 1, 'the export failed after its ship');
  assert.equal((await blobs(archive, 'web')).length, 5, 'the unit committed');
  const r = await verifyJson(config, '--sink', 'archive');
  assert.equal(r.code, 0, JSON.stringify(r.j));
  assert.equal(r.j.sinks[0]!.partitions.find((p) => p.source === 'web')!.intents, 1);

  // Retention prunes the oldest rows (every sink had them): those units cannot be counted.
  const c = JSON.parse(await fsp.readFile(config, 'utf8'));
  c.maintenance = { retention: { maxRows: 5 } };
  await fsp.writeFile(config, JSON.stringify(c));
  const ex = await cli('export', '--config', config);
  assert.equal(ex.code, 0, ex.err);
  const m = await cli('maintain', '--retention', '--config', config);
  assert.equal(m.code, 0, m.err);
  assert.match(m.out, /retention pruned [1-9]\d* row/);
  const h = await cli('verify', '--config', config);
  assert.equal(h.code, 0, h.out + h.err);
  assert.match(h.out, /sink "archive": 7 units over 2 partitions, chain whole to the watermark; \d+ units? not checked \(rows pruned from the cache\)/);
  const j = await verifyJson(config, '--sink', 'archive');
  const web = j.j.sinks[0]!.partitions.find((p) => p.source === 'web')!;
  assert.ok(web.notChecked.pruned >= 3, JSON.stringify(web));
});

test('rows retention pruned before the sink had them are its gap, not a hole', async () => {
  const { config } = await setup();
  const { k } = await openKernel(config);
  try {
    await ingestText(k, 'web', eventLines(36, 5));
  } finally {
    await k.close();
  }
  // Not ack-coupled: every row is old enough to go, the 5 unexported ones too (a gap, recorded).
  const c = JSON.parse(await fsp.readFile(config, 'utf8'));
  c.maintenance = { retention: { maxAge: '30d', ackCoupled: false } };
  await fsp.writeFile(config, JSON.stringify(c));
  const m = await cli('maintain', '--retention', '--config', config);
  assert.equal(m.code, 0, m.err);
  assert.match(m.out, /gap/);
  const e = await cli('export', '--json', '--config', config);
  assert.equal(e.code, 0, e.err);
  const r = await cli('verify', '--sink', 'archive', '--config', config);
  assert.equal(r.code, 0, r.out + r.err);
  assert.match(r.out, /sink "archive": 6 units over 2 partitions, chain whole to the watermark; 6 units not checked \(rows pruned from the cache\); 1 gap where retention pruned rows before this sink had them/);
});

test('a blob whose recorded digest is not the cache rows of its range is a content finding naming it (LLP 0054)', async () => {
  const { config, archive } = await setup();
  const web = await blobs(archive, 'web');
  // Plant another unit's digest in the commit record local-fs keeps for the second blob.
  const commits = join(archive, '.hypsink-tmp', 'commits');
  let planted = 0;
  for (const f of await fsp.readdir(commits)) {
    const path = join(commits, f);
    const rec = JSON.parse(await fsp.readFile(path, 'utf8'));
    if (typeof rec.key !== 'string' || !rec.key.endsWith(name(web[1]!))) continue;
    rec.digest = `u1-${'B'.repeat(43)}`;
    await fsp.writeFile(path, JSON.stringify(rec));
    planted++;
  }
  assert.equal(planted, 1);
  const { code, j } = await verifyJson(config, '--sink', 'archive');
  assert.equal(code, 1);
  const f = j.sinks[0]!.findings;
  assert.equal(f.length, 1, JSON.stringify(f));
  assert.equal(f[0]!.problem, 'content');
  assert.match(f[0]!.object, new RegExp(name(web[1]!)));
  assert.match(f[0]!.message, /recorded digest u1-B{43}, the cache's u1-/);
});
