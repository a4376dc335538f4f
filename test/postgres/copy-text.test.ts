/**
 * The COPY text copy.ts writes from Arrow batches, byte for byte against a
 * plain row-form reference (the first copy.ts's rules: `String` of a number,
 * a timestamp as PostgreSQL reads it (ISO; no sign past 9999, BC at or before year 0), `t`/`f`, `\N`, text with `\`, tab, newline and
 * carriage return escaped, a NUL refused): whatever copy.ts does to go faster,
 * the server gets the same bytes. Batches are built as the cache builds its
 * columns (kernel/store/columns.ts), some of them sliced so the Data has an
 * offset; values are drawn by a seeded generator over each type's edges.
 * @ref LLP 0044
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { type Data, makeData, RecordBatch, type Schema, Struct } from 'apache-arrow';
import { rng } from '../../fixtures/demo/generate.js';
import { buildColumn, userSchema } from '../../kernel/store/columns.js';
import { type CopyPass, copyText } from '../../plugins/postgres/src/copy.js';
import type { ColumnSpec } from '../../types/schema.js';

/** PostgreSQL's reading of a date, written out plainly: ISO for years 1–9999, no sign past 9999, BC at or before year 0. */
function pgTimestamp(d: Date): string {
  const y = d.getUTCFullYear();
  const p2 = (n: number) => String(n).padStart(2, '0');
  const rest = `-${p2(d.getUTCMonth() + 1)}-${p2(d.getUTCDate())}T${p2(d.getUTCHours())}:${p2(d.getUTCMinutes())}:${p2(d.getUTCSeconds())}.${String(d.getUTCMilliseconds()).padStart(3, '0')}Z`;
  return y >= 1 ? `${String(y).padStart(4, '0')}${rest}` : `${String(1 - y).padStart(4, '0')}${rest} BC`;
}

const COLUMNS: ColumnSpec[] = [
  { name: 'id', type: 'INT64', nullable: false },
  { name: 'ts', type: 'TIMESTAMP', nullable: true },
  { name: 'n', type: 'INT64', nullable: true },
  { name: 'x', type: 'DOUBLE', nullable: true },
  { name: 'ok', type: 'BOOLEAN', nullable: true },
  { name: 's', type: 'STRING', nullable: true },
  { name: 'j', type: 'JSON', nullable: true },
];

type Row = Record<string, unknown>;

/** Text as COPY's text format writes it: `\`, tab, newline, carriage return escaped; null if it holds a NUL. */
function text(s: string): string | null {
  if (s.includes('\0')) return null;
  return s.replace(/[\\\t\n\r]/g, (c) => ({ '\\': '\\\\', '\t': '\\t', '\n': '\\n', '\r': '\\r' })[c]!);
}

/** The reference: one row's line, or null when the row is refused. */
function line(row: Row, source: string): string | null {
  const cells = [text(source)];
  for (const c of COLUMNS) {
    const v = row[c.name];
    if (v === null || v === undefined) {
      cells.push('\\N');
      continue;
    }
    switch (c.type) {
      case 'INT64':
        cells.push(typeof v === 'number' ? String(v) : String(BigInt(v as string)));
        break;
      case 'DOUBLE':
        cells.push(Object.is(v, -0) ? '-0' : String(v));
        break;
      case 'BOOLEAN':
        cells.push(v ? 't' : 'f');
        break;
      case 'TIMESTAMP': {
        const d = new Date(v as number);
        if (Number.isNaN(d.getTime())) return null;
        cells.push(pgTimestamp(d));
        break;
      }
      case 'STRING':
      case 'JSON': {
        const t = text(v as string);
        if (t === null) return null;
        cells.push(t);
        break;
      }
    }
  }
  return `${cells.join('\t')}\n`;
}

const DOUBLES = [0, -0, 1, -1, 0.5, -2.25, 1 / 3, 2 / 3, 0.1, 0.1 + 0.2, 1e21, 1e-7, 1.5e-7, 123456789.123, 2147483647.5, 2147483648, -2147483649, 1e15 + 0.5, 2 ** 53, 2 ** 60 + 2 ** 8, NaN, Infinity, -Infinity, 5e-324, Number.MAX_VALUE, 1234.5678, 99.99, 0.000001, 0.0000012];
const INTS: unknown[] = [0, 1, -1, 9, 10, 99, 100, -100, 2147483647, 2147483648, -2147483648, -2147483649, 4294967296, 2 ** 53 - 1, -(2 ** 53 - 1), '9007199254740992', '-9007199254740993', '9223372036854775807', '-9223372036854775808'];
const DAY = 86_400_000;
const TIMES = [0, -1, 1, 999, -999, DAY - 1, -DAY, -DAY - 1, 1_767_225_600_000, 1_767_225_600_123, -62_167_219_200_000, -62_167_219_200_001, 253_402_300_799_999, 253_402_300_800_000, 8.64e15, -8.64e15, 8.64e15 + 1, -8.64e15 - 1];
const PIECES = ['a', 'xyz', ' ', '\\', '\t', '\n', '\r', '\r\n', '\x0b', '\x0c', '\x01', '\x7f', 'é', '€', '😀', 'N', '\\N', '"', "'", ','];

