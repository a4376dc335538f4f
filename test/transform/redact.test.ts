/**
 * redact on real Arrow batches: each built-in pattern (what it masks and the
 * near misses it leaves), user regexes, STRING and JSON columns (paths,
 * nested strings, member names kept), multi-byte UTF-8, nulls, sliced
 * batches, zero-copy when nothing is found, refusals, determinism, and a
 * seeded leak test over every built-in pattern.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { RecordBatch } from 'apache-arrow';
import type { ColumnSpec } from '../../types/schema.js';
import { rewriteJsonStrings } from '../../kernel/transform/json.js';
import { builtinFinders, type Finder, matchesAsciiOnly, redactText, userFinder } from '../../kernel/transform/patterns.js';
import { batch, cells, chain, col, ipc, prng, rawBatch } from './helpers.js';

const MSG = [col('id', 'INT64'), col('msg', 'STRING')];
const M = '[redacted]';

async function redactStrings(texts: readonly (string | null)[], redact: Record<string, unknown>): Promise<unknown[]> {
  const c = await chain([{ redact: { columns: ['msg'], ...redact } }]);
  const b = batch(MSG, texts.map((msg, id) => ({ id, msg })));
  const out = c.bind(MSG).apply(b);
  assert.equal(out.refused.length, 0);
  return cells(out.batch, 'msg');
}

const each = async (pattern: string, masked: [string, string][], kept: string[]) => {
  const got = await redactStrings([...masked.map(([t]) => t), ...kept], { patterns: [pattern] });
  assert.deepEqual(got, [...masked.map(([, w]) => w), ...kept], pattern);
};

test('email: addresses are masked, local part and domain; near misses are kept', async () => {
  await each(
    'email',
    [
      ['mail bob@example.com now', `mail ${M} now`],
      ['<a.b+c_d%e-f@sub.example.co.uk>', `<${M}>`],
      ['end of sentence: x@y.io.', `end of sentence: ${M}.`],
      ['jörg@exämple.de, 李@例子.中国', `${M}, ${M}`],
      ['two: a@b.cd;e@f.gh', `two: ${M};${M}`],
      ['git@github.com:org/repo', `${M}:org/repo`],
    ],
    ['@handle', 'a@b', 'user@localhost', 'x@10.0.0.1', 'no at sign here', 'trailing@', 'a@.com', 'a@b..com'],
  );
});

test('bearer: the token after "Bearer" is masked in any case, the word kept', async () => {
  await each(
    'bearer',
    [
      ['Authorization: Bearer eyJhbGciOi.J9-x_y~z+/ab==', `Authorization: Bearer ${M}`],
      ['BEARER abc def', `BEARER ${M} def`],
      ['bearer\tt0k3n', `bearer\t${M}`],
      ['token_type=bearer: zzz', `token_type=bearer: ${M}`],
    ],
    ['xbearer abc', 'Bearer', 'bearer "quoted"'],
  );
});

test('aws-key: access key ids and 40-character secrets after a key name are masked', async () => {
  const secret = 'wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY';
  await each(
    'aws-key',
    [
      ['id AKIAIOSFODNN7EXAMPLE used', `id ${M} used`],
      ['ASIAXXXXXXXXXXXXXXXX', M],
      [`aws_secret_access_key = ${secret}`, `aws_secret_access_key = ${M}`],
      [`AWS_SECRET_ACCESS_KEY=${secret}\n`, `AWS_SECRET_ACCESS_KEY=${M}\n`],
      [`{"SecretAccessKey": "${secret}"}`, `{"SecretAccessKey": "${M}"}`],
      [`secret_key: '${secret}'`, `secret_key: '${M}'`],
    ],
    ['AKIA-short', `token ${secret}`, `secret = ${secret}x`, 'akiaiosfodnn7example'],
  );
});

test('credit-card: 13 to 19 digits, separated or not, Luhn-checked, first digit 2 to 6', async () => {
  await each(
    'credit-card',
    [
      ['card 4111 1111 1111 1111 ok', `card ${M} ok`],
      ['4111-1111-1111-1111', M],
      ['visa:4111111111111111;', `visa:${M};`],
      ['amex 378282246310005', `amex ${M}`],
      ['disc 6011 1111 1111 1117 exp 2024', `disc ${M} exp 2024`],
      ['4111 1111 1111 1111 2024', `${M} 2024`],
      ['ref 9 4111 1111 1111 1111', `ref 9 ${M}`],
      ['mc 5555555555554444 and 4012888888881881', `mc ${M} and ${M}`],
    ],
    ['4111111111111112', 'ts=1712345678901', '1234 5678 9012 3456', '41111111111111110000', 'phone +1 555-123-4567', '2024-01-15 12:34:56'],
  );
});

test('user regexes: Unicode mode, (?i) for any case, assertions looked at cell by cell', async () => {
  const got = await redactStrings(['key sk-abcdefghijklmnopqrstuvwx!', 'SK-ABCDEFGHIJKLMNOPQRSTUVWX', 'sk-short'], { regex: ['sk-[A-Za-z0-9]{20,}'] });
  assert.deepEqual(got, [`key ${M}!`, 'SK-ABCDEFGHIJKLMNOPQRSTUVWX', 'sk-short']);
  assert.deepEqual(await redactStrings(['SK-ABCDEFGHIJKLMNOPQRSTUVWX'], { regex: ['(?i)sk-[a-z]{20,}'] }), [M]);
  // `^…$` is about each cell: over the whole column it would never match after the first cell.
  const anchored = await redactStrings(['secret', 'secret', 'not secret', 'secret'], { regex: ['^secret$'] });
  assert.deepEqual(anchored, [M, M, 'not secret', M]);
  assert.deepEqual(await redactStrings(['password=hunter2 ok', 'pw hunter2'], { regex: ['(?<=password=)\\S+'] }), [`password=${M} ok`, 'pw hunter2']);
  assert.deepEqual(await redactStrings(['日本語のテキスト', '😀😀x'], { regex: ['本語', '😀+'] }), [`日${M}のテキスト`, `${M}x`]);
});

test('matches of several patterns overlapping or touching become one mask; the mask is the one configured', async () => {
  const got = await redactStrings(['sk-aaaaaaaaaaaaaaaaaaaa@example.com'], { patterns: ['email'], regex: ['sk-[a-z]{20}'], mask: '***' });
  assert.deepEqual(got, ['***']);
  assert.deepEqual(await redactStrings(['x bob@example.com'], { patterns: ['email'], mask: '' }), ['x ']);
});

test('multi-byte UTF-8 around matches, nulls and empty strings come through', async () => {
  const texts = ['é😀 bob@example.com 日本', null, '', '😀', 'ünïcödé only', null, 'tail x@y.io'];
  assert.deepEqual(await redactStrings(texts, { patterns: ['email'] }), ['é😀 [redacted] 日本', null, '', '😀', 'ünïcödé only', null, 'tail [redacted]']);
  // the same with a user regex, whose anchor runs over the column's UTF-8 text
  assert.deepEqual(await redactStrings(texts, { regex: ['[a-z]+@[a-z]+\\.[a-z]+'] }), ['é😀 [redacted] 日本', null, '', '😀', 'ünïcödé only', null, 'tail [redacted]']);
});

test('a column where nothing is found, and every column redact does not name, is passed on as the same Data', async () => {
  const cols = [col('id', 'INT64'), col('msg', 'STRING'), col('other', 'STRING')];
  const b = batch(cols, [
    { id: 1, msg: 'nothing here', other: 'bob@example.com' },
    { id: 2, msg: 'nor here', other: null },
  ]);
  const c = await chain([{ redact: { columns: ['msg'], patterns: ['email', 'bearer', 'aws-key', 'credit-card'], regex: ['zzz+'] } }]);
  const out = c.bind(cols).apply(b);
  for (let i = 0; i < 3; i++) assert.equal(out.batch.data.children[i], b.data.children[i], `column ${i} zero-copy`);
  assert.deepEqual(cells(out.batch, 'other'), ['bob@example.com', null], 'a column not named is not redacted');
});

test('a sliced batch gives what the same rows give unsliced', async () => {
  const r = prng(3);
  const texts = Array.from({ length: 300 }, (_, i) => (i % 7 === 0 ? null : `${'é'.repeat(r.int(3))}row ${i} ${r.next() < 0.3 ? `u${i}@ex.com` : ''} ${r.next() < 0.2 ? 'Bearer tok' : ''}`));
  const cols = MSG;
  const b = batch(cols, texts.map((msg, id) => ({ id, msg })));
  for (const redact of [{ patterns: ['email', 'bearer'] }, { regex: ['u[0-9]+@ex\\.com', 'Bearer \\w+'] }]) {
    const bound = (await chain([{ redact: { columns: ['msg'], ...redact } }])).bind(cols);
    const whole = cells(bound.apply(b).batch, 'msg');
    for (const [from, to] of [
      [0, 300],
      [1, 299],
      [13, 14],
      [7, 200],
      [299, 300],
    ] as const) {
      const s = b.slice(from, to);
      assert.deepEqual(cells(bound.apply(s).batch, 'msg'), whole.slice(from, to), `slice ${from}..${to}`);
    }
  }
});

const JSONCOLS = [col('id', 'INT64'), col('payload', 'JSON')];

async function redactJson(values: unknown[], redact: Record<string, unknown>): Promise<{ texts: unknown[]; refused: { row: number; reason: string }[] }> {
  const c = await chain([{ redact: { columns: ['payload'], ...redact } }]);
  const out = c.bind(JSONCOLS).apply(batch(JSONCOLS, values.map((payload, id) => ({ id, payload }))));
  return { texts: cells(out.batch, 'payload'), refused: [...out.refused] };
}

test('JSON: every string value is redacted, at any depth; member names, numbers and structure are kept', async () => {
  const doc = { 'bob@example.com': 'key name kept', user: { email: 'bob@example.com', tags: ['x@y.io', 1, true, null] }, n: 4111111111111111 };
  const { texts } = await redactJson([doc, 'plain x@y.io', null, ['a', { b: 'c@d.ee' }]], { patterns: ['email', 'credit-card'] });
  assert.deepEqual(
    texts.map((t) => (t === null ? null : JSON.parse(t as string))),
    [{ 'bob@example.com': 'key name kept', user: { email: M, tags: [M, 1, true, null] }, n: 4111111111111111 }, `plain ${M}`, null, ['a', { b: M }]],
  );
  assert.equal(texts[0], JSON.stringify({ ...doc, user: { email: M, tags: [M, 1, true, null] } }), 'the rest of the text as it was');
});

test('JSON: only at the given paths, a masked value with quotes or escapes stays valid JSON', async () => {
  const doc = { user: { email: 'bob@example.com', note: 'bob@example.com' }, items: [{ note: 'a@b.co' }, { note: 'x' }], other: 'c@d.ee' };
  const { texts } = await redactJson([doc], { patterns: ['email'], paths: ['$.user.email', '$.items[*].note'], mask: '"\\</>' });
  const m = '"\\</>';
  assert.deepEqual(JSON.parse(texts[0] as string), { user: { email: m, note: 'bob@example.com' }, items: [{ note: m }, { note: 'x' }], other: 'c@d.ee' });
  const deep = await redactJson([{ a: { password: 'sk-aaaaaaaaaaaaaaaaaaaaaaaa' }, password: { v: 'sk-bbbbbbbbbbbbbbbbbbbbbbbb' }, b: 'sk-cccccccccccccccccccccccc' }], {
    regex: ['sk-[a-z]{20,}'],
    paths: ['$..password'],
  });
  assert.deepEqual(JSON.parse(deep.texts[0] as string), { a: { password: M }, password: { v: M }, b: 'sk-cccccccccccccccccccccccc' });
});

test('what redact does not see (LLP 0066): member names, numbers, encoded forms; a path with a match-all regex masks every string under it', async () => {
  const key = 'sk-aaaaaaaaaaaaaaaaaaaaaaaa';
  const b64 = Buffer.from(`Bearer ${key}`).toString('base64');
  const { texts } = await redactJson([{ [key]: 1, n: 4111111111111111, enc: b64, pct: encodeURIComponent('bob@example.com') }], {
    patterns: ['email', 'bearer', 'credit-card'],
    regex: ['sk-[a-z]{20,}'],
  });
  // Each of these is kept as it was: the limits the README states, and a change here must change the README.
  assert.deepEqual(JSON.parse(texts[0] as string), { [key]: 1, n: 4111111111111111, enc: b64, pct: 'bob%40example.com' });
  const all = await redactJson([{ creds: { user: 'u', token: 'line one\nline two', n: 7 }, other: 'kept' }], { regex: ['[\\s\\S]+'], paths: ['$.creds'] });
  assert.deepEqual(JSON.parse(all.texts[0] as string), { creds: { user: M, token: M, n: 7 }, other: 'kept' });
});

test('JSON: a value that spells a secret with u-escapes is still looked into', async () => {
  // JSON.stringify never escapes letters or "@", but JSON text from elsewhere (a plugin transform) may.
  const cols = [col('payload', 'JSON')];
  const c = await chain([{ redact: { columns: ['payload'], patterns: ['email', 'bearer', 'aws-key', 'credit-card'] } }]);
  const texts = ['{"a":"bob\\u0040example.com"}', '{"a":"\\u0042earer tok"}', '"\\u0041KIAIOSFODNN7EXAMPLE"', '"\\u0034111 1111 1111 1111"'];
  const out = c.bind(cols).apply(rawBatch(cols, texts.map((payload) => ({ payload }))));
  assert.deepEqual(
    cells(out.batch, 'payload').map((t) => JSON.parse(t as string)),
    [{ a: M }, { a: `Bearer ${M}` }, M, M],
  );
});

test('JSON: an AWS secret alone as the value of a member named like one is masked', async () => {
  const secret = 'wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY';
  const { texts } = await redactJson([{ aws_secret_access_key: secret, SecretAccessKey: secret, other: secret }], { patterns: ['aws-key'] });
  assert.deepEqual(JSON.parse(texts[0] as string), { aws_secret_access_key: M, SecretAccessKey: M, other: secret });
});

test('JSON: a value that is not valid JSON and must be looked into is refused; the reason holds none of it', async () => {
  const cols = [col('id', 'INT64'), col('payload', 'JSON'), col('msg', 'STRING')];
  const secretish = '{"user":"bob@example.com"';
  const rows = [
    { id: 0, payload: '{"user":"ann@example.com"}', msg: 'm0' },
    { id: 1, payload: secretish, msg: 'm1' },
    { id: 2, payload: null, msg: 'm2' },
    { id: 3, payload: '{"user":"x@y.io",}', msg: 'm3' },
    { id: 4, payload: '{"n":1}', msg: 'm4' },
  ];
  const c = await chain([{ redact: { columns: ['payload'], patterns: ['email'], paths: ['$.user'] } }]);
  const b = rawBatch(cols, rows);
  const out = c.bind(cols).apply(b);
  assert.deepEqual(
    out.refused.map((r) => r.row),
    [1, 3],
  );
  for (const r of out.refused) {
    assert.match(r.reason, /^transforms\[0\] \(redact\): column "payload" is not valid JSON \(.* at offset \d+\): what in it to redact cannot be known, so the row is not shipped$/);
    for (const part of ['bob', 'example', 'x@y', 'user']) assert.ok(!r.reason.includes(part), `reason "${r.reason}" holds "${part}"`);
  }
  assert.equal(out.batch.numRows + out.refused.length, b.numRows, 'every row is shipped or refused');
  assert.deepEqual(cells(out.batch, 'id'), [0n, 2n, 4n]);
  assert.deepEqual(cells(out.batch, 'msg'), ['m0', 'm2', 'm4'], 'the other columns lose the same rows');
  assert.deepEqual(cells(out.batch, 'payload'), [`{"user":"${M}"}`, null, '{"n":1}']);
});

test('redact is deterministic: the same batch gives byte-identical output, from the same chain or one built again', async () => {
  const cols = [col('id', 'INT64'), col('msg', 'STRING'), col('payload', 'JSON')];
  const r = prng(11);
  const rows = Array.from({ length: 500 }, (_, id) => ({ id, msg: `m ${id} u${r.int(1000)}@ex.com Bearer t${id}`, payload: { a: [`x${id}@y.io`, r.int(9)], card: '4111 1111 1111 1111' } }));
  const b = batch(cols, rows);
  const config = [{ redact: { columns: ['msg', 'payload'], patterns: ['email', 'bearer', 'credit-card'], regex: ['t[0-9]+'] } }];
  const once = ipc((await chain(config)).bind(cols).apply(b).batch);
  const c = await chain(config);
  assert.deepEqual(ipc(c.bind(cols).apply(b).batch), once);
  assert.deepEqual(ipc(c.bind(cols).apply(b).batch), once);
});

// ---- the leak test ----

const LOWER = 'abcdefghijklmnopqrstuvwxyz';
const ALNUM = `${LOWER}${LOWER.toUpperCase()}0123456789`;
const str = (r: ReturnType<typeof prng>, alphabet: string, min: number, max: number) =>
  Array.from({ length: min + r.int(max - min + 1) }, () => alphabet[r.int(alphabet.length)]).join('');

function card(r: ReturnType<typeof prng>): string {
  const len = 13 + r.int(7);
  const digits = [2 + r.int(5), ...Array.from({ length: len - 2 }, () => r.int(10))];
  // the check digit that makes the Luhn sum a multiple of 10
  let sum = 0;
  for (let i = digits.length - 1, dbl = true; i >= 0; i--, dbl = !dbl) {
    let d = digits[i]!;
    if (dbl) {
      d *= 2;
      if (d > 9) d -= 9;
    }
    sum += d;
  }
  const all = [...digits, (10 - (sum % 10)) % 10].join('');
  const sep = r.pick(['', ' ', '-']);
  return sep === '' ? all : all.match(/.{1,4}/g)!.join(sep);
}

/** A secret of each kind: the text to plant, and the part that must not survive. */
function secret(r: ReturnType<typeof prng>): { text: string; core: string; kind: string } {
  switch (r.int(5)) {
    case 0: {
      const e = `${str(r, `${LOWER}0123456789._+-`, 1, 12)}${str(r, LOWER, 1, 1)}@${Array.from({ length: 1 + r.int(3) }, () => str(r, `${LOWER}0123456789`, 1, 10)).join('.')}.${str(r, LOWER, 2, 6)}`;
      return { text: e, core: e, kind: 'email' };
    }
    case 1: {
      const t = str(r, `${ALNUM}-._~+/`, 8, 40) + '='.repeat(r.int(3));
      return { text: `${r.pick(['Bearer', 'bearer', 'BEARER'])}${r.pick([' ', '  ', '\t'])}${t}`, core: t, kind: 'bearer' };
    }
    case 2: {
      const id = `${r.pick(['AKIA', 'ASIA'])}${str(r, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789', 16, 16)}`;
      return { text: id, core: id, kind: 'aws-key id' };
    }
    case 3: {
      const s = str(r, `${ALNUM}/+`, 40, 40);
      const name = r.pick(['aws_secret_access_key', 'AWS_SECRET_ACCESS_KEY', 'SecretAccessKey', 'secret_key', 'aws-secret-key']);
      return { text: `${name}${r.pick(['=', ' = ', ': ', '":"', "='", ' '])}${s}`, core: s, kind: 'aws-key secret' };
    }
    default: {
      const c = card(r);
      return { text: c, core: c.replace(/[ -]/g, ''), kind: 'credit-card' };
    }
  }
}

