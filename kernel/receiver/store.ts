/**
 * The receiver's durable store: per-partition NDJSON data files plus one
 * batch-id ledger (`<data>/_ledger.ndjson`).
 *
 * @ref LLP 0009: the commit order and the crash rule. A batch is
 * (1) appended to its data file and fsynced, then (2) appended to the ledger with
 * its byte range and fsynced, then (3) answered 200. The ledger is the commit
 * point: at startup every data file is truncated back to the end of its last
 * ledgered batch, so rows written by a batch that died before (2) vanish and
 * the client's retry (same id, not in the ledger) stores them exactly once.
 * Data files stay plain NDJSON (no framing lines), so they remain inspectable.
 *
 * @ref LLP 0027: ids are scoped to their client (the ledger is keyed by
 * (client, id)) and each entry keeps the sha256 of the body it was stored from,
 * so an id names one body.
 * @ref LLP 0060: an entry keeps the unit digest its sender named, so an id
 * names one unit's content, compared before the body is read.
 */
import { promises as fsp } from 'node:fs';
import * as path from 'node:path';
import { HypsinkError, type Logger, type Row } from '../../types/index.js';
import { fault } from '../fault.js';
import { KeyedMutex } from '../mutex.js';
import { dataFileFor } from './names.js';
import { mkdirs } from '../io/mkdirs.js';

export const LEDGER_FILE = '_ledger.ndjson';

/**
 * The client of a single `--token`, of `--insecure-no-auth`, and of ledger lines
 * written before clients existed: a receiver upgraded either way keeps its
 * ledger's ids (LLP 0027).
 */
export const DEFAULT_CLIENT = 'default';

export interface LedgerEntry {
  /** The authenticated client that stored the batch; absent on legacy lines (= DEFAULT_CLIENT). */
  readonly client?: string;
  readonly id: string;
  readonly dataset: string;
  readonly source: string;
  readonly rows: number;
  /** ISO time the batch committed. */
  readonly at: string;
  /** The data file, relative to the data dir. */
  readonly file: string;
  /** The batch's byte range in `file`: [offset, offset + bytes). */
  readonly offset: number;
  readonly bytes: number;
  /** sha256 (hex) of the request body as received; absent on legacy lines. */
  readonly digest?: string;
  /** Length of that request body; absent on legacy lines. */
  readonly bodyBytes?: number;
  /**
   * The unit digest the sender named (`X-Hyp-Unit-Digest`: the hypsink kernel's
   * digest of the unit's rows); absent when it named none, and on lines written
   * before it existed. @ref LLP 0060
   */
  readonly unitDigest?: string;
}

/** What `X-Hyp-Unit-Digest` may hold: the ledger keeps it verbatim and shows it back. */
export const UNIT_DIGEST = /^[\x21-\x7e]{1,128}$/;

/** Why a ledgered id does not match a request: another partition, another unit's content, or another body. */
export type Mismatch = 'partition' | 'unit' | 'body';

export type CommitResult =
  | { readonly kind: 'stored'; readonly rows: number }
  | { readonly kind: 'duplicate'; readonly entry: LedgerEntry }
  /** The id is already ledgered for another partition or body: a client bug, never silently "deduped". */
  | { readonly kind: 'conflict'; readonly entry: LedgerEntry; readonly why: Mismatch };

export interface RecoveryReport {
  /** Bytes cut from data files: batches whose process died before their ledger line. */
  readonly truncatedBytes: number;
  readonly truncatedFiles: readonly string[];
  /** A torn last ledger line (crash mid-write) was dropped. */
  readonly tornLedgerTail: boolean;
}

/**
 * Whether a ledgered entry answers a request as its duplicate. A unit digest
 * on both sides that differs is other content under the id, whatever the body
 * (@ref LLP 0060); then the body is compared (a legacy entry without a body
 * digest matches on the partition alone, as it always did, @ref LLP 0027).
 */
export function mismatch(prior: LedgerEntry, dataset: string, source: string, digest: string | undefined, unitDigest?: string): Mismatch | null {
  if (prior.dataset !== dataset || prior.source !== source) return 'partition';
  if (unitDigest !== undefined && prior.unitDigest !== undefined && prior.unitDigest !== unitDigest) return 'unit';
  if (digest !== undefined && prior.digest !== undefined && prior.digest !== digest) return 'body';
  return null;
}

