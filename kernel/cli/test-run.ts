/**
 * What `hypsink test` runs: a sink's transform chain (or every chain of the
 * config over one dataset) on NDJSON rows from a file, by the code an export
 * runs and no other. The rows are parsed and validated by the ingest's parser
 * and held as the spool's Arrow columns; the chain is the one `validate` and
 * an export build (`sinkTransforms`); a refused row carries the reason the
 * dead letter keeps. Nothing of a sink but its chain is built, and the cache
 * is not opened: no destination, credential or lock is needed, so it runs
 * beside a running daemon. @ref LLP 0071
 */
import { promises as fsp } from 'node:fs';
import { resolve } from 'node:path';
import type { RecordBatch } from 'apache-arrow';
import { accessError } from '../../types/access.js';
import { HypsinkError } from '../../types/errors.js';
import type { ColumnSpec, DatasetSchema, Row } from '../../types/schema.js';
import { didYouMean, withoutComments } from '../config/keys.js';
import { type LoadedConfig, loadConfig } from '../config/load.js';
import type { SinkConfig } from '../config/schema.js';
import { createHooks } from '../hooks.js';
import { normalizeRow } from '../ingest/normalize.js';
import { parseBlock } from '../ingest/parse.js';
import { type Line, LineSplitter } from '../io/lines.js';
import { createLogger } from '../log.js';
import { PluginHost } from '../plugins/host.js';
import { sinkTransforms } from '../sinks/build.js';
import { decodeFrameLine, frameBatches } from '../spool/frames.js';
import { toRowValue } from '../store/columns.js';
import { batchOf } from '../../types/arrow-rows.js';
import { schemaOf } from '../transform/arrow.js';
import { type BoundChain, canonicalJson } from '../transform/index.js';

/** The key of a refused row's entry in an expected file: `_hyp_` names are never a column, so never an output row's. */
export const REFUSED_KEY = '_hyp_refused';

export interface TestOptions {
  readonly config?: string;
  readonly input: string;
  readonly sink?: string;
  readonly dataset?: string;
  readonly expect?: string;
  readonly source: string;
  /** A flag that needs one sink's output (`--as-expected`); `--expect` does too. */
  readonly single?: string;
}

/** One input row's fate: shipped as `row`, or refused with the reason the dead letter keeps. */
export type Outcome = { readonly line: number; readonly row: Row } | { readonly line: number; readonly refused: string };

export interface Difference {
  /** The row's place (1-based) in the input and in the expected file. */
  readonly row: number;
  /** Its input line; null when the input has no such row. */
  readonly line: number | null;
  /** Its expected file line; null when the expected file has no such entry. */
  readonly expectedLine: number | null;
  /** The field that differs; null when the whole entry does (a row against a refusal, or one side missing). */
  readonly field: string | null;
  /** Absent when the expected file has no such entry. */
  readonly expected?: unknown;
  /** Absent when the output has no such row or column. */
  readonly got?: unknown;
  /** The difference as a line: `row 2 (rows.ndjson:2, expected.ndjson:2): field "message": expected "a", got "b"`. */
  readonly message: string;
}

export interface SinkTest {
  readonly name: string;
  /** How many entries its chain has. */
  readonly transforms: number;
  readonly columns: readonly ColumnSpec[];
  /** One per input row, in input order. */
  readonly outcomes: readonly Outcome[];
  readonly differences: readonly Difference[];
}

export interface TestResult {
  /** The input file as given, for labels (`rows.ndjson:3`). */
  readonly input: string;
  readonly expected: string | null;
  readonly dataset: string;
  readonly rows: number;
  readonly sinks: readonly SinkTest[];
}

/** Bad lines named as `file:line: reason`, at most this many, then a count. */
const SHOWN_LINES = 10;

function badLines(label: string, what: string, bad: readonly { line: number; reason: string }[], hint: string): HypsinkError {
  const shown = bad.slice(0, SHOWN_LINES).map((b) => `${label}:${b.line}: ${b.reason}`);
  const more = bad.length > SHOWN_LINES ? `; and ${bad.length - SHOWN_LINES} more` : '';
  return new HypsinkError('HYPSINK_ERR_INPUT', `${bad.length} line(s) of ${what} cannot be read: ${shown.join('; ')}${more}`, { hint });
}

/** A file named by a flag, whole; a missing one is bad input, one its user may not read a permission to fix. */
async function readArg(file: string, flag: string, what: string): Promise<Buffer> {
  try {
    return await fsp.readFile(resolve(file));
  } catch (e) {
    throw (
      accessError(e, { elsewhere: `pass another ${flag}` }) ??
      new HypsinkError('HYPSINK_ERR_INPUT', `cannot read ${what} ${resolve(file)} (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`, {
        hint: `Check the ${flag} path: a readable NDJSON file; nothing was run.`,
      })
    );
  }
}