/** What may stand next to a secret in real text. */
const AROUND = ['', ' ', '\n', '"', "'", ',', ';', '(', ')', '<', '>', ' : ', '\t', 'é', '日本', '😀', ' and '];
const FILLER = ['GET /api/v1/items', 'status=200', 'took 12ms', 'user logged in', 'ünïcödé', '日本語', '😀', 'x=1', 'retry 3'];

function plant(r: ReturnType<typeof prng>): { text: string; cores: { core: string; kind: string }[] } {
  const parts: string[] = [];
  const cores: { core: string; kind: string }[] = [];
  for (let k = r.int(4); k >= 0; k--) {
    if (r.next() < 0.5) parts.push(r.pick(FILLER));
    if (r.next() < 0.6) {
      const s = secret(r);
      parts.push(r.pick(AROUND.slice(1)), s.text, r.pick(AROUND.slice(1)));
      cores.push(s);
    }
  }
  return { text: parts.join(r.pick(['', ' '])), cores };
}

function assertNoLeak(out: RecordBatch, name: string, planted: { cores: { core: string; kind: string }[] }[], json: boolean, label: string): void {
  const got = cells(out, name);
  assert.ok(got.length <= planted.length);
  got.forEach((value, i) => {
    const p = planted[i]!;
    const cell = value as string | null;
    if (cell === null) return;
    const text = json ? collectStrings(JSON.parse(cell)).join('\u0000') : cell;
    for (const { core, kind } of p.cores) {
      assert.ok(!text.includes(core), `${label}: row ${i}: a ${kind} survived: ${JSON.stringify(cell)}`);
      if (kind === 'credit-card') assert.ok(!text.replace(/[ -]/g, '').includes(core), `${label}: row ${i}: card digits survived: ${JSON.stringify(cell)}`);
    }
  });
}

