/**
 * NDJSON input as lines and as blocks of whole lines. Iterating line by line
 * with readline costs an event-loop turn per line, which dominated ingest; this
 * hands a whole chunk's lines to synchronous code. Bytes that are not UTF-8 are
 * not silently replaced: such a line comes back marked invalid.
 */
import { isAscii } from 'node:buffer';
import type { Readable } from 'node:stream';

/** A line whose bytes are not valid UTF-8, decoded with replacement characters for the dead letter. */
export interface InvalidLine {
  readonly invalid: string;
}

export type Line = string | InvalidLine;

const fatal = new TextDecoder('utf-8', { fatal: true });
const lenient = new TextDecoder('utf-8');
const NL = 0x0a;
const stripCR = (l: string) => (l.endsWith('\r') ? l.slice(0, -1) : l);

/**
 * Complete lines of `bytes` (no trailing newline expected). ASCII bytes (most
 * NDJSON: JSON escapes what is not) are the same text read as latin1, at about
 * half a UTF-8 decode's cost (0.39 s against 0.70 s of a 1M-row ingest's CPU;
 * @ref LLP 0090); else one fatal decode for the common case.
 */
function decodeLines(bytes: Uint8Array): Line[] {
  if (isAscii(bytes)) return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('latin1').split('\n').map(stripCR);
  try {
    return fatal.decode(bytes).split('\n').map(stripCR);
  } catch {
    const out: Line[] = [];
    let start = 0;
    for (;;) {
      const i = bytes.indexOf(NL, start);
      const line = bytes.subarray(start, i < 0 ? bytes.length : i);
      try {
        out.push(stripCR(fatal.decode(line)));
      } catch {
        out.push({ invalid: stripCR(lenient.decode(line)) });
      }
      if (i < 0) return out;
      start = i + 1;
    }
  }
}

/**
 * Bytes in, complete lines out: the part of a line a chunk cuts off waits for
 * the next chunk. `end()` gives the last line if the input did not end with a newline.
 */
export class LineSplitter {
  private rest: Uint8Array = new Uint8Array(0);

  push(bytes: Uint8Array): Line[] {
    const buf = this.rest.length > 0 ? Buffer.concat([this.rest, bytes]) : bytes;
    const nl = buf.lastIndexOf(NL);
    if (nl < 0) {
      this.rest = buf;
      return [];
    }
    // Copy the tail so the chunk it came from can be freed.
    this.rest = Uint8Array.prototype.slice.call(buf, nl + 1);
    return decodeLines(buf.subarray(0, nl));
  }

  end(): Line[] {
    const rest = this.rest;
    this.rest = new Uint8Array(0);
    return rest.length > 0 ? decodeLines(rest) : [];
  }
}

/** A run of whole lines of the input, and how many lines came before it. */
export interface LineBlock {
  readonly bytes: Uint8Array;
  readonly firstLine: number;
}

/**
 * Bytes in, blocks of whole lines out, each at least `minBytes` (but the last):
 * independent pieces of work, each numbered from the line it starts at.
 */
export class LineBlocks {
  private parts: Uint8Array[] = [];
  private size = 0;
  /** The part holding the last newline seen, or -1: found per chunk, so a line of any length costs no rescans. */
  private lastNl = -1;

  /** `lines`: lines before the first byte pushed (a resumed input starts past some). */
  constructor(
    private readonly minBytes: number,
    private lines = 0,
  ) {}

  push(bytes: Uint8Array): LineBlock[] {
    this.parts.push(bytes);
    this.size += bytes.byteLength;
    if (bytes.lastIndexOf(NL) >= 0) this.lastNl = this.parts.length - 1;
    if (this.size < this.minBytes || this.lastNl < 0) return [];
    const cut = this.parts[this.lastNl]!;
    const nl = cut.lastIndexOf(NL);
    const head = [...this.parts.slice(0, this.lastNl), cut.subarray(0, nl + 1)];
    // Copy the tail so the chunk it came from can be freed.
    const rest = [Uint8Array.prototype.slice.call(cut, nl + 1), ...this.parts.slice(this.lastNl + 1)].filter((p) => p.length > 0);
    this.parts = rest;
    this.size = rest.reduce((n, p) => n + p.byteLength, 0);
    this.lastNl = -1;
    return [this.block(Buffer.concat(head))];
  }

  /** The rest, a last line without its newline included. */
  end(): LineBlock[] {
    const all = Buffer.concat(this.parts, this.size);
    this.parts = [];
    this.size = 0;
    this.lastNl = -1;
    return all.length > 0 ? [this.block(all)] : [];
  }

  private block(bytes: Uint8Array): LineBlock {
    const b = { bytes, firstLine: this.lines };
    for (let at = bytes.indexOf(NL); at >= 0; at = bytes.indexOf(NL, at + 1)) this.lines++;
    return b;
  }
}

/** Chunks as Uint8Array, whether the stream gives strings or bytes. */
export async function* byteChunks(input: Readable): AsyncIterable<Uint8Array> {
  for await (const chunk of input) yield typeof chunk === 'string' ? Buffer.from(chunk, 'utf8') : (chunk as Uint8Array);
}
