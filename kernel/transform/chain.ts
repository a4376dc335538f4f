/**
 * A sink's transform chain: its entries built from config (plugin factories
 * created, `${NAME}` keys resolved), bound to a unit's columns (each entry's
 * output columns are the next one's input, checked with errors naming the
 * entry and field), and applied batch by batch in order. Rows an entry
 * refuses are reported by their index in the batch the chain was given.
 * The chain's identity is its canonical config, secrets replaced by
 * fingerprints: the kernel records it with a unit's intent. @ref LLP 0046
 */
import { createHmac } from 'node:crypto';
import type { DataType, RecordBatch } from 'apache-arrow';
import { configField } from '../../types/config.js';
import { HypsinkError, isHypsinkError } from '../../types/errors.js';
import type { Logger } from '../../types/plugins.js';
import { COLUMN_TYPES, type ColumnSpec, INTERNAL_PREFIX, PARTITION_COLUMN } from '../../types/schema.js';
import type { BoundTransform, RowRefusal, Transform, TransformFactory, TransformOutput } from '../../types/transforms.js';
import { didYouMean, UNKNOWN_KEY_HINT, unknownOptions } from '../config/keys.js';
import { interpolate } from '../config/load.js';
import { arrowType } from '../store/columns.js';
import { batchOf } from '../../types/arrow-rows.js';
import { schemaOf } from './arrow.js';
import { type HashConfig, parseSteps, type RedactConfig, type StepConfig } from './config.js';
import { bindHash } from './hash.js';
import { parseJsonPath } from './json.js';
import { builtinFinders, type Finder, type PatternName, userFinder } from './patterns.js';
import { bindRedact } from './redact.js';
import { HmacSha256 } from './sha256.js';

/** What building a sink's chain needs. */
export interface TransformChainContext {
  /** The sink instance name, for messages. */
  readonly sink: string;
  readonly baseDir: string;
  readonly log: Logger;
  /** Where `${NAME}` values come from; process.env by default. */
  readonly env?: NodeJS.ProcessEnv;
  /**
   * The factory a plugin registered under `name`, its plugin loaded (the
   * host's `activateFor(name, 'transform')`, then `registry.transforms`).
   * Without it, a plugin entry is an error.
   */
  readonly plugin?: (name: string) => Promise<TransformFactory>;
}

/** A chain bound to the columns of the batches it will be given. */
export interface BoundChain extends BoundTransform {
  /** The columns it was bound to. */
  readonly input: readonly ColumnSpec[];
  /**
   * The chain over one batch of `input`: the rows no entry refused, as
   * `columns`, and those refused, by their index in `batch` (ascending), each
   * reason starting with the entry (`transforms[2] (redact): …`).
   */
  apply(batch: RecordBatch): TransformOutput;
}

export interface TransformChain {
  /** How many entries it has; 0 for a sink without transforms. */
  readonly length: number;
  /**
   * Its canonical config: stable across key order, comments and the order
   * of lists whose order does not change the output; each value that came
   * from the environment (a hash key) replaced by `hmac-sha256:<32 hex>`, a
   * fingerprint of it and never the value. '' without transforms.
   */
  readonly identity: string;
  /**
   * Bind to columns: the output columns of the whole chain are known here.
   * Throws HYPSINK_ERR_CONFIG naming the sink, the entry and field
   * (`transforms[2].redact.columns[0]: no column "mesage" (did you mean
   * "message"?)`), and the dataset when given.
   */
  bind(input: readonly ColumnSpec[], dataset?: string): BoundChain;
}

/** Version of each built-in's behaviour, in the identity: a change of what they find or write shows there. */
const BUILTIN_VERSION = 1;
const FINGERPRINT_LABEL = 'hypsink transform identity v1';
const MIN_KEY_BYTES = 16;

/** A fingerprint of a secret: stable, and useless for finding the secret. */
export function fingerprint(secret: string): string {
  return `hmac-sha256:${createHmac('sha256', secret).update(FINGERPRINT_LABEL).digest('hex').slice(0, 32)}`;
}

/** JSON with object keys sorted, at every level. */
export function canonicalJson(value: unknown): string {
  const sort = (v: unknown): unknown => {
    if (Array.isArray(v)) return v.map(sort);
    if (v && typeof v === 'object') {
      return Object.fromEntries(
        Object.keys(v)
          .sort()
          .map((k) => [k, sort((v as Record<string, unknown>)[k])]),
      );
    }
    return v;
  };
  return JSON.stringify(sort(value));
}

const sorted = (xs: readonly string[]) => [...new Set(xs)].sort();

