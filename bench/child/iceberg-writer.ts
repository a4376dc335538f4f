/**
 * Child process for the iceberg group's commit figures: one writer (a cache of
 * its own) exporting to a table other children export to at the same time.
 *   node --import tsx bench/child/iceberg-writer.ts <config> <sink> <rows> <goAtEpochMs>
 * Fills its partition, waits until `goAtEpochMs` (so every writer's export
 * starts together), exports, and prints one JSON line:
 * { rows, ms, commits: [{ ms, attempts }] } from the writer's `iceberg: committed` log lines.
 */
import { loadConfig } from '../../kernel/config/load.js';
import { createLogger } from '../../kernel/log.js';
import { Hypsink } from '../../kernel/runtime.js';
import { fillPartition } from '../lib/fill.js';

const [configPath, sink, rowsArg, goArg] = process.argv.slice(2);
if (!configPath || !sink || !rowsArg || !goArg) {
  process.stderr.write('usage: iceberg-writer.ts <config> <sink> <rows> <goAtEpochMs>\n');
  process.exit(2);
}
const commits: { ms: number; attempts: number }[] = [];
const log = createLogger('debug', {
  write(line: string) {
    // Only the writer's commit lines are kept; the rest of the debug output is dropped unparsed.
    if (!line.includes('iceberg: committed')) return;
    const o = JSON.parse(line) as { commitMs: number; attempts: number };
    commits.push({ ms: o.commitMs, attempts: o.attempts });
  },
});
const k = await Hypsink.open(await loadConfig(configPath), { log });
let rows = 0;
let ms = 0;
try {
  await fillPartition(k, 'w', Number(rowsArg));
  const wait = Number(goArg) - Date.now();
  if (wait > 0) await new Promise((r) => setTimeout(r, wait));
  const t0 = performance.now();
  const [r] = await k.export(sink);
  ms = performance.now() - t0;
  const failed = r?.partitions.find((p) => p.error);
  if (failed?.error) throw failed.error;
  rows = r?.rows ?? 0;
} finally {
  await k.close();
}
process.stdout.write(`${JSON.stringify({ rows, ms, commits })}\n`);