/** Every line of `bytes`, as the ingest splits them (CRLF too; bytes that are not UTF-8 marked). */
function linesOf(bytes: Uint8Array): Line[] {
  const s = new LineSplitter();
  return [...s.push(bytes), ...s.end()];
}

const blank = (l: Line) => typeof l === 'string' && l.trim() === '';

/** The sinks and the dataset the options name, checked against the config. */
function choose(loaded: LoadedConfig, o: TestOptions): { dataset: string; sinks: [string, SinkConfig][] } {
  const c = loaded.config;
  const all = Object.entries(c.sinks);
  if (o.sink !== undefined && !Object.hasOwn(c.sinks, o.sink)) {
    const names = Object.keys(c.sinks);
    const guess = didYouMean(o.sink, names);
    throw new HypsinkError('HYPSINK_ERR_CONFIG', `no sink named "${o.sink}"${guess ? `; did you mean "${guess}"?` : ''} (configured: ${names.join(', ') || 'none'})`, {
      hint: 'Name one of the configured sinks with --sink, or leave --sink out to run every chain of the dataset.',
    });
  }
  if (o.dataset !== undefined && !Object.hasOwn(c.datasets, o.dataset)) {
    const names = Object.keys(c.datasets);
    const guess = didYouMean(o.dataset, names);
    throw new HypsinkError('HYPSINK_ERR_INPUT', `unknown dataset "${o.dataset}"${guess ? `; did you mean "${guess}"?` : ''} (configured: ${names.join(', ') || 'none'})`, {
      hint: 'Name one of the configured datasets with --dataset; nothing was run.',
    });
  }
  // Without --sink: the sinks whose config has transforms ("//" comments are not entries).
  const hasChain = (sc: SinkConfig) => {
    const t = withoutComments(sc.transforms);
    return Array.isArray(t) && t.length > 0;
  };
  const pool = o.sink !== undefined ? all.filter(([n]) => n === o.sink) : all.filter(([, sc]) => hasChain(sc));
  if (pool.length === 0) {
    throw new HypsinkError('HYPSINK_ERR_CONFIG', `no sink has transforms (configured: ${all.map(([n]) => n).join(', ') || 'none'})`, {
      hint: 'Add "transforms" to a sink, or name a sink with --sink to see the rows it ships as they are.',
    });
  }
  let dataset = o.dataset;
  if (dataset === undefined) {
    const ds = [...new Set(pool.flatMap(([, sc]) => sc.datasets))];
    if (ds.length !== 1) {
      throw new HypsinkError('HYPSINK_ERR_USAGE', `the rows may be of dataset ${ds.map((d) => `"${d}"`).join(' or ')}: name theirs with --dataset`);
    }
    dataset = ds[0]!;
  }
  const sinks = pool.filter(([, sc]) => sc.datasets.includes(dataset));
  if (sinks.length === 0) {
    throw new HypsinkError(
      'HYPSINK_ERR_USAGE',
      o.sink !== undefined
        ? `sink "${o.sink}" does not export dataset "${dataset}" (it exports ${c.sinks[o.sink]!.datasets.join(', ')})`
        : `no sink with transforms exports dataset "${dataset}" (those with transforms: ${pool.map(([n]) => n).join(', ')})`,
    );
  }
  const single = o.expect !== undefined ? '--expect compares' : o.single !== undefined ? `${o.single} prints` : null;
  if (single && sinks.length > 1) {
    throw new HypsinkError('HYPSINK_ERR_USAGE', `${single} one sink's output, and ${sinks.length} sinks run here (${sinks.map(([n]) => n).join(', ')}): name one with --sink`);
  }
  return { dataset, sinks };
}

/**
 * The input as the batches the cache would hold: parsed and validated by the
 * ingest's parser into spool frames, read back as the flush reads them. Any
 * line the ingest would reject is an error naming file:line; nothing runs.
 */
