/**
 * Spool frames: what one append stores, as one line of a spool file.
 *
 * v2 holds each source's rows as Arrow columns in an IPC stream. The line is a
 * JSON header (`{"v":2,"cols":[…],"parts":[{"source","rows","bytes"}],"crc"}`), a tab,
 * and the parts' streams one after another in base64, so the frame stays one
 * line (a torn tail is still found by its missing newline) and the bulk is
 * never scanned as JSON. The appending thread builds the columns once; the flush
 * reads them back without a parse per value. v1 (rows as JSON arrays, one JSON
 * line, which never holds a raw tab) is read for spools written before.
 * @ref LLP 0015: spool frames as Arrow columns, row ids over column bytes
 */
import { crc32 } from 'node:zlib';
import { type Data, makeData, RecordBatch, Struct, Table, tableFromIPC, tableToIPC } from 'apache-arrow';
import { HypsinkError } from '../../types/errors.js';
import type { ColumnSpec, DatasetSchema } from '../../types/schema.js';
import { crcMismatch, isCrc32 } from '../store/checksums.js';
import { arrowType, buildColumn, userSchema } from '../store/columns.js';

/** v1: column names at append time, then rows as [source, ...values] (normalize.ts forms). */
export interface FrameV1 {
  v: 1;
  cols: string[];
  rows: unknown[][];
}

/**
 * How far a batch's input is durable once this frame is: the lines read through
 * the end of this frame's block, and the SHA-256 of the source and those bytes. The last frame
 * of a batch says `end`, with the batch's totals. A resumed ingest starts after
 * the highest mark and checks its input against the hash.
 * @ref LLP 0021: idempotent ingest
 */
export interface BatchMark {
  /** The host's batch id. */
  readonly id: string;
  readonly lines: number;
  readonly hash: string;
  readonly end?: true;
  /** Rows of the batch accepted and rejected through this mark, earlier tries included. */
  readonly accepted?: number;
  readonly rejected?: number;
}

/** v2: column names at append time, per source its row count and IPC stream length, and the streams. */
export interface FrameV2 {
  v: 2;
  cols: string[];
  parts: { source: string; rows: number; bytes: number }[];
  batch?: BatchMark;
  /** CRC-32 of the parts' IPC streams as appended; absent in frames spooled before LLP 0106. */
  crc?: number;
  /** The parts' IPC streams, one after another (not in the header: after its tab). */
  payload: Uint8Array;
}

export type Frame = FrameV1 | FrameV2;

/** One source's rows of a frame, as columns in the order of `cols`. */
export interface FrameBatch {
  readonly source: string;
  readonly columns: readonly Data[];
}

/** One source's validated rows for a frame, column by column: `values[ci][r]`, in schema column order. */
export interface SpoolPart {
  readonly source: string;
  readonly rows: number;
  readonly values: readonly (readonly unknown[])[];
}

/** Validated rows `[source, ...values]` as parts, one per source in first-seen order. */
export function partsOf(width: number, rows: readonly (readonly unknown[])[]): SpoolPart[] {
  const bySource = new Map<string, unknown[][]>();
  for (const r of rows) {
    let cols = bySource.get(r[0] as string);
    if (!cols) {
      cols = Array.from({ length: width }, () => []);
      bySource.set(r[0] as string, cols);
    }
    for (let ci = 0; ci < width; ci++) cols[ci]!.push(r[ci + 1]);
  }
  return [...bySource].map(([source, values]) => ({ source, rows: values[0]?.length ?? 0, values }));
}

/** A v2 frame as the line a spool stores, newline included, in bytes of its own (transferable). */
export function encodeFrameLine(columns: readonly ColumnSpec[], parts: readonly SpoolPart[], batch?: BatchMark): { bytes: Uint8Array; rows: number } {
  const schema = userSchema(columns);
  const streams = parts.map(({ rows, values }) => {
    const children = columns.map((c, ci) => buildColumn(c.type, values[ci]!));
    const batch = new RecordBatch(schema, makeData({ type: new Struct(schema.fields), length: rows, nullCount: 0, children }));
    return tableToIPC(new Table(schema, [batch]), 'stream');
  });
  const ipc = Buffer.concat(streams);
  const header = JSON.stringify({
    v: 2,
    cols: columns.map((c) => c.name),
    parts: parts.map(({ source, rows }, i) => ({ source, rows, bytes: streams[i]!.byteLength })),
    // The flush checks the columns against it: a flipped bit in a durable segment is named, never committed as another value. @ref LLP 0106
    crc: crc32(ipc),
    ...(batch ? { batch } : {}),
  });
  const payload = ipc.toString('base64');
  const headBytes = Buffer.byteLength(header);
  // A buffer of its own, so a parse worker can transfer it.
  const bytes = Buffer.from(new ArrayBuffer(headBytes + 1 + payload.length + 1));
  bytes.write(header, 0, 'utf8');
  bytes[headBytes] = TAB;
  bytes.write(payload, headBytes + 1, 'latin1');
  bytes[bytes.length - 1] = 0x0a;
  return { bytes, rows: parts.reduce((n, p) => n + p.rows, 0) };
}

const TAB = 0x09;

/** The same frame line with `batch` in its header: the columns after the tab are not touched. */
export function markFrameLine(line: { bytes: Uint8Array; rows: number }, batch: BatchMark): { bytes: Uint8Array; rows: number } {
  const buf = Buffer.from(line.bytes.buffer, line.bytes.byteOffset, line.bytes.byteLength);
  const tab = buf.indexOf(TAB);
  const head = JSON.parse(buf.toString('utf8', 0, tab)) as Record<string, unknown>;
  const header = Buffer.from(JSON.stringify({ ...head, batch }), 'utf8');
  const bytes = Buffer.from(new ArrayBuffer(header.length + buf.length - tab));
  header.copy(bytes, 0);
  buf.copy(bytes, header.length, tab);
  return { bytes, rows: line.rows };
}

