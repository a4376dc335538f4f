/**
 * docs/ERRORS.md lists every code of ERROR_CODES in its table of codes, with
 * the code's exit status, and no code that does not exist.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { ERROR_CODES } from '../../types/errors.js';
import { REPO } from '../support/proc.js';

test('docs/ERRORS.md has a row for every error code, with its exit status', () => {
  const text = readFileSync(join(REPO, 'docs/ERRORS.md'), 'utf8');
  const table = text.slice(text.indexOf('## Codes'), text.indexOf('\n## ', text.indexOf('## Codes') + 1));
  const rows = new Map<string, number>();
  for (const m of table.matchAll(/^\| `(HYPSINK_ERR_[A-Z_]+)` \| (\d) \|/gm)) rows.set(m[1]!, Number(m[2]));
  for (const [code, { exit }] of Object.entries(ERROR_CODES)) {
    assert.ok(rows.has(code), `docs/ERRORS.md's table of codes has no row for ${code}`);
    assert.equal(rows.get(code), exit, `${code}: the table says exit ${rows.get(code)}, ERROR_CODES says ${exit}`);
  }
  for (const code of rows.keys()) assert.ok(Object.hasOwn(ERROR_CODES, code), `docs/ERRORS.md lists ${code}, which ERROR_CODES does not have`);
  // Each code also has a section of example messages.
  for (const code of Object.keys(ERROR_CODES)) assert.ok(text.includes(`### \`${code}\``), `docs/ERRORS.md has no examples section for ${code}`);
});
