/**
 * Progress bars for a person at a terminal (stderr a TTY; never into a pipe):
 * they count what the work is made of, so they move as it moves. An ingest
 * from a file counts bytes of the file's size (rows have no total known ahead,
 * bytes do), with rows and their rate beside; from stdin, rows and a rate. An
 * export counts each sink's rows exported of the rows it had pending when its
 * tick began, one bar per sink.
 * @ref LLP 0035
 */
import type { MultiBar, SingleBar } from 'cli-progress';
import type { IngestProgress } from '../ingest/ingest.js';

/** Bars are this wide: the line, values and all, fits 100 columns. */
const BAR = 20;

const tty = () => process.stderr.isTTY === true;

export function bytesText(n: number): string {
  if (n < 1024) return `${n} B`;
  const units = ['KiB', 'MiB', 'GiB', 'TiB'];
  let v = n / 1024;
  let u = 0;
  while (v >= 1024 && u < units.length - 1) {
    v /= 1024;
    u++;
  }
  return `${v.toFixed(1)} ${units[u]}`;
}

/** Seconds as `7s`, `3m05s`, `2h04m`. */
export function secondsText(s: number): string {
  const t = Math.max(0, Math.ceil(s));
  if (t < 60) return `${t}s`;
  if (t < 3600) return `${Math.floor(t / 60)}m${String(t % 60).padStart(2, '0')}s`;
  return `${Math.floor(t / 3600)}h${String(Math.floor((t % 3600) / 60)).padStart(2, '0')}m`;
}

/** Per second since `since`; the first moments count as one millisecond, never zero. */
const perSecond = (n: number, since: number) => Math.round((n * 1000) / Math.max(1, Date.now() - since));

export interface IngestBar {
  readonly onRead: (p: IngestProgress) => void;
  stop(): void;
}

/**
 * `size`: the input file's size in bytes; null (stdin, a pipe) when unknown:
 * then the bar shows rows, bytes and the rate, no percentage.
 */
export async function ingestBar(size: number | null): Promise<IngestBar | null> {
  if (!tty()) return null;
  const { SingleBar } = await import('cli-progress');
  const known = size !== null;
  const format = known
    ? 'ingest {bar} {percentage}% | {done}/{size} | {rows} rows | {rate} rows/s | ETA {left}'
    : 'ingest {rows} rows | {done} | {rate} rows/s | {duration_formatted}';
  const bar: SingleBar = new SingleBar({ format, barsize: BAR, stream: process.stderr, hideCursor: true });
  const started = Date.now();
  let total = size ?? 0;
  const payload = (p: IngestProgress) => {
    const bytesPerSecond = perSecond(p.bytes, started);
    return {
      rows: p.rows,
      rate: perSecond(p.rows, started),
      done: bytesText(p.bytes),
      size: bytesText(total),
      left: bytesPerSecond > 0 && p.bytes > 0 ? secondsText((total - p.bytes) / bytesPerSecond) : '?',
    };
  };
  bar.start(total, 0, payload({ bytes: 0, rows: 0 }));
  return {
    onRead: (p) => {
      // A file that grew while read: its end is further than its size said.
      if (known && p.bytes > total) {
        total = p.bytes;
        bar.setTotal(total);
      }
      bar.update(known ? p.bytes : p.rows, payload(p));
    },
    stop: () => bar.stop(),
  };
}

export interface ExportBars {
  /** A sink's tick began with this many rows pending. */
  readonly onPending: (sink: string, rows: number) => void;
  /** A unit of the sink was acknowledged by its destination. */
  readonly onUnit: (sink: string, rows: number) => void;
  stop(): void;
}

export async function exportBars(): Promise<ExportBars | null> {
  if (!tty()) return null;
  const { MultiBar } = await import('cli-progress');
  const multi: MultiBar = new MultiBar({
    format: '{sink} {bar} {percentage}% | {value}/{total} rows | {rate} rows/s',
    barsize: BAR,
    stream: process.stderr,
    hideCursor: true,
  });
  const bars = new Map<string, { bar: SingleBar; started: number; done: number }>();
  let width = 0;
  return {
    onPending: (sink, rows) => {
      // Sink names padded to one width, so the bars line up.
      width = Math.max(width, sink.length);
      for (const [name, b] of bars) b.bar.update({ sink: name.padEnd(width) });
      bars.set(sink, { bar: multi.create(rows, 0, { sink: sink.padEnd(width), rate: 0 }), started: Date.now(), done: 0 });
    },
    onUnit: (sink, rows) => {
      const b = bars.get(sink);
      if (!b) return;
      b.done += rows;
      // Rows committed after the tick began may ship in it too.
      if (b.done > b.bar.getTotal()) b.bar.setTotal(b.done);
      b.bar.update(b.done, { rate: perSecond(b.done, b.started) });
    },
    stop: () => multi.stop(),
  };
}
