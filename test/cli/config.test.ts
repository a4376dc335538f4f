/**
 * Config loading through the CLI: the sample config loads as is;
 * every bad config is exit 2 with one message naming the sink (or dataset) and
 * the field; relative paths resolve against the config file's folder whatever
 * the working folder, with `--config` before or after the command.
 */
import assert from 'node:assert/strict';
import { existsSync, promises as fsp, readdirSync } from 'node:fs';
import { join, relative } from 'node:path';
import { test } from 'node:test';
import {
  archive,
  assertExactlyOnce,
  assertStatusShape,
  cli,
  eventLines,
  FIXTURE_PLUGINS,
  type Json,
  range,
  readExports,
  runBin,
  SAMPLE_CONFIG_TEXT,
  sampleConfig,
  writeConfig,
} from '../support/kernel.js';
import { tempDir } from '../support/tmp.js';

test('the issue sample config loads as is', async () => {
  const dir = tempDir();
  const config = await writeConfig(dir, SAMPLE_CONFIG_TEXT);
  const r = await cli('status', '--json', '--config', config);
  assert.equal(r.code, 0, r.err);
  const s = assertStatusShape(r.out);
  assert.deepEqual(
    s.sinks.map((x) => [x.name, x.kind, x.partitions]),
    [['archive', 'blob', []]],
  );
  assert.ok(existsSync(join(dir, '.hypsink/cache/datasets')), 'the cache root resolved against the config folder');
});

interface BadCase {
  readonly name: string;
  readonly edit: (c: ReturnType<typeof sampleConfig>, dir: string) => unknown;
  /** Every pattern must match the one-line message. */
  readonly says: RegExp[];
  readonly code?: string;
  /** The message names the config file (default: when the kernel raised it). */
  readonly file?: boolean;
  /** The command that meets it (default status). */
  readonly command?: string;
}

const BAD: BadCase[] = [
  {
    name: 'unknown plugin in "plugins"',
    edit: (c) => {
      c.plugins = ['hypsink-plugin-that-does-not-exist'];
    },
    says: [/unknown plugin "hypsink-plugin-that-does-not-exist"/],
    code: 'HYPSINK_ERR_PLUGIN',
  },
  {
    name: 'unknown writer plugin',
    edit: (c) => {
      archive(c).writer = '@hypsink/format-nope';
    },
    says: [/sink "archive": writer: /, /format-nope/],
  },
  {
    name: 'cron that is not cron',
    edit: (c) => {
      archive(c).schedule = 'every 5';
    },
    says: [/sink "archive": schedule: /, /"every 5" is not a 5-field cron expression/],
  },
  {
    name: 'cron with 6 fields',
    edit: (c) => {
      archive(c).schedule = '0 */5 * * * *';
    },
    says: [/sink "archive": schedule: /, /not a 5-field cron/],
  },
  {
    name: 'cron with a value out of range',
    edit: (c) => {
      archive(c).schedule = '61 * * * *';
    },
    says: [/sink "archive": schedule: /, /not a valid cron expression/],
  },
  {
    name: 'writer and destination swapped',
    edit: (c) => {
      Object.assign(archive(c), { writer: '@hypsink/local-fs', destination: '@hypsink/format-jsonl' });
    },
    says: [/sink "archive": writer: "@hypsink\/local-fs" is a destination, not an encoder/],
  },
  {
    name: 'an encoder as destination',
    edit: (c) => {
      archive(c).destination = '@hypsink/format-jsonl';
    },
    says: [/sink "archive": destination: "@hypsink\/format-jsonl" is an encoder, not a destination/],
  },
  {
    name: 'a request sink plugin as destination of an encoder',
    edit: (c, dir) => {
      c.plugins = [relative(dir, join(FIXTURE_PLUGINS, 'file-sink'))];
      archive(c).destination = 'test-file-sink';
    },
    says: [/sink "archive": destination: "test-file-sink" is a sink, not a destination; a request sink is configured with "plugin"/],
  },
  {
    name: '@hypsink/forward (a request sink) as destination',
    edit: (c) => {
      archive(c).destination = '@hypsink/forward';
    },
    // Whether or not forward is loadable yet, the error names the sink, the field and the plugin.
    says: [/sink "archive": destination: /, /@hypsink\/forward/],
  },
  {
    name: 'an encoder as a request sink plugin',
    edit: (c) => {
      c.sinks.archive = { plugin: '@hypsink/format-parquet', datasets: ['events'] };
    },
    says: [/sink "archive": plugin: "@hypsink\/format-parquet" is an encoder, not a sink; an encoder belongs in a blob sink/],
  },
  {
    name: 'both plugin and writer',
    edit: (c) => {
      archive(c).plugin = '@hypsink/forward';
    },
    says: [/sink "archive": give either "plugin"/],
  },
  {
    name: 'unknown dataset in a sink',
    edit: (c) => {
      archive(c).datasets = ['events', 'clicks'];
    },
    says: [/sink "archive": datasets\[1\]: unknown dataset "clicks" \(configured: events\)/],
  },
  {
    name: 'missing environment variable (found when the sink is built to export, not at load)',
    edit: (c) => {
      // biome-ignore lint/suspicious/noTemplateCurlyInString: the config's ${ENV} syntax
      archive(c).config = { dir: '${HYPSINK_TEST_UNSET_DIR}/exports' };
    },
    says: [/sink "archive": config\.dir: environment variable HYPSINK_TEST_UNSET_DIR is not set/],
    command: 'export',
  },
  {
    name: 'bad column type',
    edit: (c) => {
      (c.datasets.events!.columns as Json[])[2]!.type = 'VARCHAR';
    },
    says: [/dataset "events": columns\[2\]\.type: /],
  },
  {
    name: 'timestamp column that is not a TIMESTAMP',
    edit: (c) => {
      c.datasets.events!.timestampColumn = 'msg';
    },
    says: [/dataset "events": timestampColumn: "msg" is not a TIMESTAMP column/],
  },
  {
    name: 'bad local-fs config',
    edit: (c) => {
      archive(c).config = { dir: 42 };
    },
    says: [/sink "archive": config\.dir/],
    // The plugin validates its own config when the sink is built; its message names sink and field, not the file.
    file: false,
    command: 'validate',
  },
  {
    name: 'bad local-fs config, met by the daemon at start',
    edit: (c) => {
      archive(c).config = { dir: 42 };
    },
    says: [/sink "archive": config\.dir/],
    file: false,
    // Built before the first tick: `run` ends with the error instead of logging it at every tick.
    command: 'run',
  },
  {
    name: 'two blob sinks writing one dataset to the same dir (spelled differently)',
    edit: (c) => {
      c.sinks.copy = { ...archive(c), writer: '@hypsink/format-jsonl', config: { dir: './exports/' } };
    },
    says: [/sinks "archive" and "copy" both write dataset "events" to .*exports\/; give each sink its own dir or prefix/],
    command: 'validate',
  },
  {
    name: 'unit.maxRows not a positive integer',
    edit: (c) => {
      archive(c).unit = { maxRows: 0 };
    },
    says: [/sink "archive": unit\.maxRows: /],
  },
];

