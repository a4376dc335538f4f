/**
 * The JSON scanner redact looks into JSON values with (kernel/transform/json.ts):
 * it accepts exactly what JSON.parse accepts, hands over each string value
 * (never a member name) decoded, splices replacements back as JSON strings,
 * and selects values by JSON paths. Random cases are seeded.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseJsonPath, rewriteJsonStrings } from '../../kernel/transform/json.js';
import { prng } from './helpers.js';

type Json = null | boolean | number | string | Json[] | { [k: string]: Json };

const STRINGS = ['', 'a', 'x@y.io', 'é', '😀', 'quote " back \\ slash', 'tab\tnl\n', '\u0000\u001f', '\ud800', 'a/b', '\u2028'];

function value(r: ReturnType<typeof prng>, depth: number): Json {
  const k = r.int(depth > 3 ? 4 : 7);
  switch (k) {
    case 0:
      return null;
    case 1:
      return r.next() < 0.5;
    case 2:
      return r.pick([0, -1, 1.5, 1e21, -2.5e-7, 123456789]);
    case 3:
      return r.pick(STRINGS) + (r.next() < 0.3 ? r.pick(STRINGS) : '');
    case 4:
    case 5:
      return Array.from({ length: r.int(4) }, () => value(r, depth + 1));
    default: {
      const o: Record<string, Json> = {};
      for (let i = r.int(4); i > 0; i--) o[r.pick(['a', 'b', 'email', 'odd key', 'é', ''])] = value(r, depth + 1);
      return o;
    }
  }
}

/** The string values of a parsed value (not member names), in document order. */
function stringsOf(v: Json): string[] {
  if (typeof v === 'string') return [v];
  if (Array.isArray(v)) return v.flatMap(stringsOf);
  if (v && typeof v === 'object') return Object.values(v).flatMap(stringsOf);
  return [];
}

function mapStrings(v: Json, f: (s: string) => string): Json {
  if (typeof v === 'string') return f(v);
  if (Array.isArray(v)) return v.map((x) => mapStrings(x, f));
  if (v && typeof v === 'object') return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, mapStrings(x, f)]));
  return v;
}

const validByParse = (t: string) => {
  try {
    JSON.parse(t);
    return true;
  } catch {
    return false;
  }
};
const validByScan = (t: string) => {
  const r = rewriteJsonStrings(t, null, () => null);
  return r === null || typeof r === 'string';
};

test('the scanner accepts exactly what JSON.parse accepts (seeded mutations of valid texts)', () => {
  const r = prng(46);
  const noise = ['{', '}', '[', ']', ',', ':', '"', '\\', 'u', '0', '-', '.', 'e', '+', ' ', '\n', 't', 'n', 'x', '\u0001', '1'];
  let valid = 0;
  let invalid = 0;
  for (let n = 0; n < 4000; n++) {
    let t = JSON.stringify(value(r, 0), null, r.next() < 0.3 ? 2 : undefined) ?? 'null';
    for (let m = r.int(3); m > 0; m--) {
      const at = r.int(t.length + 1);
      const op = r.int(3);
      t = op === 0 ? t.slice(0, at) + r.pick(noise) + t.slice(at) : op === 1 ? t.slice(0, at) + t.slice(at + 1) : t.slice(0, at) + r.pick(noise) + t.slice(at + 1);
    }
    const want = validByParse(t);
    assert.equal(validByScan(t), want, `case ${n}: ${JSON.stringify(t)}: JSON.parse says ${want ? 'valid' : 'invalid'}`);
    if (want) valid++;
    else invalid++;
  }
  assert.ok(valid > 500 && invalid > 500, `both kinds were tried (${valid} valid, ${invalid} invalid)`);
  for (const t of ['', ' ', '01', '1.', '.5', '-', '+1', '1e', '"\\x"', '"\\u12"', '[1,]', '{"a":1,}', '{"a"}', '{1:2}', 'tru', 'nulls', '"a"b', '\ufeff1', '[', '"']) {
    assert.equal(validByScan(t), false, JSON.stringify(t));
  }
});

