/**
 * Issue 28, a newcomer's friction: after a batch with rejected rows there was
 * no documented way to send the corrected rows alone. The README shows it
 * (under "The host's retry rule"); this runs its commands as shown, then the
 * retries a host may make of either batch, and checks every row once.
 * @ref LLP 0070, LLP 0021 (idempotent ingest)
 */
import assert from 'node:assert/strict';
import { promises as fsp, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { assertExactlyOnce, cli, readExports, REPO, sampleConfig, writeConfig } from '../support/kernel.js';
import { tempDir } from '../support/tmp.js';

const TS = '"ts":"2026-01-01T00:00:00.000Z"';

/** The README's example: its `hypsink …` lines and its `grep` line. */
function shown(): { hypsink: string[][]; grep: string } {
  const readme = readFileSync(join(REPO, 'README.md'), 'utf8');
  const block = /<!-- corrected rows -->\n```sh\n([\s\S]*?)```/.exec(readme);
  assert.ok(block, 'the README shows how to send corrected rows alone, after its marker');
  const lines = block[1]!.split('\n').filter((l) => l && !l.startsWith('#'));
  const grep = lines.find((l) => l.startsWith('grep '));
  assert.ok(grep, 'it shows how to find the rejected rows of the batch');
  return { hypsink: lines.filter((l) => l.startsWith('hypsink ')).map((l) => l.split(/\s+/).slice(1)), grep };
}

test('corrected rows sent alone, as the README shows, under a batch id of their own: every row once, and retries of both batches add nothing', async () => {
  const dir = tempDir();
  process.chdir(dir); // the README's commands run in the config's folder
  await writeConfig(dir, sampleConfig());
  await fsp.writeFile(join(dir, 'batch.ndjson'), [`{"id":1,${TS}}`, `{"id":"two",${TS}}`, `{"id":3,${TS}}`].join('\n') + '\n');
  await fsp.writeFile(join(dir, 'fixed.ndjson'), `{"id":2,${TS}}\n`);

  const { hypsink, grep } = shown();
  assert.equal(hypsink.length, 2, 'the batch, then the corrected rows');
  const [first, fix] = hypsink as [string[], string[]];
  const a = await cli(...first);
  assert.equal(a.code, 2, `the batch with a refused row exits 2: ${a.err}`);
  assert.match(a.out, /ingested 2 row\(s\) into events\/source=web, rejected 1/);
  // The grep finds the refused line of that batch in the dead letter.
  const [, pattern, file] = /^grep '([^']+)' (\S+)$/.exec(grep) ?? [];
  assert.ok(pattern && file, grep);
  const found = readFileSync(join(dir, file), 'utf8').split('\n').filter((l) => l.includes(pattern));
  assert.equal(found.length, 1, `the one refused row: ${found.join('\n')}`);
  assert.equal((JSON.parse(found[0]!) as { line: number }).line, 2);

  const b = await cli(...fix);
  assert.equal(b.code, 0, b.err);
  assert.match(b.out, /ingested 1 row\(s\) into events\/source=web/);
  // A host that heard no answer retries either batch with the same id and rows: nothing is added.
  for (const again of [fix, first]) {
    const r = await cli(...again);
    assert.equal(r.code, 0, r.err);
    assert.match(r.out, /was ingested before .*nothing added/);
  }

  assert.equal((await cli('export')).code, 0);
  assertExactlyOnce(await readExports(join(dir, 'exports')), { web: [1, 2, 3] });
});