function collectStrings(v: unknown): string[] {
  if (typeof v === 'string') return [v];
  if (Array.isArray(v)) return v.flatMap(collectStrings);
  if (v && typeof v === 'object') return Object.values(v).flatMap(collectStrings);
  return [];
}

test('leak test: no seeded secret of any built-in pattern survives, in STRING or JSON columns, whole or sliced batches', async () => {
  const all = { patterns: ['email', 'bearer', 'aws-key', 'credit-card'] };
  const cols: ColumnSpec[] = [col('id', 'INT64'), col('msg', 'STRING'), col('payload', 'JSON')];
  const c = (await chain([{ redact: { columns: ['msg', 'payload'], ...all } }])).bind(cols);
  let secrets = 0;
  for (const seed of [1, 2, 3, 4, 5]) {
    const r = prng(seed);
    const msgs = Array.from({ length: 1500 }, () => plant(r));
    const payloads = Array.from({ length: 1500 }, () => plant(r));
    const rows = msgs.map((m, id) => {
      const p = payloads[id]!.text;
      const shape = r.int(4);
      const payload = shape === 0 ? p : shape === 1 ? { msg: p, n: id } : shape === 2 ? { a: [{ deep: p }], b: true } : [p, null, id];
      return { id, msg: r.next() < 0.05 ? null : m.text, payload };
    });
    secrets += [...msgs, ...payloads].reduce((n, p) => n + p.cores.length, 0);
    const b = batch(cols, rows);
    const out = c.apply(b);
    assert.equal(out.refused.length, 0);
    assertNoLeak(out.batch, 'msg', msgs, false, `seed ${seed}`);
    assertNoLeak(out.batch, 'payload', payloads, true, `seed ${seed}`);
    const from = 1 + r.int(100);
    const sliced = c.apply(b.slice(from, from + 700));
    assertNoLeak(sliced.batch, 'msg', msgs.slice(from), false, `seed ${seed} sliced`);
    assertNoLeak(sliced.batch, 'payload', payloads.slice(from), true, `seed ${seed} sliced`);
  }
  assert.ok(secrets > 10_000, `${secrets} secrets planted`);
});

