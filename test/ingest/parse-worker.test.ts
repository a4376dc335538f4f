/**
 * Where an ingest parses does not change what it commits or rejects (LLP 0016):
 * in this thread, in the parse worker from the first byte, or handed over to
 * the worker mid-way, the same rows are committed in the same order and the same
 * lines reach the dead letter with the same numbers and reasons. The input is
 * cut into chunks that split lines and multi-byte characters.
 */
import assert from 'node:assert/strict';
import { promises as fsp } from 'node:fs';
import { Readable } from 'node:stream';
import { test } from 'node:test';
import { ingestNdjson } from '../../kernel/ingest/ingest.js';
import { collect } from '../support/datasets.js';
import { openKernel, sampleConfig, writeConfig } from '../support/kernel.js';
import { tempDir } from '../support/tmp.js';

const TS = (id: number) => new Date(Date.UTC(2026, 0, 1) + id * 1000).toISOString();

/** ~60k lines: valid rows (some multi-byte, some CRLF) with a bad line of each kind every few thousand. */
function input(): Buffer {
  const parts: Buffer[] = [];
  let id = 0;
  for (let i = 1; i <= 60_000; i++) {
    const row = { id: ++id, ts: TS(id), msg: i % 7 === 0 ? `ünï ${'é'.repeat(i % 13)} 🎉` : `m${id}` };
    let line = JSON.stringify(row);
    if (i % 4999 === 0) line = `{"id":${id},"ts":"${TS(id)}","msg":`; // malformed
    if (i % 5003 === 0) line = JSON.stringify({ ...row, colour: 'red' }); // unknown field
    if (i % 6007 === 0) line = ''; // blank: skipped, still counted
    const eol = i % 11 === 0 ? '\r\n' : '\n';
    parts.push(Buffer.from(line + eol, 'utf8'));
    if (i % 7001 === 0) parts.push(Buffer.from([0x7b, 0xff, 0xfe, 0x7d, 0x0a])); // not UTF-8
  }
  parts.push(Buffer.from(JSON.stringify({ id: ++id, ts: TS(id), msg: 'last, without a newline' })));
  return Buffer.concat(parts);
}

/** The input in chunks of 1–9 KiB: lines and characters are cut anywhere. */
function chunks(bytes: Buffer): Buffer[] {
  const out: Buffer[] = [];
  let a = 7;
  for (let at = 0; at < bytes.length; ) {
    a = (Math.imul(a, 1103515245) + 12345) >>> 0;
    const n = 1024 + (a % 8192);
    out.push(bytes.subarray(at, at + n));
    at += n;
  }
  return out;
}

async function run(bytes: Buffer, parseWorkerAfterBytes: number) {
  const dir = tempDir();
  const { k } = await openKernel(await writeConfig(dir, sampleConfig()));
  try {
    const progress: number[] = [];
    // Past the switch, each chunk waits for a round trip to the worker until it has parsed a
    // block: started mid-way, the worker starts while this thread parses on, and the rest could
    // all be parsed here before it is up (then the case tests no take-over at all). Round trips
    // are answered in order, so once the ingest's own start has been answered, its next block
    // goes to the worker.
    async function* switching() {
      let read = 0;
      for (const c of chunks(bytes)) {
        if (parseWorkerAfterBytes > 0 && read >= parseWorkerAfterBytes && k.parsers.parsedBlocks === 0) await k.parsers.ready();
        read += c.length;
        yield c;
      }
    }
    const r = await ingestNdjson(k, 'events', 'web', Readable.from(switching()), 'input.ndjson', {
      parseWorkerAfterBytes,
      onProgress: (lines) => progress.push(lines),
    });
    const rows = (await collect(k.cache.storage.readRowsSince(k.cache.partition('events', 'web'), {}))).map((x) => x.row);
    const dead = r.deadLetter
      ? (await fsp.readFile(r.deadLetter, 'utf8'))
          .trimEnd()
          .split('\n')
          .map((l) => {
            const { line, reason, raw } = JSON.parse(l) as { line: number; reason: string; raw: string };
            return { line, reason, raw };
          })
      : [];
    return { accepted: r.accepted, rejected: r.rejected, samples: r.samples, rows, dead, worker: k.parsers.parsedBlocks > 0, progress };
  } finally {
    await k.close();
  }
}

test('the parse worker commits and rejects what parsing in place does, also when it takes over mid-way', async () => {
  const bytes = input();
  const here = await run(bytes, Number.POSITIVE_INFINITY);
  assert.equal(here.worker, false);
  assert.equal(here.rejected, 12 + 11 + 8);
  assert.equal(here.accepted + here.rejected + 9, 60_001 + 8, 'every line is a row, a rejection or blank');
  assert.equal(here.rows.length, here.accepted);
  assert.deepEqual(here.dead.slice(0, 2).map((d) => d.line), [4999, 5003]);
  assert.ok(here.dead.some((d) => d.reason === 'the line is not valid UTF-8' && d.line === 7002));
  assert.equal(here.rows.at(-1)?.msg, 'last, without a newline');
  // Progress every 50k lines, then the total once the input is read.
  assert.deepEqual(here.progress, [here.progress[0], 60_009]);
  assert.ok(here.progress[0]! >= 50_000 && here.progress[0]! < 60_009, `first report at ${here.progress[0]}`);
  for (const after of [0, Math.floor(bytes.length / 3)]) {
    const there = await run(bytes, after);
    assert.deepEqual(there, { ...here, worker: true }, `parse worker after ${after} bytes`);
  }
});

test('a parse worker that stops mid-way costs nothing: this thread parses its blocks, every row is committed once', async () => {
  const bytes = input();
  const here = await run(bytes, Number.POSITIVE_INFINITY);
  const dir = tempDir();
  const { k, logs } = await openKernel(await writeConfig(dir, sampleConfig()));
  try {
    const all = chunks(bytes);
    async function* stopping() {
      for (const [i, c] of all.entries()) {
        if (i === Math.floor(all.length / 2)) await k.parsers.close();
        yield c;
      }
    }
    const r = await ingestNdjson(k, 'events', 'web', Readable.from(stopping()), 'input.ndjson', { parseWorkerAfterBytes: 0 });
    assert.deepEqual([r.accepted, r.rejected, r.samples], [here.accepted, here.rejected, here.samples]);
    const rows = (await collect(k.cache.storage.readRowsSince(k.cache.partition('events', 'web'), {}))).map((x) => x.row);
    assert.deepEqual(rows, here.rows);
    assert.ok(logs.some((l) => /the parse worker stopped; parsing in this thread/.test(String(l.msg))), 'the stop is logged');
  } finally {
    await k.close();
  }
});