function corrupt(file: string, what: string): HypsinkError {
  return new HypsinkError('HYPSINK_ERR_CORRUPT', `receiver: ${file}: ${what}`);
}

function isEntry(v: unknown): v is LedgerEntry {
  if (typeof v !== 'object' || v === null) return false;
  const e = v as Record<string, unknown>;
  return (
    (e.client === undefined || typeof e.client === 'string') &&
    (e.digest === undefined || (typeof e.digest === 'string' && /^[0-9a-f]{64}$/.test(e.digest))) &&
    (e.bodyBytes === undefined || Number.isSafeInteger(e.bodyBytes)) &&
    (e.unitDigest === undefined || (typeof e.unitDigest === 'string' && UNIT_DIGEST.test(e.unitDigest))) &&
    typeof e.id === 'string' &&
    typeof e.dataset === 'string' &&
    typeof e.source === 'string' &&
    typeof e.file === 'string' &&
    typeof e.at === 'string' &&
    Number.isSafeInteger(e.rows) &&
    Number.isSafeInteger(e.offset) &&
    Number.isSafeInteger(e.bytes)
  );
}

interface ParsedLedger {
  readonly entries: LedgerEntry[];
  /** Length of the complete (newline-terminated) prefix. */
  readonly validBytes: number;
  readonly torn: boolean;
}

/** Parse the ledger. A last line without '\n' is a torn write (dropped); any other bad line is corruption. */
function parseLedger(text: Buffer, file: string): ParsedLedger {
  const lastNl = text.lastIndexOf(0x0a);
  const validBytes = lastNl + 1;
  const entries: LedgerEntry[] = [];
  const lines = text.subarray(0, validBytes).toString('utf8').split('\n');
  lines.pop(); // the empty string after the final '\n'
  lines.forEach((line, i) => {
    let v: unknown;
    try {
      v = JSON.parse(line);
    } catch {
      throw corrupt(file, `line ${i + 1} is not JSON; move the data dir aside or repair the line`);
    }
    if (!isEntry(v)) throw corrupt(file, `line ${i + 1} is not a ledger entry`);
    entries.push(v);
  });
  return { entries, validBytes, torn: validBytes < text.length };
}

async function readIfExists(file: string): Promise<Buffer | null> {
  try {
    return await fsp.readFile(file);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw e;
  }
}

async function fsyncDir(dir: string): Promise<void> {
  const fh = await fsp.open(dir, 'r');
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}

/** Every data file under the data dir, relative, '/'-separated. */
async function listDataFiles(dataDir: string): Promise<string[]> {
  const out: string[] = [];
  for (const d of await fsp.readdir(dataDir, { withFileTypes: true })) {
    if (!d.isDirectory()) continue;
    for (const f of await fsp.readdir(path.join(dataDir, d.name), { withFileTypes: true })) {
      if (f.isFile() && f.name.startsWith('source=') && f.name.endsWith('.ndjson')) out.push(`${d.name}/${f.name}`);
    }
  }
  return out.sort();
}

/** End of the last ledgered batch of each file. */
function ledgeredEnds(entries: readonly LedgerEntry[]): Map<string, number> {
  const ends = new Map<string, number>();
  for (const e of entries) {
    // A legacy empty batch (refused since LLP 0027) is ledgered but owns no bytes and may name a file never created.
    if (e.bytes > 0) ends.set(e.file, Math.max(ends.get(e.file) ?? 0, e.offset + e.bytes));
  }
  return ends;
}

export function clientOf(e: LedgerEntry): string {
  return e.client ?? DEFAULT_CLIENT;
}

/** Client names never hold a space (see the tokens file rule), so this key is injective. */
function key(client: string, id: string): string {
  return `${client} ${id}`;
}

/** A new batch to store: its normalized NDJSON bytes (each line ends in '\n') and its body's digest. */
export interface NewBatch {
  readonly client: string;
  readonly id: string;
  readonly dataset: string;
  readonly source: string;
  readonly data: Buffer;
  readonly rows: number;
  readonly digest: string;
  readonly bodyBytes: number;
  /** The unit digest the sender named, if it named one. @ref LLP 0060 */
  readonly unitDigest?: string;
  /** How deep a row may nest: a writer that parses the rows checks it (LLP 0087). */
  readonly maxDepth: number;
}

