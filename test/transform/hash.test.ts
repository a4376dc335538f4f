/**
 * hash: HMAC-SHA256 hex of a value's text under a key from the environment.
 * The JavaScript HMAC is checked against node:crypto; the column against
 * node:crypto row by row (STRING with multi-byte text, JSON text, INT64 in
 * and beyond the safe range, nulls, sliced batches); the key is never in the
 * identity, only its fingerprint.
 */
import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import { test } from 'node:test';
import { HmacSha256 } from '../../kernel/transform/sha256.js';
import { batch, cells, chain, col, errorOf, prng, ref } from './helpers.js';

const KEY = 'k3y-0f-at-least-16-bytes';
const env = { HYPSINK_HASH_KEY: KEY };
const hmac = (text: string, key = KEY) => createHmac('sha256', key).update(text, 'utf8').digest('hex');

test('the HMAC agrees with node:crypto for keys and messages of every length around the block size', () => {
  const r = prng(5);
  for (const keyLength of [0, 1, 16, 55, 56, 63, 64, 65, 128, 300]) {
    const key = Buffer.from(Array.from({ length: keyLength }, () => r.int(256)));
    const h = new HmacSha256(key);
    for (let length = 0; length <= 200; length++) {
      const msg = Buffer.from(Array.from({ length: length + 7 }, () => r.int(256)));
      const out = Buffer.alloc(64 + 5);
      h.hexInto(msg, 7, length + 7, out, 5);
      assert.equal(out.toString('latin1', 5), createHmac('sha256', key).update(msg.subarray(7)).digest('hex'), `key ${keyLength}, message ${length}`);
    }
  }
});

test('STRING, JSON and INT64 columns become hex HMACs of their text; nulls stay null; other columns pass as they are', async () => {
  const cols = [col('user', 'STRING'), col('payload', 'JSON', false), col('n', 'INT64'), col('keep', 'STRING')];
  const big = ['9007199254740993', '-9223372036854775808', '9223372036854775807'];
  const rows = [
    { user: 'bob', payload: { a: 1 }, n: 0, keep: 'k0' },
    { user: 'jörg 😀 日本', payload: 'text', n: -1, keep: 'k1' },
    { user: null, payload: [1, 'x'], n: null, keep: null },
    { user: '', payload: null, n: Number.MAX_SAFE_INTEGER, keep: 'k3' },
    { user: 'x'.repeat(200), payload: {}, n: Number.MIN_SAFE_INTEGER, keep: 'k4' },
    ...big.map((n, i) => ({ user: `u${i}`, payload: i, n, keep: `b${i}` })),
  ];
  const b = batch(cols, rows);
  const c = (await chain([{ hash: { columns: ['user', 'payload', 'n'], key: ref('HYPSINK_HASH_KEY') } }], { env })).bind(cols);
  assert.deepEqual(c.columns, [col('user', 'STRING'), col('payload', 'STRING', false), col('n', 'STRING'), col('keep', 'STRING')], 'hashed columns are STRING, nullability kept');
  const out = c.apply(b);
  const want = (v: unknown, f: (x: unknown) => string) => (v === null || v === undefined ? null : hmac(f(v)));
  assert.deepEqual(cells(out.batch, 'user'), rows.map((r) => want(r.user, String)));
  assert.deepEqual(cells(out.batch, 'payload'), rows.map((r) => want(r.payload, (x) => JSON.stringify(x))), 'the JSON text as the cache holds it');
  assert.deepEqual(cells(out.batch, 'n'), rows.map((r) => want(r.n, String)), 'INT64 as its decimal digits');
  assert.equal(out.batch.data.children[3], b.data.children[3], 'a column not hashed is the same Data');
  for (const [from, to] of [
    [1, 8],
    [3, 4],
    [5, 8],
  ] as const) {
    const s = c.apply(b.slice(from, to));
    for (const name of ['user', 'payload', 'n']) assert.deepEqual(cells(s.batch, name), cells(out.batch, name).slice(from, to), `${name} sliced ${from}..${to}`);
  }
});

test('hash takes STRING, JSON and INT64 columns only', async () => {
  const cols = [col('score', 'DOUBLE'), col('at', 'TIMESTAMP'), col('ok', 'BOOLEAN')];
  const c = await chain([{ hash: { columns: ['score', 'at', 'ok'], key: ref('HYPSINK_HASH_KEY') } }], { env });
  const e = await errorOf(() => c.bind(cols));
  assert.equal(e.code, 'HYPSINK_ERR_CONFIG');
  assert.equal(
    e.message,
    'sink "lake": transforms[0].hash.columns[0]: column "score" is DOUBLE; hash takes STRING, JSON or INT64 columns; ' +
      'transforms[0].hash.columns[1]: column "at" is TIMESTAMP; hash takes STRING, JSON or INT64 columns; ' +
      'transforms[0].hash.columns[2]: column "ok" is BOOLEAN; hash takes STRING, JSON or INT64 columns',
  );
});

test(`the key comes from the environment as a \${NAME} reference, long enough, and is never in a message or the identity`, async () => {
  const hash = (key: string) => [{ hash: { columns: ['user'], key } }];
  const literal = await errorOf(() => chain(hash('my-literal-key-of-24-byte'), { env }));
  assert.match(literal.message, /^sink "lake": transforms\[0\]\.hash\.key: give the key as "\$\{NAME\}", an environment variable/);
  assert.ok(!literal.message.includes('my-literal-key'), 'the literal is not echoed');
  const unset = await errorOf(() => chain(hash(ref('NOT_SET')), { env }));
  assert.match(unset.message, /^sink "lake": transforms\[0\]\.hash\.key: environment variable NOT_SET is not set/);
  const short = await errorOf(() => chain(hash(ref('SHORT')), { env: { SHORT: 'tiny-key' } }));
  assert.equal(short.message, 'sink "lake": transforms[0].hash.key: the key in SHORT has 8 bytes; give at least 16 (e.g. the output of "openssl rand -hex 32")');

  const a = await chain(hash(ref('HYPSINK_HASH_KEY')), { env });
  assert.ok(!a.identity.includes(KEY), 'the key is not in the identity');
  assert.match(a.identity, /"key":"hmac-sha256:[0-9a-f]{32}"/);
  const renamed = await chain(hash(ref('OTHER_NAME')), { env: { OTHER_NAME: KEY } });
  assert.equal(renamed.identity, a.identity, 'the same key under another variable: the same output, the same identity');
  const other = await chain(hash(ref('HYPSINK_HASH_KEY')), { env: { HYPSINK_HASH_KEY: `${KEY}!` } });
  assert.notEqual(other.identity, a.identity, 'another key: other output, another identity');
});
