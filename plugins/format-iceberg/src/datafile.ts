/**
 * A unit's data files: Parquet through parquet-wasm, each column carrying its
 * table field id (`PARQUET:field_id`), `source` written as a constant column,
 * timestamps as timestamptz in microseconds, and the schema the file was
 * written with in its `iceberg.schema` key, as Iceberg's own writers do. One
 * file per partition (the unit's source, and each day of its rows when the
 * table is partitioned by day), each at a key that names the writer and the
 * unit, put create-if-absent under the unit's read guard. Column statistics
 * for the manifest (value, null and NaN counts, lower and upper bounds): read
 * from each written file's footer, where the Parquet writer kept them, but a
 * double's NaNs, counted from the rows as they pass; a file this attempt did
 * not write (a retry) has every column counted from the unit's rows instead.
 * @ref LLP 0051
 * @ref LLP 0099: column statistics from the written file's footer
 */
import { type Data, Field, makeData, type RecordBatch, Utf8 } from 'apache-arrow';
import type { BlobBody, BlobDestination, ColumnSpec, ParquetPlan, Unit, UnitGuard } from 'hypsink/plugin';
import { engineBatch, footerBytes, HypsinkError, isValid, type ParquetFooter, parquetBody, parseParquetFooter, rowsWithKey } from 'hypsink/plugin';
import type { DataFile } from './avro.js';
import { type IcebergSchema, type IcebergType, SOURCE_FIELD, SOURCE_FIELD_ID } from './schema.js';

const DAY_MS = 86_400_000;
/** String bounds longer than this are cut (the lower bound) or left out (the upper): a prefix is still a lower bound. */
const MAX_BOUND_BYTES = 64;

/** A day as days since 1970-01-01 (Iceberg's `day` transform), or null for a row without a timestamp. */
export type Day = number | null;

export interface FilePlan {
  /** The key of the table's folder (the destination's key space). */
  readonly tableKey: string;
  readonly schema: IcebergSchema;
  readonly columns: readonly ColumnSpec[];
  /** The field id of each of `columns`. */
  readonly ids: readonly number[];
  /** The column the table is partitioned by day on; undefined when it is not. */
  readonly dayColumn: string | undefined;
  /** The partition field names, in the spec's order: `source`, then `<dayColumn>_day`. */
  readonly partitionNames: readonly string[];
  /** The writer's tag and the unit's range, in every file name. */
  readonly fileStem: string;
  readonly compression: ParquetPlan['compression'];
  readonly rowGroupRows: number;
}

export interface WrittenFile {
  readonly key: string;
  readonly created: boolean;
  readonly file: DataFile;
}

class ColumnStats {
  values = 0;
  nulls = 0;
  nans = 0;
  min: bigint | number | boolean | Uint8Array | undefined;
  max: bigint | number | boolean | Uint8Array | undefined;
  /** The writer kept only a cut maximum (a long string): no upper bound is given, as for one counted here. */
  maxCut = false;
}

class FileStats {
  rows = 0;
  readonly columns: ColumnStats[];
  constructor(n: number) {
    this.columns = Array.from({ length: n }, () => new ColumnStats());
  }
}

export function compareBytes(a: Uint8Array, b: Uint8Array): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return a[i]! - b[i]!;
  return a.length - b.length;
}

/** a[as..ae) against b, as compareBytes, without a view per row. */
function compareRange(a: Uint8Array, as: number, ae: number, b: Uint8Array, bs: number, be: number): number {
  const n = Math.min(ae - as, be - bs);
  for (let i = 0; i < n; i++) {
    const d = a[as + i]! - b[bs + i]!;
    if (d !== 0) return d;
  }
  return ae - as - (be - bs);
}

/**
 * Count rows [from, to) of column data `d` into `s`: the minimum and maximum
 * found by index within the range (no allocation per row: a 64-bit value is
 * compared by its two 32-bit halves, a string in place), then taken as a
 * value once. Every row of a unit passes here. @ref LLP 0086
 */
