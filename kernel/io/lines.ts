/**
 * NDJSON input as batches of lines, one batch per chunk read. Iterating line by
 * line with readline costs an event-loop turn per line, which dominated ingest;
 * this hands a whole chunk's lines to synchronous code.
 */
import type { Readable } from 'node:stream';
import { StringDecoder } from 'node:string_decoder';

export async function* lineBatches(input: Readable): AsyncIterable<string[]> {
  const decoder = new StringDecoder('utf8');
  let rest = '';
  for await (const chunk of input) {
    const text = rest + (typeof chunk === 'string' ? chunk : decoder.write(chunk as Buffer));
    const lines = text.split('\n');
    rest = lines.pop() ?? '';
    if (lines.length > 0) yield lines.map((l) => (l.endsWith('\r') ? l.slice(0, -1) : l));
  }
  const tail = rest + decoder.end();
  if (tail !== '') yield [tail.endsWith('\r') ? tail.slice(0, -1) : tail];
}
