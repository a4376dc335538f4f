/**
 * `hypsink ingest` with bad input: exit 2, a one-line summary on stderr naming
 * the rejected line numbers, each rejected line whole in
 * `<state>/dead-letter/<dataset>.ndjson` with its line and reason; the valid
 * rows are committed and exported.
 */
import assert from 'node:assert/strict';
import { promises as fsp, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { assertExactlyOnce, cli, eventLines, type Json, readExports, runBin, sampleConfig, writeConfig } from '../support/kernel.js';
import { tempDir } from '../support/tmp.js';

const ok = (id: number) => eventLines(id, 1).trimEnd();
const TS = '"ts":"2026-01-01T00:00:00.000Z"';

test('ingest rejects bad lines to the dead letter with line and reason, keeps the valid rows, exit 2', async () => {
  const dir = tempDir();
  const cfg = sampleConfig();
  cfg.datasets.events!.maxRowBytes = 200;
  const config = await writeConfig(dir, cfg);
  const first = [
    ok(1),
    `{"id":2,${TS},"msg":`, // 2: malformed JSON
    `{"id":"three",${TS}}`, // 3: wrong type
    `{"id":4,"msg":"no ts"}`, // 4: missing required field
    ok(5),
    `{"id":6,${TS},"msg":"${'x'.repeat(300)}"}`, // 6: over maxRowBytes
    `{"id":7,${TS},"_hyp_ingest_seq":1}`, // 7: an internal column
    '',
    ok(9),
  ];
  const second = [
    `{"id":10,${TS},"colour":"red"}`, // 1: unknown field
    `[1,2,3]`, // 2: not an object
    `{"id":12,${TS},"source":"app"}`, // 3: source that contradicts --source
    ok(13),
  ];
  await fsp.writeFile(join(dir, 'a.ndjson'), first.join('\n') + '\n');
  await fsp.writeFile(join(dir, 'b.ndjson'), second.join('\n'));

  const a = await runBin(['ingest', 'events', '--source', 'web', '--file', 'a.ndjson', '--config', config], { cwd: dir });
  assert.equal(a.code, 2, a.stderr);
  assert.match(a.stdout, /ingested 3 row\(s\) into events\/source=web, rejected 5/);
  const summary = a.stderr.split('\n').filter((l) => l.startsWith('hypsink: '));
  assert.equal(summary.length, 1, `one summary line: ${a.stderr}`);
  assert.match(summary[0]!, /^hypsink: HYPSINK_ERR_INPUT: \S*a\.ndjson: 5 row\(s\) of dataset "events" rejected \(/);
  for (const n of [2, 3, 4, 6, 7]) assert.match(summary[0]!, new RegExp(`line ${n}: `), `names line ${n}`);
  assert.match(summary[0]!, /dead-letter\/events\.ndjson/);

  const b = await cli('ingest', 'events', '--source', 'web', '--file', join(dir, 'b.ndjson'), '--config', config);
  assert.equal(b.code, 2);
  for (const n of [1, 2, 3]) assert.match(b.err, new RegExp(`line ${n}: `));

  const dead = readFileSync(join(dir, '.hypsink/state/dead-letter/events.ndjson'), 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as Json);
  assert.deepEqual(
    dead.map((d) => [d.line, d.raw]),
    [
      [2, first[1]],
      [3, first[2]],
      [4, first[3]],
      [6, first[5]],
      [7, first[6]],
      [1, second[0]],
      [2, second[1]],
      [3, second[2]],
    ],
    'each rejected line kept whole with its line number',
  );
  const reasons = dead.map((d) => String(d.reason));
  assert.match(reasons[0]!, /malformed JSON/);
  assert.match(reasons[1]!, /field "id" must be an INT64/);
  assert.match(reasons[2]!, /field "ts" is required/);
  assert.match(reasons[3]!, /over the dataset's maxRowBytes 200/);
  assert.match(reasons[4]!, /field "_hyp_ingest_seq" is not in the dataset schema/);
  assert.match(reasons[5]!, /field "colour" is not in the dataset schema/);
  assert.match(reasons[6]!, /not a JSON object/);
  assert.match(reasons[7]!, /"source"/);
  assert.ok(dead.every((d) => d.dataset === 'events' && d.source === 'web'));
  assert.ok(String(dead[0]!.file).endsWith('a.ndjson'), 'names the input file');

  const e = await cli('export', '--config', config);
  assert.equal(e.code, 0, e.err);
  assertExactlyOnce(await readExports(join(dir, 'exports')), { web: [1, 5, 9, 13] });
});

test('ingest with only valid rows is exit 0 and writes no dead letter', async () => {
  const dir = tempDir();
  const config = await writeConfig(dir, sampleConfig());
  await fsp.writeFile(join(dir, 'ok.ndjson'), eventLines(1, 3));
  const r = await cli('ingest', 'events', '--source', 'web', '--file', join(dir, 'ok.ndjson'), '--config', config, '--json');
  assert.equal(r.code, 0, r.err);
  const out = JSON.parse(r.out);
  assert.match(out.batchId, /^auto-/, 'a batch id is made when the host names none');
  assert.deepEqual({ ...out, batchId: 'x' }, { accepted: 3, rejected: 0, deadLetter: null, samples: [], batchId: 'x', duplicate: false, resumedAfterLine: 0 });
  await assert.rejects(fsp.access(join(dir, '.hypsink/state/dead-letter/events.ndjson')));
});

test('ingest into an unknown dataset is exit 2', async () => {
  const dir = tempDir();
  const config = await writeConfig(dir, sampleConfig());
  await fsp.writeFile(join(dir, 'ok.ndjson'), eventLines(1, 1));
  const r = await cli('ingest', 'clicks', '--source', 'web', '--file', join(dir, 'ok.ndjson'), '--config', config);
  assert.equal(r.code, 2);
  assert.match(r.err, /unknown dataset "clicks" \(configured: events\)/);
});

test('ingest of a missing file is exit 2 naming the file, and nothing is committed', async () => {
  const dir = tempDir();
  const config = await writeConfig(dir, sampleConfig());
  const missing = join(dir, 'missing.ndjson');
  const r = await cli('ingest', 'events', '--source', 'web', '--file', missing, '--config', config);
  assert.equal(r.code, 2);
  assert.ok(r.err.startsWith(`hypsink: HYPSINK_ERR_INPUT: cannot read input file ${missing} (ENOENT)`), r.err);
  const s = await cli('status', '--json', '--config', config);
  assert.deepEqual(JSON.parse(s.out).sinks[0].partitions, []);
});

test('control characters of an untrusted --source reach the terminal only as visible escapes', async () => {
  const dir = tempDir();
  const config = await writeConfig(dir, sampleConfig());
  await fsp.writeFile(join(dir, 'rows.ndjson'), `${ok(1)}\n`);
  const source = 'web\u001b[2J\u001b]0;owned\u0007\rX\u009b';
  const r = await cli('ingest', 'events', '--source', source, '--file', join(dir, 'rows.ndjson'), '--config', config);
  assert.equal(r.code, 0, r.err);
  // biome-ignore lint/suspicious/noControlCharactersInRegex: asserting their absence
  assert.doesNotMatch(r.out + r.err, /[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/, 'no raw control character is printed');
  assert.match(r.out, /source=web\\u001b\[2J\\u001b\]0;owned\\u0007\\u000dX\\u009b/, r.out);
  // The value itself is kept as given: only its printing is escaped.
  const st = await cli('status', '--json', '--config', config);
  const parts = (JSON.parse(st.out) as { sinks: { partitions: { source: string }[] }[] }).sinks[0]!.partitions;
  assert.deepEqual(parts.map((p) => p.source), [source]);
});

test('hints fit the mistake: an unknown sink or dataset, a bad receiver flag', async () => {
  const dir = tempDir();
  const config = await writeConfig(dir, sampleConfig());
  await fsp.writeFile(join(dir, 'rows.ndjson'), `${ok(1)}\n`);
  const cases: [string[], RegExp][] = [
    [['export', '--sink', 'archiv', '--config', config], /no sink named "archiv" \(configured: archive\)\n {2}→ Name one of the configured sinks/],
    [['ingest', 'event', '--source', 'web', '--file', join(dir, 'rows.ndjson'), '--config', config], /unknown dataset "event".*\n {2}→ Name one of the configured datasets.*nothing was read/],
    [['receiver', '--port', '0', '--data', join(dir, 'recv'), '--insecure-no-auth', '--rate', 'abc'], /--rate must be .*\n {2}→ Fix the named flag/],
  ];
  for (const [args, want] of cases) {
    const r = await cli(...args);
    assert.equal(r.code, 2, `${args[0]}: ${r.err}`);
    assert.match(r.err, want);
    assert.doesNotMatch(r.err, /config file and run again|valid rows were kept/, `${args[0]}: a hint that does not fit`);
  }
});
