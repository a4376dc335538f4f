/**
 * Child process for the peak-RSS figure: its only job is one tick of one sink,
 * through the package as a host imports it (`hypsink`, the compiled build that
 * `npm run bench` makes first): plain JavaScript, so neither the TypeScript
 * loader nor its copy in each worker thread is in the figure.
 *   HYPSINK_LOG_LEVEL=silent node bench/child/export.mjs <config> <sink> [--idle]
 * `--idle` opens the kernel and exports nothing (the baseline RSS).
 * Prints one JSON line: { rows, ms, peakRssKb, maxRssKb, end } (`end`: process.memoryUsage() in MB at the end).
 *
 * peakRssKb is this process image's own high-water RSS (VmHWM of /proc/self/status).
 * process.resourceUsage().maxRSS is kept alongside but is not the figure: Linux
 * carries ru_maxrss across fork and execve, so a child spawned by a big parent
 * reports the parent's RSS (an idle child of the bench read 320 MB).
 */
import { readFileSync } from 'node:fs';
import { open } from 'hypsink';

const [configPath, sink, mode] = process.argv.slice(2);
if (!configPath || !sink) {
  process.stderr.write('usage: export.mjs <config> <sink> [--idle]\n');
  process.exit(2);
}
const k = await open(configPath);
const t0 = performance.now();
let rows = 0;
try {
  if (mode !== '--idle') {
    const [r] = await k.export(sink);
    const failed = r?.partitions.find((p) => p.error);
    if (failed?.error) throw failed.error;
    rows = r?.rows ?? 0;
  }
} finally {
  await k.close();
}
const maxRssKb = process.resourceUsage().maxRSS;
/** VmHWM in kB where /proc exists (Linux), else maxRSS. */
function peakRssKb() {
  try {
    const m = /^VmHWM:\s+(\d+)\s+kB/m.exec(readFileSync('/proc/self/status', 'utf8'));
    if (m) return Number(m[1]);
  } catch {
    // not Linux
  }
  return maxRssKb;
}
const end = Object.fromEntries(Object.entries(process.memoryUsage()).map(([key, v]) => [key, Math.round(v / 104857.6) / 10]));
process.stdout.write(`${JSON.stringify({ rows, ms: performance.now() - t0, peakRssKb: peakRssKb(), maxRssKb, end })}\n`);
