/**
 * "Also seen" in issue 12: `hypsink ingest` and `status` exited 2 when a
 * forward sink's `${HYPSINK_TOKEN}` was unset. The process that records rows
 * must not need an exporter's credentials: a sink's `${VAR}` values are
 * resolved when that sink is built (to export), the rest at load.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { eventLines, runBin, sampleConfig, writeConfig } from '../support/kernel.js';
import { tempDir } from '../support/tmp.js';

test('ingest and status work without a forward sink\'s token; export names the sink and the variable', async () => {
  const dir = tempDir();
  const c = sampleConfig();
  // biome-ignore lint/suspicious/noTemplateCurlyInString: the config's own ${ENV} reference
  c.sinks.central = { plugin: '@hypsink/forward', datasets: ['events'], config: { url: 'http://127.0.0.1:9/', token: '${HYPSINK_TEST_UNSET_TOKEN}' } };
  const config = await writeConfig(dir, c);
  const env = { HYPSINK_TEST_UNSET_TOKEN: undefined as unknown as string };
  const ingest = await runBin(['ingest', 'events', '--source', 'web', '--config', config], { input: eventLines(1, 3), env });
  assert.equal(ingest.code, 0, ingest.stderr);
  const status = await runBin(['status', '--json', '--config', config], { env });
  assert.equal(status.code, 0, status.stderr);
  assert.equal(JSON.parse(status.stdout).sinks.length, 2);
  // The blob sink needs no token: it exports.
  const archive = await runBin(['export', '--sink', 'archive', '--config', config], { env });
  assert.equal(archive.code, 0, archive.stderr);
  const central = await runBin(['export', '--sink', 'central', '--config', config], { env });
  assert.equal(central.code, 2);
  assert.match(central.stderr, /sink "central": config\.token: environment variable HYPSINK_TEST_UNSET_TOKEN is not set/);
});