/** Where a column went, for "no column" messages: "transforms[1] renamed it to "message"". */
type Gone = ReadonlyMap<string, string>;

/** Problems of one entry, collected, thrown as one config error. */
class Problems {
  readonly list: string[] = [];
  constructor(
    readonly input: readonly ColumnSpec[],
    readonly gone: Gone,
    readonly dataset: string | undefined,
  ) {}

  add(field: string, message: string): void {
    this.list.push(`${field}: ${message}`);
  }

  /** The index of column `name`, or a problem at `field` saying what became of it. */
  column(name: string, field: string): number {
    const i = this.input.findIndex((c) => c.name === name);
    if (i >= 0) return i;
    const where = this.dataset ? ` in dataset "${this.dataset}"` : '';
    const went = this.gone.get(name);
    const names = this.input.map((c) => c.name);
    const guess = didYouMean(name, names);
    const why = went ? `: ${went}` : guess ? ` (did you mean "${guess}"?)` : ` (columns here: ${names.join(', ')})`;
    this.add(field, `no column "${name}"${where}${why}`);
    return -1;
  }
}

interface Step {
  /** `transforms[i]`. */
  readonly at: string;
  /** `redact`, `plugin "x"`. */
  readonly label: string;
  readonly canonical: unknown;
  /** What its binding removes, said of a name it removes. */
  readonly removes: (name: string, next: readonly ColumnSpec[]) => string;
  bind(input: readonly ColumnSpec[], p: Problems): BoundTransform;
  readonly plugin?: string;
}

/** A zero-copy projection: output column k is input column `from[k]`, named `names[k]`. */
function project(input: readonly ColumnSpec[], picks: readonly number[], names: readonly string[]): BoundTransform {
  // a column not found (-1) is a problem already noted: the chain throws before this is used
  const from = picks.filter((i) => i >= 0);
  const columns = from.map((i, k) => ({ ...input[i]!, name: names[k]! }));
  const schema = schemaOf(columns);
  return {
    columns,
    apply: (batch) => ({ batch: batchOf(schema, from.map((i) => batch.data.children[i]!), batch.numRows), refused: [] }),
  };
}

function selectStep(at: string, cols: readonly string[]): Step {
  return {
    at,
    label: 'select',
    canonical: { select: cols },
    removes: () => `${at} (select) does not select it`,
    bind(input, p) {
      const from = cols.map((c, j) => p.column(c, `${at}.select[${j}]`));
      return project(input, from, cols);
    },
  };
}

function dropStep(at: string, cols: readonly string[]): Step {
  return {
    at,
    label: 'drop',
    canonical: { drop: sorted(cols) },
    removes: () => `${at} drops it`,
    bind(input, p) {
      for (const [j, c] of cols.entries()) p.column(c, `${at}.drop[${j}]`);
      const from = input.flatMap((c, i) => (cols.includes(c.name) ? [] : [i]));
      if (from.length === 0 && p.list.length === 0) p.add(`${at}.drop`, 'no column would be left; a sink exports at least one');
      return project(input, from, from.map((i) => input[i]!.name));
    },
  };
}

function renameStep(at: string, map: Readonly<Record<string, string>>): Step {
  return {
    at,
    label: 'rename',
    canonical: { rename: map },
    removes: (name) => `${at} renames it to "${map[name]}"`,
    bind(input, p) {
      for (const from of Object.keys(map)) p.column(from, `${at}.rename.${from}`);
      for (const [from, to] of Object.entries(map)) {
        const taken = input.some((c) => c.name === to && !Object.hasOwn(map, c.name));
        if (taken) p.add(`${at}.rename.${from}`, `"${to}" is already a column; drop it first, or choose another name`);
      }
      const names = input.map((c) => (Object.hasOwn(map, c.name) ? map[c.name]! : c.name));
      return project(
        input,
        input.map((_, i) => i),
        names,
      );
    },
  };
}

