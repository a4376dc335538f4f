/**
 * The README's host example (docs/examples/host/embed.mjs) runs as shown, in
 * an empty folder, importing `hypsink` by package name; run twice, its retry
 * of the same batch id adds nothing and exports nothing twice.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { REPO } from '../support/kernel.js';
import { runNode } from '../support/proc.js';
import { tempDir } from '../support/tmp.js';

const EXAMPLE = join(REPO, 'docs/examples/host/embed.mjs');
/** From sources, as the suite runs: tsx's loader by absolute URL (the example runs in an empty folder). */
const TSX = import.meta.resolve('tsx');

test('the README shows the host example verbatim', () => {
  const readme = readFileSync(join(REPO, 'README.md'), 'utf8');
  const shown = /<!-- file: docs\/examples\/host\/embed\.mjs -->\n```js\n([\s\S]*?)```\n/.exec(readme);
  assert.ok(shown, 'the README shows docs/examples/host/embed.mjs after its marker');
  assert.equal(shown[1], readFileSync(EXAMPLE, 'utf8'));
  assert.ok(shown[1]!.trimEnd().split('\n').length <= 16, 'a dozen lines or so');
});

test('the host example records, exports and reports; run again, its batch is acknowledged and nothing is exported twice', async () => {
  const dir = tempDir();
  const first = await runNode(['--import', TSX, EXAMPLE], { cwd: dir, env: { HYPSINK_LOG_LEVEL: 'warn' } });
  assert.equal(first.code, 0, first.stderr);
  assert.equal(first.stdout.trim(), 'ingested 3, exported 3; exported 3 of 3, pending 0');
  const again = await runNode(['--import', TSX, EXAMPLE], { cwd: dir, env: { HYPSINK_LOG_LEVEL: 'warn' } });
  assert.equal(again.code, 0, again.stderr);
  assert.equal(again.stdout.trim(), 'ingested 3, exported 0; exported 3 of 3, pending 0', 'the same batch id: acknowledged, nothing added');
});