test('every string value is handed over decoded, member names never, and replacements keep the text valid JSON', () => {
  const r = prng(7);
  for (let n = 0; n < 2000; n++) {
    const v = value(r, 0);
    const text = JSON.stringify(v);
    const seen: string[] = [];
    assert.equal(
      rewriteJsonStrings(text, null, (s) => {
        seen.push(s);
        return null;
      }),
      null,
      'nothing replaced: unchanged',
    );
    assert.deepEqual(seen, stringsOf(v), text);
    const out = rewriteJsonStrings(text, null, (s) => `<${s}>"\\`);
    const want = mapStrings(v, (s) => `<${s}>"\\`);
    if (seen.length === 0) assert.equal(out, null);
    else assert.deepEqual(JSON.parse(out as string), want, text);
  }
});

test('the text outside a replaced string stays byte for byte as it was', () => {
  const text = '{ "a" : [ 1 , "x" ,  {"b":"y"} ] ,\n"c":"\\u0041z" }';
  assert.equal(
    rewriteJsonStrings(text, null, (s) => (s === 'y' ? 'Y' : null)),
    '{ "a" : [ 1 , "x" ,  {"b":"Y"} ] ,\n"c":"\\u0041z" }',
  );
  assert.equal(
    rewriteJsonStrings(text, null, (s) => (s === 'Az' ? 'q' : null)),
    '{ "a" : [ 1 , "x" ,  {"b":"y"} ] ,\n"c":"q" }',
    'an escaped value is decoded for the visitor',
  );
});

test('the member a value belongs to is handed over with it', () => {
  const keys: (string | undefined)[] = [];
  rewriteJsonStrings('{"k":"v","arr":["e"],"o":{"in":"w"}}', null, (_s, key) => {
    keys.push(key);
    return null;
  });
  assert.deepEqual(keys, ['k', undefined, 'in']);
});

test('JSON paths select a node and everything under it', () => {
  const doc = {
    user: { email: 'u', name: 'n', tags: ['t0', 't1'] },
    items: [{ note: 'i0', other: 'o0' }, { note: 'i1', deep: { note: 'd' } }],
    'odd key': 'k',
    password: 'p0',
    nested: { password: { v: 'p1' } },
  };
  const text = JSON.stringify(doc);
  const picked = (...paths: string[]) => {
    const got: string[] = [];
    rewriteJsonStrings(
      text,
      paths.map((p) => parseJsonPath(p)),
      (s) => {
        got.push(s);
        return null;
      },
    );
    return got;
  };
  assert.deepEqual(picked('$.user.email'), ['u']);
  assert.deepEqual(picked('$.user'), ['u', 'n', 't0', 't1']);
  assert.deepEqual(picked('$.user.tags[1]'), ['t1']);
  assert.deepEqual(picked('$.items[*].note'), ['i0', 'i1']);
  assert.deepEqual(picked('$.items.*.note'), ['i0', 'i1']);
  assert.deepEqual(picked('$..note'), ['i0', 'i1', 'd']);
  assert.deepEqual(picked('$..password'), ['p0', 'p1']);
  assert.deepEqual(picked('$["odd key"]'), ['k']);
  assert.deepEqual(picked("$['odd key']"), ['k']);
  assert.deepEqual(picked('$'), stringsOf(doc as unknown as Json));
  assert.deepEqual(picked('$.user.email', '$.user'), ['u', 'n', 't0', 't1'], 'overlapping paths select each value once');
  assert.deepEqual(picked('$.nobody', '$.items[5]', '$.user[0]'), []);
  assert.deepEqual(picked('$.user.email.x'), [], 'a path through a string selects nothing');
});

test('a JSON path that is not one is refused with how to write one', () => {
  for (const bad of ['user.email', '$.', '$.a[', '$.a[x]', '$...a', '$ .a', '$["a]', '$.1a']) {
    assert.throws(() => parseJsonPath(bad), /is not a JSON path \(.*\); write it like \$\.user\.email/, bad);
  }
});