function countRange(s: ColumnStats, type: IcebergType, d: Data, from: number, to: number): void {
  s.values += to - from;
  const all = d.nullCount === 0 || d.nullBitmap === undefined;
  let lo = -1;
  let hi = -1;
  if (type === 'string') {
    const o = d.valueOffsets as Int32Array;
    const v = d.values as Uint8Array;
    for (let i = from; i < to; i++) {
      if (!all && !isValid(d, i)) {
        s.nulls++;
        continue;
      }
      if (lo < 0) {
        lo = hi = i;
        continue;
      }
      if (compareRange(v, o[i]!, o[i + 1]!, v, o[lo]!, o[lo + 1]!) < 0) lo = i;
      else if (compareRange(v, o[i]!, o[i + 1]!, v, o[hi]!, o[hi + 1]!) > 0) hi = i;
    }
    if (lo < 0) return;
    const min = v.subarray(o[lo]!, o[lo + 1]!);
    const max = v.subarray(o[hi]!, o[hi + 1]!);
    if (s.min === undefined || compareBytes(min, s.min as Uint8Array) < 0) s.min = min.slice();
    if (s.max === undefined || compareBytes(max, s.max as Uint8Array) > 0) s.max = max.slice();
    return;
  }
  if (type === 'long' || type === 'timestamptz') {
    const big = d.values as BigInt64Array;
    // Little-endian halves: [2i] the low 32 bits (unsigned), [2i + 1] the high (signed).
    const h = new Int32Array(big.buffer, big.byteOffset, big.length * 2);
    for (let i = from; i < to; i++) {
      if (!all && !isValid(d, i)) {
        s.nulls++;
        continue;
      }
      if (lo < 0) {
        lo = hi = i;
        continue;
      }
      const ih = h[2 * i + 1]!;
      const il = h[2 * i]! >>> 0;
      const mh = h[2 * lo + 1]!;
      if (ih < mh || (ih === mh && il < h[2 * lo]! >>> 0)) lo = i;
      else {
        const xh = h[2 * hi + 1]!;
        if (ih > xh || (ih === xh && il > h[2 * hi]! >>> 0)) hi = i;
      }
    }
    if (lo < 0) return;
    const min = big[lo]!;
    const max = big[hi]!;
    if (s.min === undefined || min < (s.min as bigint)) s.min = min;
    if (s.max === undefined || max > (s.max as bigint)) s.max = max;
    return;
  }
  for (let i = from; i < to; i++) {
    if (!all && !isValid(d, i)) {
      s.nulls++;
      continue;
    }
    let v: number | boolean;
    if (type === 'boolean') {
      const bit = d.offset + i;
      v = (((d.values as Uint8Array)[bit >> 3]! >> (bit & 7)) & 1) === 1;
    } else {
      v = (d.values as Float64Array)[i]!;
      if (type === 'double' && Number.isNaN(v)) {
        s.nans++;
        continue;
      }
    }
    if (s.min === undefined || v < (s.min as typeof v)) s.min = v;
    if (s.max === undefined || v > (s.max as typeof v)) s.max = v;
  }
}

/** Iceberg's single-value serialization of a bound. */
function boundBytes(type: IcebergType, v: bigint | number | boolean | Uint8Array, upper: boolean): Uint8Array | undefined {
  switch (type) {
    case 'long':
    case 'timestamptz': {
      const b = new Uint8Array(8);
      // The cache keeps milliseconds; the table microseconds.
      new DataView(b.buffer).setBigInt64(0, type === 'timestamptz' ? BigInt(v as bigint) * 1000n : BigInt(v as bigint), true);
      return b;
    }
    case 'double': {
      const b = new Uint8Array(8);
      new DataView(b.buffer).setFloat64(0, v as number, true);
      return b;
    }
    case 'boolean':
      return Uint8Array.of(v ? 1 : 0);
    case 'string': {
      const bytes = v as Uint8Array;
      if (bytes.length <= MAX_BOUND_BYTES) return bytes;
      if (upper) return undefined;
      // Cut at a character boundary (never inside a UTF-8 sequence).
      let n = MAX_BOUND_BYTES;
      while (n > 0 && (bytes[n]! & 0xc0) === 0x80) n--;
      return bytes.slice(0, n);
    }
  }
}

