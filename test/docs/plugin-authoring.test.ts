/**
 * The plugin-authoring example is a test (docs/PLUGIN_AUTHORING.md):
 * docs/examples/audit-sink is loaded by path from a temp config's `plugins`,
 * its request sink receives every row exactly once — across exports, a crash
 * between its ship and the watermark advance, and a torn tail — its hook fires,
 * and the doc shows its files verbatim, so the doc cannot drift from the code.
 */
import assert from 'node:assert/strict';
import { promises as fsp, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { test } from 'node:test';
import ts from 'typescript';
// A static import, so `tsc -p .` type-checks the example (docs/ is outside tsconfig's include).
import activate from '../../docs/examples/audit-sink/src/index.js';
import { eventLines, ingest, type Json, openKernel, partitionStatus, REPO, range, runSteps, sampleConfig, writeConfig } from '../support/kernel.js';
import { tempDir } from '../support/tmp.js';

const EXAMPLE = join(REPO, 'docs/examples/audit-sink');
const FILES = ['package.json', 'plugin.json', 'src/index.ts', 'test/conformance.test.js'] as const;
/** What the doc's line budget counts: the manifest and the code. */
const CODE = ['plugin.json', 'src/index.ts'] as const;
const DOC = join(REPO, 'docs/PLUGIN_AUTHORING.md');

const read = (rel: string) => readFileSync(join(EXAMPLE, rel), 'utf8');

/** A temp config: the sample `events` dataset and one `audit` sink of the example, loaded by relative path. */
async function auditConfig(dir: string, sink: Json = {}): Promise<string> {
  const cfg = sampleConfig();
  const path = relative(dir, EXAMPLE);
  assert.ok(path.startsWith('..'), 'a relative path, resolved against the config folder');
  cfg.plugins = [path];
  cfg.sinks = { audit: { plugin: 'hypsink-audit-sink', datasets: ['events'], config: { dir: 'audit' }, ...sink } };
  return writeConfig(dir, cfg);
}

/** The ids in one partition's JSONL file, in file order; every line must be a whole JSON row. */
function ids(dir: string, source: string): number[] {
  const text = readFileSync(join(dir, 'audit/events', `source=${source}.jsonl`), 'utf8');
  assert.ok(text.endsWith('\n'), 'no torn last line');
  return text
    .split('\n')
    .filter(Boolean)
    .map((l) => (JSON.parse(l) as { id: number }).id);
}

test("the example stays under 60 lines and imports only Node built-ins and 'hypsink/plugin'", () => {
  const lines = CODE.reduce((n, f) => n + read(f).trimEnd().split('\n').length, 0);
  assert.ok(lines < 60, `plugin.json + src/index.ts is ${lines} lines; the doc promises under 60`);
  assert.equal(typeof activate, 'function', 'the default export is the activate function');
  for (const spec of ts.preProcessFile(read('src/index.ts'), true, true).importedFiles.map((f) => f.fileName)) {
    const ok = spec.startsWith('node:') || spec === 'hypsink/plugin';
    assert.ok(ok, `the example imports ${spec}: only node: built-ins and 'hypsink/plugin' are allowed`);
  }
  const manifest = JSON.parse(read('plugin.json')) as { name: string; provides: string[] };
  assert.deepEqual([manifest.name, manifest.provides], ['hypsink-audit-sink', ['sink']]);
});

test('docs/PLUGIN_AUTHORING.md shows the example files verbatim', () => {
  const doc = readFileSync(DOC, 'utf8');
  const shown = new Map<string, string>();
  for (const m of doc.matchAll(/<!-- file: docs\/examples\/audit-sink\/(\S+) -->\n```[a-z]*\n([\s\S]*?)```\n/g)) {
    assert.ok(!shown.has(m[1]!), `${m[1]} is shown once`);
    shown.set(m[1]!, m[2]!);
  }
  assert.deepEqual([...shown.keys()].sort(), [...FILES].sort(), 'the doc shows each file, each after a <!-- file: … --> marker');
  for (const f of FILES) assert.equal(shown.get(f), read(f), `the doc's ${f} equals docs/examples/audit-sink/${f}`);
});

test('loaded by path, the example sink gets every row exactly once and its hook fires', async () => {
  const dir = tempDir();
  const { k, logs } = await openKernel(await auditConfig(dir, { unit: { maxRows: 3 } }));
  try {
    await ingest(k, 'web', 1, 7);
    await ingest(k, 'app', 1, 2);
    const [first] = await k.export('audit');
    assert.deepEqual([first!.rows, first!.units, first!.failed], [9, 4, 0], 'web in units of 3, 3, 1; app in one');

    await ingest(k, 'web', 8, 5);
    const [second] = await k.export('audit');
    assert.deepEqual([second!.rows, second!.units, second!.failed], [5, 2, 0], 'only the new rows');
    const [third] = await k.export('audit');
    assert.deepEqual([third!.rows, third!.bytes, third!.units], [0, 0, 0], 'nothing new: nothing shipped');

    assert.deepEqual(ids(dir, 'web'), range(1, 12), 'every web row once, in order');
    assert.deepEqual(ids(dir, 'app'), [1, 2], 'every app row once');

    const advanced = logs.filter((l) => l.plugin === 'hypsink-audit-sink' && l.msg === 'watermark advanced');
    assert.equal(advanced.length, 6, 'watermarkAdvanced fired once per shipped unit');
    const status = await k.status();
    for (const [source, n] of [['web', 12], ['app', 2]] as const) {
      const chain = advanced.filter((l) => l.source === source);
      assert.equal(chain[0]!.from, null, 'the first advance starts from no watermark');
      for (let i = 1; i < chain.length; i++) assert.equal(chain[i]!.from, chain[i - 1]!.to, 'advances chain');
      const p = partitionStatus(status, 'audit', source);
      assert.equal(chain.at(-1)!.to, p.highWater, 'the last advance reaches the high water');
      assert.deepEqual([p.exportedRows, p.pendingRows, p.gapRows, p.intent], [n, 0, 0, null]);
    }
  } finally {
    await k.close();
  }
});

test('a unit shipped before a crash is not written twice, and a torn tail is cut', async () => {
  const dir = tempDir();
  const config = await auditConfig(dir, { unit: { maxRows: 3 } });
  await fsp.writeFile(join(dir, 'a.ndjson'), eventLines(1, 5));
  await fsp.writeFile(join(dir, 'b.ndjson'), eventLines(6, 2));
  const crashed = await runSteps(
    [
      ['ingest', 'events', '--source', 'web', '--file', join(dir, 'a.ndjson'), '--config', config],
      ['export', '--sink', 'audit', '--config', config],
    ],
    { HYPSINK_FAULT: 'export.afterShip' },
  );
  assert.equal(crashed.signal, 'SIGKILL', crashed.stderr);
  assert.deepEqual(ids(dir, 'web'), [1, 2, 3], 'the first unit landed; its advance was lost');
  // As if a later crash had cut an append short: a tail no ledger line covers.
  await fsp.appendFile(join(dir, 'audit/events/source=web.jsonl'), '{"id":4,"ts":"2026-');

  const retry = await runSteps([
    ['ingest', 'events', '--source', 'web', '--file', join(dir, 'b.ndjson'), '--config', config],
    ['export', '--sink', 'audit', '--config', config],
    ['status', '--json', '--config', config],
  ]);
  assert.ok(
    retry.steps.length === 3 && retry.steps.every((s) => s.code === 0),
    retry.stderr,
  );
  assert.deepEqual(ids(dir, 'web'), range(1, 7), 'the retried unit was recognised by its id; the tail was cut');
  const st = JSON.parse(retry.steps[2]!.out) as { sinks: { name: string; partitions: Json[] }[] };
  const p = st.sinks.find((s) => s.name === 'audit')!.partitions[0]!;
  assert.deepEqual([p.intent, p.exportedRows, p.watermark], [null, 7, p.highWater]);
});
