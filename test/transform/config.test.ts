/**
 * A sink's `transforms` as written: strict keys for every built-in, each
 * problem named by entry and field, unknown names with the one most likely
 * meant, "//" comments allowed at every level.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { chain, errorOf, ref } from './helpers.js';

const problems = async (transforms: unknown) => {
  const e = await errorOf(() => chain(transforms, { env: { K: 'a-key-of-sixteen-bytes' } }));
  assert.equal(e.code, 'HYPSINK_ERR_CONFIG', e.message);
  assert.ok(e.message.startsWith('sink "lake": '), e.message);
  return e.message.slice('sink "lake": '.length);
};
/** The problems of one error, joined as the message joins them. */
const all = (...lines: string[]) => lines.join('; ');

test('the shape of the list and of each entry', async () => {
  assert.equal(await problems({ drop: ['x'] }), all('transforms: expected a list of transforms, like [{ "drop": ["debug"] }]'));
  assert.equal(await problems(['drop']), all('transforms[0]: expected an object with one transform, like { "drop": ["debug"] } (known: select, drop, rename, redact, hash, or "plugin" with "config")'));
  assert.equal(await problems([{}]), all('transforms[0]: an empty entry; give one transform (known: select, drop, rename, redact, hash, or "plugin" with "config")'));
  assert.equal(await problems([{ drop: ['a'], rename: { b: 'c' } }]), all('transforms[0]: one transform per entry, found "drop" and "rename"; give each its own entry'));
  assert.equal(await problems([{ drop: ['a'] }, { redcat: {} }, { mask: {} }]), all(
    'transforms[1]: unknown transform "redcat"; did you mean "redact"? (known: select, drop, rename, redact, hash, or "plugin" with "config")',
    'transforms[2]: unknown transform "mask" (known: select, drop, rename, redact, hash, or "plugin" with "config")',
  ));
  const e = await errorOf(() => chain([{ redcat: {} }]));
  assert.match(e.hint ?? '', /Fix or remove each key/);
});

test('select, drop, rename', async () => {
  assert.equal(await problems([{ select: [] }, { drop: ['a', 'a'] }, { drop: [''] }, { select: 'a' }]), all(
    'transforms[0].select: name at least one column',
    'transforms[1].drop[1]: "a" is listed twice',
    'transforms[2].drop[0]: a column name is empty',
    'transforms[3].select: Invalid input: expected array, received string',
  ));
  assert.equal(await problems([{ rename: {} }, { rename: { a: '_hyp_x', b: 'source' } }, { rename: { a: 'x', b: 'x' } }, { rename: { a: 1 } }]), all(
    'transforms[0].rename: give at least one "old": "new" pair',
    'transforms[1].rename.a: names starting with _hyp_ and the name "source" are reserved',
    'transforms[1].rename.b: names starting with _hyp_ and the name "source" are reserved',
    'transforms[2].rename.b: "a" is renamed to "x" too',
    'transforms[3].rename.a: Invalid input: expected string, received number',
  ));
});

test('redact', async () => {
  assert.equal(await problems([{ redact: { columns: ['m'] } }]), all('transforms[0].redact.patterns: give what to redact: "patterns" (email, bearer, aws-key, credit-card) or "regex", or both'));
  assert.equal(
    await problems([{ redact: { colums: ['m'], patterns: ['emial', 'ssn', 'email', 'email'], regex: ['(', 'a*', '[a-'], paths: [], mask: 'x'.repeat(300), masks: '*' } }]),
    all(
      'transforms[0].redact.columns: required',
      'transforms[0].redact.patterns[0]: unknown pattern "emial"; did you mean "email"? (built-in patterns: email, bearer, aws-key, credit-card; give your own in "regex")',
      'transforms[0].redact.patterns[1]: unknown pattern "ssn" (built-in patterns: email, bearer, aws-key, credit-card; give your own in "regex")',
      'transforms[0].redact.patterns[3]: "email" is listed twice',
      'transforms[0].redact.regex[0]: not a valid regular expression (/(/gu: Unterminated group)',
      'transforms[0].redact.regex[1]: matches the empty string; a redaction must match at least one character',
      'transforms[0].redact.regex[2]: not a valid regular expression (/[a-/gu: Unterminated character class)',
      'transforms[0].redact.paths: give at least one JSON path, or leave "paths" out to redact every string in the value',
      'transforms[0].redact.mask: a mask of at most 256 characters',
      'transforms[0].redact.colums: unknown key; did you mean "columns"?',
      'transforms[0].redact.masks: unknown key; did you mean "mask"?',
    ),
  );
  assert.equal(await problems([{ redact: { columns: ['m'], regex: ['x'], paths: ['user.email'] } }]), all(
    'transforms[0].redact.paths[0]: "user.email" is not a JSON path (it must start with $); write it like $.user.email, $.items[*].note, $..password or $["odd key"]',
  ));
});

test('hash and plugin entries', async () => {
  assert.equal(await problems([{ hash: { columns: ['u'], key: ref('K'), salt: 'x' } }, { hash: { columns: ['u'] } }]), all(
    'transforms[0].hash.salt: unknown key (known keys: columns, key)',
    'transforms[1].hash.key: required',
  ));
  assert.equal(await problems([{ plugin: '', confg: {} }, { plugin: 'x', config: 3 }]), all(
    'transforms[0].plugin: name the plugin that registered the transform',
    'transforms[0].confg: unknown key; did you mean "config"?',
    'transforms[1].config: Invalid input: expected record, received number',
  ));
});

test('"//" comments are allowed at every level and change nothing', async () => {
  const plain = await chain([{ redact: { columns: ['m'], patterns: ['email'] } }]);
  const commented = await chain([{ '//': 'why', redact: { '//': 'mask e-mails', columns: ['m'], patterns: ['email'] } }]);
  assert.equal(commented.identity, plain.identity);
});