/** A row without a timestamp in `daysOf`'s output: no day of a JS date is this far from 1970. */
const NO_DAY = -0x80000000;

/** A day of `daysOf`'s output as the partition's value. */
const dayOf = (k: number): Day => (k === NO_DAY ? null : k);

/**
 * The day of each row (`day(timestampColumn)`), from the column's milliseconds,
 * read by their 32-bit halves: a BigInt made per row cost more than the rest
 * of the pass's day work (exact for |ms| < 2^53, beyond any date). @ref LLP 0095
 * Typed, NO_DAY for a null: an array of numbers and nulls cost 4 ms per 100k
 * rows, a tenth of what the Iceberg export adds to a Parquet one. @ref LLP 0108
 */
function daysOf(d: Data, length: number): Int32Array {
  const out = new Int32Array(length);
  const values = d.values as BigInt64Array;
  const h = new Int32Array(values.buffer, values.byteOffset, values.length * 2);
  const all = d.nullCount === 0;
  for (let i = 0; i < length; i++) out[i] = all || isValid(d, i) ? Math.floor((h[2 * i + 1]! * 4294967296 + (h[2 * i]! >>> 0)) / DAY_MS) : NO_DAY;
  return out;
}

const encoder = new TextEncoder();

/** Each of the plan's columns in a batch, found by name (a batch's column order is not assumed). */
function columnsOf(b: RecordBatch, columns: readonly ColumnSpec[]): Data[] {
  return columns.map((c) => {
    const i = b.schema.fields.findIndex((f) => f.name === c.name);
    if (i < 0) throw new HypsinkError('HYPSINK_ERR_INVARIANT', `iceberg: a batch of the unit has no column "${c.name}" (it has ${b.schema.fields.map((f) => f.name).join(', ')})`);
    return b.data.children[i]!;
  });
}

/**
 * The Iceberg form of a batch of the unit's rows: `source` first, field ids on
 * every column, µs timestamps (the SDK's engine form), and each column
 * required exactly where the table's schema says so. @ref LLP 0069
 */
class BatchShape {
  private readonly sourceField: Field;
  private readonly sourceBytes: Uint8Array;
  /** Each column's field id, as Parquet's writer takes it from Arrow field metadata. */
  private readonly meta: Map<string, string>[];
  private readonly required: boolean[];

  constructor(
    private readonly plan: FilePlan,
    source: string,
  ) {
    const meta = (id: number) => new Map([['PARQUET:field_id', String(id)]]);
    const requiredOf = (id: number) => plan.schema.fields.find((f) => f.id === id)?.required === true;
    this.sourceField = new Field(SOURCE_FIELD, new Utf8(), !requiredOf(SOURCE_FIELD_ID), meta(SOURCE_FIELD_ID));
    this.meta = plan.ids.map(meta);
    this.required = plan.ids.map(requiredOf);
    this.sourceBytes = encoder.encode(source);
  }

  /** The `source` column of the longest batch so far: a shorter batch's is a slice of it, not a new copy a batch. */
  private source: Data<Utf8> | undefined;