function redactStep(at: string, r: RedactConfig): Step {
  const finders: Finder[] = [...new Set(r.patterns as PatternName[])].flatMap((n) => builtinFinders(n));
  for (const [j, src] of r.regex.entries()) finders.push(userFinder(j, src));
  const paths = r.paths ? r.paths.map((s) => parseJsonPath(s)) : null;
  return {
    at,
    label: 'redact',
    canonical: {
      [`redact@${BUILTIN_VERSION}`]: {
        columns: sorted(r.columns),
        mask: r.mask,
        patterns: sorted(r.patterns),
        regex: sorted(r.regex),
        ...(r.paths ? { paths: sorted(r.paths) } : {}),
      },
    },
    removes: () => `${at} removes it`,
    bind(input, p) {
      const targets: { index: number; name: string; json: boolean }[] = [];
      r.columns.forEach((c, j) => {
        const i = p.column(c, `${at}.redact.columns[${j}]`);
        if (i < 0) return;
        const type = input[i]!.type;
        if (type !== 'STRING' && type !== 'JSON') p.add(`${at}.redact.columns[${j}]`, `column "${c}" is ${type}; redact takes STRING or JSON columns`);
        else if (paths && type === 'STRING') {
          p.add(`${at}.redact.paths`, `paths look inside JSON values, and column "${c}" is STRING; redact it in an entry of its own, without paths`);
        } else targets.push({ index: i, name: c, json: type === 'JSON' });
      });
      return bindRedact(input, { targets, finders, paths, mask: r.mask });
    },
  };
}

function hashStep(at: string, h: HashConfig, key: string): Step {
  const hmac = new HmacSha256(Buffer.from(key, 'utf8'));
  return {
    at,
    label: 'hash',
    canonical: { [`hash@${BUILTIN_VERSION}`]: { columns: sorted(h.columns), key: fingerprint(key) } },
    removes: () => `${at} removes it`,
    bind(input, p) {
      const targets: number[] = [];
      h.columns.forEach((c, j) => {
        const i = p.column(c, `${at}.hash.columns[${j}]`);
        if (i < 0) return;
        const type = input[i]!.type;
        if (type !== 'STRING' && type !== 'JSON' && type !== 'INT64') {
          p.add(`${at}.hash.columns[${j}]`, `column "${c}" is ${type}; hash takes STRING, JSON or INT64 columns`);
        } else targets.push(i);
      });
      return bindHash(input, targets, hmac);
    },
  };
}

const ENV_ANY = /\$\{[A-Za-z_][A-Za-z0-9_]*\}/;

/** A plugin's config with `${NAME}` values resolved, and its form for the identity (each such value fingerprinted). */
function resolveConfig(value: unknown, where: string, env: NodeJS.ProcessEnv): { value: unknown; identity: unknown } {
  if (typeof value === 'string') {
    if (!ENV_ANY.test(value)) return { value, identity: value };
    const resolved = interpolate(value, where, env) as string;
    return { value: resolved, identity: fingerprint(resolved) };
  }
  if (Array.isArray(value)) {
    const parts = value.map((v, i) => resolveConfig(v, `${where}[${i}]`, env));
    return { value: parts.map((x) => x.value), identity: parts.map((x) => x.identity) };
  }
  if (value && typeof value === 'object') {
    const entries = Object.entries(value).map(([k, v]) => [k, resolveConfig(v, `${where}.${k}`, env)] as const);
    return { value: Object.fromEntries(entries.map(([k, x]) => [k, x.value])), identity: Object.fromEntries(entries.map(([k, x]) => [k, x.identity])) };
  }
  return { value, identity: value };
}

const validName = (n: unknown) => typeof n === 'string' && n.length > 0 && !n.startsWith(INTERNAL_PREFIX) && n !== PARTITION_COLUMN;

/** What a plugin's bind declared, checked: the kernel relies on it for every batch. */
function checkDeclared(columns: unknown, fail: (why: string) => never): readonly ColumnSpec[] {
  if (!Array.isArray(columns) || columns.length === 0) fail('its bind declared no output columns');
  const seen = new Set<string>();
  for (const c of columns as ColumnSpec[]) {
    if (!c || !validName(c.name)) fail(`its bind declared a column named ${JSON.stringify(c?.name)} (names must be non-empty, not "${PARTITION_COLUMN}", not starting with ${INTERNAL_PREFIX})`);
    if (!COLUMN_TYPES.includes(c.type)) fail(`its bind declared column "${c.name}" of type ${JSON.stringify(c.type)} (types: ${COLUMN_TYPES.join(', ')})`);
    if (seen.has(c.name)) fail(`its bind declared column "${c.name}" twice`);
    seen.add(c.name);
  }
  return (columns as ColumnSpec[]).map((c) => ({ name: c.name, type: c.type, nullable: c.nullable !== false }));
}

/** Whether `batch` has exactly the fields of `columns`, with their Arrow types. */
function fits(batch: RecordBatch, columns: readonly ColumnSpec[]): boolean {
  const fields = batch.schema.fields;
  if (fields.length !== columns.length) return false;
  for (let i = 0; i < fields.length; i++) {
    if (fields[i]!.name !== columns[i]!.name || !fieldTypeIs(fields[i]!.type, columns[i]!.type)) return false;
  }
  return true;
}

