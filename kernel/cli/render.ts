/** Human output: the status table and export summaries. */
import Table from 'cli-table3';
import stringWidth from 'string-width';
import type { TickReport } from '../sinks/driver.js';
import type { ForgetPlan, StatusReport } from '../runtime.js';
import { colourful } from './colour.js';

export { colourful };

/**
 * The table's own colour styling is off: cli-table3's colour library guesses
 * from TERM and CI and would drop colour at a real terminal on a CI runner or
 * under a bare TERM. hypsink decides by `colourful()` alone and writes the SGR
 * (bold cyan heading) itself; cli-table3 measures widths without it.
 * @ref LLP 0031
 */
function table(head: string[], colWidths?: number[]): Table.Table {
  const paint = colourful() ? (h: string) => `\u001b[1;36m${h}\u001b[22;39m` : (h: string) => h;
  // A heading wrapped over lines is painted line by line: an escape never spans a break.
  const heads = head.map((h) => h.split('\n').map(paint).join('\n'));
  return new Table({ head: heads, style: { head: [], border: [] }, ...(colWidths ? { colWidths, wordWrap: false } : {}) });
}

/** The terminal's width when stdout is one; into a pipe or a file, no limit: the table is whole. */
export function terminalWidth(out: { isTTY?: boolean; columns?: number } = process.stdout): number {
  return out.isTTY === true ? out.columns || 80 : Number.POSITIVE_INFINITY;
}

/**
 * A column of a table that fits: `drop` says when it may be left out to fit
 * the terminal: a number ranks it (lower goes first), `blank` only when it has
 * nothing to say (every cell `-`, `0` or empty); without it, never.
 */
interface Column {
  readonly head: string;
  readonly drop?: number | 'blank';
}

/** Terminal cells, as cli-table3 measures them: a wide (CJK) character or an emoji takes two. @ref LLP 0035 */
const cells = (s: string) => stringWidth(s);
const width = (s: string) => Math.max(0, ...s.split('\n').map(cells));
const isBlank = (s: string) => s === '' || s === '-' || s === '0';

/** `s` in lines of at most `w` terminal cells: broken at spaces where it can be, inside a word where it must. */
export function wrapText(s: string, w: number): string {
  const out: string[] = [];
  for (const para of s.split('\n')) {
    let line = '';
    for (const word of para.split(' ')) {
      const len = cells(line);
      if (len > 0 && len + 1 + cells(word) <= w) {
        line += ` ${word}`;
        continue;
      }
      if (len > 0) out.push(line);
      // The word alone, cut where the next character would pass `w`.
      let piece = '';
      for (const ch of word) {
        if (piece !== '' && cells(piece) + cells(ch) > w) {
          out.push(piece);
          piece = '';
        }
        piece += ch;
      }
      line = piece;
    }
    out.push(line);
  }
  return out.join('\n');
}

/**
 * A table no wider than `maxWidth`: columns with nothing to say are left out
 * first, then the least useful ones while even wrapped cells would not fit,
 * then the widest cells wrap, until every line fits (or each column that must
 * stay is down to a few characters). Returns the table and the headings left out.
 * @ref LLP 0035
 */
function fitTable(columns: readonly Column[], rows: readonly string[][], maxWidth: number): { text: string; dropped: string[] } {
  let keep = columns.map((_, i) => i);
  const natural = (i: number) => Math.max(width(columns[i]!.head), ...rows.map((r) => width(r[i] ?? '')));
  // cli-table3: a space either side of each cell, a border between and around.
  const total = (ix: readonly number[], w: (i: number) => number) => ix.reduce((n, i) => n + w(i) + 3, 1);
  const blank = (i: number) => rows.every((r) => isBlank(r[i] ?? ''));
  // Wrapped cells are at least MIN_CELL wide; a column with something to say goes only when
  // the rest cannot fit even wrapped at WRAP_FLOOR, and a `blank` one only as a last resort.
  const MIN_CELL = 4;
  const WRAP_FLOOR = 20;
  const LAST = 1000;
  const droppable = columns
    .map((c, i) => ({ i, rank: c.drop === undefined ? null : blank(i) ? -1 : c.drop === 'blank' ? LAST + i : c.drop }))
    .filter((d): d is { i: number; rank: number } => d.rank !== null)
    .sort((a, b) => a.rank - b.rank || a.i - b.i);
  const within = (floor: number) => (i: number) => Math.min(natural(i), floor);
  const dropped = new Set<number>();
  for (const d of droppable) {
    if (total(keep, d.rank < 0 ? natural : within(d.rank < LAST ? WRAP_FLOOR : MIN_CELL)) <= maxWidth) break;
    keep = keep.filter((i) => i !== d.i);
    dropped.add(d.i);
  }
  let widths: number[] | undefined;
  if (total(keep, natural) > maxWidth) {
    // The widest columns give way first: each is cut to `cap` (water-filling), none below MIN_CELL.
    const room = maxWidth - total(keep, () => 0);
    const nat = keep.map(natural);
    const fits = (cap: number) => nat.reduce((n, w) => n + Math.min(w, Math.max(cap, MIN_CELL)), 0) <= room;
    let cap = Math.max(...nat);
    while (cap > MIN_CELL && !fits(cap)) cap--;
    widths = nat.map((w) => Math.min(w, Math.max(cap, MIN_CELL)));
    // What the cap leaves over goes to the columns it cut, one character each.
    let spare = room - widths.reduce((n, w) => n + w, 0);
    for (let j = 0; j < widths.length && spare > 0; j++) {
      if (widths[j]! < nat[j]!) {
        widths[j]!++;
        spare--;
      }
    }
  }
  const cell = (s: string, j: number) => (widths ? wrapText(s, widths[j]!) : s);
  const t = table(
    keep.map((i, j) => cell(columns[i]!.head, j)),
    widths?.map((w) => w + 2),
  );
  for (const r of rows) t.push(keep.map((i, j) => cell(r[i] ?? '', j)));
  return { text: t.toString(), dropped: columns.filter((_, i) => dropped.has(i)).map((c) => c.head) };
}