  private sourceOf(n: number): Data<Utf8> {
    if (this.source && this.source.length >= n) return n === this.source.length ? this.source : this.source.slice(0, n);
    const src = this.sourceBytes;
    const values = new Uint8Array(src.length * n);
    const offsets = new Int32Array(n + 1);
    if (n > 0) values.set(src, 0);
    // The value n times over, by doubling copies.
    for (let filled = src.length; filled < values.length; filled *= 2) values.copyWithin(filled, 0, Math.min(filled, values.length - filled));
    for (let i = 0; i < n; i++) offsets[i + 1] = (i + 1) * src.length;
    this.source = makeData({ type: new Utf8(), length: n, nullCount: 0, valueOffsets: offsets, data: values });
    return this.source;
  }

  convert(b: RecordBatch): RecordBatch {
    return engineBatch(b, this.plan.columns, {
      leading: [{ field: this.sourceField, data: this.sourceOf(b.numRows) }],
      nullable: (_, j) => !this.required[j],
      metadata: (_, j) => this.meta[j],
    });
  }
}

/** Statistics of every file of the unit, by day; complete once a pass ran to the end. */
type StatsByDay = Map<Day, FileStats>;

/**
 * One whole read of the unit: counts every row into `stats` (when given) and
 * yields, in Iceberg form, the rows of day `want` (all rows when the table is
 * not partitioned by day).
 */
async function* pass(
  batches: AsyncIterable<RecordBatch>,
  plan: FilePlan,
  shape: BatchShape,
  want: Day | undefined,
  stats: StatsByDay | null,
  /** Count only rows and each double's NaNs: the rest is read from each written file's footer. @ref LLP 0099 */
  light = false,
): AsyncIterable<RecordBatch> {
  const types = plan.columns.map((c) => plan.schema.fields.find((f) => f.name === c.name)!.type);
  const counted = plan.columns.flatMap((_, j) => (!light || types[j] === 'double' ? [j] : []));
  const dayIndex = plan.dayColumn === undefined ? -1 : plan.columns.findIndex((c) => c.name === plan.dayColumn);
  for await (const b of batches) {
    if (b.numRows === 0) continue;
    const data = columnsOf(b, plan.columns);
    const days = dayIndex < 0 ? null : daysOf(data[dayIndex]!, b.numRows);
    if (stats) {
      // Runs of rows of one day (the whole batch, mostly): each counted as a range.
      const count = (day: Day, from: number, to: number) => {
        let s = stats.get(day);
        if (!s) {
          s = new FileStats(plan.columns.length);
          stats.set(day, s);
        }
        s.rows += to - from;
        for (const j of counted) countRange(s.columns[j]!, types[j]!, data[j]!, from, to);
      };
      if (!days) count(null, 0, b.numRows);
      else {
        let start = 0;
        for (let i = 1; i <= days.length; i++) {
          if (i < days.length && days[i] === days[start]) continue;
          count(dayOf(days[start]!), start, i);
          start = i;
        }
      }
    }
    if (!days) {
      yield shape.convert(b);
      continue;
    }
    // The day's rows as one batch, however the days interleave (no day wanted: a pass that only counts). @ref LLP 0108
    const mine = want === undefined ? null : rowsWithKey(b, days, want === null ? NO_DAY : want);
    if (mine) yield shape.convert(mine);
  }
}

/** How a data file is written: the table's schema in its metadata, its columns' encodings, its codec and row groups. */
export type DataFilePlan = Pick<FilePlan, 'schema' | 'columns' | 'compression' | 'rowGroupRows'>;

/**
 * A Parquet file of `batches`, through the SDK's writer (on its thread for a
 * unit of `rows` or more, when that is turned on); a source error is rethrown
 * as it was. @ref LLP 0079
 */
export function parquet(batches: AsyncIterable<RecordBatch>, plan: DataFilePlan, rows = 0): BlobBody {
  const { columns, compression, rowGroupRows } = plan;
  return parquetBody(batches, { columns, compression, rowGroupRows, keyValueMetadata: { 'iceberg.schema': JSON.stringify(plan.schema) } }, rows);
}

/** A day as a partition path names it (Iceberg's `YYYY-MM-DD`, `null` for no timestamp). */
function dayText(day: Day): string {
  return day === null ? 'null' : new Date(day * DAY_MS).toISOString().slice(0, 10);
}

