/**
 * Test support for transforms: real Arrow batches built the way the cache
 * builds them (kernel/store/columns.ts), a chain built from a sink's
 * `transforms` as written, and the cells of a result read back.
 */
import { type RecordBatch, Table, tableToIPC } from 'apache-arrow';
import type { ColumnSpec, Row } from '../../types/schema.js';
import { buildColumn, toRowValue } from '../../kernel/store/columns.js';
import { schemaOf } from '../../kernel/transform/arrow.js';
import { batchOf } from '../../types/arrow-rows.js';
import { buildTransforms, type TransformChain, type TransformChainContext } from '../../kernel/transform/index.js';

export const col = (name: string, type: ColumnSpec['type'], nullable = true): ColumnSpec => ({ name, type, nullable });

/** A batch of `rows` (row form: JSON columns as values, TIMESTAMP as ISO text or ms) with the cache's column builders. */
export function batch(columns: readonly ColumnSpec[], rows: readonly Row[]): RecordBatch {
  const children = columns.map((c) =>
    buildColumn(
      c.type,
      rows.map((r) => {
        const v = r[c.name];
        if (v === null || v === undefined) return null;
        if (c.type === 'JSON') return typeof v === 'string' && (r as { __rawJson?: boolean }).__rawJson ? v : JSON.stringify(v);
        if (c.type === 'TIMESTAMP' && typeof v === 'string') return Date.parse(v);
        return v;
      }),
    ),
  );
  return batchOf(schemaOf(columns), children, rows.length);
}

/** A batch whose JSON columns hold the given texts as they are (valid JSON or not). */
export function rawBatch(columns: readonly ColumnSpec[], rows: readonly Record<string, unknown>[]): RecordBatch {
  const children = columns.map((c) => buildColumn(c.type, rows.map((r) => r[c.name] ?? null)));
  return batchOf(schemaOf(columns), children, rows.length);
}

/** The raw cells of column `name`: Utf8 text as held (JSON as its text), numbers and booleans as Arrow gives them. */
export function cells(b: RecordBatch, name: string): unknown[] {
  const v = b.getChild(name);
  if (!v) throw new Error(`no column ${name} in the batch (has ${b.schema.fields.map((f) => f.name).join(', ')})`);
  return [...v].map((x) => (x === undefined ? null : x));
}

/** The rows in row form, by the given columns. */
export function rowsOf(b: RecordBatch, columns: readonly ColumnSpec[]): Row[] {
  const out: Row[] = [];
  for (let i = 0; i < b.numRows; i++) {
    const r: Row = {};
    for (const c of columns) r[c.name] = toRowValue(c.type, b.getChild(c.name)!.get(i));
    out.push(r);
  }
  return out;
}

/** The batch as Arrow IPC bytes: what "byte-identical" is compared on. */
export function ipc(b: RecordBatch): Uint8Array {
  return tableToIPC(new Table(b), 'stream');
}

const log = { debug() {}, info() {}, warn() {}, error() {} };

export function chain(transforms: unknown, ctx: Partial<TransformChainContext> = {}): Promise<TransformChain> {
  return buildTransforms(transforms, { sink: 'lake', baseDir: '/nonexistent', log, env: {}, ...ctx });
}

/** The message of the error `fn` throws (sync or async). */
export async function errorOf(fn: () => unknown): Promise<Error & { code?: string; hint?: string }> {
  try {
    await fn();
  } catch (e) {
    return e as Error;
  }
  throw new Error('expected an error');
}

/** A seeded PRNG (mulberry32): the same seed, the same cases, so a failure can be replayed. */
export function prng(seed: number): { next(): number; int(n: number): number; pick<T>(xs: readonly T[]): T } {
  let s = seed >>> 0;
  const next = () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return { next, int: (n) => Math.floor(next() * n), pick: (xs) => xs[Math.floor(next() * xs.length)]! };
}

/** `${NAME}`, as a config writes an environment reference. */
export const ref = (name: string) => `\${${name}}`;
