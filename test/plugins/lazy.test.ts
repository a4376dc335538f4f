/**
 * A command loads a plugin's code only when it builds a sink of it: `ingest`
 * and `status` read a sink plugin's plugin.json and nothing more, `export`
 * imports it. And no third-party warning reaches stderr: with an S3 sink, the
 * AWS SDK's NodeVersionSupportWarning (it concerns SDK releases hypsink does
 * not use) is not printed, by `ingest` or by an `export` to s3rver.
 */
import assert from 'node:assert/strict';
import { existsSync, promises as fsp, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { FIXTURE_PLUGINS, runBin, SAMPLE_CONFIG_TEXT, writeConfig } from '../support/kernel.js';
import { startS3Server, useS3rverCredentials } from '../support/s3server.js';
import { tempDir } from '../support/tmp.js';

const ROWS = '{"id":1,"ts":"2026-01-01T00:00:00Z","msg":"a"}\n';

test("a sink plugin's code loads only when a command builds its sink (export), never for ingest or status", async () => {
  const dir = tempDir();
  // Installed as a package, so the sink names it by package name.
  await fsp.cp(join(FIXTURE_PLUGINS, 'lazy-probe'), join(dir, 'node_modules/lazy-probe'), { recursive: true });
  const cfg = JSON.parse(SAMPLE_CONFIG_TEXT) as Record<string, unknown>;
  cfg.sinks = { probe: { plugin: 'lazy-probe', datasets: ['events'] } };
  const config = await writeConfig(dir, cfg);
  const marker = join(dir, 'imported.txt');
  const env = { HYPSINK_TEST_LAZY_MARKER: marker };
  const ingest = await runBin(['ingest', 'events', '--source', 'web', '--config', config], { env, input: ROWS });
  assert.equal(ingest.code, 0, ingest.stderr);
  const status = await runBin(['status', '--config', config], { env });
  assert.equal(status.code, 0, status.stderr);
  assert.equal(existsSync(marker), false, 'neither ingest nor status imported the plugin');
  const exp = await runBin(['export', '--json', '--config', config], { env });
  assert.equal(exp.code, 0, exp.stderr);
  assert.equal(JSON.parse(exp.stdout).sinks[0].rows, 1);
  assert.equal(readFileSync(marker, 'utf8').split('\n').filter(Boolean).length, 1, 'export imported it, once');
});

test('a plugin that is not what the sink needs is refused at load, from its plugin.json, without importing it', async () => {
  const dir = tempDir();
  await fsp.cp(join(FIXTURE_PLUGINS, 'lazy-probe'), join(dir, 'node_modules/lazy-probe'), { recursive: true });
  const cfg = JSON.parse(SAMPLE_CONFIG_TEXT) as { sinks: Record<string, Record<string, unknown>> };
  cfg.sinks.archive!.destination = 'lazy-probe';
  const config = await writeConfig(dir, cfg);
  const marker = join(dir, 'imported.txt');
  const r = await runBin(['status', '--config', config], { env: { HYPSINK_TEST_LAZY_MARKER: marker } });
  assert.equal(r.code, 2);
  assert.match(r.stderr, /sink "archive": destination: "lazy-probe" is a sink, not a destination/);
  assert.equal(existsSync(marker), false);
});

test('with an S3 sink, neither ingest nor an export to s3rver prints a warning of the AWS SDK', async (t) => {
  const s3 = await startS3Server({ buckets: ['lake'] });
  t.after(() => s3.stop());
  const dir = tempDir();
  const cfg = JSON.parse(SAMPLE_CONFIG_TEXT) as { sinks: Record<string, unknown> };
  cfg.sinks = {
    lake: { writer: '@hypsink/format-parquet', destination: '@hypsink/s3', datasets: ['events'], config: { bucket: 'lake', region: 'us-east-1', endpoint: s3.endpoint, forcePathStyle: true } },
  };
  const config = await writeConfig(dir, cfg);
  useS3rverCredentials();
  delete process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED; // the operator's own switch, off
  const env = { HYPSINK_LOG_LEVEL: 'warn' };
  const ingest = await runBin(['ingest', 'events', '--source', 'web', '--config', config], { env, input: ROWS });
  assert.equal(ingest.code, 0, ingest.stderr);
  assert.equal(ingest.stderr, '', 'ingest: nothing on stderr');
  const exp = await runBin(['export', '--json', '--config', config], { env });
  assert.equal(exp.code, 0, exp.stderr);
  assert.equal(JSON.parse(exp.stdout).sinks[0].rows, 1);
  assert.doesNotMatch(exp.stderr, /Warning/);
});