/**
 * Where a batch's rows go before its ledger line, when not to the data files:
 * `hypsink receiver --config` ingests them into a hypsink cache (kernel/receiver/aggregate.ts).
 * Resolves once the rows are durable there, with the rows it took; it must be
 * idempotent by (client, id): a crash between it and the ledger line makes the
 * retry call it again. @ref LLP 0074
 */
export type BatchWriter = (batch: NewBatch) => Promise<WriteResult>;

export interface WriteResult {
  readonly rows: number;
  /**
   * Another aggregator stored this batch (the shared claim says so): nothing
   * was written here and no ledger line is added; the client is answered as
   * for a duplicate. @ref LLP 0080
   */
  readonly elsewhere?: boolean;
}

/**
 * A writer's refusal with the answer it calls for: 409 (the id was stored
 * with another partition or body) or 503 (not now; retry, perhaps at another
 * aggregator). Nothing of the batch is committed. @ref LLP 0080
 */
export class WriteRefused extends HypsinkError {
  constructor(
    readonly status: 400 | 409 | 503,
    message: string,
    readonly conflict?: Mismatch,
    /** 400: the data's line (1-based, over the rows as given to the writer) that no client may send. @ref LLP 0087 */
    readonly line?: number,
  ) {
    super(status === 503 ? 'HYPSINK_ERR_RETRYABLE' : 'HYPSINK_ERR_INPUT', message, { retryable: status === 503 });
    this.name = 'WriteRefused';
  }
}

export class LedgerStore {
  /** (client, id) → entry. @ref LLP 0027 */
  private readonly ids = new Map<string, LedgerEntry>();
  /** (client, dataset, source) → its entries in commit order, for GET /v1/ledger. @ref LLP 0038 */
  private readonly byPartition = new Map<string, LedgerEntry[]>();
  private readonly idLock = new KeyedMutex();
  private readonly fileLock = new KeyedMutex();
  private readonly ledgerLock = new KeyedMutex();
  /** Set when a failed write could not be undone: refuse further commits rather than risk a bad ledger. */
  private broken: Error | null = null;

  private constructor(
    readonly dataDir: string,
    private readonly ledger: fsp.FileHandle,
    private ledgerSize: number,
    entries: readonly LedgerEntry[],
    readonly recovery: RecoveryReport,
    private readonly writer: BatchWriter | undefined,
  ) {
    for (const e of entries) {
      const k = key(clientOf(e), e.id);
      if (this.ids.has(k)) {
        throw corrupt(LEDGER_FILE, `batch id ${JSON.stringify(e.id)} of client ${JSON.stringify(clientOf(e))} is ledgered twice`);
      }
      this.ids.set(k, e);
      this.index(e);
    }
  }

  private index(e: LedgerEntry): void {
    const k = JSON.stringify([clientOf(e), e.dataset, e.source]);
    const list = this.byPartition.get(k);
    if (list) list.push(e);
    else this.byPartition.set(k, [e]);
  }

  /** A client's entries of one partition, in commit order (never another client's). @ref LLP 0038 */
  entriesOf(client: string, dataset: string, source: string): readonly LedgerEntry[] {
    return this.byPartition.get(JSON.stringify([client, dataset, source])) ?? [];
  }

  /** Open the store, first applying the crash rule (truncate un-ledgered tails). */
  static async open(dataDir: string, log?: Logger, writer?: BatchWriter): Promise<LedgerStore> {
    await mkdirs(dataDir);
    const ledgerPath = path.join(dataDir, LEDGER_FILE);
    const text = await readIfExists(ledgerPath);
    const parsed = text === null ? { entries: [], validBytes: 0, torn: false } : parseLedger(text, ledgerPath);
    if (parsed.torn) {
      await fsp.truncate(ledgerPath, parsed.validBytes);
      log?.warn({ file: ledgerPath, droppedBytes: (text?.length ?? 0) - parsed.validBytes }, 'dropped a torn ledger tail');
    }
    const ends = ledgeredEnds(parsed.entries);
    const truncatedFiles: string[] = [];
    let truncatedBytes = 0;
    const seen = new Set<string>();
    for (const rel of await listDataFiles(dataDir)) {
      seen.add(rel);
      const abs = path.join(dataDir, rel);
      const size = (await fsp.stat(abs)).size;
      const end = ends.get(rel) ?? 0;
      if (size < end) throw corrupt(abs, `the ledger records ${end} bytes but the file has ${size}`);
      if (size > end) {
        const fh = await fsp.open(abs, 'r+');
        try {
          await fh.truncate(end);
          await fh.sync();
        } finally {
          await fh.close();
        }
        truncatedFiles.push(rel);
        truncatedBytes += size - end;
        log?.warn({ file: rel, bytes: size - end }, 'truncated an un-ledgered batch tail (crash before its ledger line)');
      }
    }
    for (const rel of ends.keys()) {
      if (!seen.has(rel)) throw corrupt(path.join(dataDir, rel), 'the ledger lists this file but it is missing');
    }
    const created = text === null;
    const ledger = await fsp.open(ledgerPath, 'a');
    if (created) await fsyncDir(dataDir);
    return new LedgerStore(dataDir, ledger, parsed.validBytes, parsed.entries, {
      truncatedBytes,
      truncatedFiles,
      tornLedgerTail: parsed.torn,
    }, writer);
  }