function value(r: () => number, c: ColumnSpec, i: number): unknown {
  if (c.nullable && r() < 0.15) return null;
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(r() * xs.length)]!;
  switch (c.type) {
    case 'INT64':
      if (c.name === 'id') return i + 1;
      return r() < 0.5 ? pick(INTS) : Math.floor((r() - 0.5) * 2 ** (1 + Math.floor(r() * 53)));
    case 'DOUBLE':
      if (r() < 0.4) return pick(DOUBLES);
      return r() < 0.5 ? Math.round((r() - 0.5) * 10 ** Math.floor(r() * 10)) / 10 ** Math.floor(r() * 8) : (r() - 0.5) * 10 ** Math.floor(r() * 40 - 20);
    case 'BOOLEAN':
      return r() < 0.5;
    case 'TIMESTAMP':
      if (r() < 0.3) return pick(TIMES);
      return r() < 0.5 ? 1_767_225_600_000 + Math.floor(r() * 400 * DAY) : Math.floor((r() - 0.5) * 2 * 8.64e15);
    case 'STRING': {
      if (r() < 0.003) return `before\0after`;
      const n = r() < 0.1 ? 100 + Math.floor(r() * 200) : Math.floor(r() * 12);
      return Array.from({ length: n }, () => pick(PIECES)).join('');
    }
    case 'JSON': {
      if (r() < 0.003) return '{"a":"\0"}';
      return JSON.stringify({ k: pick(PIECES) + pick(PIECES), n: Math.floor(r() * 1000), path: r() < 0.5 ? 'C:\\dir\\file' : null, tags: ['x', pick(PIECES)] });
    }
  }
}

function batchOf(rows: readonly Row[]): RecordBatch {
  const children: Data[] = COLUMNS.map((c) => buildColumn(c.type, rows.map((row) => row[c.name] ?? null)));
  const schema = userSchema(COLUMNS) as Schema;
  const data = makeData({ type: new Struct(schema.fields), length: rows.length, nullCount: 0, children });
  return new RecordBatch(schema, data);
}

async function* each(batches: readonly RecordBatch[]): AsyncIterable<RecordBatch> {
  yield* batches;
}

async function run(batches: readonly RecordBatch[], source: string, skip = new Set<number>()) {
  const refused: number[] = [];
  const skipped: number[] = [];
  const pass: CopyPass = { sent: [], bytes: 0 };
  const chunks: Buffer[] = [];
  for await (const c of copyText(each(batches), { columns: COLUMNS, source, skip, onRefused: (o) => refused.push(o), onSkipped: (o) => skipped.push(o) }, pass)) chunks.push(c);
  const all = Buffer.concat(chunks);
  assert.equal(pass.bytes, all.length, 'pass.bytes counts what was sent');
  return { text: all.toString('utf8'), bytes: all, refused, skipped, sent: pass.sent };
}

function expected(rows: readonly Row[], source: string, skip = new Set<number>()) {
  const lines: string[] = [];
  const refused: number[] = [];
  const sent: number[] = [];
  rows.forEach((row, i) => {
    if (skip.has(i)) return;
    const l = line(row, source);
    if (l === null) refused.push(i);
    else {
      lines.push(l);
      sent.push(i);
    }
  });
  return { text: lines.join(''), refused, sent };
}

/** Rows in batches of uneven sizes, each either whole or a slice of a bigger batch (an offset into its Data). */
function batches(rows: readonly Row[], r: () => number): RecordBatch[] {
  const out: RecordBatch[] = [];
  for (let at = 0; at < rows.length; ) {
    const n = Math.min(rows.length - at, 1 + Math.floor(r() * 700));
    if (r() < 0.5 && at >= 5) {
      const pad = 1 + Math.floor(r() * 5);
      out.push(batchOf(rows.slice(at - pad, Math.min(rows.length, at + n + 3))).slice(pad, pad + n));
    } else out.push(batchOf(rows.slice(at, at + n)));
    at += n;
  }
  return out;
}

for (const seed of [1, 2, 3, 4, 5]) {
  test(`COPY text, byte for byte as the row-form reference (seed ${seed})`, async () => {
    const r = rng(seed);
    const rows: Row[] = Array.from({ length: 5000 }, (_, i) => Object.fromEntries(COLUMNS.map((c) => [c.name, value(r, c, i)])));
    const source = seed === 3 ? 'host\twith\\odd\nname é' : `host-${seed}`;
    const got = await run(batches(rows, r), source);
    const want = expected(rows, source);
    assert.ok(want.refused.length > 0, 'the draw holds refused rows (a NUL, a timestamp out of range)');
    assert.deepEqual(got.refused, want.refused);
    assert.deepEqual(got.sent, want.sent);
    if (got.text !== want.text) {
      const a = got.text.split('\n');
      const b = want.text.split('\n');
      const i = a.findIndex((l, k) => l !== b[k]);
      assert.equal(a[i], b[i], `line ${i + 1} differs`);
    }
    assert.equal(got.bytes.equals(Buffer.from(want.text, 'utf8')), true);
  });
}

test('skipped rows are left out and handed over; every chunk ends at a line', async () => {
  const r = rng(9);
  const rows: Row[] = Array.from({ length: 40_000 }, (_, i) => Object.fromEntries(COLUMNS.map((c) => [c.name, value(r, c, i)])));
  const skip = new Set([0, 17, 39_999, 20_000]);
  const refusedFirst = expected(rows, 'h').refused;
  for (const o of refusedFirst) skip.add(o);
  const got = await run(batches(rows, r), 'h', skip);
  const want = expected(rows, 'h', skip);
  assert.deepEqual(got.skipped, [...skip].sort((a, b) => a - b));
  assert.deepEqual(got.refused, []);
  assert.equal(got.text, want.text);
  // Chunks end with whole lines: checked on the stream itself.
  const chunks: Buffer[] = [];
  const pass: CopyPass = { sent: [], bytes: 0 };
  for await (const c of copyText(each(batches(rows, rng(9))), { columns: COLUMNS, source: 'h', skip, onRefused: () => undefined, onSkipped: () => undefined }, pass)) chunks.push(c);
  assert.ok(chunks.length > 1, 'more than one chunk');
  for (const c of chunks) assert.equal(c[c.length - 1], 0x0a);
});