function inputBatches(bytes: Uint8Array, label: string, schema: DatasetSchema & { maxRowBytes: number }, dataset: string, source: string, frameRows: number): { batches: RecordBatch[]; lines: number[] } {
  const parsed = parseBlock({ schema, source, maxRowBytes: schema.maxRowBytes, frameRows, firstLine: 0 }, bytes);
  if (parsed.rejects.length > 0) {
    throw badLines(label, 'the input', parsed.rejects, `Fix the named lines: each must be one row of dataset "${dataset}", as "hypsink ingest" takes it; nothing was run.`);
  }
  // The parser skips blank lines: the rows are the other lines, in order.
  const lines: number[] = [];
  linesOf(bytes).forEach((l, i) => {
    if (!blank(l)) lines.push(i + 1);
  });
  const arrow = schemaOf(schema.columns);
  const batches: RecordBatch[] = [];
  for (const f of parsed.frames) {
    const frame = decodeFrameLine(Buffer.from(f.bytes.buffer, f.bytes.byteOffset, f.bytes.byteLength - 1));
    if (typeof frame === 'string') throw new HypsinkError('HYPSINK_ERR_INVARIANT', `${label}: a spool frame of its rows does not read back: ${frame}`);
    for (const part of frameBatches(frame, schema, label)) batches.push(batchOf(arrow, part.columns, part.columns[0]?.length ?? 0));
  }
  const rows = batches.reduce((n, b) => n + b.numRows, 0);
  if (rows !== lines.length) throw new HypsinkError('HYPSINK_ERR_INVARIANT', `${label}: ${lines.length} row lines were read as ${rows} rows`);
  return { batches, lines };
}

/** The chain over the input: per input row, the row it ships (in row form, as `Unit.rows()` hands it out) or its refusal. */
function run(chain: BoundChain, batches: readonly RecordBatch[], lines: readonly number[]): Outcome[] {
  const out: Outcome[] = [];
  const cols = chain.columns;
  let at = 0;
  for (const b of batches) {
    const r = chain.apply(b);
    const vectors = cols.map((c) => r.batch.getChild(c.name));
    let k = 0;
    let next = 0;
    for (let j = 0; j < b.numRows; j++) {
      const line = lines[at + j]!;
      if (next < r.refused.length && r.refused[next]!.row === j) {
        out.push({ line, refused: r.refused[next++]!.reason });
        continue;
      }
      const row: Row = {};
      for (let c = 0; c < cols.length; c++) row[cols[c]!.name] = toRowValue(cols[c]!.type, vectors[c]?.get(k));
      out.push({ line, row });
      k++;
    }
    at += b.numRows;
  }
  return out;
}

type Expected = { readonly line: number; readonly row: Row } | { readonly line: number; readonly refused: true | string };

/** The expected file: one entry per input row, a row or `{"_hyp_refused": true | "<part of the reason>"}`; blank lines skipped. */
function parseExpected(bytes: Uint8Array, label: string): Expected[] {
  const out: Expected[] = [];
  const bad: { line: number; reason: string }[] = [];
  for (const [i, l] of linesOf(bytes).entries()) {
    const line = i + 1;
    if (blank(l)) continue;
    if (typeof l !== 'string') {
      bad.push({ line, reason: 'the line is not valid UTF-8' });
      continue;
    }
    let v: unknown;
    try {
      v = JSON.parse(l);
    } catch (e) {
      bad.push({ line, reason: `malformed JSON (${(e as Error).message})` });
      continue;
    }
    if (v === null || typeof v !== 'object' || Array.isArray(v)) {
      bad.push({ line, reason: 'not a JSON object' });
      continue;
    }
    const obj = v as Record<string, unknown>;
    if (!Object.hasOwn(obj, REFUSED_KEY)) {
      out.push({ line, row: obj });
      continue;
    }
    const m = obj[REFUSED_KEY];
    if (Object.keys(obj).length !== 1 || !(m === true || (typeof m === 'string' && m.length > 0))) {
      bad.push({ line, reason: `"${REFUSED_KEY}" stands alone on its line, with true or a part of the reason: {"${REFUSED_KEY}": true}` });
      continue;
    }
    out.push({ line, refused: m as true | string });
  }
  if (bad.length > 0) {
    throw badLines(label, 'the expected file', bad, `Fix the named lines: each is one expected output row, or {"${REFUSED_KEY}": true} for a refused row; nothing was compared.`);
  }
  return out;
}

/** A value by its column's type: a TIMESTAMP in any ISO form or as ms, an INT64 as number or digits, JSON whatever its key order. */
function same(c: ColumnSpec, expected: unknown, got: unknown): boolean {
  if (expected === null || expected === undefined || got === null) return (expected ?? null) === got;
  if (c.type === 'JSON') return canonicalJson(expected) === canonicalJson(got);
  if (c.type === 'TIMESTAMP' || c.type === 'INT64') {
    // The ingest's own rules read both sides into the form the cache keeps.
    const one = { columns: [{ ...c, nullable: true }] };
    const e = normalizeRow(one, { [c.name]: expected });
    const g = normalizeRow(one, { [c.name]: got });
    return e.ok && g.ok && e.values[0] === g.values[0];
  }
  return expected === got;
}

