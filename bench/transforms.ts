/**
 * The transform engine alone, per row (LLP 0046): chains over one 16,384-row
 * batch of demo-like rows, against the same batch written as NDJSON and
 * encoded as Parquet without transforms. Not a DESIGN §10 figure (that is an
 * export with and without transforms, once they are wired in): the least of
 * 40 interleaved runs, to see what a chain costs.
 *
 *   NODE_OPTIONS=--conditions=hypsink-source npx tsx bench/transforms.ts
 */
import { Table, tableToIPC } from 'apache-arrow';
import * as pw from 'parquet-wasm/node';
import { NdjsonWriter } from '../kernel/sinks/ndjson.js';
import { buildColumn } from '../kernel/store/columns.js';
import { schemaOf } from '../kernel/transform/arrow.js';
import { batchOf } from '../types/arrow-rows.js';
import { buildTransforms } from '../kernel/transform/index.js';
import type { ColumnSpec } from '../types/schema.js';

/** `${NAME}`, as a config writes an environment reference. */
const ref = (name: string) => `\${${name}}`;
const N = 16_384;
const cols: ColumnSpec[] = [
  { name: 'id', type: 'INT64', nullable: false },
  { name: 'ts', type: 'TIMESTAMP', nullable: false },
  { name: 'level', type: 'STRING', nullable: true },
  { name: 'msg', type: 'STRING', nullable: true },
  { name: 'debug', type: 'STRING', nullable: true },
  { name: 'payload', type: 'JSON', nullable: true },
];
let seed = 1;
const rnd = () => {
  seed = (seed * 1103515245 + 12345) & 0x7fffffff;
  return seed / 0x80000000;
};
const pick = <T>(xs: readonly T[]) => xs[Math.floor(rnd() * xs.length)]!;
const WORDS = ['GET', '/api/v1/items', 'status=200', 'took', '12ms', 'user', 'login', 'ok', 'retry', 'cache', 'miss', 'é', 'handler'];
const values: Record<string, unknown[]> = { id: [], ts: [], level: [], msg: [], debug: [], payload: [] };
for (let id = 0; id < N; id++) {
  values.id!.push(id);
  values.ts!.push(1_767_225_600_000 + id);
  values.level!.push(pick(['info', 'warn', 'error']));
  const words = Array.from({ length: 8 + Math.floor(rnd() * 8) }, () => pick(WORDS)).join(' ');
  values.msg!.push(`${words}${rnd() < 0.02 ? ` from u${id}@example.com` : ''}${rnd() < 0.01 ? ' Authorization: Bearer abc.def' : ''}`);
  values.debug!.push(`trace ${id}`);
  values.payload!.push(JSON.stringify({ path: `/x/${id}`, n: id, tags: ['a', 'b'] }));
}
const batch = batchOf(
  schemaOf(cols),
  cols.map((c) => buildColumn(c.type, values[c.name]!)),
  N,
);

const props = new pw.WriterPropertiesBuilder().setCompression(pw.Compression.ZSTD).build();
const runs: [string, () => void][] = [
  ['no transforms: parquet encode (zstd)', () => void pw.writeParquet(pw.Table.fromIPCStream(tableToIPC(new Table(batch), 'stream')), props)],
  ['no transforms: NDJSON body', () => new NdjsonWriter(cols, N).append(batch)],
];
const select = { select: ['id', 'ts', 'level', 'msg', 'payload'] };
const chains: [string, unknown[]][] = [
  ['select + redact(email, bearer)', [select, { redact: { columns: ['msg'], patterns: ['email', 'bearer'] } }]],
  ['select + redact(email, bearer, regex sk-…)', [select, { redact: { columns: ['msg'], patterns: ['email', 'bearer'], regex: ['sk-[A-Za-z0-9]{20,}'] } }]],
  ['select + redact(all four patterns)', [select, { redact: { columns: ['msg'], patterns: ['email', 'bearer', 'aws-key', 'credit-card'] } }]],
  ['redact(^anchored regex), cell by cell', [{ redact: { columns: ['msg'], regex: ['^user .*'] } }]],
  ['redact(email) on a JSON column', [{ redact: { columns: ['payload'], patterns: ['email'] } }]],
  ['hash a STRING column', [{ hash: { columns: ['msg'], key: ref('K') } }]],
  ['hash an INT64 column', [{ hash: { columns: ['id'], key: ref('K') } }]],
];
const log = { debug() {}, info() {}, warn() {}, error() {} };
for (const [label, transforms] of chains) {
  const bound = (await buildTransforms(transforms, { sink: 'bench', baseDir: '.', log, env: { K: 'k'.repeat(32) } })).bind(cols);
  runs.push([label, () => bound.apply(batch)]);
}
const best = runs.map(() => Number.POSITIVE_INFINITY);
for (let rep = 0; rep < 40; rep++) {
  runs.forEach(([, f], k) => {
    const t = performance.now();
    f();
    best[k] = Math.min(best[k]!, ((performance.now() - t) * 1000) / N);
  });
}
const [parquet, ndjson] = best as [number, number];
runs.forEach(([label], k) => {
  const ratio = k < 2 ? '' : `  ratio with parquet ${(parquet / (parquet + best[k]!)).toFixed(2)}, with NDJSON ${(ndjson / (ndjson + best[k]!)).toFixed(2)}`;
  console.log(`${label.padEnd(44)} ${best[k]!.toFixed(3)} µs/row${ratio}`);
});
