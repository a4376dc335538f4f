/**
 * `npm run bench`: the DESIGN §10 figures, each measured as a ratio within this
 * one run (the machine is shared and noisy), except the ingest rate and the
 * peak RSS, which are absolute. Prints a table and writes bench/results.json.
 *
 *   npx tsx bench/run.ts [--quick] [--only tick,nonew,...] [--out file] [--strict] [--quiet]
 *
 * --quick   smaller partitions (≈2 min on 2 cores); --only runs some groups
 * (ids: see bench/figures/index.ts); --strict exits 1 when a figure misses its
 * target (by default only a failed measurement exits non-zero).
 */
import { mkdtempSync, promises as fsp, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import Table from 'cli-table3';
import { GROUPS } from './figures/index.js';
import { createContext } from './lib/context.js';
import { type Figure, showSpread } from './lib/figure.js';

const { values } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    only: { type: 'string' },
    out: { type: 'string', default: fileURLToPath(new URL('./results.json', import.meta.url)) },
    strict: { type: 'boolean', default: false },
    quiet: { type: 'boolean', default: false },
  },
  strict: true,
});

const only = values.only?.split(',').map((s) => s.trim()).filter(Boolean);
const unknown = only?.filter((id) => !GROUPS.some((g) => g.id === id)) ?? [];
if (unknown.length > 0) {
  process.stderr.write(`bench: unknown group(s) ${unknown.join(', ')}; known: ${GROUPS.map((g) => g.id).join(', ')}\n`);
  process.exit(2);
}
const groups = only ? GROUPS.filter((g) => only.includes(g.id)) : GROUPS;

const root = mkdtempSync(join(tmpdir(), 'hypsink-bench-'));
const cleanup = () => rmSync(root, { recursive: true, force: true });
for (const sig of ['SIGINT', 'SIGTERM'] as const) {
  process.once(sig, () => {
    cleanup();
    process.exit(130);
  });
}

const ctx = createContext(root, values.quick, !values.quiet);
const figures: Figure[] = [];
const errors: { group: string; error: string }[] = [];
const started = performance.now();
try {
  for (const g of groups) {
    ctx.progress(`${g.id}: ${g.title}`);
    const t0 = performance.now();
    try {
      const got = await g.run(ctx);
      figures.push(...got);
      ctx.progress(`${g.id}: done in ${((performance.now() - t0) / 1000).toFixed(1)}s: ${got.map((f) => `${f.name}=${f.value} [${showSpread(f.spread)}]`).join(', ')}`);
    } catch (e) {
      const error = e instanceof Error ? (e.stack ?? e.message) : String(e);
      errors.push({ group: g.id, error });
      process.stderr.write(`bench: ${g.id} failed: ${error}\n`);
    }
  }
} finally {
  cleanup();
}

const results = {
  figures,
  quick: values.quick,
  at: new Date().toISOString(),
  node: process.version,
  seconds: Math.round((performance.now() - started) / 100) / 10,
  details: ctx.details,
  ...(errors.length > 0 ? { errors } : {}),
};
await fsp.writeFile(values.out, `${JSON.stringify(results, null, 2)}\n`);

const plain = !process.stdout.isTTY;
const table = new Table({ head: ['figure', 'value', 'spread: min / median / max', 'target', 'pass'], ...(plain ? { style: { head: [], border: [] } } : {}) });
for (const f of figures) table.push([f.name, String(f.value), showSpread(f.spread), f.target, f.pass ? 'yes' : 'NO']);
process.stdout.write(`${table.toString()}\n`);
process.stdout.write(
  `${values.quick ? 'quick' : 'full'} run, ${results.seconds}s, ${figures.filter((f) => f.pass).length}/${figures.length} figures meet their target; details in ${values.out}\n`,
);
process.exitCode = errors.length > 0 || (values.strict && figures.some((f) => !f.pass)) ? 1 : 0;