export function fileKey(plan: FilePlan, source: string, day: Day | undefined): string {
  const part = `${SOURCE_FIELD}=${encodeURIComponent(source)}${day === undefined ? '' : `/${plan.dayColumn}_day=${dayText(day)}`}`;
  return `${plan.tableKey}/data/${part}/${plan.fileStem}.parquet`;
}

/**
 * Write the unit's data files. The first row's day is written first, its read
 * counting every day's statistics; each other day after, in order (null
 * last). When a file was already there (a retry) its body was not read, and
 * one read counts the statistics instead. Every read is checked whole.
 */
export async function writeDataFiles(
  unit: Unit,
  destination: BlobDestination,
  reads: UnitGuard,
  plan: FilePlan,
  locate: (key: string) => string,
  afterFile: () => void,
): Promise<WrittenFile[]> {
  const source = unit.partition.source;
  const shape = new BatchShape(plan, source);
  const stats: StatsByDay = new Map();
  let complete = false;
  /** Whether `stats` holds every column's counts (a recount's), not only rows and NaNs (the first file's pass). */
  let full = false;
  /** Each written file's footer, by key: its columns' statistics as the writer kept them. @ref LLP 0099 */
  const footers = new Map<string, Uint8Array>();
  const put = async (day: Day | undefined, batches: AsyncIterable<RecordBatch> = unit.batches()): Promise<{ key: string; created: boolean; bytes: number }> => {
    const key = fileKey(plan, source, day);
    const collect = complete ? null : stats;
    if (collect) collect.clear();
    const body = withFooter(
      parquet(
        (async function* () {
          yield* pass(batches, plan, shape, day, collect, true);
          if (collect) complete = true;
        })(),
        plan,
        unit.plannedRows,
      ),
      (meta) => footers.set(key, meta),
    );
    const r = await destination.putIfAbsent(key, reads.guard(body), { contentType: 'application/vnd.apache.parquet', signal: unit.signal });
    return { key, created: r.created, bytes: r.bytes };
  };
  const recount = async () => {
    stats.clear();
    for await (const _ of pass(unit.batches(), plan, shape, undefined, stats)) {
      // counting only
    }
    reads.check();
    complete = true;
    full = true;
  };
  const results: { key: string; created: boolean; bytes: number; day: Day | undefined }[] = [];
  if (plan.dayColumn === undefined) {
    results.push({ ...(await put(undefined)), day: undefined });
    if (!complete) await recount();
  } else {
    // The first file's read names its day by its first batch, and goes on from there: one read, not
    // a read of a batch for the day and another for the file. @ref LLP 0095
    const read = unit.batches()[Symbol.asyncIterator]();
    let first: Day;
    try {
      const head = await firstBatch(read);
      if (head === undefined) throw new HypsinkError('HYPSINK_ERR_INVARIANT', `sink "${unit.sink}": unit ${unit.id} has no rows to write; nothing of it was advanced`);
      first = dayOf(daysOf(columnsOf(head, [plan.columns.find((c) => c.name === plan.dayColumn)!])[0]!, 1)[0]!);
      results.push({ ...(await put(first, resumed(head, read))), day: first });
    } finally {
      // The file was there already (its body not read), or the put failed: the read ends here.
      await read.return?.();
    }
    if (!complete) await recount();
    if (!stats.has(first)) {
      throw new HypsinkError('HYPSINK_ERR_INVARIANT', `sink "${unit.sink}": unit ${unit.id}: its reads disagree on its rows; nothing of it was advanced`);
    }
    const rest = [...stats.keys()].filter((d) => d !== first).sort((a, b) => (a === b ? 0 : a === null ? 1 : b === null ? -1 : a - b));
    for (const day of rest) {
      afterFile();
      results.push({ ...(await put(day)), day });
    }
  }
  const types = plan.columns.map((c) => plan.schema.fields.find((f) => f.name === c.name)!.type);
  // A file this attempt did not write (there already: a retry) has no footer here: count every column then.
  if (!full) {
    for (const r of results) {
      const s = stats.get(r.day ?? null);
      const meta = r.created ? footers.get(r.key) : undefined;
      if (!s || !meta || !fromFooter(s, meta, plan, types)) {
        await recount();
        break;
      }
    }
  }
  return Promise.all(
    results.map(async (r) => {
      const s = stats.get(r.day ?? null);
      if (!s) throw new HypsinkError('HYPSINK_ERR_INVARIANT', `sink "${unit.sink}": unit ${unit.id}: no statistics for ${r.key}`);
      // A file that was already there: its size is what is stored, not what this attempt would write.
      const bytes = r.created ? r.bytes : await storedSize(destination, r.key, unit.signal);
      return { key: r.key, created: r.created, file: dataFileOf(plan, locate(r.key), source, r.day, s, types, bytes) };
    }),
  );
}