const text = (v: unknown) => JSON.stringify(v) ?? String(v);

function compare(outcomes: readonly Outcome[], expected: readonly Expected[], columns: readonly ColumnSpec[], input: string, exp: string): Difference[] {
  const diffs: Difference[] = [];
  const names = columns.map((c) => c.name);
  for (let i = 0; i < Math.max(outcomes.length, expected.length); i++) {
    const g = outcomes[i];
    const e = expected[i];
    const where = `row ${i + 1} (${[g ? `${input}:${g.line}` : '', e ? `${exp}:${e.line}` : ''].filter(Boolean).join(', ')})`;
    const base = { row: i + 1, line: g?.line ?? null, expectedLine: e?.line ?? null };
    const eValue = e && ('row' in e ? e.row : { [REFUSED_KEY]: e.refused });
    const gValue = g && ('row' in g ? g.row : { [REFUSED_KEY]: g.refused });
    if (!g) {
      diffs.push({ ...base, field: null, expected: eValue, message: `${where}: expected ${text(eValue)}, got no row (the input has ${outcomes.length})` });
      continue;
    }
    if (!e) {
      diffs.push({ ...base, field: null, got: gValue, message: `${where}: expected no row (the expected file has ${expected.length}), got ${text(gValue)}` });
      continue;
    }
    if ('refused' in e) {
      if ('row' in g) diffs.push({ ...base, field: null, expected: eValue, got: gValue, message: `${where}: expected refused, got ${text(g.row)}` });
      else if (e.refused !== true && !g.refused.includes(e.refused)) {
        diffs.push({ ...base, field: null, expected: eValue, got: gValue, message: `${where}: expected refused with a reason holding ${text(e.refused)}, got refused: ${g.refused}` });
      }
      continue;
    }
    if ('refused' in g) {
      diffs.push({ ...base, field: null, expected: eValue, got: gValue, message: `${where}: expected a row, got refused: ${g.refused}` });
      continue;
    }
    for (const c of columns) {
      // A field left out is null, as in an ingested row.
      const ev = Object.hasOwn(e.row, c.name) ? e.row[c.name] : null;
      const gv = g.row[c.name];
      if (same(c, ev, gv)) continue;
      // JSON.parse has already rounded such a number: say how to write it.
      const big = c.type === 'INT64' && typeof ev === 'number' && !Number.isSafeInteger(ev) ? ' (an INT64 beyond ±2^53 is written as a string of digits)' : '';
      diffs.push({ ...base, field: c.name, expected: ev, got: gv, message: `${where}: field "${c.name}": expected ${text(ev)}, got ${text(gv)}${big}` });
    }
    for (const k of Object.keys(e.row)) {
      if (names.includes(k)) continue;
      diffs.push({ ...base, field: k, expected: e.row[k], message: `${where}: field "${k}": expected ${text(e.row[k])}, got no such column (the output columns: ${names.join(', ')})` });
    }
  }
  return diffs;
}

/** Run the chosen chains on the input, and compare with the expected file if one is given. */
export async function runTest(o: TestOptions): Promise<TestResult> {
  const loaded = await loadConfig(o.config);
  const { dataset, sinks } = choose(loaded, o);
  const schema = loaded.config.datasets[dataset]!;
  // Every input line is read before any plugin loads: a bad line is the first thing to fix.
  const bytes = await readArg(o.input, '--input', 'input file');
  const { batches, lines } = inputBatches(bytes, o.input, schema, dataset, o.source, loaded.config.cache.rowGroupRows);
  const expected = o.expect === undefined ? null : parseExpected(await readArg(o.expect, '--expect', 'expected file'), o.expect);

  // The plugins as a kernel loads them (those in "plugins" first), and each chain as an export builds it.
  const log = createLogger();
  const host = new PluginHost(createHooks(), log, loaded.baseDir);
  for (const spec of loaded.config.plugins) await host.load(spec);
  const results: SinkTest[] = [];
  for (const [name, sc] of sinks) {
    const chain = await sinkTransforms({ loaded, log, host }, name, sc);
    const bound = chain.bind(schema.columns, dataset);
    const outcomes = run(bound, batches, lines);
    const differences = expected === null ? [] : compare(outcomes, expected, bound.columns, o.input, o.expect!);
    results.push({ name, transforms: chain.length, columns: bound.columns, outcomes, differences });
  }
  return { input: o.input, expected: o.expect ?? null, dataset, rows: lines.length, sinks: results };
}
