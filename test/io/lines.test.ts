/**
 * NDJSON input split into lines (kernel/io/lines.ts): whatever the chunking,
 * the lines are the input's lines decoded as UTF-8, a line that is not valid
 * UTF-8 marked invalid, a CR before the newline dropped. ASCII blocks take
 * the latin1 path (LLP 0090), others the UTF-8 decoder; both must agree with
 * a line-by-line reference decode.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { type Line, LineSplitter } from '../../kernel/io/lines.js';

const fatal = new TextDecoder('utf-8', { fatal: true });
const lenient = new TextDecoder('utf-8');

/** The reference: each line on its own. */
function reference(bytes: Buffer): Line[] {
  const out: Line[] = [];
  let start = 0;
  for (;;) {
    const i = bytes.indexOf(0x0a, start);
    let line = bytes.subarray(start, i < 0 ? bytes.length : i);
    if (line.length > 0 && line[line.length - 1] === 0x0d) line = line.subarray(0, -1);
    try {
      out.push(fatal.decode(line));
    } catch {
      out.push({ invalid: lenient.decode(line) });
    }
    if (i < 0) return out;
    start = i + 1;
  }
}

function split(bytes: Buffer, rand: () => number): Line[] {
  const s = new LineSplitter();
  const out: Line[] = [];
  for (let at = 0; at < bytes.length; ) {
    const n = 1 + Math.floor(rand() * 200);
    out.push(...s.push(bytes.subarray(at, at + n)));
    at += n;
  }
  out.push(...s.end());
  return out;
}

const PIECES = ['{"id":1,"msg":"plain"}', '{"msg":"caf\u00e9"}', '{"e":"\u{1F600}"}', '{"esc":"\\u00e9"}', '', '\r', '{"x":"\u0000"}'];

test('lines: ASCII, UTF-8, invalid bytes and CRLF, in any chunking, decode as a line-by-line UTF-8 decode would', () => {
  let seed = 7;
  const rand = () => {
    seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
    return seed / 2 ** 32;
  };
  for (let round = 0; round < 300; round++) {
    const parts: Buffer[] = [];
    const lines = 1 + Math.floor(rand() * 30);
    // A third of the inputs are ASCII only, so the latin1 path is taken whole as often as not.
    const ascii = round % 3 === 0;
    for (let i = 0; i < lines; i++) {
      const r = rand();
      if (!ascii && r < 0.1) parts.push(Buffer.from([0x7b, 0xff, 0xfe, 0x7d]));
      else if (!ascii && r < 0.15) parts.push(Buffer.from([0xc3])); // a cut multi-byte character
      else {
        const p = PIECES[Math.floor(rand() * PIECES.length)]!;
        parts.push(Buffer.from(ascii ? [...p].map((c) => (c.charCodeAt(0) < 0x80 ? c : '?')).join('') : p, 'utf8'));
      }
      if (rand() < 0.2) parts.push(Buffer.from('\r'));
      parts.push(Buffer.from('\n'));
    }
    if (rand() < 0.5) parts.pop(); // no final newline
    const bytes = Buffer.concat(parts);
    const want = bytes.length === 0 ? [] : reference(bytes);
    // The splitter gives no line for an input's final empty line after a newline.
    if (bytes.length > 0 && bytes[bytes.length - 1] === 0x0a) want.pop();
    assert.deepEqual(split(bytes, rand), want, `round ${round}: ${JSON.stringify(bytes.toString('latin1'))}`);
  }
});
