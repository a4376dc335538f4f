/**
 * The Postgres sink's rule, as a table: the watermark row (`held`) and the
 * unit records whose range meets the unit's decide whether it ships, is
 * committed (a duplicate), is other content under its label (a copy:
 * refused with unitConflict), or meets a row that matches nothing.
 * @ref LLP 0041, LLP 0056
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { type UnitRecord, verdict } from '../../plugins/postgres/src/shipper.js';

const D = `u1-${'D'.repeat(43)}`;
const E = `u1-${'E'.repeat(43)}`;
const c = (seq: string) => ({ v: 1 as const, seq });
const unit = (since: string | null, until: string, prior: string | null = since) => ({ since: since === null ? null : c(since), until: c(until), prior: prior === null ? null : c(prior), digest: D });
const rec = (since: string | null, until: string, digest: string | null = D): UnitRecord => ({ since, until, unit: `u-${until}`, digest, rows: digest ? '1' : null, rejected: digest ? 0 : null });

test('the verdict for every case of the row and the records', () => {
  const cases: [string, ReturnType<typeof verdict>['kind'], ReturnType<typeof verdict>][] = [
    ['no row, first unit', 'ship', verdict(null, unit(null, '5'), [])],
    ['row at since', 'ship', verdict('5', unit('5', '9'), [])],
    ['row at prior (after a gap)', 'ship', verdict('3', unit('5', '9', '3'), [])],
    ['held, its record with its digest', 'committed', verdict('9', unit('5', '9'), [rec('5', '9')])],
    ['held past it (the next unit too), its record', 'committed', verdict('12', unit('5', '9'), [rec('5', '9'), rec('9', '12')])],
    ['held, its record with another digest', 'other', verdict('9', unit('5', '9'), [rec('5', '9', E)])],
    ['held, a record of another range over it (a clone cut elsewhere)', 'other', verdict('12', unit(null, '5'), [rec(null, '12', E)])],
    ['held, the same range from another since', 'other', verdict('9', unit('5', '9'), [rec('4', '9')])],
    ['held, no record (committed before unit records)', 'committed', verdict('9', unit('5', '9'), [])],
    ['held, only a record without a digest', 'committed', verdict('12', unit('5', '9'), [rec(null, '12', null)])],
    ['row inside the unit, a record with a digest there', 'other', verdict('7', unit('5', '9'), [rec('5', '7', E)])],
    ['row inside the unit, no record', 'conflict', verdict('7', unit('5', '9'), [])],
    ['row below the unit, no record', 'conflict', verdict('3', unit('5', '9'), [])],
    ['no row, a later unit', 'conflict', verdict(null, unit('5', '9'), [])],
  ];
  for (const [what, want, got] of cases) assert.equal(got.kind, want, what);
  const other = verdict('9', unit('5', '9'), [rec('5', '9', E)]);
  assert.deepEqual(other.kind === 'other' && [other.record.since, other.record.until, other.record.digest], ['5', '9', E], 'names the record found');
});
