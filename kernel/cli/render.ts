/** Human output: the status table and export summaries. */
import Table from 'cli-table3';
import type { TickReport } from '../sinks/driver.js';
import type { ForgetPlan, StatusReport } from '../runtime.js';

/**
 * Colour only for a person at a terminal: not into a pipe or a file, and not
 * when NO_COLOR is set to anything (no-color.org).
 */
export function colourful(out: { isTTY?: boolean } = process.stdout, env: NodeJS.ProcessEnv = process.env): boolean {
  return out.isTTY === true && (env.NO_COLOR ?? '') === '';
}

/**
 * The table's own colour styling is off: cli-table3's colour library guesses
 * from TERM and CI and would drop colour at a real terminal on a CI runner or
 * under a bare TERM. hypsink decides by `colourful()` alone and writes the SGR
 * (bold cyan heading) itself; cli-table3 measures widths without it.
 * @ref LLP 0031
 */
function table(head: string[]): Table.Table {
  const paint = colourful() ? (h: string) => `\u001b[1;36m${h}\u001b[22;39m` : (h: string) => h;
  return new Table({ head: head.map(paint), style: { head: [], border: [] } });
}

export function statusTable(s: StatusReport): string {
  const t = table(['sink', 'dataset', 'source', 'watermark', 'high water', 'pending', 'exported', 'gap', 'intent', 'last export', 'last error']);
  for (const sink of s.sinks) {
    if (sink.partitions.length === 0) t.push([sink.name, '(no partitions yet)', '', '', '', '', '', '', '', '', '']);
    for (const p of sink.partitions) {
      t.push([
        sink.name,
        p.dataset,
        p.source,
        p.watermark ?? '-',
        p.highWater ?? '-',
        String(p.pendingRows),
        String(p.exportedRows),
        String(p.gapRows),
        p.intent ? `(${p.intent.since ?? '-'}, ${p.intent.until}]` : '-',
        p.lastExportAt ?? '-',
        p.lastError ? p.lastError.slice(0, 60) : '-',
      ]);
    }
  }
  const notes = s.absent.map((a) => {
    const held = a.partitions.reduce((n, p) => n + p.pendingRows, 0);
    const what = a.configured ? `sink "${a.name}" no longer exports ${a.datasets.join(', ')}` : `sink "${a.name}" is not in this config`;
    return `${what}, but its watermarks hold ${held} row(s) back from retention; run "hypsink forget ${a.name}${a.configured ? ` --dataset <d>` : ''}" to see what forgetting it drops`;
  });
  return [t.toString(), ...notes].join('\n');
}

/** What `hypsink forget` drops, said before (or as) it drops it. */
export function forgetText(plan: ForgetPlan, doing: boolean): string {
  const scope = plan.dataset === null ? `sink "${plan.sink}"` : `sink "${plan.sink}", dataset "${plan.dataset}"`;
  const lines = [`${doing ? 'forgetting' : 'forgetting would drop'} the watermarks of ${scope}:`];
  if (plan.partitions.length === 0) lines.push('  (no partitions)');
  for (const p of plan.partitions) {
    const intent = p.intent ? `; a unit in flight (${p.intent.since ?? 'start'}, ${p.intent.until}] is abandoned` : '';
    lines.push(`  ${p.dataset}/source=${p.source}: exported ${p.exportedRows}, ${p.pendingRows} row(s) it has not exported${intent}`);
  }
  lines.push(
    plan.configured
      ? `The sink is still configured: its next export starts again from the oldest row in the cache, to a new destination. Its current destination keeps what it delivered, so exporting there again is refused (until "hypsink accept-destination ${plan.sink}", once it was emptied).`
      : 'Retention may then prune the rows it held back; they are not counted as its gap (its state is gone).',
  );
  if (!doing) lines.push(`Run again with --yes to drop them.`);
  return lines.join('\n');
}

export function exportTable(reports: readonly TickReport[]): string {
  const t = table(['sink', 'dataset', 'source', 'rows', 'bytes', 'units', 'note']);
  for (const r of reports) {
    for (const p of r.partitions) {
      const note = p.error ? `${p.error.code}: ${p.error.message}`.slice(0, 80) : p.waiting ? 'waiting (small-file policy)' : p.gapRows ? `gap ${p.gapRows}` : '';
      t.push([r.sink, p.partition.dataset, p.partition.source, String(p.rows), String(p.bytes), String(p.units), note]);
    }
  }
  return t.toString();
}
