/**
 * Secrets stay out of log lines whatever characters they hold: a token with a
 * `"` or a `\` is escaped in the JSON text, so masking that text missed it;
 * masking works on the values before they are serialised.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { createLogger, registerSecret } from '../../kernel/log.js';

function capture(level = 'info'): { lines: string[]; log: ReturnType<typeof createLogger> } {
  const lines: string[] = [];
  return { lines, log: createLogger(level, { write: (s: string) => void lines.push(s) }) };
}

test('a secret holding a quote, a backslash or a newline is masked in messages, fields, nested values and errors', () => {
  const secrets = ['ab"cd-t0ken', 'back\\slash-t0ken', 'new\nline-t0ken'];
  for (const s of secrets) registerSecret(s);
  const { lines, log } = capture('debug');
  for (const s of secrets) {
    log.info({ url: `http://x/?t=${s}`, nested: { list: [`a ${s} b`] } }, `message with ${s}`);
    log.warn({ err: new Error(`failed with ${s}`) }, 'an error');
  }
  let deep: Record<string, unknown> = { leaf: `deep ${secrets[0]}` };
  for (let i = 0; i < 12; i++) deep = { deep };
  log.info(deep, 'a deep record');
  assert.equal(lines.length, 7);
  for (const line of lines) {
    const parsed = JSON.parse(line) as Record<string, unknown>;
    const text = JSON.stringify(parsed);
    for (const s of secrets) {
      assert.ok(!line.includes(JSON.stringify(s).slice(1, -1)), `the escaped secret leaked: ${line}`);
      assert.ok(!text.includes(JSON.stringify(s).slice(1, -1)), `the secret leaked: ${line}`);
    }
    assert.ok(line.includes('***'), `masked: ${line}`);
  }
  // The error is still there for the reader, masked.
  assert.ok(!lines[6]!.includes('t0ken'), `nested deep, still masked: ${lines[6]}`);
  const err = (JSON.parse(lines[1]!) as { err: { message: string; stack: string } }).err;
  assert.equal(err.message, 'failed with ***');
  assert.match(err.stack, /^Error: failed with \*\*\*/);
});

test('fields that hold no secret keep their values, an error its message', () => {
  const { lines, log } = capture();
  log.info({ n: 1, s: 'plain', err: new Error('boom') }, 'hello');
  const parsed = JSON.parse(lines[0]!) as { n: number; s: string; err: { message: string } };
  assert.equal(parsed.n, 1);
  assert.equal(parsed.s, 'plain');
  assert.equal(parsed.err.message, 'boom');
});

test('an error in a log line carries no stack unless the level is debug', () => {
  for (const [level, stacks] of [['info', false], ['warn', false], ['debug', true]] as const) {
    const { lines, log } = capture(level);
    log.error({ err: new Error('boom') }, 'failed');
    const err = (JSON.parse(lines[0]!) as { err: { message: string; stack?: string } }).err;
    assert.equal(err.message, 'boom', level);
    assert.equal(err.stack !== undefined, stacks, `${level}: ${lines[0]}`);
  }
});
