/**
 * The chain: select, drop and rename as zero-copy projections; the output
 * columns known at bind; entries composed in order, refusals reported by
 * their row in the batch the chain was given; the identity canonical and
 * stable; a plugin transform registered through the plugin host (a real
 * plugin folder), its config checked and its output checked against what it
 * declared.
 */
import assert from 'node:assert/strict';
import { promises as fsp } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { createHooks } from '../../kernel/hooks.js';
import { PluginHost } from '../../kernel/plugins/host.js';
import type { ColumnSpec } from '../../types/schema.js';
import type { TransformFactory } from '../../types/transforms.js';
import { FIXTURE_PLUGINS } from '../support/kernel.js';
import { tempDir } from '../support/tmp.js';
import { batch, cells, chain, col, errorOf, ipc, rawBatch, ref, rowsOf } from './helpers.js';

const COLS: ColumnSpec[] = [col('id', 'INT64', false), col('msg', 'STRING'), col('debug', 'BOOLEAN'), col('score', 'DOUBLE'), col('ts', 'TIMESTAMP'), col('user', 'STRING')];
const ROWS = [
  { id: 1, msg: 'hello bob@example.com', debug: true, score: 1.5, ts: '2026-01-01T00:00:00.000Z', user: 'bob' },
  { id: 2, msg: null, debug: null, score: null, ts: null, user: null },
  { id: 3, msg: 'plain', debug: false, score: -2, ts: '2026-01-02T00:00:00.000Z', user: 'ann' },
];

test('select, drop and rename: output columns at bind, the same Data in the output, sliced batches too', async () => {
  const c = await chain([{ select: ['user', 'id', 'msg', 'debug'] }, { drop: ['debug'] }, { rename: { msg: 'message', user: 'who' } }]);
  const bound = c.bind(COLS);
  assert.deepEqual(bound.columns, [col('who', 'STRING'), col('id', 'INT64', false), col('message', 'STRING')]);
  const b = batch(COLS, ROWS);
  for (const input of [b, b.slice(1, 3)]) {
    const out = bound.apply(input);
    assert.deepEqual(
      out.batch.schema.fields.map((f) => f.name),
      ['who', 'id', 'message'],
    );
    assert.equal(out.batch.data.children[0], input.data.children[5], 'user passes zero-copy');
    assert.equal(out.batch.data.children[1], input.data.children[0]);
    assert.equal(out.batch.data.children[2], input.data.children[1]);
    assert.equal(out.batch.numRows, input.numRows);
  }
  const swap = (await chain([{ rename: { msg: 'user', user: 'msg' } }])).bind(COLS);
  assert.deepEqual(rowsOf(swap.apply(b).batch, swap.columns)[0], { ...ROWS[0], msg: 'bob', user: 'hello bob@example.com', ts: ROWS[0]!.ts }, 'renames are simultaneous: a swap works');
});

test('no transforms: the batch itself, identity empty', async () => {
  const c = await chain(undefined);
  assert.equal(c.length, 0);
  assert.equal(c.identity, '');
  const b = batch(COLS, ROWS);
  assert.equal(c.bind(COLS).apply(b).batch, b);
  assert.equal((await chain([])).identity, '');
});

test('the issue example: drop, rename, redact, hash in order', async () => {
  const key = 'a-hash-key-of-32-bytes-0123456789';
  const cols = [col('msg', 'STRING'), col('debug', 'STRING'), col('user', 'STRING')];
  const c = await chain(
    [
      { drop: ['debug'] },
      { rename: { msg: 'message' } },
      { redact: { columns: ['message'], patterns: ['email', 'bearer'], regex: ['sk-[A-Za-z0-9]{20,}'], mask: '[redacted]' } },
      { hash: { columns: ['user'], key: ref('HYPSINK_HASH_KEY') } },
    ],
    { env: { HYPSINK_HASH_KEY: key } },
  );
  const bound = c.bind(cols);
  assert.deepEqual(bound.columns, [col('message', 'STRING'), col('user', 'STRING')]);
  const out = bound.apply(batch(cols, [{ msg: 'a@b.cd Bearer xyz sk-aaaaaaaaaaaaaaaaaaaaaaaa', debug: 'd', user: 'u1' }]));
  assert.deepEqual(cells(out.batch, 'message'), ['[redacted] Bearer [redacted] [redacted]']);
  assert.equal((cells(out.batch, 'user')[0] as string).length, 64);
});