for (const c of BAD) {
  test(`config error, exit 2: ${c.name}`, async () => {
    const dir = tempDir();
    const cfg = sampleConfig();
    c.edit(cfg, dir);
    const config = await writeConfig(dir, cfg);
    delete process.env.HYPSINK_TEST_UNSET_DIR;
    const r = await cli(c.command ?? 'status', '--config', config);
    assert.equal(r.code, 2, `exit 2 (${r.err})`);
    const first = r.err.split('\n')[0]!;
    assert.match(first, new RegExp(`^hypsink: ${c.code ?? 'HYPSINK_ERR_CONFIG'}: `));
    for (const re of c.says) assert.match(first, re);
    if ((c.file ?? c.code === undefined) === true) assert.ok(first.includes(config), 'names the config file');
    assert.equal(r.out, '');
  });
}

test('blob sinks may share a dir when they write different datasets, and other dirs always', async () => {
  const dir = tempDir();
  const cfg = sampleConfig();
  cfg.datasets.other = cfg.datasets.events!;
  cfg.sinks.others = { ...archive(cfg), datasets: ['other'] };
  cfg.sinks.copy = { ...archive(cfg), config: { dir: 'exports-copy' } };
  const r = await cli('status', '--json', '--config', await writeConfig(dir, cfg));
  assert.equal(r.code, 0, r.err);
  assert.deepEqual(
    assertStatusShape(r.out).sinks.map((x) => x.name),
    ['archive', 'others', 'copy'],
  );
});

test('invalid JSON: the message gives line and column', async () => {
  const dir = tempDir();
  const lines = SAMPLE_CONFIG_TEXT.split('\n');
  // Line 2 loses its trailing comma: the parser stops at "sinks", line 3 column 3.
  lines[1] = lines[1]!.replace(/,$/, '');
  const config = await writeConfig(dir, lines.join('\n'));
  const r = await cli('export', '--config', config);
  assert.equal(r.code, 2);
  assert.match(r.err, /HYPSINK_ERR_CONFIG: .*hypsink\.config\.json: not valid JSON at line 3, column 3 /);
});

test('a missing --config file is exit 2 and says how to make one', async () => {
  const dir = tempDir();
  const r = await cli('status', '--config', join(dir, 'nope.json'));
  assert.equal(r.code, 2);
  assert.match(r.err, /nope\.json does not exist \(run "hypsink init"/);
});

test('relative paths resolve against the config folder, from any working folder, --config before or after the command', async () => {
  const root = tempDir();
  const cfgDir = join(root, 'project');
  const elsewhere = join(root, 'elsewhere');
  await fsp.mkdir(cfgDir);
  await fsp.mkdir(elsewhere);
  await writeConfig(cfgDir, SAMPLE_CONFIG_TEXT);
  await fsp.writeFile(join(elsewhere, 'rows.ndjson'), eventLines(1, 4));
  const rel = '../project/hypsink.config.json'; // --config itself is relative to the working folder

  const ing = await runBin(['--config', rel, 'ingest', 'events', '--source', 'web', '--file', 'rows.ndjson'], { cwd: elsewhere });
  assert.equal(ing.code, 0, ing.stderr);
  const exp = await runBin(['export', '--json', '--config', rel], { cwd: elsewhere });
  assert.equal(exp.code, 0, exp.stderr);
  assert.equal((JSON.parse(exp.stdout) as { sinks: { rows: number }[] }).sinks[0]!.rows, 4);

  assert.deepEqual(readdirSync(elsewhere), ['rows.ndjson'], 'nothing created in the working folder');
  assert.ok(existsSync(join(cfgDir, '.hypsink/cache/datasets/events/source=web')));
  assert.ok(existsSync(join(cfgDir, '.hypsink/state/sinks/archive/watermarks')));
  assertExactlyOnce(await readExports(join(cfgDir, 'exports')), { web: range(1, 4) });
});
