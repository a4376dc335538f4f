/**
 * `hypsink test`: a sink's transform chain (or every chain of the config) run
 * on NDJSON rows from a file, through the code an export runs (the ingest's
 * parser, the spool's Arrow columns, the sink's chain as `validate` builds it).
 * Output rows and refused rows (by input line, with the reason the dead letter
 * keeps) are printed; an expected file that matches exits 0, one that differs
 * exits 1 naming the row, the field, expected and got; a malformed input line
 * is an error naming file:line; an unknown sink lists the configured ones.
 * @ref LLP 0071
 */
import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import { existsSync, promises as fsp } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { cli, FIXTURE_PLUGINS, runBin, sampleConfig, writeConfig } from '../support/kernel.js';
import { tempDir } from '../support/tmp.js';
import { ref } from '../transform/helpers.js';

const KEY = 'a-test-hash-key-of-32-bytes-0123';
process.env.HYPSINK_TEST_CMD_KEY = KEY;

/** A config of three sinks of `events`: two with transforms, one without. */
async function setup(): Promise<{ dir: string; config: string }> {
  const dir = tempDir('hypsink-test-cmd-');
  const c = sampleConfig();
  c.plugins = [join(FIXTURE_PLUGINS, 'upper-transform')];
  c.datasets.events!.columns = [
    { name: 'id', type: 'INT64', nullable: false },
    { name: 'ts', type: 'TIMESTAMP', nullable: false },
    { name: 'msg', type: 'STRING' },
    { name: 'user', type: 'STRING' },
    { name: 'debug', type: 'BOOLEAN' },
  ];
  // Only the chains are built: a destination's unset variable is no matter here.
  const blob = (d: string) => ({ writer: '@hypsink/format-parquet', destination: '@hypsink/local-fs', datasets: ['events'], config: { dir: `${ref('HYPSINK_TEST_CMD_UNSET')}/${d}` } });
  c.sinks = {
    lake: {
      ...blob('lake'),
      transforms: [
        // Upper-cases user, refuses the rows whose user is "bad".
        { plugin: 'test-upper-transform', config: { column: 'user' } },
        { drop: ['debug'] },
        { rename: { msg: 'message' } },
        { redact: { columns: ['message'], patterns: ['email'] } },
      ],
    },
    warehouse: { ...blob('warehouse'), transforms: [{ select: ['id', 'user'] }, { hash: { columns: ['user'], key: ref('HYPSINK_TEST_CMD_KEY') } }] },
    plain: blob('plain'),
  };
  return { dir, config: await writeConfig(dir, c) };
}

/** Five rows, a blank line between the second and third: line numbers are the file's. */
const ROWS = [
  { id: 1, ts: '2026-01-01T00:00:00Z', msg: 'mail bob@example.com now', user: 'ann', debug: true },
  { id: 2, ts: '2026-01-01T00:00:01Z', msg: 'plain', user: 'cy', debug: null },
  null,
  { id: 3, ts: '2026-01-01T00:00:02Z', msg: 'secret-ish', user: 'bad', debug: false },
  { id: 4, ts: '2026-01-01T00:00:03Z', msg: null, user: null },
];
const INPUT = `${ROWS.map((r) => (r ? JSON.stringify(r) : '')).join('\n')}\n`;

const LAKE_OUT = [
  { id: 1, ts: '2026-01-01T00:00:00.000Z', message: 'mail [redacted] now', user: 'ANN' },
  { id: 2, ts: '2026-01-01T00:00:01.000Z', message: 'plain', user: 'CY' },
  { id: 4, ts: '2026-01-01T00:00:03.000Z', message: null, user: null },
];
const REFUSAL = 'transforms[0] (plugin "test-upper-transform"): value refused';

interface TestJson {
  ok: boolean;
  input: string;
  dataset: string;
  rows: number;
  sinks: {
    name: string;
    transforms: number;
    columns: { name: string; type: string }[];
    output: { line: number; row: Record<string, unknown> }[];
    refused: { line: number; reason: string }[];
    expected: string | null;
    differences: { row: number; line: number | null; expectedLine: number | null; field: string | null; expected: unknown; got: unknown; message: string }[];
  }[];
}

