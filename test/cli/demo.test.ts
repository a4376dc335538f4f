/**
 * `npm start` (`hypsink demo`) stands apart: next to a config written by
 * `hypsink init` (another schema, the same `.hypsink/` and `exports/`), it
 * runs on its own config and folders, ingests and exports every demo row, and
 * leaves the user's cache, state and exports alone.
 */
import assert from 'node:assert/strict';
import { promises as fsp } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { runBin, walkFiles } from '../support/kernel.js';
import { tempDir } from '../support/tmp.js';

const exists = (p: string) =>
  fsp.access(p).then(
    () => true,
    () => false,
  );

test('the demo keeps its own config and folders beside an init config, and exports every row it ingests', { timeout: 120_000 }, async () => {
  const dir = tempDir();
  const init = await runBin(['init'], { cwd: dir });
  assert.equal(init.code, 0, init.stderr);
  for (const run of [1, 2]) {
    const r = await runBin(['demo'], { cwd: dir });
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, new RegExp(`run ${run}: ingested 6000 demo rows into "activity"`), r.stdout);
    assert.match(r.stdout, /new files this run \(3\)/);
  }
  const files = (await walkFiles(join(dir, 'demo-exports'), '.hypsink-tmp')).map((f) => f.slice(dir.length + 1)).sort();
  assert.equal(files.length, 6, files.join('\n'));
  assert.ok(files.every((f) => f.startsWith('demo-exports/activity/source=')), files.join('\n'));
  // Nothing of the user's config was touched: no cache, state or export of its own yet, no dead letter anywhere.
  for (const p of ['.hypsink/cache', '.hypsink/state', 'exports', '.hypsink/demo/state/dead-letter']) assert.equal(await exists(join(dir, p)), false, p);
  assert.ok(await exists(join(dir, '.hypsink/demo/cache')));
});