// ---- the anchors never hide a cell ----

/**
 * What redact means, cell by cell with no anchors: each cell decoded and every
 * finder run over it (or over each string value of a JSON cell).
 */
function reference(texts: readonly (string | null)[], finders: readonly Finder[], mask: string, json: boolean): (string | null)[] {
  const members = finders.filter((f) => f.member);
  return texts.map((t) => {
    if (t === null) return null;
    if (!json) return redactText(t, finders, mask) ?? t;
    const out = rewriteJsonStrings(t, null, (v, key) => (key !== undefined && members.some((f) => f.member!(key, v)) ? mask : redactText(v, finders, mask)));
    return out === null ? t : typeof out === 'string' ? out : 'REFUSED';
  });
}

test('the anchors never hide a cell: seeded columns give what redacting cell by cell gives, for built-ins and user regexes', async () => {
  const pieces = ['a', 'b', 'Z', '0', '1', '4', ' ', '-', '@', '.', 'bearer ', 'Bearer\t', 'AKIA', 'ASIA', 'secret_key=', '4111', 'é', '日', '😀', 'K', 'ſ', 'sk-', 'x.y', '"', '\\', '\n', 'q@', '.co', '\u00a0', '\u2003', 'a\nb'];
  const configs: { patterns?: string[]; regex?: string[] }[] = [
    { patterns: ['email', 'bearer', 'aws-key', 'credit-card'] },
    { regex: ['sk-[a-z0-9]{2,}'] }, // ASCII-only: its anchor runs over the bytes
    { regex: ['[0-9]{3}-[0-9]'] },
    { regex: ['é+[a-z]?'] }, // not ASCII-only: over the UTF-8 text
    { regex: ['(?i)k+s'] }, // Unicode case folding: K and ſ match too
    { regex: ['a\\s+b'] }, // \s is Unicode spaces
    { regex: ['"a'] }, // matches a character JSON text writes escaped
    { regex: ['a\\nb'] },
    { regex: ['^a', 'b$'] }, // assertions: every cell looked at
  ];
  const r = prng(99);
  for (const [k, cfg] of configs.entries()) {
    const finders: Finder[] = [...(cfg.patterns ?? []).flatMap((n) => builtinFinders(n as never)), ...(cfg.regex ?? []).map((s, j) => userFinder(j, s))];
    for (const json of [false, true]) {
      const cols = [col('v', json ? 'JSON' : 'STRING')];
      const values = Array.from({ length: 3000 }, () => (r.next() < 0.05 ? null : Array.from({ length: r.int(12) }, () => r.pick(pieces)).join('')));
      const texts = json ? values.map((v) => (v === null ? null : JSON.stringify(r.next() < 0.5 ? v : { k: v, l: [v, 1] }))) : values;
      const c = (await chain([{ redact: { columns: ['v'], ...cfg } }])).bind(cols);
      const b = rawBatch(cols, texts.map((v) => ({ v })));
      const want = reference(texts, finders, M, json);
      assert.deepEqual(cells(c.apply(b).batch, 'v'), want, `config ${k} (${json ? 'JSON' : 'STRING'})`);
      assert.deepEqual(cells(c.apply(b.slice(17, 2500)).batch, 'v'), want.slice(17, 2500), `config ${k} (${json ? 'JSON' : 'STRING'}) sliced`);
      assert.ok(
        want.some((w, i) => w !== texts[i]),
        `config ${k}: something was redacted`,
      );
    }
  }
});

test('which user regexes count as ASCII-only (their anchor may run over the bytes)', () => {
  for (const yes of ['sk-[A-Za-z0-9]{20,}', 'a\\d+\\w', '[!-~]+', '\\x41\\u0042\\u{43}', '(a)\\1', '(?<n>ab)\\k<n>', '[.]', '\\.', 'a|b', '\\cA']) assert.equal(matchesAsciiOnly(yes), true, yes);
  for (const no of ['.', 'a.b', '\\s', '\\S', '\\D', '\\W', '\\p{L}', '[^a]', 'é', '\\u00e9', '\\u{1F600}', '\\xff', '[a-\\u0100]']) assert.equal(matchesAsciiOnly(no), false, no);
});