  get size(): number {
    return this.ids.size;
  }

  lookup(client: string, id: string): LedgerEntry | undefined {
    return this.ids.get(key(client, id));
  }

  /**
   * What a commit of this (client, id) would answer from the ledger alone:
   * duplicate or conflict for a ledgered id, undefined for one not ledgered
   * (yet). `digest` undefined leaves the body uncompared (the server then
   * compares it itself); `unitDigest` undefined, the unit's content. Read-only.
   */
  check(client: string, id: string, dataset: string, source: string, digest?: string, unitDigest?: string): Exclude<CommitResult, { kind: 'stored' }> | undefined {
    const prior = this.ids.get(key(client, id));
    if (!prior) return undefined;
    const why = mismatch(prior, dataset, source, digest, unitDigest);
    return why === null ? { kind: 'duplicate', entry: prior } : { kind: 'conflict', entry: prior, why };
  }

  /**
   * Store a validated batch once. Serialized per (client, id) (two concurrent
   * requests with one id: the second waits, then finds the ledger line) and per
   * data file (byte ranges in the ledger never interleave).
   */
  commit(batch: NewBatch): Promise<CommitResult> {
    return this.idLock.run(key(batch.client, batch.id), async () => {
      const prior = this.check(batch.client, batch.id, batch.dataset, batch.source, batch.digest, batch.unitDigest);
      if (prior) return prior;
      if (this.broken) throw this.broken;
      if (this.writer) return this.commitTo(this.writer, batch);
      const file = dataFileFor(batch.dataset, batch.source);
      return this.fileLock.run(file, async () => {
        const abs = path.join(this.dataDir, file);
        const offset = await this.appendData(abs, batch.data);
        fault('receiver.afterData');
        const entry = entryOf(batch, batch.rows, { file, offset, bytes: batch.data.length });
        try {
          await this.appendLedger(entry);
        } catch (e) {
          // Not ledgered: take the rows back out now, as a restart would.
          await fsp.truncate(abs, offset).catch((te: Error) => {
            this.broken = te;
          });
          throw e;
        }
        fault('receiver.afterLedger');
        this.ids.set(key(batch.client, entry.id), entry);
        this.index(entry);
        return { kind: 'stored', rows: entry.rows };
      });
    });
  }

  /**
   * The rows to the writer (durable there, idempotent by id), then the ledger
   * line: a crash between the two leaves the id un-ledgered, and the retry's
   * write finds the rows already there and adds none. The entry owns no
   * data-file bytes. @ref LLP 0074
   */
  private async commitTo(writer: BatchWriter, batch: NewBatch): Promise<CommitResult> {
    const { rows, elsewhere } = await writer(batch);
    // Stored by another aggregator (the claim): its ledger, not this one, lists it. @ref LLP 0080
    if (elsewhere) return { kind: 'duplicate', entry: entryOf(batch, rows, { file: '', offset: 0, bytes: 0 }) };
    fault('receiver.afterData');
    const entry = entryOf(batch, rows, { file: '', offset: 0, bytes: 0 });
    await this.appendLedger(entry);
    fault('receiver.afterLedger');
    this.ids.set(key(batch.client, entry.id), entry);
    this.index(entry);
    return { kind: 'stored', rows };
  }