test('refusals keep counts exact through a chain: rows by their index in the given batch, the entry in the reason', async () => {
  const cols = [col('id', 'INT64'), col('a', 'JSON'), col('b', 'JSON')];
  const c = await chain([
    { redact: { columns: ['a'], patterns: ['email'] } },
    { drop: ['id'] },
    { rename: { b: 'bee' } },
    { redact: { columns: ['bee'], patterns: ['email'], paths: ['$.x'] } },
  ]);
  const rows = Array.from({ length: 10 }, (_, id) => ({
    id,
    a: id % 3 === 0 ? '{"x":"a@b.co"' : '{"x":"a@b.co"}',
    b: id % 4 === 1 ? '["@"' : '{"x":"c@d.ee"}',
  }));
  const input = rawBatch(cols, rows);
  const out = c.bind(cols).apply(input.slice(0)); // a whole-batch slice: offsets start at 0 again
  assert.deepEqual(
    out.refused.map((r) => [r.row, r.reason.slice(0, 26)]),
    [
      [0, 'transforms[0] (redact): co'],
      [1, 'transforms[3] (redact): co'],
      [3, 'transforms[0] (redact): co'],
      [5, 'transforms[3] (redact): co'],
      [6, 'transforms[0] (redact): co'],
      [9, 'transforms[0] (redact): co'],
    ],
  );
  assert.equal(out.batch.numRows + out.refused.length, 10);
  assert.deepEqual(cells(out.batch, 'bee'), Array(4).fill('{"x":"[redacted]"}'));
  const sliced = c.bind(cols).apply(input.slice(4, 10));
  assert.deepEqual(
    sliced.refused.map((r) => r.row),
    [1, 2, 5],
    'rows 5, 6, 9 of the whole batch are rows 1, 2, 5 of the slice from 4',
  );
});

test('the identity: canonical (key order, comments, order of unordered lists), and it changes with what the sink delivers', async () => {
  const a = await chain([{ drop: ['b', 'a'] }, { redact: { columns: ['m', 'n'], patterns: ['email', 'bearer'], regex: ['x+', 'y+'] } }, { select: ['c', 'm'] }]);
  const b = await chain([
    { '//': 'a comment', drop: ['a', 'b'] },
    { redact: { regex: ['y+', 'x+'], patterns: ['bearer', 'email'], columns: ['n', 'm'], mask: '[redacted]' } },
    { select: ['c', 'm'] },
  ]);
  assert.equal(a.identity, b.identity);
  assert.equal(
    a.identity,
    '[{"drop":["a","b"]},{"redact@1":{"columns":["m","n"],"mask":"[redacted]","patterns":["bearer","email"],"regex":["x+","y+"]}},{"select":["c","m"]}]',
  );
  const differs = async (transforms: unknown) => assert.notEqual((await chain(transforms)).identity, a.identity, JSON.stringify(transforms));
  await differs([{ drop: ['b', 'a'] }, { redact: { columns: ['m', 'n'], patterns: ['email', 'bearer'], regex: ['x+', 'y+'] } }, { select: ['m', 'c'] }]);
  await differs([{ drop: ['b', 'a'] }, { redact: { columns: ['m', 'n'], patterns: ['email', 'bearer'], regex: ['x+', 'y+'], mask: '*' } }, { select: ['c', 'm'] }]);
  await differs([{ redact: { columns: ['m', 'n'], patterns: ['email', 'bearer'], regex: ['x+', 'y+'] } }, { drop: ['b', 'a'] }, { select: ['c', 'm'] }]);
  await differs([{ drop: ['b', 'a'] }, { redact: { columns: ['m', 'n'], patterns: ['email', 'bearer'], regex: ['x+', 'y+'], paths: ['$.a'] } }, { select: ['c', 'm'] }]);
});