/** The last bytes of a written file kept to read its footer: a data file's is a few kB; a longer one is counted instead. */
const FOOTER_WINDOW = 1 << 20;

/** `body` as it is, and the file's FileMetaData to `onFooter` once it ended whole. */
async function* withFooter(body: BlobBody, onFooter: (meta: Uint8Array) => void): BlobBody {
  const last: Uint8Array[] = [];
  let kept = 0;
  for await (const chunk of body) {
    last.push(chunk);
    kept += chunk.length;
    while (last.length > 1 && kept - last[0]!.length >= FOOTER_WINDOW) kept -= last.shift()!.length;
    yield chunk;
  }
  const end = footerBytes(Buffer.concat(last, kept));
  // A copy: the footer outlives the tail it was read from.
  if (end && 'meta' in end) onFooter(new Uint8Array(end.meta));
}

/**
 * Fill `s` (rows and NaNs counted) with each column's value and null counts
 * and its minimum and maximum, from the file's footer: the Parquet writer
 * keeps them per row group (NaN left out of a double's), so they need not be
 * counted again here. False, `s` unchanged, when the footer lacks any of
 * them: then they are counted. @ref LLP 0099
 */
function fromFooter(s: FileStats, meta: Uint8Array, plan: FilePlan, types: readonly IcebergType[]): boolean {
  let footer: ParquetFooter;
  try {
    footer = parseParquetFooter(meta);
  } catch {
    return false;
  }
  if (footer.rows !== s.rows) return false;
  const found: ColumnStats[] = [];
  for (let j = 0; j < plan.columns.length; j++) {
    const name = plan.columns[j]!.name;
    const type = types[j]!;
    const c = new ColumnStats();
    c.nans = s.columns[j]!.nans;
    for (const rg of footer.rowGroups) {
      const chunk = rg.columns.find((x) => x.path === name);
      const st = chunk?.statistics;
      if (!chunk || !st || st.nulls === undefined) return false;
      c.values += chunk.values;
      c.nulls += st.nulls;
      if (st.min === undefined || st.max === undefined) {
        // No bounds: every value of the group is null (or, for a double, NaN); anything else is counted.
        if (st.nulls < chunk.values && type !== 'double') return false;
        continue;
      }
      const lo = statValue(type, st.min);
      const hi = statValue(type, st.max);
      if (lo === undefined || hi === undefined) return false;
      if (st.maxExact === false) c.maxCut = true;
      if (c.min === undefined || less(type, lo, c.min)) c.min = lo;
      if (c.max === undefined || less(type, c.max, hi)) c.max = hi;
    }
    if (c.values !== s.rows) return false;
    found.push(c);
  }
  found.forEach((c, j) => {
    s.columns[j] = c;
  });
  return true;
}