/** The line under a table that left columns out: which, and where they all are. */
function droppedNote(dropped: readonly string[], maxWidth: number, json: string): string[] {
  if (dropped.length === 0) return [];
  const note = `(not shown, to fit the terminal: ${dropped.join(', ')}; "${json}" has every field)`;
  return [Number.isFinite(maxWidth) ? wrapText(note, maxWidth) : note];
}

const STATUS_COLUMNS: readonly Column[] = [
  { head: 'sink' },
  { head: 'dataset' },
  { head: 'source' },
  { head: 'watermark', drop: 3 },
  { head: 'high water', drop: 1 },
  { head: 'pending' },
  { head: 'exported' },
  { head: 'gap', drop: 'blank' },
  { head: 'rejected', drop: 'blank' },
  { head: 'intent', drop: 'blank' },
  { head: 'last export', drop: 2 },
  { head: 'last error', drop: 'blank' },
];

export function statusTable(s: StatusReport, maxWidth = terminalWidth()): string {
  const rows: string[][] = [];
  for (const sink of s.sinks) {
    if (sink.partitions.length === 0) rows.push([sink.name, '(no partitions yet)', '', '', '', '', '', '', '', '', '', '']);
    for (const p of sink.partitions) {
      rows.push([
        sink.name,
        p.dataset,
        p.source,
        p.watermark ?? '-',
        p.highWater ?? '-',
        String(p.pendingRows),
        String(p.exportedRows),
        String(p.gapRows),
        String(p.rejectedRows),
        p.intent ? `(${p.intent.since ?? '-'}, ${p.intent.until}]` : '-',
        p.lastExportAt ?? '-',
        p.lastError ? p.lastError.slice(0, 60) : '-',
      ]);
    }
  }
  const fitted = fitTable(STATUS_COLUMNS, rows, maxWidth);
  const notes = s.absent.map((a) => {
    const held = a.partitions.reduce((n, p) => n + p.pendingRows, 0);
    const what = a.configured ? `sink "${a.name}" no longer exports ${a.datasets.join(', ')}` : `sink "${a.name}" is not in this config`;
    return `${what}, but its watermarks hold ${held} row(s) back from retention; run "hypsink forget ${a.name}${a.configured ? ` --dataset <d>` : ''}" to see what forgetting it drops`;
  });
  const wrap = (n: string) => (Number.isFinite(maxWidth) ? wrapText(n, maxWidth) : n);
  // A suspected copy says so first: nothing exports until the operator decides. @ref LLP 0055
  const copy = s.copy ? [`${s.copy}; exports are stopped: run "hypsink identity" to decide`] : [];
  return [...copy.map(wrap), fitted.text, ...droppedNote(fitted.dropped, maxWidth, 'hypsink status --json'), ...notes.map(wrap)].join('\n');
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

const EXPORT_COLUMNS: readonly Column[] = [
  { head: 'sink' },
  { head: 'dataset' },
  { head: 'source' },
  { head: 'rows' },
  { head: 'bytes', drop: 1 },
  { head: 'units', drop: 2 },
  { head: 'note', drop: 'blank' },
];

export function exportTable(reports: readonly TickReport[], maxWidth = terminalWidth()): string {
  const rows: string[][] = [];
  for (const r of reports) {
    for (const p of r.partitions) {
      const note = p.error ? `${p.error.code}: ${p.error.message}`.slice(0, 80) : p.waiting ? 'waiting (small-file policy)' : [p.gapRows ? `gap ${p.gapRows}` : '', p.rejectedRows ? `${p.rejectedRows} rejected (dead letter)` : ''].filter(Boolean).join('; ');
      rows.push([r.sink, p.partition.dataset, p.partition.source, String(p.rows), String(p.bytes), String(p.units), note]);
    }
  }
  const fitted = fitTable(EXPORT_COLUMNS, rows, maxWidth);
  return [fitted.text, ...droppedNote(fitted.dropped, maxWidth, 'hypsink export --json')].join('\n');
}
