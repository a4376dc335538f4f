/**
 * A cache and state dir named under the first name rule (v1: uppercase letters
 * as they are, `con` as it is) are renamed to the current one on open, and a
 * crash at the rename (a real SIGKILL, `names.afterRename`) is finished by the
 * next open: every partition is found, no watermark is lost, so nothing is
 * exported twice and nothing is left behind.
 * The v1 tree is made by this version and then renamed back, name by name, to
 * what the first rule made of each value.
 * @ref LLP 0029 (one name rule)
 */
import assert from 'node:assert/strict';
import { promises as fsp } from 'node:fs';
import { join, relative, sep } from 'node:path';
import { describe, test } from 'node:test';
import { FAULT_POINTS } from '../../kernel/fault.js';
import { encodeSegment } from '../../kernel/store/segments.js';
import { encodeSegmentV1, NAMES_FILE } from '../../kernel/store/segments-v1.js';
import { cli, cliStatus, eventLines, ingestText, type Json, openKernel, runBin, sampleConfig, walkFiles, writeConfig } from '../support/kernel.js';
import { tempDir } from '../support/tmp.js';

process.env.HYPSINK_LOG_LEVEL ??= 'warn';

const DATASETS = ['Events', 'events'] as const;
const SOURCES = ['HostA', 'hosta', 'con', 'web', `Long${'X'.repeat(200)}`] as const;
const SINK = 'Archive';
const VALUES = [...DATASETS, ...SOURCES, SINK];

function config(): Json {
  const c = sampleConfig();
  const schema = c.datasets.events!;
  const sink = { ...c.sinks.archive!, writer: '@hypsink/format-jsonl', datasets: [...DATASETS], schedule: undefined };
  return { cache: { root: 'cache' }, state: { dir: 'state' }, datasets: { Events: schema, events: schema }, sinks: { [SINK]: sink } };
}

/** Rows exported so far, as `dataset/source/id` (from each JSONL file's path and its lines). */
async function exported(dir: string): Promise<string[]> {
  const out: string[] = [];
  const root = join(dir, 'exports');
  for (const file of await walkFiles(root, '.hypsink-tmp')) {
    const [ds, src] = relative(root, file).split(sep);
    for (const line of (await fsp.readFile(file, 'utf8')).split('\n')) {
      if (line) out.push(`${ds}/${src}/${(JSON.parse(line) as { id: number }).id}`);
    }
  }
  return out.sort();
}

/** Every entry under the cache and state dirs, relative. */
async function entries(dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const top of ['cache', 'state']) {
    const walk = async (d: string): Promise<void> => {
      for (const e of await fsp.readdir(d, { withFileTypes: true })) {
        out.push(relative(dir, join(d, e.name)));
        if (e.isDirectory()) await walk(join(d, e.name));
      }
    };
    await walk(join(dir, top));
  }
  return out;
}

/** Rename every name this version made of a test value to what the first rule made of it, deepest first. */
async function toV1(dir: string): Promise<number> {
  const v1 = new Map<string, string>();
  for (const v of VALUES) {
    for (const [pre, suf] of [['', ''], ['source=', ''], ['source=', '.json'], ['', '.ndjson']]) v1.set(`${pre}${encodeSegment(v)}${suf}`, `${pre}${encodeSegmentV1(v)}${suf}`);
  }
  let n = 0;
  const all = (await entries(dir)).sort((a, b) => b.split(sep).length - a.split(sep).length);
  for (const rel of all) {
    const name = rel.slice(rel.lastIndexOf(sep) + 1);
    const old = v1.get(name);
    if (old === undefined || old === name) continue;
    await fsp.rename(join(dir, rel), join(dir, rel.slice(0, rel.length - name.length), old));
    n++;
  }
  await fsp.rm(join(dir, 'cache', NAMES_FILE));
  await fsp.rm(join(dir, 'state', NAMES_FILE));
  return n;
}

/** Ingest in this process (only the crash needs a process of its own). */
async function ingestAll(cfg: string, from: number, n: number): Promise<void> {
  const { k } = await openKernel(cfg);
  try {
    for (const [i, ds] of DATASETS.entries()) {
      for (const [j, src] of SOURCES.entries()) {
        const r = await ingestText(k, src, eventLines(from + (i * 10 + j) * 1000, n), ds);
        assert.equal(r.accepted, n);
      }
    }
  } finally {
    await k.close();
  }
}

function expected(n: number): string[] {
  const out: string[] = [];
  for (const [i, ds] of DATASETS.entries()) {
    for (const [j, src] of SOURCES.entries()) {
      for (let k = 0; k < n; k++) out.push(`${encodeSegment(ds)}/source=${encodeSegment(src)}/${(i * 10 + j) * 1000 + 1 + k}`);
    }
  }
  return out.sort();
}

describe('a tree named under the first name rule', () => {
  test('the renaming has a crash case for each of its fault points', () => {
    assert.deepEqual(
      Object.keys(FAULT_POINTS).filter((p) => p.startsWith('names.')),
      ['names.afterRename'],
    );
  });

  for (const crashAt of [0, 1, 12]) {
    test(crashAt === 0 ? 'is renamed on open: nothing exported twice, nothing lost' : `SIGKILL at names.afterRename (hit ${crashAt}), then a clean run`, { timeout: 120_000 }, async () => {
      const dir = tempDir();
      const cfg = await writeConfig(dir, config());
      await ingestAll(cfg, 1, 3);
      const first = await cli('export', '--config', cfg);
      assert.equal(first.code, 0, first.err);
      assert.deepEqual(await exported(dir), expected(3));
      await ingestAll(cfg, 4, 2);
      // A tree as the first rule left it: rows exported, rows pending, watermarks, a cut source, `con`.
      const renamed = await toV1(dir);
      assert.ok(renamed >= 10, `made ${renamed} v1 names`);
      const before = await entries(dir);
      assert.ok(before.some((e) => e.endsWith(`${sep}Events`)), 'the dataset folder has its v1 name');

      if (crashAt > 0) {
        const crashed = await runBin(['status', '--config', cfg], { env: { HYPSINK_FAULT: 'names.afterRename', HYPSINK_FAULT_AT: String(crashAt) } });
        assert.equal(crashed.signal, 'SIGKILL', `killed at the rename: ${crashed.stderr}`);
      }
      const again = await runBin(['export', '--config', cfg]);
      assert.equal(again.code, 0, again.stderr);
      assert.deepEqual(await exported(dir), expected(5), 'each row exported once, under its current names');

      const after = await entries(dir);
      const current = new Set(VALUES.map(encodeSegment));
      const leftover = after.filter((e) => e.split(sep).some((seg) => VALUES.some((v) => seg.replace(/^source=|\.json$|\.ndjson$/g, '') === encodeSegmentV1(v) && !current.has(encodeSegmentV1(v)))));
      assert.deepEqual(leftover, [], 'no name of the first rule is left');
      const folded = new Map<string, string>();
      for (const e of after) {
        const prev = folded.get(e.toLowerCase());
        assert.equal(prev, undefined, `${e} and ${prev} are one entry where the filesystem folds case`);
        folded.set(e.toLowerCase(), e);
      }
      const st = await cliStatus(cfg);
      const parts = st.sinks.find((s) => s.name === SINK)!.partitions;
      assert.equal(parts.length, DATASETS.length * SOURCES.length);
      assert.ok(
        parts.every((p) => p.pendingRows === 0 && p.exportedRows === 5 && p.intent === null),
        JSON.stringify(parts.map((p) => [p.dataset, p.source.slice(0, 8), p.exportedRows])),
      );
    });
  }
});