/** Arrow types by their text, as the reader compares a file's columns with the schema's. */
const ARROW_TEXT = new Map(COLUMN_TYPES.map((t) => [t, String(arrowType(t))]));
const fieldTypeIs = (t: DataType, type: ColumnSpec['type']) => String(t) === ARROW_TEXT.get(type);

async function pluginStep(at: string, name: string, written: Record<string, unknown>, ctx: TransformChainContext): Promise<Step> {
  const w = `sink "${ctx.sink}"`;
  if (!ctx.plugin) throw new HypsinkError('HYPSINK_ERR_INVARIANT', `${w}: ${at}.plugin: plugin transforms are built with the plugin host`);
  let factory: TransformFactory;
  try {
    factory = await ctx.plugin(name);
  } catch (e) {
    throw new HypsinkError(isHypsinkError(e) ? e.code : 'HYPSINK_ERR_PLUGIN', `${w}: ${at}.plugin: ${(e as Error).message}`, {
      cause: e,
      ...(isHypsinkError(e) ? { hint: e.hint } : {}),
    });
  }
  const { value, identity } = resolveConfig(written, `${w}: ${at}.config`, ctx.env ?? process.env);
  const config = value as Record<string, unknown>;
  const root = `${at}.config`;
  if (factory.options) {
    const unknown = unknownOptions(factory.options.keys, config, root);
    const invalid: string[] = [];
    if (unknown.length === 0 && factory.options.validate) {
      const seen = new Set<string>();
      for (const issue of (await factory.options.validate(config)).issues ?? []) {
        const field = configField((issue.path ?? []).map((p) => (typeof p === 'object' ? p.key : p)), root);
        if (!seen.has(field)) invalid.push(`${field}: ${issue.message}`);
        seen.add(field);
      }
    }
    const problems = [...unknown, ...invalid];
    if (problems.length > 0) throw new HypsinkError('HYPSINK_ERR_CONFIG', `${w}: ${problems.join('; ')}`, unknown.length ? { hint: UNKNOWN_KEY_HINT } : {});
  }
  const label = `plugin "${name}"`;
  const failed = (what: string, e: unknown): never => {
    if (isHypsinkError(e) && e.code === 'HYPSINK_ERR_CONFIG') {
      const m = e.message.startsWith('config') ? `${at}.${e.message}` : `${at} (${label}): ${e.message}`;
      throw new HypsinkError('HYPSINK_ERR_CONFIG', `${w}: ${m}`, { cause: e, hint: e.hint });
    }
    throw new HypsinkError(isHypsinkError(e) ? e.code : 'HYPSINK_ERR_PLUGIN', `${w}: ${at} (${label}): ${what} failed: ${(e as Error)?.message ?? String(e)}`, { cause: e });
  };
  let transform: Transform;
  try {
    transform = factory.create(config, { sink: ctx.sink, baseDir: ctx.baseDir, log: ctx.log });
  } catch (e) {
    return failed('create', e);
  }
  return {
    at,
    label,
    plugin: name,
    canonical: { plugin: name, config: identity, ...(transform.version !== undefined ? { version: transform.version } : {}) },
    removes: () => `${at} (${label}) leaves it out`,
    bind(input) {
      let bound: BoundTransform;
      try {
        bound = transform.bind(input);
      } catch (e) {
        return failed('bind', e);
      }
      const bad = (why: string): never => {
        throw new HypsinkError('HYPSINK_ERR_PLUGIN', `${w}: ${at} (${label}): ${why}; this is a bug in the plugin`);
      };
      const columns = checkDeclared(bound?.columns, bad);
      return {
        columns,
        apply(batch) {
          let out: TransformOutput;
          try {
            out = bound.apply(batch);
          } catch (e) {
            return failed('apply', e);
          }
          if (!out?.batch || !fits(out.batch, columns)) bad('its apply returned a batch of other columns than its bind declared');
          const refused = out.refused ?? [];
          let last = -1;
          for (const r of refused) {
            if (!Number.isInteger(r.row) || r.row <= last || r.row >= batch.numRows) bad('its apply refused rows out of order, twice or out of the batch');
            last = r.row;
          }
          if (out.batch.numRows + refused.length !== batch.numRows) {
            bad(`its apply was given ${batch.numRows} rows and returned ${out.batch.numRows} and refused ${refused.length}`);
          }
          return { batch: out.batch, refused };
        },
      };
    },
  };
}