test('the output rows and the refused ones (by line, with the reason the dead letter keeps, never the value) of one sink', async () => {
  const { dir, config } = await setup();
  const input = join(dir, 'rows.ndjson');
  await fsp.writeFile(input, INPUT);
  const r = await cli('test', '--sink', 'lake', '--input', input, '--config', config);
  assert.equal(r.code, 0, r.err);
  assert.match(r.out, /sink "lake" \(dataset "events", 4 transforms\): 4 row\(s\) → 3 out, 1 refused/);
  for (const [i, line] of [1, 2, 5].entries()) assert.ok(r.out.includes(`${input}:${line}  ${JSON.stringify(LAKE_OUT[i])}`), r.out);
  assert.ok(r.out.includes(`${input}:4  refused: ${REFUSAL}`), r.out);
  assert.ok(!r.out.includes('secret-ish') && !r.out.includes('"bad"'), 'a refused row is named by its line, its values are not printed');
  assert.equal(existsSync(join(dir, '.hypsink')), false, 'no cache opened or made: it runs beside a daemon holding the cache');

  const j = await cli('test', '--sink', 'lake', '--input', input, '--json', '--config', config);
  assert.equal(j.code, 0, j.err);
  const out = JSON.parse(j.out) as TestJson;
  assert.equal(out.ok, true);
  assert.equal(out.dataset, 'events');
  assert.equal(out.rows, 4);
  const lake = out.sinks[0]!;
  assert.deepEqual(
    lake.columns.map((c) => `${c.name} ${c.type}`),
    ['id INT64', 'ts TIMESTAMP', 'message STRING', 'user STRING'],
  );
  assert.deepEqual(lake.output, [
    { line: 1, row: LAKE_OUT[0] },
    { line: 2, row: LAKE_OUT[1] },
    { line: 5, row: LAKE_OUT[2] },
  ]);
  assert.deepEqual(lake.refused, [{ line: 4, reason: REFUSAL }]);
  assert.equal(lake.expected, null);
});

test('without --sink: every chain of the config over the dataset, a sink without transforms left out', async () => {
  const { dir, config } = await setup();
  const input = join(dir, 'rows.ndjson');
  await fsp.writeFile(input, INPUT);
  const r = await cli('test', '--input', input, '--json', '--config', config);
  assert.equal(r.code, 0, r.err);
  const out = JSON.parse(r.out) as TestJson;
  assert.deepEqual(
    out.sinks.map((s) => s.name),
    ['lake', 'warehouse'],
  );
  const hmac = (v: string) => createHmac('sha256', KEY).update(v).digest('hex');
  assert.deepEqual(
    out.sinks[1]!.output.map((o) => o.row),
    [
      { id: 1, user: hmac('ann') },
      { id: 2, user: hmac('cy') },
      { id: 3, user: hmac('bad') },
      { id: 4, user: null },
    ],
    'the hash key came from the environment, as an export takes it',
  );
  const text = await cli('test', '--input', input, '--config', config);
  assert.equal(text.code, 0, text.err);
  assert.match(text.out, /sink "lake"/);
  assert.match(text.out, /sink "warehouse" \(dataset "events", 2 transforms\): 4 row\(s\) → 4 out, 0 refused/);
  assert.doesNotMatch(text.out, /sink "plain"/);
  assert.ok(!text.out.includes(KEY), 'the key is never printed');
});

