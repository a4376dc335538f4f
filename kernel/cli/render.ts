/** Human output: the status table and export summaries. */
import Table from 'cli-table3';
import type { TickReport } from '../sinks/driver.js';
import type { StatusReport } from '../runtime.js';

export function statusTable(s: StatusReport): string {
  const t = new Table({
    head: ['sink', 'dataset', 'source', 'watermark', 'high water', 'pending', 'exported', 'gap', 'intent', 'last export', 'last error'],
  });
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
  return t.toString();
}

export function exportTable(reports: readonly TickReport[]): string {
  const t = new Table({ head: ['sink', 'dataset', 'source', 'rows', 'bytes', 'units', 'note'] });
  for (const r of reports) {
    for (const p of r.partitions) {
      const note = p.error ? `${p.error.code}: ${p.error.message}`.slice(0, 80) : p.waiting ? 'waiting (small-file policy)' : p.gapRows ? `gap ${p.gapRows}` : '';
      t.push([r.sink, p.partition.dataset, p.partition.source, String(p.rows), String(p.bytes), String(p.units), note]);
    }
  }
  return t.toString();
}