/**
 * Build a sink's chain from its `transforms` as written (`${NAME}` left in:
 * they are resolved here, and a hash key must be one). Every config problem
 * of every entry is in one HYPSINK_ERR_CONFIG; a plugin's own problems in
 * another, once its entry is reached.
 */
export async function buildTransforms(raw: unknown, ctx: TransformChainContext): Promise<TransformChain> {
  const w = `sink "${ctx.sink}"`;
  const { steps: configs, problems } = parseSteps(raw);
  if (problems.length > 0) {
    const unknown = problems.some((p) => p.includes('unknown key') || p.includes('unknown transform'));
    throw new HypsinkError('HYPSINK_ERR_CONFIG', `${w}: ${problems.join('; ')}`, unknown ? { hint: UNKNOWN_KEY_HINT } : {});
  }
  const env = ctx.env ?? process.env;
  const steps: Step[] = [];
  for (const [i, sc] of configs.entries()) steps.push(await stepOf(`transforms[${i}]`, sc, ctx, env));
  const identity = steps.length === 0 ? '' : canonicalJson(steps.map((s) => s.canonical));
  return { length: steps.length, identity, bind: (input, dataset) => bindChain(ctx.sink, steps, input, dataset) };
}

async function stepOf(at: string, sc: StepConfig, ctx: TransformChainContext, env: NodeJS.ProcessEnv): Promise<Step> {
  switch (sc.kind) {
    case 'select':
      return selectStep(at, sc.config);
    case 'drop':
      return dropStep(at, sc.config);
    case 'rename':
      return renameStep(at, sc.config);
    case 'redact':
      return redactStep(at, sc.config);
    case 'hash': {
      const where = `sink "${ctx.sink}": ${at}.hash.key`;
      const key = interpolate(sc.config.key, where, env) as string;
      const bytes = Buffer.byteLength(key, 'utf8');
      if (bytes < MIN_KEY_BYTES) {
        throw new HypsinkError(
          'HYPSINK_ERR_CONFIG',
          `${where}: the key in ${sc.config.key.slice(2, -1)} has ${bytes} bytes; give at least ${MIN_KEY_BYTES} (e.g. the output of "openssl rand -hex 32")`,
        );
      }
      return hashStep(at, sc.config, key);
    }
    case 'plugin':
      return pluginStep(at, sc.plugin, sc.config, ctx);
  }
}

function bindChain(sink: string, steps: readonly Step[], input: readonly ColumnSpec[], dataset: string | undefined): BoundChain {
  const gone = new Map<string, string>();
  const bound: BoundTransform[] = [];
  let cols = input;
  for (const s of steps) {
    const p = new Problems(cols, gone, dataset);
    const b = s.bind(cols, p);
    if (p.list.length > 0) throw new HypsinkError('HYPSINK_ERR_CONFIG', `sink "${sink}": ${p.list.join('; ')}`);
    for (const c of cols) if (!b.columns.some((x) => x.name === c.name)) gone.set(c.name, s.removes(c.name, b.columns));
    for (const c of b.columns) gone.delete(c.name);
    bound.push(b);
    cols = b.columns;
  }
  const output = cols;
  return {
    input,
    columns: output,
    apply(batch: RecordBatch): TransformOutput {
      if (!fits(batch, input)) {
        const got = batch.schema.fields.map((f) => `${f.name} ${f.type}`).join(', ');
        throw new HypsinkError('HYPSINK_ERR_INVARIANT', `sink "${sink}": transforms were bound to columns ${input.map((c) => `${c.name} ${c.type}`).join(', ')} and given a batch of ${got}`);
      }
      let cur = batch;
      /** Row k of `cur` is row `rows[k]` of `batch`; null while they are the same. */
      let rows: Int32Array | null = null;
      const refused: RowRefusal[] = [];
      for (let i = 0; i < bound.length; i++) {
        const out = bound[i]!.apply(cur);
        if (out.refused.length > 0) {
          const at = `${steps[i]!.at} (${steps[i]!.label})`;
          const keep = new Int32Array(cur.numRows - out.refused.length);
          let k = 0;
          let r = 0;
          for (let j = 0; j < cur.numRows; j++) {
            const orig = rows ? rows[j]! : j;
            if (r < out.refused.length && out.refused[r]!.row === j) {
              refused.push({ row: orig, reason: `${at}: ${out.refused[r]!.reason}` });
              r++;
            } else keep[k++] = orig;
          }
          rows = keep;
        }
        cur = out.batch;
      }
      if (refused.length > 1) refused.sort((a, b) => a.row - b.row);
      return { batch: cur, refused };
    },
  };
}