test('an expected file that matches exits 0; one that differs exits 1 naming the row, the field, expected and got', async () => {
  const { dir, config } = await setup();
  const input = join(dir, 'rows.ndjson');
  await fsp.writeFile(input, INPUT);
  const good = join(dir, 'expected.ndjson');
  // One entry per input row, in order; a refused row as {"_hyp_refused": <part of the reason>}; ts in any ISO form.
  await fsp.writeFile(
    good,
    [
      JSON.stringify({ ...LAKE_OUT[0], ts: '2026-01-01T00:00:00Z' }),
      JSON.stringify(LAKE_OUT[1]),
      '',
      JSON.stringify({ _hyp_refused: 'value refused' }),
      // a field left out is null, as in ingest
      JSON.stringify({ id: 4, ts: '2026-01-01T00:00:03.000Z', user: null }),
    ].join('\n'),
  );
  const ok = await cli('test', '--sink', 'lake', '--input', input, '--expect', good, '--config', config);
  assert.equal(ok.code, 0, ok.out + ok.err);
  assert.match(ok.out, new RegExp(`matches ${good.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')} \\(4 row\\(s\\)\\)`));

  // --as-expected prints an expected file of the output as it is: kept as is, it matches.
  const snap = await cli('test', '--sink', 'lake', '--input', input, '--as-expected', '--config', config);
  assert.equal(snap.code, 0, snap.err);
  assert.deepEqual(
    snap.out.trim().split('\n').map((l) => JSON.parse(l)),
    [LAKE_OUT[0], LAKE_OUT[1], { _hyp_refused: REFUSAL }, LAKE_OUT[2]],
  );
  const kept = join(dir, 'kept.ndjson');
  await fsp.writeFile(kept, snap.out);
  const again = await cli('test', '--sink', 'lake', '--input', input, '--expect', kept, '--config', config);
  assert.equal(again.code, 0, again.out + again.err);

  const bad = join(dir, 'bad.ndjson');
  await fsp.writeFile(
    bad,
    [
      JSON.stringify(LAKE_OUT[0]),
      JSON.stringify({ ...LAKE_OUT[1], message: 'PLAIN', debug: null }),
      JSON.stringify({ id: 3, ts: '2026-01-01T00:00:02.000Z', message: 'secret-ish', user: 'BAD' }),
      JSON.stringify({ _hyp_refused: true }),
    ].join('\n'),
  );
  const r = await cli('test', '--sink', 'lake', '--input', input, '--expect', bad, '--config', config);
  assert.equal(r.code, 1, r.out + r.err);
  assert.match(r.err, /HYPSINK_ERR_TEST: sink "lake": 4 difference\(s\) from .*bad\.ndjson/);
  const lines = r.out.split('\n');
  const says = (s: string) => assert.ok(lines.some((l) => l.includes(s)), `no line says ${s}:\n${r.out}`);
  says(`row 2 (${input}:2, ${bad}:2): field "message": expected "PLAIN", got "plain"`);
  says(`row 2 (${input}:2, ${bad}:2): field "debug": expected null, got no such column (the output columns: id, ts, message, user)`);
  says(`row 3 (${input}:4, ${bad}:3): expected a row, got refused: ${REFUSAL}`);
  says(`row 4 (${input}:5, ${bad}:4): expected refused, got ${JSON.stringify(LAKE_OUT[2])}`);

  const j = await cli('test', '--sink', 'lake', '--input', input, '--expect', bad, '--json', '--config', config);
  assert.equal(j.code, 1);
  const out = JSON.parse(j.out) as TestJson;
  assert.equal(out.ok, false);
  assert.deepEqual(
    out.sinks[0]!.differences.map((d) => [d.row, d.line, d.expectedLine, d.field, d.expected, d.got]),
    [
      [2, 2, 2, 'message', 'PLAIN', 'plain'],
      [2, 2, 2, 'debug', null, undefined],
      [3, 4, 3, null, { id: 3, ts: '2026-01-01T00:00:02.000Z', message: 'secret-ish', user: 'BAD' }, { _hyp_refused: REFUSAL }],
      [4, 5, 4, null, { _hyp_refused: true }, LAKE_OUT[2]],
    ],
  );

  // Too few and too many entries are differences too.
  const short = join(dir, 'short.ndjson');
  await fsp.writeFile(short, `${JSON.stringify(LAKE_OUT[0])}\n${JSON.stringify(LAKE_OUT[1])}\n{"_hyp_refused":true}\n${JSON.stringify(LAKE_OUT[2])}\n{"id":9}\n`);
  const s = await cli('test', '--sink', 'lake', '--input', input, '--expect', short, '--config', config);
  assert.equal(s.code, 1, s.out + s.err);
  assert.ok(s.out.includes(`row 5 (${short}:5): expected {"id":9}, got no row (the input has 4)`), s.out);
});

