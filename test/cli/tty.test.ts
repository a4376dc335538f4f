/**
 * What a person at a terminal sees, through a real pseudo-terminal (util-linux
 * `script`, 100 columns, TERM unset and CI set as on a CI runner): progress
 * bars that count what the work is made of (bytes of a file, rows of a sink's
 * pending), tables no wider than the terminal, and logs for reading; into a
 * pipe, full tables and JSON log lines. Assertions look at a bar's final
 * frame and at totals, never at timing.
 * @ref LLP 0035
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { promises as fsp, statSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { BIN, eventLines, REPO, runBin, sampleConfig, writeConfig } from '../support/kernel.js';
import { tempDir } from '../support/tmp.js';

const COLS = 100;
const quote = (s: string) => `'${s.replaceAll("'", "'\\''")}'`;
// biome-ignore lint/suspicious/noControlCharactersInRegex: terminal output is the point
const ANSI = /\x1b\[[0-9;?]*[A-Za-z]|\x1b[78]/g;
/** Between two frames of a bar: a move to column 1, a carriage return or a line break. */
// biome-ignore lint/suspicious/noControlCharactersInRegex: terminal output is the point
const FRAME_BREAK = /\x1b\[\d*G|\r|\n/;

interface Tty {
  readonly status: number | null;
  /** Everything the command wrote to the terminal (stdout and stderr), raw. */
  readonly raw: string;
  /** The same, escape sequences stripped, carriage returns dropped. */
  readonly text: string;
}

/**
 * Run the CLI with stdout and stderr on a pty `COLS` wide. `stdin`: a file
 * piped into it (the bar then knows no size).
 */
function onTty(args: string[], env: Record<string, string | undefined> = {}, stdin?: string): Tty {
  const cmd = [process.execPath, BIN, ...args].map(quote).join(' ');
  const r = spawnSync('script', ['-qec', `stty cols ${COLS} rows 40; ${cmd}${stdin ? ` < ${quote(stdin)}` : ''}`, '/dev/null'], {
    cwd: REPO,
    env: { ...process.env, TERM: undefined, CI: 'true', NO_COLOR: undefined, HYPSINK_LOG_LEVEL: 'warn', NODE_TEST_CONTEXT: undefined, ...env },
    encoding: 'utf8',
    timeout: 120_000,
  });
  return { status: r.status, raw: r.stdout, text: r.stdout.replace(ANSI, '').replaceAll('\r', '') };
}

/** The last frame of the bar labelled `label` (its frames start with it). */
function lastFrame(raw: string, label: string): string {
  const frames = raw
    .split(FRAME_BREAK)
    .map((f) => f.replace(ANSI, '').trim())
    .filter((f) => f.startsWith(`${label} `));
  assert.ok(frames.length > 0, `a bar frame with "${label}" was drawn: ${JSON.stringify(raw.slice(0, 400))}`);
  return frames[frames.length - 1]!;
}

const LONG_SOURCE = 'frontend-web-server-eu-west-1-production-blue-green-canary-host-0042';

async function setup(rows: number, source = 'web'): Promise<{ dir: string; config: string; file: string }> {
  const dir = tempDir();
  const config = await writeConfig(dir, sampleConfig());
  const file = join(dir, 'rows.ndjson');
  await fsp.writeFile(file, eventLines(1, rows, (id) => ({ msg: `message ${id} ${'x'.repeat(100)}` })));
  if (source) {
    const r = await runBin(['ingest', 'events', '--source', source, '--file', file, '--config', config]);
    assert.equal(r.code, 0, r.stderr);
  }
  return { dir, config, file };
}

test('the status table is no wider than the terminal; into a pipe it is whole', async () => {
  const { config } = await setup(3, LONG_SOURCE);
  const piped = await runBin(['status', '--config', config]);
  assert.equal(piped.code, 0, piped.stderr);
  const widest = Math.max(...piped.stdout.split('\n').map((l) => [...l].length));
  assert.ok(widest > COLS, `the full table is wider than ${COLS} (${widest}), so the terminal must make it fit`);
  assert.ok(piped.stdout.includes(LONG_SOURCE), 'into a pipe every value is whole');
  assert.ok(piped.stdout.includes('high water'), 'into a pipe every column is there');

  const tty = onTty(['status', '--config', config]);
  assert.equal(tty.status, 0, tty.text);
  const lines = tty.text.split('\n').filter((l) => l.length > 0);
  for (const l of lines) assert.ok([...l].length <= COLS, `a line of ${[...l].length} > ${COLS} columns: ${l}`);
  // What is kept is whole, wrapped over lines: the source's pieces are all there, in order.
  const cells = lines.filter((l) => l.startsWith('│')).map((l) => l.split('│')[3]!.trim());
  assert.ok(cells.join('').includes(LONG_SOURCE), `the long source wraps, whole: ${cells.join('|')}`);
  assert.match(tty.text, /pending/);
  assert.match(tty.text, /--json/, 'a note says where the left-out columns are');
});

test('ingest of a file at a terminal: bytes of its size with a percentage, rows/s and an ETA', async () => {
  const { config, file } = await setup(20_000, '');
  const size = statSync(file).size;
  assert.ok(size > 2 * 1024 * 1024, `a file of a few MB (${size} B)`);
  const tty = onTty(['ingest', 'events', '--source', 'web', '--file', file, '--config', config]);
  assert.equal(tty.status, 0, tty.text);
  const frame = lastFrame(tty.raw, 'ingest');
  assert.match(frame, /100%/, frame);
  assert.match(frame, /\b20000 rows\b/, frame);
  assert.match(frame, /\d rows\/s/, frame);
  assert.match(frame, /ETA \d+s/, frame);
  assert.match(frame, new RegExp(`\\| ${(size / 2 ** 20).toFixed(1)} MiB/${(size / 2 ** 20).toFixed(1)} MiB \\|`), `bytes read of the file's size: ${frame}`);
  assert.ok([...frame].length <= COLS, `the bar fits ${COLS} columns: ${frame}`);
  assert.match(tty.text, /ingested 20000 row\(s\)/);
});

test('ingest from stdin at a terminal: rows and a rate (no size is known)', async () => {
  const { config, file } = await setup(5_000, '');
  const tty = onTty(['ingest', 'events', '--source', 'web', '--config', config], {}, file);
  assert.equal(tty.status, 0, tty.text);
  const frame = lastFrame(tty.raw, 'ingest');
  assert.match(frame, /\b5000 rows\b/, frame);
  assert.match(frame, /\d rows\/s/, frame);
  assert.doesNotMatch(frame, /%/, `no percentage of an unknown size: ${frame}`);
});

test('export at a terminal: one bar per sink, rows exported of rows pending', async () => {
  const dir = tempDir();
  const c = sampleConfig();
  c.sinks.second = { ...c.sinks.archive!, config: { dir: 'exports-2' } };
  const config = await writeConfig(dir, c);
  const file = join(dir, 'rows.ndjson');
  await fsp.writeFile(file, eventLines(1, 2000));
  for (const source of ['web', 'api']) {
    const r = await runBin(['ingest', 'events', '--source', source, '--file', file, '--config', config]);
    assert.equal(r.code, 0, r.stderr);
  }
  // The first export ships all of one sink's 4000 rows; the other's come next, with 2000 more of web.
  const first = onTty(['export', '--sink', 'archive', '--config', config]);
  assert.equal(first.status, 0, first.text);
  assert.match(lastFrame(first.raw, 'archive'), /\b4000\/4000 rows\b/);
  await fsp.writeFile(file, eventLines(2001, 2000));
  const r = await runBin(['ingest', 'events', '--source', 'web', '--file', file, '--config', config]);
  assert.equal(r.code, 0, r.stderr);
  const both = onTty(['export', '--config', config]);
  assert.equal(both.status, 0, both.text);
  assert.match(lastFrame(both.raw, 'archive'), /\b2000\/2000 rows\b/, 'archive had 2000 pending');
  assert.match(lastFrame(both.raw, 'second'), /\b6000\/6000 rows\b/, 'second had 6000 pending');
});

test('logs at a terminal are for reading, with --log-format json or into a pipe JSON lines', async () => {
  const { config } = await setup(3);
  const e = await runBin(['export', '--config', config]);
  assert.equal(e.code, 0, e.stderr);
  const forget = ['forget', 'archive', '--yes', '--config', config];
  const isJson = (l: string) => {
    try {
      return typeof JSON.parse(l) === 'object';
    } catch {
      return false;
    }
  };
  const logLine = (text: string) => text.split('\n').find((l) => l.includes('sink state forgotten'));

  const pretty = onTty(forget);
  assert.equal(pretty.status, 0, pretty.text);
  const line = logLine(pretty.text);
  assert.ok(line, `the log line is there: ${pretty.text}`);
  assert.ok(!isJson(line), `not JSON at a terminal: ${line}`);
  assert.match(line, /WARN/);

  await runBin(['export', '--config', config]);
  const json = onTty(['--log-format', 'json', ...forget]);
  assert.equal(json.status, 0, json.text);
  assert.ok(isJson(logLine(json.text) ?? ''), `JSON with --log-format json: ${json.text}`);

  const piped = await runBin(forget);
  assert.equal(piped.code, 0, piped.stderr);
  const l = logLine(piped.stderr);
  assert.ok(l && isJson(l), `JSON into a pipe: ${piped.stderr}`);

  const forced = await runBin(['--log-format', 'pretty', ...forget]);
  assert.ok(!isJson(logLine(forced.stderr) ?? '{}'), `--log-format pretty into a pipe: ${forced.stderr}`);

  const bad = await runBin(['--log-format', 'yaml', 'status', '--config', config]);
  assert.equal(bad.code, 2, 'a wrong --log-format is a usage error');
  assert.match(bad.stderr, /--log-format/);
});

test('a registered secret stays out of pretty logs at a terminal', async () => {
  const dir = tempDir();
  const c = sampleConfig();
  // The forward sink warns naming the host a token would travel to in the clear: here it is a secret.
  // biome-ignore lint/suspicious/noTemplateCurlyInString: the config's own ${ENV} references
  c.sinks = { central: { plugin: '@hypsink/forward', datasets: ['events'], config: { url: 'http://${HIDDEN_HOST}:9/', token: '${HIDDEN_TOKEN}' } } };
  const config = await writeConfig(dir, c);
  const host = 'very-secret-host-name.example';
  const tty = onTty(['validate', '--config', config], { HIDDEN_HOST: host, HIDDEN_TOKEN: 'tok-12345678' });
  assert.equal(tty.status, 0, tty.text);
  const line = tty.text.split('\n').find((l) => l.includes('plain http'));
  assert.ok(line, `the warning is there: ${tty.text}`);
  assert.doesNotMatch(line, /^\s*\{/, `pretty, not JSON: ${line}`);
  assert.ok(line.includes('***'), `masked: ${line}`);
  assert.ok(!tty.text.includes(host), `the secret leaked: ${tty.text}`);
  assert.ok(!tty.text.includes('tok-12345678'), 'the token leaked');
});

test('statusTable fits every width it is given, keeping sink, source and counts; without a width it is whole', async () => {
  const { statusTable } = await import('../../kernel/cli/render.js');
  const partition = (source: string, lastError: string | null) => ({
    dataset: 'events',
    source,
    watermark: '123456789',
    highWater: '987654321',
    committedRows: 10,
    pendingRows: 4,
    exportedRows: 6,
    intent: { since: '100', until: '200', unit: 'u' },
    gapRows: 0,
    rejectedRows: 0,
    lastExportAt: '2026-11-29T09:20:43.034Z',
    lastError,
  });
  const s = {
    sinks: [{ name: 'archive-with-a-long-name', kind: 'blob' as const, partitions: [partition(LONG_SOURCE, `HYPSINK_ERR_DESTINATION: ${'the destination said no '.repeat(3)}`), partition('web', null)] }],
    absent: [],
  };
  const whole = statusTable(s, Number.POSITIVE_INFINITY);
  assert.ok(Math.max(...whole.split('\n').map((l) => [...l].length)) > 150, 'whole, the table is wide');
  for (const w of [40, 60, 80, 100, 120, 160]) {
    const text = statusTable(s, w);
    for (const l of text.split('\n')) assert.ok([...l].length <= w, `at ${w}: a line of ${[...l].length}: ${l}`);
    // Each column's cells, read down the table: a wrapped value reads back whole.
    const columns: string[] = [];
    for (const l of text.split('\n').filter((x) => x.startsWith('│'))) {
      l.split('│')
        .slice(1, -1)
        .forEach((c, i) => {
          columns[i] = (columns[i] ?? '') + c.trim();
        });
    }
    for (const kept of ['archive-with-a-long-name', LONG_SOURCE, 'pending', 'exported']) assert.ok(columns.some((c) => c.includes(kept)), `at ${w}: ${kept} is shown\n${text}`);
  }
});

test('statusTable fits in terminal cells, not code points: wide (CJK) and emoji values', async () => {
  const { statusTable } = await import('../../kernel/cli/render.js');
  const { default: stringWidth } = await import('string-width');
  const source = `${'東京都渋谷区の端末'.repeat(3)}🎉`;
  const s = {
    sinks: [
      {
        name: 'アーカイブ',
        kind: 'blob' as const,
        partitions: [
          {
            dataset: 'イベント',
            source,
            watermark: '1',
            highWater: '2',
            committedRows: 2,
            pendingRows: 1,
            exportedRows: 1,
            intent: null,
            gapRows: 0,
            rejectedRows: 0,
            lastExportAt: null,
            lastError: `HYPSINK_ERR_DESTINATION: ${'宛先が拒否しました '.repeat(4)}`,
          },
        ],
      },
    ],
    absent: [],
  };
  for (const w of [40, 60, 80, 100]) {
    const text = statusTable(s, w);
    for (const l of text.split('\n')) assert.ok(stringWidth(l) <= w, `at ${w}: a line of ${stringWidth(l)} cells: ${l}`);
    const flat = text.split('\n').filter((x) => x.startsWith('│')).map((l) => l.split('│')[3]!.trim()).join('');
    assert.ok(flat.includes(source), `at ${w}: the source reads back whole down its column\n${text}`);
  }
});
