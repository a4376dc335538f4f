/**
 * NDJSON ingest: validate each line against the dataset schema, append valid
 * rows to a spool of this process, flush. A bad line (malformed JSON, wrong
 * type, missing required field, over the size limit) goes to the dead-letter
 * file with its line number and reason, whole; valid lines still commit.
 */
import { randomBytes } from 'node:crypto';
import { promises as fsp } from 'node:fs';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { HypsinkError } from '../types/errors.js';
import { PARTITION_COLUMN } from '../types/schema.js';
import { normalizeRowInto } from './cache/normalize.js';
import { encodeSegment } from './cache/segments.js';
import { lineBatches } from './io/lines.js';
import type { Hypsink } from './runtime.js';

export interface IngestResult {
  accepted: number;
  rejected: number;
  /** The dead-letter file, when any line was rejected. */
  deadLetter: string | null;
  /** The first few rejections, for the summary line. */
  samples: { line: number; reason: string }[];
}

const FRAME_ROWS = 10_000;
/**
 * Flush every this many accepted rows while the input is still being read: the
 * flush worker builds and encodes one segment while this thread parses the next
 * (LLP 0013). Rows are durable in the spool from their frame on either way.
 */
const FLUSH_ROWS = 50_000;

export async function ingestNdjson(
  k: Hypsink,
  dataset: string,
  source: string,
  input: Readable,
  label: string,
  onProgress?: (lines: number) => void,
): Promise<IngestResult> {
  const schema = k.cache.schema(dataset);
  const maxRowBytes = k.loaded.config.datasets[dataset]?.maxRowBytes ?? 1024 * 1024;
  const spool = { dataset, id: `ingest-${process.pid}-${randomBytes(4).toString('hex')}` };
  const ignore = new Set([PARTITION_COLUMN]);
  const width = schema.columns.length;
  const result: IngestResult = { accepted: 0, rejected: 0, deadLetter: null, samples: [] };
  let dead: fsp.FileHandle | undefined;
  // The frame being filled, column by column; each row is validated into `scratch` first.
  const scratch: unknown[] = new Array(width);
  const newColumns = () => Array.from({ length: width }, (): unknown[] => []);
  let columns = newColumns();
  let rows = 0;

  const reject = async (line: number, reason: string, raw: string) => {
    result.rejected++;
    if (result.samples.length < 5) result.samples.push({ line, reason });
    if (!dead) {
      result.deadLetter = join(await k.deadLetterDir(), `${encodeSegment(dataset)}.ndjson`);
      dead = await fsp.open(result.deadLetter, 'a');
    }
    const rec = { at: new Date().toISOString(), dataset, source, file: label, line, reason, raw };
    await dead.write(JSON.stringify(rec) + '\n');
  };

  const flush = async (sealCurrent = true) => {
    const r = await k.cache.flushTable(spool, { sealCurrent });
    if (r.partitions.length > 0) await k.hooks.cacheFlushed.promise({ partitions: r.partitions });
  };
  // At most one append in flight: its write and fsync run while the next frame is parsed.
  // Appends stay in order, and a failed one surfaces at the next.
  let appending: Promise<void> = Promise.resolve();
  const append = async (seal: boolean) => {
    await appending;
    appending = k.cache.appendParts(spool, [{ source, rows, values: columns }], { seal });
    appending.catch(() => undefined);
    columns = newColumns();
    rows = 0;
  };
  // At most one flush in flight; it runs while the next rows are read.
  let flushing: Promise<void> | null = null;
  let sinceFlush = 0;

  let n = 0;
  try {
    for await (const lines of lineBatches(input)) {
      for (const line of lines) {
        n++;
        if (n % 50_000 === 0) onProgress?.(n);
        if (typeof line !== 'string') {
          await reject(n, 'the line is not valid UTF-8', line.invalid);
          continue;
        }
        const raw = line;
        if (raw.trim() === '') continue;
        // Characters bound bytes from below (and 3x from above): count bytes only when it can matter.
        if (raw.length * 3 > maxRowBytes && Buffer.byteLength(raw) > maxRowBytes) {
          await reject(n, `row is ${Buffer.byteLength(raw)} bytes, over the dataset's maxRowBytes ${maxRowBytes}`, raw);
          continue;
        }
        let obj: unknown;
        try {
          obj = JSON.parse(raw);
        } catch (e) {
          await reject(n, `malformed JSON (${(e as Error).message})`, raw);
          continue;
        }
        if (obj === null || typeof obj !== 'object' || Array.isArray(obj)) {
          await reject(n, 'not a JSON object', raw);
          continue;
        }
        const row = obj as Record<string, unknown>;
        if (row[PARTITION_COLUMN] !== undefined && row[PARTITION_COLUMN] !== source) {
          await reject(n, `field "${PARTITION_COLUMN}" is ${JSON.stringify(row[PARTITION_COLUMN])} but --source is ${JSON.stringify(source)}`, raw);
          continue;
        }
        const reason = normalizeRowInto(schema, row, scratch, 0, ignore);
        if (reason !== null) {
          await reject(n, reason, raw);
          continue;
        }
        for (let ci = 0; ci < width; ci++) columns[ci]!.push(scratch[ci]);
        rows++;
        result.accepted++;
        if (rows >= FRAME_ROWS) {
          sinceFlush += rows;
          const seal = sinceFlush >= FLUSH_ROWS;
          await append(seal);
          if (seal) {
            sinceFlush = 0;
            await flushing;
            // The flush commits the segment the append seals, once it has.
            flushing = appending.then(() => flush(false));
            // A failed flush surfaces at the next await; its rows stay spooled for the next flush.
            flushing.catch(() => undefined);
          }
        }
      }
    }
    await append(false);
    await appending;
    onProgress?.(n);
  } finally {
    if (dead) {
      await dead.sync();
      await dead.close();
    }
    await appending.catch(() => undefined);
    await flushing?.catch(() => undefined);
  }
  await flushing;
  await flush();
  // The spool dir of this process is empty now; leave no trace of it.
  await fsp.rm(k.cache.spool(spool).dir, { recursive: true, force: true });
  return result;
}

export function rejectedError(r: IngestResult, dataset: string, label: string): HypsinkError {
  const first = r.samples.map((s) => `line ${s.line}: ${s.reason}`).join('; ');
  return new HypsinkError(
    'HYPSINK_ERR_INPUT',
    `${label}: ${r.rejected} row(s) of dataset "${dataset}" rejected (${first}${r.rejected > r.samples.length ? '; …' : ''}); kept in ${r.deadLetter}`,
  );
}
