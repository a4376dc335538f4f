/**
 * NDJSON bytes → spool frames and rejections: the pure, costly half of an
 * ingest. Each line is parsed and validated against the dataset schema; a valid
 * row goes into the frame being filled, column by column; a bad line (malformed
 * JSON, wrong type, missing required field, over the size limit, not UTF-8)
 * comes back whole with its line number and reason. It runs in the ingesting
 * thread or in a parse worker (parsers.ts), a block of lines at a time, with
 * the same result.
 * @ref LLP 0016: ingest parses in a worker
 */
import type { DatasetSchema } from '../../types/schema.js';
import { PARTITION_COLUMN } from '../../types/schema.js';
import { encodeFrameLine } from '../spool/frames.js';
import { normalizeRowInto } from './normalize.js';
import { LineSplitter } from '../io/lines.js';
import { type WireRows, wireObject } from './wire.js';

export interface ParseOptions {
  readonly schema: DatasetSchema;
  readonly source: string;
  readonly maxRowBytes: number;
  /** Rows per spool frame. */
  readonly frameRows: number;
  /** Lines before the first byte this parser sees (it numbers lines from firstLine + 1). */
  readonly firstLine: number;
  /** Rows from a receiver's client: a line that is not one JSON object refuses the batch (`refused`), not a dead letter. @ref LLP 0087 */
  readonly wire?: WireRows;
}

export interface Rejection {
  readonly line: number;
  readonly reason: string;
  readonly raw: string;
}

/** A spool frame ready to append: one line of bytes (newline included). */
export interface FrameLine {
  readonly bytes: Uint8Array;
  readonly rows: number;
}

export interface ParseOutput {
  readonly frames: FrameLine[];
  readonly rejects: Rejection[];
  /** Lines of the input up to here (firstLine + the lines parsed). */
  readonly lines: number;
  /** Wire rows only: the first line that is not one JSON object a client may send; the batch is refused whole. */
  readonly refused?: { readonly line: number; readonly reason: string };
}

/**
 * Parse one block of whole lines (LineBlocks) into frames and rejections, a
 * slice of `sliceBytes` at a time, yielding between slices so the caller can
 * let other work run.
 */
export function* parseBlockSlices(opts: ParseOptions, bytes: Uint8Array, sliceBytes = Math.max(1, bytes.length)): Generator<void, ParseOutput> {
  const parser = new RowParser(opts);
  const frames: FrameLine[] = [];
  const rejects: Rejection[] = [];
  for (let at = 0; at < bytes.length; at += sliceBytes) {
    if (at > 0) yield;
    const out = parser.push(bytes.subarray(at, at + sliceBytes));
    frames.push(...out.frames);
    rejects.push(...out.rejects);
  }
  const last = parser.end();
  const refused = parser.refused;
  return { frames: [...frames, ...last.frames], rejects: [...rejects, ...last.rejects], lines: last.lines, ...(refused ? { refused } : {}) };
}

/** Parse one block of whole lines in one go. */
export function parseBlock(opts: ParseOptions, bytes: Uint8Array): ParseOutput {
  const slices = parseBlockSlices(opts, bytes);
  for (;;) {
    const r = slices.next();
    if (r.done) return r.value;
  }
}

const ignore = new Set([PARTITION_COLUMN]);

/** One parser over a run of lines: frames as rows fill them, rejections as they come. */
class RowParser {
  private readonly splitter = new LineSplitter();
  private readonly width: number;
  /** Each row is validated into this first, then copied into the frame's columns. */
  private readonly scratch: unknown[];
  private columns: unknown[][];
  private rows = 0;
  private line: number;
  /** Wire rows: the first line refused; nothing after it is parsed. */
  refused: { line: number; reason: string } | undefined;

  constructor(private readonly opts: ParseOptions) {
    this.width = opts.schema.columns.length;
    this.scratch = new Array(this.width);
    this.columns = this.newColumns();
    this.line = opts.firstLine;
  }

  push(bytes: Uint8Array): ParseOutput {
    return this.parse(this.splitter.push(bytes), false);
  }

  /** The rest: a last line without a newline, and the frame being filled. */
  end(): ParseOutput {
    return this.parse(this.splitter.end(), true);
  }

  private parse(lines: ReturnType<LineSplitter['push']>, last: boolean): ParseOutput {
    const { schema, source, maxRowBytes, frameRows, wire } = this.opts;
    const out: ParseOutput = { frames: [], rejects: [], lines: 0 };
    for (const line of lines) {
      if (this.refused) break;
      const n = ++this.line;
      if (typeof line !== 'string') {
        if (wire) this.refused = { line: n, reason: 'not valid UTF-8' };
        else out.rejects.push({ line: n, reason: 'the line is not valid UTF-8', raw: line.invalid });
        continue;
      }
      if (line.trim() === '') continue;
      let obj: unknown;
      if (wire) {
        // The client's protocol before the dataset's schema: a line no client may send refuses the batch.
        const w = wireObject(line, wire.maxDepth);
        if (!w.ok) {
          this.refused = { line: n, reason: w.error };
          continue;
        }
        // The receiver says who sent the row, never the row. @ref LLP 0074
        w.row[wire.stamp.column] = wire.stamp.value;
        obj = w.row;
      }
      // Characters bound bytes from below (and 3x from above): count bytes only when it can matter.
      if (line.length * 3 > maxRowBytes && Buffer.byteLength(line) > maxRowBytes) {
        out.rejects.push({ line: n, reason: `row is ${Buffer.byteLength(line)} bytes, over the dataset's maxRowBytes ${maxRowBytes}`, raw: line });
        continue;
      }
      if (!wire) {
        try {
          obj = JSON.parse(line);
        } catch (e) {
          out.rejects.push({ line: n, reason: `malformed JSON (${(e as Error).message})`, raw: line });
          continue;
        }
        if (obj === null || typeof obj !== 'object' || Array.isArray(obj)) {
          out.rejects.push({ line: n, reason: 'not a JSON object', raw: line });
          continue;
        }
      }
      const row = obj as Record<string, unknown>;
      if (row[PARTITION_COLUMN] !== undefined && row[PARTITION_COLUMN] !== source) {
        const reason = `field "${PARTITION_COLUMN}" is ${JSON.stringify(row[PARTITION_COLUMN])} but --source is ${JSON.stringify(source)}`;
        out.rejects.push({ line: n, reason, raw: line });
        continue;
      }
      const reason = normalizeRowInto(schema, row, this.scratch, 0, ignore);
      if (reason !== null) {
        out.rejects.push({ line: n, reason, raw: line });
        continue;
      }
      for (let ci = 0; ci < this.width; ci++) this.columns[ci]!.push(this.scratch[ci]);
      if (++this.rows >= frameRows) out.frames.push(this.frame());
    }
    if (last && this.rows > 0) out.frames.push(this.frame());
    return { ...out, lines: this.line };
  }

  private frame(): FrameLine {
    const frame = encodeFrameLine(this.opts.schema.columns, [{ source: this.opts.source, rows: this.rows, values: this.columns }]);
    this.columns = this.newColumns();
    this.rows = 0;
    return frame;
  }

  private newColumns(): unknown[][] {
    return Array.from({ length: this.width }, () => []);
  }
}
