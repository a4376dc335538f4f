/**
 * A third-party plugin loaded by filesystem path from the config's `plugins`
 * (test/fixtures/plugins/file-sink): its hook taps fire, and the request sink it
 * registers receives every row exactly once — across a real crash between its
 * ship and the watermark advance, thanks to the unit id. Plugin errors: a
 * capability missing from plugin.json, registration after start, bad manifests.
 */
import assert from 'node:assert/strict';
import { promises as fsp, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { test } from 'node:test';
import { isHypsinkError } from '../../types/errors.js';
import type { TickEndEvent, WatermarkAdvancedEvent } from '../../types/hooks.js';
import { createHooks, taps } from '../../kernel/hooks.js';
import {
  cli,
  eventLines,
  FIXTURE_PLUGINS,
  ingest,
  type Json,
  openKernel,
  partitionStatus,
  range,
  runSteps,
  sampleConfig,
  writeConfig,
} from '../support/kernel.js';
import { tempDir } from '../support/tmp.js';

interface Received {
  unit: string;
  source: string;
  rows: { id: number }[];
}

const lines = <T>(path: string): T[] =>
  readFileSync(path, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as T);

/** Sample config plus the file-sink plugin by relative path and a "central" sink of it. */
function withFileSink(dir: string, sink: Json = {}) {
  const cfg = sampleConfig();
  const path = relative(dir, join(FIXTURE_PLUGINS, 'file-sink'));
  assert.ok(path.startsWith('..'), 'a relative path, resolved against the config folder');
  cfg.plugins = [path];
  cfg.sinks.central = { plugin: 'test-file-sink', datasets: ['events'], config: { out: 'received', maxRows: 3, ...sink } };
  return cfg;
}

function receivedIds(dir: string): Record<string, number[]> {
  const out: Record<string, number[]> = {};
  for (const r of lines<Received>(join(dir, 'received/received.ndjson'))) {
    out[r.source] = [...(out[r.source] ?? []), ...r.rows.map((x) => x.id)];
  }
  return out;
}

test('a plugin loaded by path taps lifecycle hooks and its sink receives every row once', async () => {
  const dir = tempDir();
  const config = await writeConfig(dir, withFileSink(dir));
  const { k } = await openKernel(config);
  try {
    await ingest(k, 'web', 1, 7);
    await ingest(k, 'app', 1, 2);
    const [central] = await k.export('central');
    assert.deepEqual([central!.rows, central!.units, central!.failed], [9, 4, 0], 'web in units of 3, 3, 1; app in one');
    await k.export('central'); // nothing new

    const got = receivedIds(dir);
    assert.deepEqual(got, { app: [1, 2], web: range(1, 7) }, 'every row once, in order');
    const units = lines<Received>(join(dir, 'received/received.ndjson')).map((r) => r.unit);
    assert.equal(new Set(units).size, units.length, 'one line per unit id');

    const ticks = lines<TickEndEvent>(join(dir, 'received/ticks.ndjson'));
    assert.deepEqual(
      ticks.map((t) => [t.sink, t.rows, t.units, t.failed]),
      [
        ['central', 9, 4, 0],
        ['central', 0, 0, 0],
      ],
      'tickEnd fired once per tick with its totals',
    );
    const adv = lines<WatermarkAdvancedEvent>(join(dir, 'received/advanced.ndjson'));
    assert.equal(adv.length, 4, 'watermarkAdvanced once per unit');
    for (const source of ['app', 'web']) {
      const chain = adv.filter((a) => a.partition.source === source);
      assert.equal(chain[0]!.from, null);
      for (let i = 1; i < chain.length; i++) assert.deepEqual(chain[i]!.from, chain[i - 1]!.to, 'advances chain');
      assert.equal(chain[chain.length - 1]!.to.seq, partitionStatus(await k.status(), 'central', source).highWater);
      assert.deepEqual(
        chain.map((a) => a.unit),
        units.filter((u) => u.includes(`source=${source}:`)),
        'each advance names the unit shipped',
      );
    }
  } finally {
    await k.close();
  }
});

test('the plugin sink across a crash after its ship: the unit id keeps the retry from writing it twice', async () => {
  const dir = tempDir();
  const config = await writeConfig(dir, withFileSink(dir));
  await fsp.writeFile(join(dir, 'a.ndjson'), eventLines(1, 5));
  await fsp.writeFile(join(dir, 'b.ndjson'), eventLines(6, 2));
  const crashed = await runSteps(
    [
      ['ingest', 'events', '--source', 'web', '--file', join(dir, 'a.ndjson'), '--config', config],
      ['export', '--sink', 'central', '--config', config],
    ],
    { HYPSINK_FAULT: 'export.afterShip' },
  );
  assert.equal(crashed.signal, 'SIGKILL', crashed.stderr);
  const before = lines<Received>(join(dir, 'received/received.ndjson'));
  assert.equal(before.length, 1, 'the first unit was received, its advance lost');

  const retry = await runSteps([
    ['ingest', 'events', '--source', 'web', '--file', join(dir, 'b.ndjson'), '--config', config],
    ['export', '--sink', 'central', '--config', config],
    ['status', '--json', '--config', config],
  ]);
  assert.ok(
    retry.steps.every((s) => s.code === 0),
    retry.stderr,
  );
  assert.deepEqual(receivedIds(dir), { web: range(1, 7) });
  const after = lines<Received>(join(dir, 'received/received.ndjson'));
  assert.equal(after[0]!.unit, before[0]!.unit);
  assert.equal(after.filter((r) => r.unit === before[0]!.unit).length, 1, 'the retried unit id was recognised');
  const st = JSON.parse(retry.steps[2]!.out) as { sinks: { name: string; partitions: Json[] }[] };
  const p = st.sinks.find((s) => s.name === 'central')!.partitions[0]!;
  assert.deepEqual([p.intent, p.exportedRows, p.watermark], [null, 7, p.highWater]);
});

test('a plugin registering a capability its plugin.json lacks is a clear error (exit 2)', async () => {
  const dir = tempDir();
  const cfg = sampleConfig();
  cfg.plugins = [join(FIXTURE_PLUGINS, 'undeclared')];
  const config = await writeConfig(dir, cfg);
  const r = await cli('status', '--config', config);
  assert.equal(r.code, 2);
  assert.match(r.err, /^hypsink: HYPSINK_ERR_PLUGIN: plugin test-undeclared registers a sink but plugin.json "provides" lacks "sink"/);
});

test('registration after the kernel has started is refused', async () => {
  const dir = tempDir();
  const cfg = sampleConfig();
  cfg.plugins = [join(FIXTURE_PLUGINS, 'late-register')];
  const config = await writeConfig(dir, cfg);
  const g = globalThis as { __hypsinkLateRegister?: unknown };
  delete g.__hypsinkLateRegister;
  const { k } = await openKernel(config);
  try {
    await k.export();
    const e = g.__hypsinkLateRegister;
    assert.ok(isHypsinkError(e), `refused with a HypsinkError, got ${String(e)}`);
    assert.equal(e.code, 'HYPSINK_ERR_PLUGIN');
    assert.match(e.message, /plugin test-late-register: registration is closed once its activate has returned/);
    assert.equal(k.sinks.has('test-late-sink'), false);
  } finally {
    await k.close();
  }
});

test('bad plugin folders: missing manifest, bad manifest, API major mismatch, no activate, duplicate or reserved name', async () => {
  const dir = tempDir();
  const make = async (name: string, manifest: unknown, module?: string) => {
    await fsp.mkdir(join(dir, name, 'src'), { recursive: true });
    if (manifest !== undefined) await fsp.writeFile(join(dir, name, 'plugin.json'), typeof manifest === 'string' ? manifest : JSON.stringify(manifest));
    if (module !== undefined) await fsp.writeFile(join(dir, name, 'src/index.js'), module);
  };
  await make('none', undefined);
  await make('broken', '{ "name": ');
  await make('noprovides', { name: 'p-noprovides', version: '1.0.0', provides: [] });
  await make('future', { name: 'p-future', version: '1.0.0', apiVersion: '2.0.0', provides: ['sink'] });
  await make('noactivate', { name: 'p-noactivate', version: '1.0.0', provides: ['sink'] }, 'export const x = 1;\n');
  const same = "export default (ctx) => ctx.registerEncoder({ name: 'p-same', create() {} });\n";
  await make('dup1', { name: 'p-dup1', version: '1.0.0', provides: ['encoder'] }, same);
  await make('dup2', { name: 'p-dup2', version: '1.0.0', provides: ['encoder'] }, same);
  // A built-in's name taken before the built-in loads (on first use) would replace it unseen.
  const squat = "export default (ctx) => ctx.registerDestination({ name: '@hypsink/local-fs', create() {} });\n";
  await make('squat', { name: 'p-squat', version: '1.0.0', provides: ['destination'] }, squat);
  const cases: [string | string[], RegExp][] = [
    ['./none', /unknown plugin "\.\/none": .*none\/plugin\.json does not exist/],
    ['./broken', /plugin \.\/broken: .*plugin\.json is not valid JSON/],
    ['./noprovides', /plugin \.\/noprovides: .*provides: /],
    ['./future', /plugin p-future targets plugin API 2\.0\.0; this hypsink implements 1\./],
    ['./noactivate', /plugin p-noactivate: .*exports no activate function/],
    [['./dup1', './dup2'], /plugin p-dup2: "p-same" is already registered/],
    ['./squat', /plugin p-squat: "@hypsink\/local-fs" is in the reserved @hypsink\/ scope of the built-in plugins/],
  ];
  for (const [spec, re] of cases) {
    const cfg = sampleConfig();
    cfg.plugins = typeof spec === 'string' ? [spec] : spec;
    const config = await writeConfig(dir, cfg);
    const r = await cli('status', '--config', config);
    assert.equal(r.code, 2, `${String(spec)}: exit 2`);
    assert.match(r.err.split('\n')[0]!, new RegExp(`^hypsink: HYPSINK_ERR_PLUGIN: ${re.source}`), String(spec));
  }
});

test('plugins get tap-only hooks: they can tap, never call', () => {
  const view = taps(createHooks()) as unknown as Record<string, Record<string, unknown>>;
  for (const [name, hook] of Object.entries(view)) {
    assert.equal(typeof hook.tap, 'function', name);
    for (const call of ['call', 'callAsync', 'promise']) assert.equal(hook[call], undefined, `${name}.${call}`);
    assert.ok(Object.isFrozen(hook));
  }
  assert.ok(Object.isFrozen(view));
});