  /** Append and fsync; returns the offset the batch starts at. A failed write is cut back off. */
  private async appendData(abs: string, data: Buffer): Promise<number> {
    if (data.length === 0) return 0;
    const dir = path.dirname(abs);
    let newDir = false;
    try {
      await fsp.mkdir(dir);
      newDir = true;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
    }
    if (newDir) await fsyncDir(this.dataDir);
    const fh = await fsp.open(abs, 'a');
    let offset = 0;
    try {
      const st = await fh.stat();
      offset = st.size;
      try {
        await fh.appendFile(data);
        await fh.datasync();
      } catch (e) {
        await fh.truncate(offset).catch((te: Error) => {
          this.broken = te;
        });
        throw e;
      }
    } finally {
      await fh.close();
    }
    // A new file's directory entry must survive too, or the ledger would point at nothing.
    if (offset === 0) await fsyncDir(dir);
    return offset;
  }

  private appendLedger(entry: LedgerEntry): Promise<void> {
    return this.ledgerLock.run('ledger', async () => {
      const line = Buffer.from(`${JSON.stringify(entry)}\n`, 'utf8');
      try {
        await this.ledger.appendFile(line);
        await this.ledger.datasync();
        this.ledgerSize += line.length;
      } catch (e) {
        // A torn line followed by later appends would be mid-file corruption: cut it now.
        await this.ledger.truncate(this.ledgerSize).catch((te: Error) => {
          this.broken = te;
        });
        throw e;
      }
    });
  }

  async close(): Promise<void> {
    await this.ledger.close();
  }
}

/** What the receiver stored, as a restart would see it (only ledgered batches). */
export interface Stored {
  /** The ledger, in commit order. */
  readonly ledger: readonly LedgerEntry[];
  /** rows[dataset][source]: the rows in arrival order (null-prototype records). */
  readonly rows: Readonly<Record<string, Readonly<Record<string, readonly Row[]>>>>;
  readonly rowCount: number;
  /** Bytes in data files beyond their last ledgered batch (a crash tail not yet recovered). */
  readonly unledgeredBytes: number;
}

/** Read back what a receiver stored under `dataDir` (for tests and the oracle). Read-only. */
export async function readStored(dataDir: string): Promise<Stored> {
  const ledgerPath = path.join(dataDir, LEDGER_FILE);
  const text = await readIfExists(ledgerPath);
  const { entries } = text === null ? { entries: [] } : parseLedger(text, ledgerPath);
  const files = new Map<string, Buffer>();
  for (const rel of await listDataFiles(dataDir).catch(() => [])) {
    files.set(rel, await fsp.readFile(path.join(dataDir, rel)));
  }
  const rows: Record<string, Record<string, Row[]>> = Object.create(null);
  let rowCount = 0;
  for (const e of entries) {
    if (e.bytes === 0) continue;
    const data = files.get(e.file);
    if (!data || data.length < e.offset + e.bytes) throw corrupt(e.file, `missing bytes of batch ${e.id}`);
    const perSource = rows[e.dataset] ?? Object.create(null);
    rows[e.dataset] = perSource;
    const list = perSource[e.source] ?? [];
    perSource[e.source] = list;
    const chunk = data.subarray(e.offset, e.offset + e.bytes).toString('utf8');
    for (const line of chunk.split('\n')) {
      if (line.trim() === '') continue;
      list.push(JSON.parse(line) as Row);
      rowCount++;
    }
  }
  let unledgeredBytes = 0;
  const ends = ledgeredEnds(entries);
  for (const [rel, data] of files) unledgeredBytes += Math.max(0, data.length - (ends.get(rel) ?? 0));
  return { ledger: entries, rows, rowCount, unledgeredBytes };
}

/** The rows stored for one partition ([] if none). */
export function storedRows(stored: Stored, dataset: string, source: string): readonly Row[] {
  return stored.rows[dataset]?.[source] ?? [];
}

/** The ledger line of a batch stored now: where its rows are (a data file's span, or none when a writer holds them). */
function entryOf(batch: NewBatch, rows: number, at: Pick<LedgerEntry, 'file' | 'offset' | 'bytes'>): LedgerEntry {
  return {
    client: batch.client,
    id: batch.id,
    dataset: batch.dataset,
    source: batch.source,
    rows,
    at: new Date().toISOString(),
    ...at,
    digest: batch.digest,
    bodyBytes: batch.bodyBytes,
    ...(batch.unitDigest !== undefined ? { unitDigest: batch.unitDigest } : {}),
  };
}
