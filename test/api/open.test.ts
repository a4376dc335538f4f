/**
 * Issue 28, a newcomer's frictions with the host API (`hypsink`): `open(path)`
 * silently opened the embedded default config; `open({ config })` took any
 * `object`, so a misspelled field got no compile-time help; `ingest` refused
 * rows typed by an `interface`; `VerifyReport` was not exported. The type
 * checks here are compiled by `tsc -p tsconfig.json` (npm test's typecheck):
 * a `@ts-expect-error` that no longer finds its error fails it.
 * @ref LLP 0070
 */
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { type HypsinkConfig, type OpenOptions, open, type VerifyReport } from 'hypsink';
import { createLogger } from '../../kernel/log.js';
import { tempDir } from '../support/tmp.js';
import { writeConfig } from '../support/kernel.js';

// Nothing here may fall back to a config in the working folder, nor leave a cache there.
process.chdir(tempDir('hypsink-cwd-'));
const log = createLogger('silent');

const CONFIG = {
  cache: { root: 'my-cache' },
  state: { dir: 'my-state' },
  datasets: {
    events: {
      columns: [
        { name: 'id', type: 'INT64', nullable: false },
        { name: 'msg', type: 'STRING' },
      ],
    },
  },
  sinks: { archive: { writer: '@hypsink/format-jsonl', destination: '@hypsink/local-fs', datasets: ['events'], config: { dir: 'out' } } },
} satisfies HypsinkConfig;

test('open(path): a string is the config file’s path, not the embedded default', async () => {
  const dir = tempDir();
  const path = await writeConfig(dir, CONFIG);
  const k = await (open as (config: string) => ReturnType<typeof open>)(path);
  try {
    assert.deepEqual([...(await k.status()).sinks.map((s) => s.name)], ['archive'], 'the file’s sinks, not the default’s');
    assert.ok(existsSync(join(dir, 'my-cache')), 'its cache, beside the file');
  } finally {
    await k.close();
  }
  await assert.rejects(open(join(dir, 'missing.json')), (e: Error & { code?: string }) => e.code === 'HYPSINK_ERR_CONFIG' && /missing\.json does not exist/.test(e.message));
});

test('open(options): an option hypsink does not know is refused, naming the one meant', async () => {
  const dir = tempDir();
  const path = await writeConfig(dir, CONFIG);
  await assert.rejects(
    open({ configPath: path } as unknown as OpenOptions),
    (e: Error & { code?: string }) => e.code === 'HYPSINK_ERR_USAGE' && /open\(\): unknown option "configPath"; did you mean "config"\?/.test(e.message),
  );
  await assert.rejects(open(42 as unknown as OpenOptions), (e: Error & { code?: string }) => e.code === 'HYPSINK_ERR_USAGE' && /a config path or options/.test(e.message));
});

test('open({ config }) is typed: rows of an interface ingest, verify returns a VerifyReport, a typo fails to compile and to load', async () => {
  const dir = tempDir();
  const k = await open({ config: CONFIG, baseDir: dir, log });
  try {
    interface Event {
      id: number;
      msg: string | null;
    }
    const rows: Event[] = [
      { id: 1, msg: 'a' },
      { id: 2, msg: null },
    ];
    assert.equal((await k.ingest('events', rows, { source: 'web', batchId: 'b1' })).accepted, 2);
    await k.export();
    const report: VerifyReport = await k.verify();
    assert.equal(report.ok, true);
  } finally {
    await k.close();
  }
  const sink = CONFIG.sinks.archive;
  await assert.rejects(
    open({
      baseDir: dir,
      log,
      config: {
        ...CONFIG,
        sinks: {
          archive: {
            ...sink,
            // @ts-expect-error a misspelled field is a compile error
            scheduel: '*/5 * * * *',
          },
        },
      },
    }),
    /scheduel: unknown key; did you mean "schedule"\?/,
  );
  // @ts-expect-error a blob sink is not a request sink too
  const both: HypsinkConfig = { datasets: {}, sinks: { x: { writer: 'w', destination: 'd', plugin: 'p', datasets: [] } } };
  assert.ok(both);
});