test('a chain that leaves no column, or names a column an earlier entry removed, says so', async () => {
  const cols = [col('msg', 'STRING'), col('debug', 'BOOLEAN')];
  const none = await errorOf(async () => (await chain([{ drop: ['msg', 'debug'] }])).bind(cols));
  assert.equal(none.message, 'sink "lake": transforms[0].drop: no column would be left; a sink exports at least one');
  const gone = await errorOf(async () => (await chain([{ rename: { msg: 'message' } }, { drop: ['debug'] }, { redact: { columns: ['msg', 'debug'], patterns: ['email'] } }])).bind(cols, 'events'));
  assert.equal(
    gone.message,
    'sink "lake": transforms[2].redact.columns[0]: no column "msg" in dataset "events": transforms[0] renames it to "message"; ' +
      'transforms[2].redact.columns[1]: no column "debug" in dataset "events": transforms[1] drops it',
  );
  const typo = await errorOf(async () => (await chain([{ rename: { msg: 'message' } }, { redact: { columns: ['mesage'], patterns: ['email'] } }])).bind(cols));
  assert.equal(typo.message, 'sink "lake": transforms[1].redact.columns[0]: no column "mesage" (did you mean "message"?)');
  const far = await errorOf(async () => (await chain([{ select: ['zzzzzz'] }])).bind(cols));
  assert.equal(far.message, 'sink "lake": transforms[0].select[0]: no column "zzzzzz" (columns here: msg, debug)');
  const taken = await errorOf(async () => (await chain([{ rename: { msg: 'debug' } }])).bind(cols));
  assert.equal(taken.message, 'sink "lake": transforms[0].rename.msg: "debug" is already a column; drop it first, or choose another name');
  const types = await errorOf(async () => (await chain([{ redact: { columns: ['debug'], patterns: ['email'] } }])).bind(cols));
  assert.equal(types.message, 'sink "lake": transforms[0].redact.columns[0]: column "debug" is BOOLEAN; redact takes STRING or JSON columns');
  const paths = await errorOf(async () => (await chain([{ redact: { columns: ['msg'], patterns: ['email'], paths: ['$.a'] } }])).bind(cols));
  assert.equal(paths.message, 'sink "lake": transforms[0].redact.paths: paths look inside JSON values, and column "msg" is STRING; redact it in an entry of its own, without paths');
  assert.equal(types.code, 'HYPSINK_ERR_CONFIG');
});

test('a batch of other columns than the chain was bound to is refused, not transformed', async () => {
  const bound = (await chain([{ drop: ['debug'] }])).bind(COLS);
  const e = await errorOf(() => bound.apply(batch([col('id', 'STRING'), col('debug', 'BOOLEAN')], [{ id: 'x', debug: true }])));
  assert.equal(e.code, 'HYPSINK_ERR_INVARIANT');
});

test('determinism: the same batch through the same config gives the same bytes', async () => {
  const config = [{ select: ['msg', 'user', 'id'] }, { redact: { columns: ['msg'], patterns: ['email'] } }, { hash: { columns: ['user'], key: ref('K') } }];
  const env = { K: 'another-key-0123456789' };
  const b = batch(COLS, ROWS);
  const one = ipc((await chain(config, { env })).bind(COLS).apply(b).batch);
  const two = ipc((await chain(config, { env })).bind(COLS).apply(b).batch);
  assert.deepEqual(one, two);
});

// ---- plugin transforms ----

const quiet = () => {
  const log = { debug() {}, info() {}, warn() {}, error() {}, child: () => log };
  return log;
};
const fixtureHost = () => new PluginHost(createHooks(), quiet(), FIXTURE_PLUGINS);

/** A plugin folder with plugin.json and src/index.js, loaded by a real PluginHost. */
async function host(dir: string, name: string, code: string, provides = ['transform']): Promise<PluginHost> {
  await fsp.mkdir(join(dir, name, 'src'), { recursive: true });
  await fsp.writeFile(join(dir, name, 'plugin.json'), JSON.stringify({ name, version: '1.0.0', provides }));
  await fsp.writeFile(join(dir, name, 'src/index.js'), code);
  return new PluginHost(createHooks(), quiet(), dir);
}

const resolver = (h: PluginHost) => async (name: string): Promise<TransformFactory> => {
  await h.activateFor(name, 'transform');
  return h.registry.transforms.get(name)!;
};