/** A PLAIN-encoded statistic as the counts keep values: a timestamp's microseconds back to the cache's milliseconds. */
function statValue(type: IcebergType, b: Uint8Array): bigint | number | boolean | Uint8Array | undefined {
  const dv = new DataView(b.buffer, b.byteOffset, b.byteLength);
  switch (type) {
    case 'long':
      return b.length === 8 ? dv.getBigInt64(0, true) : undefined;
    case 'timestamptz': {
      if (b.length !== 8) return undefined;
      const us = dv.getBigInt64(0, true);
      return us % 1000n === 0n ? us / 1000n : undefined;
    }
    case 'double':
      return b.length === 8 ? dv.getFloat64(0, true) : undefined;
    case 'boolean':
      return b.length === 1 ? b[0] === 1 : undefined;
    case 'string':
      return b.slice();
  }
}

function less(type: IcebergType, a: bigint | number | boolean | Uint8Array, b: bigint | number | boolean | Uint8Array): boolean {
  return type === 'string' ? compareBytes(a as Uint8Array, b as Uint8Array) < 0 : a < b;
}

async function storedSize(destination: BlobDestination, key: string, signal: AbortSignal): Promise<number> {
  const slash = key.lastIndexOf('/');
  for await (const b of destination.list!(key.slice(0, slash + 1), { signal })) if (b.key === key) return b.bytes;
  throw new HypsinkError('HYPSINK_ERR_DESTINATION', `iceberg: data file ${destination.describe(key)} was there a moment ago and is gone; export again`, { retryable: true });
}

function dataFileOf(plan: FilePlan, filePath: string, source: string, day: Day | undefined, s: FileStats, types: readonly IcebergType[], bytes: number): DataFile {
  const valueCounts = new Map<number, number>([[SOURCE_FIELD_ID, s.rows]]);
  const nullValueCounts = new Map<number, number>([[SOURCE_FIELD_ID, 0]]);
  const nanValueCounts = new Map<number, number>();
  const src = encoder.encode(source);
  const lowerBounds = new Map<number, Uint8Array>();
  const upperBounds = new Map<number, Uint8Array>();
  if (src.length <= MAX_BOUND_BYTES) {
    lowerBounds.set(SOURCE_FIELD_ID, src);
    upperBounds.set(SOURCE_FIELD_ID, src);
  }
  plan.columns.forEach((_, j) => {
    const id = plan.ids[j]!;
    const c = s.columns[j]!;
    valueCounts.set(id, c.values);
    nullValueCounts.set(id, c.nulls);
    if (types[j] === 'double') nanValueCounts.set(id, c.nans);
    if (c.min !== undefined) {
      const lo = boundBytes(types[j]!, c.min, false);
      if (lo) lowerBounds.set(id, lo);
    }
    if (c.max !== undefined && !c.maxCut) {
      const hi = boundBytes(types[j]!, c.max, true);
      if (hi) upperBounds.set(id, hi);
    }
  });
  const partition: Record<string, string | number | null> = { [plan.partitionNames[0]!]: source };
  if (day !== undefined) partition[plan.partitionNames[1]!] = day;
  return { filePath, partition, recordCount: s.rows, fileSizeInBytes: bytes, valueCounts, nullValueCounts, nanValueCounts, lowerBounds, upperBounds };
}

/** The first batch of `read` with rows; undefined when it has none. */
async function firstBatch(read: AsyncIterator<RecordBatch>): Promise<RecordBatch | undefined> {
  for (let r = await read.next(); !r.done; r = await read.next()) if (r.value.numRows > 0) return r.value;
  return undefined;
}

/** `head`, then the rest of the read it was taken from; the read is closed when this one is. */
async function* resumed(head: RecordBatch, rest: AsyncIterator<RecordBatch>): AsyncGenerator<RecordBatch> {
  try {
    yield head;
    for (let r = await rest.next(); !r.done; r = await rest.next()) yield r.value;
  } finally {
    await rest.return?.();
  }
}
