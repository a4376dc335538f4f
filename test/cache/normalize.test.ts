/**
 * Row validation. Timestamps in the form toISOString writes take a hand-written
 * parser (LLP 0013); it must agree with Date.parse on every date it accepts and
 * leave everything else to the general path, which rejects impossible dates.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { normalizeRow } from '../../kernel/ingest/normalize.js';
import type { DatasetSchema } from '../../types/schema.js';

const TS: DatasetSchema = { columns: [{ name: 't', type: 'TIMESTAMP', nullable: false }], timestampColumn: 't' };

const ts = (v: unknown) => normalizeRow(TS, { t: v });

describe('normalize', () => {
  test('canonical UTC timestamps parse as Date.parse does, across years, months and leap days', () => {
    let a = 12345;
    const next = () => {
      a = (Math.imul(a, 1103515245) + 12345) >>> 0;
      return a / 4294967296;
    };
    const lo = Date.parse('0100-01-01T00:00:00.000Z');
    const hi = Date.parse('9999-12-31T23:59:59.999Z');
    const samples = Array.from({ length: 20_000 }, () => Math.floor(lo + next() * (hi - lo)));
    samples.push(lo, hi, 0, -1, Date.parse('2024-02-29T23:59:59.999Z'), Date.parse('2000-02-29T12:00:00.000Z'));
    for (const ms of samples) {
      const iso = new Date(ms).toISOString();
      assert.deepEqual(ts(iso), { ok: true, values: [ms] }, iso);
    }
  });

  test('impossible or out-of-range canonical dates are rejected, not rolled over', () => {
    for (const bad of ['2023-02-29T00:00:00.000Z', '2026-04-31T00:00:00.000Z', '2026-13-01T00:00:00.000Z', '2026-00-10T00:00:00.000Z', '2026-11-29T23:59:60.000Z', '2026-11-29T10:61:00.000Z', '2026-1a-29T10:57:09.123Z', '2026-11-29T10:57:09.12xZ']) {
      const r = ts(bad);
      assert.equal(r.ok, false, bad);
      assert.match((r as { reason: string }).reason, /field "t" must be an ISO-8601 timestamp/);
    }
  });

  test('other ISO forms still take the general path', () => {
    for (const [v, want] of [
      ['2026-11-29T24:00:00.000Z', Date.parse('2026-11-30T00:00:00.000Z')],
      ['0099-01-01T00:00:00.000Z', Date.parse('0099-01-01T00:00:00.000Z')],
      ['2026-11-29T10:57:09.1234Z', Date.parse('2026-11-29T10:57:09.123Z')],
      ['2026-11-29T10:57:09+02:00', Date.parse('2026-11-29T08:57:09Z')],
      ['2026-11-29', Date.parse('2026-11-29')],
    ] as const) {
      assert.deepEqual(ts(v), { ok: true, values: [want] }, v);
    }
  });

  test('a JSON value that cannot be serialized is rejected naming the field, not thrown', () => {
    const schema: DatasetSchema = { columns: [{ name: 'payload', type: 'JSON', nullable: true }] };
    const circular: Record<string, unknown> = {};
    circular.self = circular;
    for (const [v, why] of [
      [{ n: 1n }, /field "payload" is not JSON-serializable \(.*BigInt/],
      [circular, /field "payload" is not JSON-serializable \(.*circular/i],
      [() => 1, /field "payload" is not JSON-serializable \(a function\)/],
    ] as const) {
      const r = normalizeRow(schema, { payload: v });
      assert.equal(r.ok, false);
      assert.match((r as { reason: string }).reason, why);
    }
    assert.deepEqual(normalizeRow(schema, { payload: { a: [1, 'x'] } }), { ok: true, values: ['{"a":[1,"x"]}'] });
  });

  test('a date-time without a zone is UTC, whatever the time zone of the machine', () => {
    const tz = process.env.TZ;
    try {
      for (const zone of ['America/New_York', 'Asia/Kolkata', 'UTC']) {
        process.env.TZ = zone;
        assert.deepEqual(ts('2026-11-29T10:00:00'), { ok: true, values: [Date.UTC(2026, 10, 29, 10)] }, zone);
        assert.deepEqual(ts('2026-11-29 10:00'), { ok: true, values: [Date.UTC(2026, 10, 29, 10)] }, zone);
        assert.deepEqual(ts('2026-11-29T10:00:00.250'), { ok: true, values: [Date.UTC(2026, 10, 29, 10, 0, 0, 250)] }, zone);
        // An explicit zone is kept, and a date alone was UTC already.
        assert.deepEqual(ts('2026-11-29T10:00:00+02:00'), { ok: true, values: [Date.UTC(2026, 10, 29, 8)] }, zone);
        assert.deepEqual(ts('2026-11-29'), { ok: true, values: [Date.UTC(2026, 10, 29)] }, zone);
      }
    } finally {
      if (tz === undefined) delete process.env.TZ;
      else process.env.TZ = tz;
    }
  });

  test('a column named like an Object.prototype member is read only as an own field', () => {
    const schema: DatasetSchema = { columns: [{ name: 'constructor', type: 'STRING', nullable: true }, { name: 'n', type: 'INT64', nullable: false }] };
    assert.deepEqual(normalizeRow(schema, { n: 1 }), { ok: true, values: [null, 1] });
    assert.deepEqual(normalizeRow(schema, { n: 1, constructor: 'x' }), { ok: true, values: ['x', 1] });
    assert.deepEqual(normalizeRow(schema, { n: 1, extra: 2 }), { ok: false, reason: 'field "extra" is not in the dataset schema' });
  });
});
