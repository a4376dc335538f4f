/**
 * NDJSON input as batches of lines, one batch per chunk read. Iterating line by
 * line with readline costs an event-loop turn per line, which dominated ingest;
 * this hands a whole chunk's lines to synchronous code. Bytes that are not
 * UTF-8 are not silently replaced: such a line comes back marked invalid.
 */
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

/** Complete lines of `bytes` (no trailing newline expected). One fatal decode for the common case. */
function decodeLines(bytes: Uint8Array): Line[] {
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

export async function* lineBatches(input: Readable): AsyncIterable<Line[]> {
  let rest: Uint8Array = new Uint8Array(0);
  for await (const chunk of input) {
    const bytes: Uint8Array = typeof chunk === 'string' ? Buffer.from(chunk, 'utf8') : (chunk as Uint8Array);
    const buf = rest.length > 0 ? Buffer.concat([rest, bytes]) : bytes;
    const nl = buf.lastIndexOf(NL);
    if (nl < 0) {
      rest = buf;
      continue;
    }
    // Copy the tail so the chunk it came from can be freed.
    rest = Uint8Array.prototype.slice.call(buf, nl + 1);
    yield decodeLines(buf.subarray(0, nl));
  }
  if (rest.length > 0) yield decodeLines(rest);
}