test('a plugin transform: registered with registerTransform, its config resolved and fingerprinted, its refusals mapped', async () => {
  const h = fixtureHost();
  await h.load(join(FIXTURE_PLUGINS, 'upper-transform')); // as the config's "plugins" list loads it; entries name what it registered
  const env = { TOKEN: 'a-token-that-is-secret' };
  const cols = [col('id', 'INT64'), col('msg', 'STRING')];
  const c = await chain([{ plugin: 'test-upper-transform', config: { column: 'msg', token: ref('TOKEN') } }], { env, plugin: resolver(h) });
  assert.equal(h.kindOf('test-upper-transform'), 'transform');
  assert.ok(!c.identity.includes('a-token'), 'the resolved secret is not in the identity');
  assert.match(c.identity, /^\[\{"config":\{"column":"msg","token":"hmac-sha256:[0-9a-f]{32}"\},"plugin":"test-upper-transform","version":"2"\}\]$/);
  const out = c.bind(cols).apply(batch(cols, [{ id: 1, msg: 'a' }, { id: 2, msg: 'bad' }, { id: 3, msg: null }, { id: 4, msg: 'd' }]));
  assert.deepEqual(cells(out.batch, 'msg'), ['A', null, 'D']);
  assert.deepEqual(out.refused, [{ row: 1, reason: 'transforms[0] (plugin "test-upper-transform"): value refused' }]);

  const missing = await errorOf(async () => (await chain([{ plugin: 'test-upper-transform', config: { column: 'nope' } }], { env, plugin: resolver(h) })).bind(cols));
  assert.equal(missing.message, 'sink "lake": transforms[0].config.column: no column "nope"');
  const unknownKey = await errorOf(() => chain([{ plugin: 'test-upper-transform', config: { colum: 'msg' } }], { env, plugin: resolver(h) }));
  assert.match(unknownKey.message, /^sink "lake": transforms\[0\]\.config\.colum: unknown key; did you mean "column"\?$/);
  const lies = await errorOf(async () => (await chain([{ plugin: 'test-upper-transform', config: { column: 'msg', broken: 'columns' } }], { plugin: resolver(h) })).bind(cols).apply(batch(cols, [{ id: 1, msg: 'a' }])));
  assert.equal(lies.code, 'HYPSINK_ERR_PLUGIN');
  assert.match(lies.message, /transforms\[0\] \(plugin "test-upper-transform"\): its apply returned a batch of other columns than its bind declared; this is a bug in the plugin/);
  const loses = await errorOf(async () => (await chain([{ plugin: 'test-upper-transform', config: { column: 'msg', broken: 'count' } }], { plugin: resolver(h) })).bind(cols).apply(batch(cols, [{ id: 1, msg: 'a' }, { id: 2, msg: 'b' }])));
  assert.match(loses.message, /its apply was given 2 rows and returned 1 and refused 0; this is a bug in the plugin/);
});

test('a plugin named in transforms that registers no transform, or does not exist, is an error at its entry', async () => {
  const dir = tempDir();
  const h = await host(dir, 'a-sink', "export default (ctx) => ctx.registerSink({ name: 'a-sink', create() {} });\n", ['sink']);
  const wrong = await errorOf(() => chain([{ plugin: './a-sink' }], { plugin: resolver(h) }));
  assert.match(wrong.message, /^sink "lake": transforms\[0\]\.plugin: plugin \.\/a-sink: its plugin\.json provides a transform, but activate registered nothing named "\.\/a-sink"/);
  const none = await errorOf(() => chain([{ plugin: './nowhere' }], { plugin: resolver(h) }));
  assert.match(none.message, /^sink "lake": transforms\[0\]\.plugin: unknown plugin "\.\/nowhere"/);
  // registerTransform needs "transform" in plugin.json's provides, as every other kind
  const undeclared = await host(dir, 'undeclared', "export default (ctx) => ctx.registerTransform({ name: 'undeclared', create() {} });\n", ['sink']);
  const e = await errorOf(() => undeclared.load('./undeclared'));
  assert.match(e.message, /plugin undeclared registers a transform but plugin\.json "provides" lacks "transform"/);
});
