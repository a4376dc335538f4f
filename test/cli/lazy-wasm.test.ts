/**
 * parquet-wasm is loaded by the first read or write of a data file, not by
 * starting the CLI (LLP 0089): `status` and `validate` over a cache with rows
 * never load it; a 1-row `ingest` (it writes a data file) does, which shows
 * the check below sees a load when there is one.
 */
import assert from 'node:assert/strict';
import { promises as fsp } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { BIN, eventLines, SAMPLE_CONFIG_TEXT, writeConfig } from '../support/kernel.js';
import { runNode } from '../support/proc.js';
import { tempDir } from '../support/tmp.js';

/** Preloaded in the child: at exit, says whether parquet-wasm's module was ever required. */
const PROBE = `data:text/javascript,${encodeURIComponent(
  `import { createRequire } from 'node:module';
const cache = createRequire(process.cwd() + '/').cache;
process.on('exit', () => process.stderr.write('parquet-wasm loaded: ' + Object.keys(cache).some((k) => k.includes('parquet_wasm')) + '\\n'));`,
)}`;

async function loadedBy(args: string[], cwd: string): Promise<boolean> {
  const r = await runNode(['--import', PROBE, BIN, ...args], { cwd, env: { HYPSINK_LOG_LEVEL: 'warn' } });
  assert.equal(r.code, 0, `${args.join(' ')}: ${r.stderr}`);
  const m = /parquet-wasm loaded: (true|false)/.exec(r.stderr);
  assert.ok(m, `the probe did not report: ${r.stderr}`);
  return m[1] === 'true';
}

test('status and validate start without parquet-wasm; an ingest that writes a data file loads it', async () => {
  const dir = tempDir();
  await writeConfig(dir, SAMPLE_CONFIG_TEXT);
  await fsp.writeFile(join(dir, 'one.ndjson'), eventLines(1, 1));
  assert.equal(await loadedBy(['ingest', 'events', '--source', 'web', '--file', 'one.ndjson'], dir), true, 'ingest writes a data file with parquet-wasm');
  assert.equal(await loadedBy(['status'], dir), false, 'status over a cache with rows');
  assert.equal(await loadedBy(['validate'], dir), false, 'validate');
});