/** The header of a frame line (its JSON before the tab), without decoding its columns; null if it is not one. */
export function frameHeader(line: Buffer): { batch?: BatchMark } | null {
  const tab = line.indexOf(TAB);
  try {
    const head = JSON.parse(line.toString('utf8', 0, tab < 0 ? line.length : tab)) as { batch?: BatchMark } | null;
    return head && typeof head === 'object' ? head : null;
  } catch {
    return null;
  }
}

export function checkBatchMark(b: unknown): string | null {
  const m = b as BatchMark;
  if (!m || typeof m.id !== 'string' || !Number.isSafeInteger(m.lines) || m.lines < 0 || typeof m.hash !== 'string') return 'bad batch mark';
  return null;
}

/** A frame from its line (without the newline), or why it is not one. */
export function decodeFrameLine(line: Buffer): Frame | string {
  const tab = line.indexOf(TAB);
  let head: unknown;
  try {
    head = JSON.parse(line.toString('utf8', 0, tab < 0 ? line.length : tab));
  } catch (e) {
    return `not valid JSON (${(e as Error).message})`;
  }
  if (tab >= 0) (head as { payload?: unknown }).payload = Buffer.from(line.toString('latin1', tab + 1), 'base64');
  return frameProblem(head) ?? (head as Frame);
}

/** Why `f` is not a frame, or null. Checks the shape, not the values. */
function frameProblem(f: unknown): string | null {
  const frame = f as { v?: unknown; cols?: unknown[]; rows?: unknown[]; parts?: { source?: unknown; rows?: unknown; bytes?: unknown }[]; payload?: Uint8Array } | null;
  if (!frame || !Array.isArray(frame.cols) || !frame.cols.every((c) => typeof c === 'string')) return 'not a spool frame';
  if (frame.v === 1) {
    const width = frame.cols.length + 1;
    return Array.isArray(frame.rows) && frame.rows.every((r) => Array.isArray(r) && typeof r[0] === 'string' && r.length === width)
      ? null
      : 'not a spool frame (v1 rows)';
  }
  if (frame.v === 2) {
    if (!(frame.payload instanceof Uint8Array)) return 'not a spool frame (v2 without its columns after a tab)';
    const parts = frame.parts;
    const ok =
      Array.isArray(parts) &&
      parts.every((p) => typeof p?.source === 'string' && Number.isSafeInteger(p.rows) && (p.rows as number) > 0 && Number.isSafeInteger(p.bytes));
    if (!ok) return 'not a spool frame (v2 parts)';
    if ('batch' in frame && checkBatchMark((frame as { batch?: unknown }).batch)) return 'not a spool frame (v2 batch mark)';
    const total = parts.reduce((n, p) => n + (p.bytes as number), 0);
    if (total !== frame.payload.byteLength) return `its columns hold ${frame.payload.byteLength} bytes, its parts say ${total}`;
    const crc = (frame as { crc?: unknown }).crc;
    if (crc === undefined) return null;
    if (!isCrc32(crc)) return 'not a spool frame (v2 crc)';
    const mismatch = crcMismatch(crc, frame.payload);
    return mismatch && `its columns do not match the checksum they were spooled with (${mismatch}): damaged on disk`;
  }
  return `spool frame version ${JSON.stringify(frame.v)} is not known to this hypsink (1 or 2)`;
}

/**
 * A frame's rows per source, as columns of the current schema: a column added
 * since the append reads as null. `where` names the frame in errors.
 */
export function frameBatches(frame: Frame, schema: DatasetSchema, where: string): FrameBatch[] {
  const idx = schema.columns.map((c) => frame.cols.indexOf(c.name));
  if (frame.v === 1) {
    const bySource = new Map<string, unknown[][]>();
    for (const r of frame.rows) {
      const list = bySource.get(r[0] as string);
      if (list) list.push(r);
      else bySource.set(r[0] as string, [r]);
    }
    return [...bySource].map(([source, list]) => ({
      source,
      columns: schema.columns.map((c, ci) => buildColumn(c.type, list.map((r) => (idx[ci]! < 0 ? null : r[idx[ci]! + 1])))),
    }));
  }
  let at = 0;
  return frame.parts.map((part) => {
    const table = tableFromIPC(frame.payload.subarray(at, at + part.bytes));
    at += part.bytes;
    if (table.numRows !== part.rows || table.numCols !== frame.cols.length || table.batches.length !== 1) {
      throw new HypsinkError(
        'HYPSINK_ERR_CORRUPT',
        `${where}: source ${JSON.stringify(part.source)} should hold one batch of ${part.rows} rows of ${frame.cols.length} columns, its IPC stream holds ${table.batches.length} of ${table.numRows} rows of ${table.numCols}`,
      );
    }
    const columns = schema.columns.map((c, ci) => {
      if (idx[ci]! < 0) return buildColumn(c.type, new Array(part.rows).fill(null));
      const child = table.getChildAt(idx[ci]!)!;
      // Every column type maps to one Arrow type, whose string names it with its unit.
      if (String(child.type) !== String(arrowType(c.type))) {
        throw new HypsinkError(
          'HYPSINK_ERR_INPUT',
          `${where}: column "${c.name}" was ${child.type} when these rows were spooled and is ${c.type} now; restore its type, flush, then change it`,
        );
      }
      return child.data[0]!;
    });
    return { source: part.source, columns };
  });
}