test('the real process: a difference exits 1, named on stdout', async () => {
  const { dir, config } = await setup();
  const input = join(dir, 'rows.ndjson');
  await fsp.writeFile(input, `${JSON.stringify(ROWS[0])}\n`);
  const expect = join(dir, 'e.ndjson');
  await fsp.writeFile(expect, `${JSON.stringify({ ...LAKE_OUT[0], message: 'mail bob@example.com now' })}\n`);
  const env = { HYPSINK_TEST_CMD_KEY: KEY };
  const r = await runBin(['test', '--sink', 'lake', '--input', input, '--expect', expect, '--config', config], { env });
  assert.equal(r.code, 1, r.stderr);
  assert.match(r.stdout, /row 1 .*field "message": expected "mail bob@example.com now", got "mail \[redacted\] now"/);
  assert.match(r.stderr, /HYPSINK_ERR_TEST/);
});

test('a malformed input line, or a row the dataset refuses, is an error naming file:line; nothing runs', async () => {
  const { dir, config } = await setup();
  const input = join(dir, 'rows.ndjson');
  await fsp.writeFile(input, `${JSON.stringify(ROWS[0])}\n{"id": 2, "ts":\n${JSON.stringify({ id: 'x', ts: '2026-01-01T00:00:00Z' })}\n`);
  const r = await cli('test', '--sink', 'lake', '--input', input, '--config', config);
  assert.equal(r.code, 2, r.out + r.err);
  assert.match(r.err, /HYPSINK_ERR_INPUT/);
  assert.ok(r.err.includes(`${input}:2: malformed JSON`), r.err);
  assert.ok(r.err.includes(`${input}:3: field "id" must be an INT64`), r.err);
  assert.equal(r.out, '', 'no rows printed');

  const expect = join(dir, 'e.ndjson');
  await fsp.writeFile(input, `${JSON.stringify(ROWS[0])}\n`);
  await fsp.writeFile(expect, '{"id": 1,\n');
  const e = await cli('test', '--sink', 'lake', '--input', input, '--expect', expect, '--config', config);
  assert.equal(e.code, 2, e.out + e.err);
  assert.ok(e.err.includes(`${expect}:1: malformed JSON`), e.err);

  const missing = await cli('test', '--sink', 'lake', '--input', join(dir, 'nope.ndjson'), '--config', config);
  assert.equal(missing.code, 2);
  assert.match(missing.err, /HYPSINK_ERR_INPUT: cannot read input file .*nope\.ndjson/);
});

test('an unknown sink or dataset is an error listing the configured ones', async () => {
  const { dir, config } = await setup();
  const input = join(dir, 'rows.ndjson');
  await fsp.writeFile(input, INPUT);
  const r = await cli('test', '--sink', 'lak', '--input', input, '--config', config);
  assert.equal(r.code, 2, r.err);
  assert.match(r.err, /HYPSINK_ERR_CONFIG: no sink named "lak"; did you mean "lake"\? \(configured: lake, warehouse, plain\)/);
  const d = await cli('test', '--dataset', 'evnts', '--input', input, '--config', config);
  assert.equal(d.code, 2, d.err);
  assert.match(d.err, /unknown dataset "evnts"; did you mean "events"\? \(configured: events\)/);
  // --expect compares one chain: with several, name the sink.
  const several = await cli('test', '--input', input, '--expect', input, '--config', config);
  assert.equal(several.code, 2, several.err);
  assert.match(several.err, /HYPSINK_ERR_USAGE: --expect compares one sink's output, and 2 sinks .*lake, warehouse.*: name one with --sink/);
});
