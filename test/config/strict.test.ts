/**
 * Strict config through the CLI, on real config files: an unknown key at any
 * level of the config, or in a built-in plugin's `config` / `writerConfig`, is
 * exit 2 naming the file, the key path and the known key it most likely means;
 * every unknown key of a config is in the one message; "//" keys are comments
 * everywhere; an unknown plugin name lists the names of its kind and no path
 * of the installation. @ref LLP 0032
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import { archive, type CliResult, cli, type Json, REPO, runBin, sampleConfig, writeConfig } from '../support/kernel.js';
import { tempDir } from '../support/tmp.js';

const REPO_DIR = REPO.replace(/\/+$/, '');

async function run(cfg: unknown, command = 'validate'): Promise<CliResult & { file: string; first: string }> {
  const dir = tempDir();
  const file = await writeConfig(dir, cfg);
  const r = await cli(command, '--config', file);
  return { ...r, file, first: r.err.split('\n')[0] ?? '' };
}

function assertConfigError(r: CliResult & { file: string; first: string }): void {
  assert.equal(r.code, 2, `exit 2 (${r.err})`);
  assert.match(r.first, /^hypsink: HYPSINK_ERR_CONFIG: /);
  assert.ok(r.first.includes(r.file), `names the config file: ${r.first}`);
  assert.equal(r.out, '');
}

test('a typo of a sink key (scheduel) is exit 2 naming the key and "schedule", at load (status)', async () => {
  const cfg = sampleConfig();
  const a = archive(cfg);
  a.scheduel = a.schedule;
  delete a.schedule;
  const r = await run(cfg, 'status');
  assertConfigError(r);
  assert.match(r.first, /sink "archive": scheduel: unknown key; did you mean "schedule"\?/);
});

test('a typo of a required sink key (destinaton) names it and suggests destination, not only a missing field', async () => {
  const cfg = sampleConfig();
  const a = archive(cfg);
  a.destinaton = a.destination;
  delete a.destination;
  const r = await run(cfg, 'status');
  assertConfigError(r);
  assert.match(r.first, /sink "archive": destinaton: unknown key; did you mean "destination"\?/);
});

test('a typo in the writerConfig of a parquet sink (compresion) is exit 2 naming writerConfig.compresion and "compression"', async () => {
  const cfg = sampleConfig();
  archive(cfg).writerConfig = { compresion: 'snappy' };
  for (const command of ['validate', 'export']) {
    const r = await run(cfg, command);
    assertConfigError(r);
    assert.match(r.first, /sink "archive": writerConfig\.compresion: unknown key; did you mean "compression"\?/, command);
  }
});

test("a typo in a destination's config (local-fs dri) names config.dri and suggests dir", async () => {
  const cfg = sampleConfig();
  archive(cfg).config = { dri: 'exports' };
  const r = await run(cfg);
  assertConfigError(r);
  assert.match(r.first, /sink "archive": config\.dri: unknown key; did you mean "dir"\?/);
});

test("a typo in a request sink's nested config (forward retry.atempts) names config.retry.atempts", async () => {
  const cfg = sampleConfig();
  cfg.sinks.central = { plugin: '@hypsink/forward', datasets: ['events'], config: { url: 'http://127.0.0.1:9', retry: { atempts: 3 } } };
  const r = await run(cfg);
  assertConfigError(r);
  assert.match(r.first, /sink "central": config\.retry\.atempts: unknown key; did you mean "attempts"\?/);
});

test('every unknown key of the config, at every level, is named in one message, each with its suggestion', async () => {
  const cfg = sampleConfig() as Json & { sinks: Record<string, Json>; datasets: Record<string, Json> };
  cfg.plugin = [];
  cfg.cache = { root: '.hypsink/cache', lockWaitMS: 5000 };
  cfg.state = { dri: '.hypsink/state' };
  cfg.maintenance = { schedul: '0 * * * *', retention: { maxAgee: '30d' }, compaction: { minFile: 4 } };
  cfg.driver = { concurency: 2 };
  const ev = cfg.datasets.events!;
  ev.maxRowByte = 1000;
  (ev.columns as Json[])[2]!.nulable = true;
  archive(cfg).unit = { maxRow: 10 };
  const r = await run(cfg, 'status');
  assertConfigError(r);
  for (const [key, known] of [
    ['plugin', 'plugins'],
    ['cache.lockWaitMS', 'lockWaitMs'],
    ['state.dri', 'dir'],
    ['maintenance.schedul', 'schedule'],
    ['maintenance.retention.maxAgee', 'maxAge'],
    ['maintenance.compaction.minFile', 'minFiles'],
    ['driver.concurency', 'concurrency'],
    ['dataset "events": maxRowByte', 'maxRowBytes'],
    ['dataset "events": columns[2].nulable', 'nullable'],
    ['sink "archive": unit.maxRow', 'maxRows'],
  ] as const) {
    assert.ok(r.first.includes(`${key}: unknown key; did you mean "${known}"?`), `names ${key} and suggests ${known}: ${r.first}`);
  }
});

test('a key far from every known one gets no guess but the list of known keys', async () => {
  const cfg = sampleConfig();
  archive(cfg).colour = 'red';
  const r = await run(cfg, 'status');
  assertConfigError(r);
  assert.match(r.first, /sink "archive": colour: unknown key \(known keys: [^)]*schedule[^)]*\)/);
  assert.doesNotMatch(r.first, /did you mean/);
});

test('"//" comment keys pass at every level, plugin options included', async () => {
  const c = '// a comment';
  const cfg = sampleConfig() as Json & { sinks: Record<string, Json>; datasets: Record<string, Json> };
  cfg['//'] = c;
  cfg.cache = { '//': c, root: '.hypsink/cache' };
  cfg.state = { '//': c, dir: '.hypsink/state' };
  cfg.maintenance = { '//': c, retention: { '//': c, maxAge: '30d' }, compaction: { '//': c, minFiles: 4 } };
  cfg.driver = { '//': c, concurrency: 2 };
  cfg.plugins = [];
  const ev = cfg.datasets.events!;
  ev['//'] = c;
  (ev.columns as Json[])[0]!['//'] = c;
  (cfg.datasets as Json)['//'] = c;
  const a = archive(cfg);
  a['//'] = c;
  a.unit = { '//': c, maxRows: 1000 };
  a.config = { '//': c, dir: 'exports' };
  a.writerConfig = { '//': c, compression: 'snappy' };
  cfg.sinks.central = {
    '//': c,
    plugin: '@hypsink/forward',
    datasets: ['events'],
    config: { '//': c, url: 'http://127.0.0.1:9', retry: { '//': c, attempts: 2 } },
  };
  (cfg.sinks as Json)['//'] = c;
  for (const command of ['status', 'validate']) {
    const r = await run(cfg, command);
    assert.equal(r.code, 0, `${command}: ${r.err}`);
  }
});

test('an unknown writer (@hypsink/format-parket) lists the encoders, suggests format-parquet, and shows no path of the installation', async () => {
  const cfg = sampleConfig();
  archive(cfg).writer = '@hypsink/format-parket';
  const r = await run(cfg, 'status');
  assertConfigError(r);
  assert.match(r.first, /sink "archive": writer: unknown plugin "@hypsink\/format-parket"; did you mean "@hypsink\/format-parquet"\?/);
  assert.match(r.first, /@hypsink\/format-jsonl/, 'lists every encoder');
  assert.doesNotMatch(r.first, /@hypsink\/local-fs|@hypsink\/forward/, 'lists encoders only');
  assert.ok(!r.err.includes(REPO_DIR), `no path of the installation: ${r.err}`);
});

test('an unknown destination lists the destinations, plugins of the config included', async () => {
  const cfg = sampleConfig();
  cfg.plugins = [join(REPO_DIR, 'test/fixtures/plugins/file-sink')];
  archive(cfg).destination = '@hypsink/local-f';
  const r = await run(cfg, 'status');
  assertConfigError(r);
  assert.match(r.first, /sink "archive": destination: unknown plugin "@hypsink\/local-f"; did you mean "@hypsink\/local-fs"\?/);
  assert.match(r.first, /@hypsink\/s3/);
  assert.ok(!r.err.includes(REPO_DIR), `no path of the installation: ${r.err}`);
});

test('an unknown request sink plugin lists the sinks, those of the config plugins included', async () => {
  const cfg = sampleConfig();
  cfg.plugins = [join(REPO_DIR, 'test/fixtures/plugins/file-sink')];
  cfg.sinks.archive = { plugin: 'test-file-snik', datasets: ['events'], config: {} };
  const r = await run(cfg, 'status');
  assertConfigError(r);
  assert.match(r.first, /sink "archive": plugin: unknown plugin "test-file-snik"; did you mean "test-file-sink"\?/);
  assert.match(r.first, /@hypsink\/forward/);
  assert.ok(!r.err.includes(REPO_DIR), `no path of the installation: ${r.err}`);
});

test('a plugin given by a path that has none is named by the path as written', async () => {
  const cfg = sampleConfig();
  archive(cfg).writer = './my-plugins/parquet';
  const r = await run(cfg, 'status');
  assertConfigError(r);
  assert.match(r.first, /sink "archive": writer: unknown plugin "\.\/my-plugins\/parquet": \.\/my-plugins\/parquet\/plugin\.json does not exist/);
  assert.ok(!r.first.includes(join(r.file, '..', 'my-plugins')), `the path as written, not resolved: ${r.first}`);
});

test('what `hypsink init` writes and the embedded default both pass the strict check', async () => {
  const dir = tempDir();
  const init = await runBin(['init'], { cwd: dir });
  assert.equal(init.code, 0, init.stderr);
  const v = await runBin(['validate'], { cwd: dir });
  assert.equal(v.code, 0, v.stderr);
  const empty = tempDir();
  const d = await runBin(['validate'], { cwd: empty });
  assert.equal(d.code, 0, d.stderr);
  assert.match(d.stdout, /config OK/);
});
