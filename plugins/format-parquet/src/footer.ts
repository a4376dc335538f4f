/**
 * The JSON logical type, set in a Parquet file's footer. parquet-wasm 0.8's
 * writer (arrow-rs built without canonical extension types) writes an
 * `arrow.json` column as a plain STRING; engines then type it VARCHAR. A
 * file's footer is its last bytes (`<FileMetaData, Thrift compact><len:
 * u32 LE>PAR1`) and every offset in it points before it, so the schema
 * elements of the JSON columns are re-encoded there (converted type JSON,
 * logical type JSON) and nothing else of the file moves. Only the stream's
 * tail is held back to do it.
 * @ref LLP 0069
 */
import { HypsinkError, ThriftReader as Reader, ThriftType } from 'hypsink/plugin';

/** The tail held back while the file streams: a footer is far smaller (tens of kB for a large unit). */
const HOLD = 8 << 20;
const MAGIC = [0x50, 0x41, 0x52, 0x31]; // PAR1

const { I32: T_I32, BINARY: T_BINARY, LIST: T_LIST, STRUCT: T_STRUCT } = ThriftType;

/** Parquet's ConvertedType JSON, as a compact i32 (zigzag varint of 19). */
const CONVERTED_JSON = Uint8Array.of(38);
/** LogicalType { 12: JSON {} } as a compact struct value. */
const LOGICAL_JSON = Uint8Array.of((12 << 4) | T_STRUCT, 0, 0);

function varintBytes(v: number): number[] {
  const out: number[] = [];
  let x = v >>> 0;
  while (x >= 0x80) {
    out.push((x & 0x7f) | 0x80);
    x >>>= 7;
  }
  out.push(x);
  return out;
}

/** A field header after field `last`. */
function header(last: number, id: number, type: number): number[] {
  const delta = id - last;
  if (delta > 0 && delta <= 15) return [(delta << 4) | type];
  return [type, ...varintBytes((id << 1) ^ (id >> 31))];
}

/** One schema element re-encoded with converted type and logical type JSON; its other fields as they were. */
function jsonElement(r: Reader): Uint8Array {
  const fields: { id: number; type: number; value: Uint8Array }[] = [];
  for (const f of r.fields()) {
    const start = r.pos;
    r.skip(f.type);
    if (f.id !== 6 && f.id !== 10) fields.push({ ...f, value: r.b.subarray(start, r.pos) });
  }
  fields.push({ id: 6, type: T_I32, value: CONVERTED_JSON }, { id: 10, type: T_STRUCT, value: LOGICAL_JSON });
  fields.sort((a, b) => a.id - b.id);
  const out: number[] = [];
  let last = 0;
  for (const f of fields) {
    out.push(...header(last, f.id, f.type), ...f.value);
    last = f.id;
  }
  out.push(0);
  return Uint8Array.from(out);
}

/** The name of a schema element, read without moving `r`. */
function nameOf(r: Reader): string | undefined {
  const peek = new Reader(r.b);
  peek.pos = r.pos;
  for (const f of peek.fields()) {
    if (f.id === 4 && f.type === T_BINARY) {
      const n = Number(peek.varint());
      return new TextDecoder().decode(peek.b.subarray(peek.pos, peek.pos + n));
    }
    peek.skip(f.type);
  }
  return undefined;
}

/**
 * FileMetaData with the top-level schema elements named in `json` marked
 * JSON. Field 2 (the schema list) is re-encoded and spliced in place: fields
 * after it are delta-encoded from its id, which does not change.
 */
export function markJson(meta: Uint8Array, json: ReadonlySet<string>): Uint8Array {
  const r = new Reader(meta);
  for (const f of r.fields()) {
    if (f.id !== 2 || f.type !== T_LIST) {
      r.skip(f.type);
      continue;
    }
    const listStart = r.pos;
    const h = r.byte();
    const n = h >> 4 === 15 ? Number(r.varint()) : h >> 4;
    const parts: Uint8Array[] = [meta.subarray(listStart, r.pos)];
    for (let i = 0; i < n; i++) {
      const start = r.pos;
      // Element 0 is the root; the columns follow, flat (a unit's columns are never nested).
      const name = i > 0 ? nameOf(r) : undefined;
      if (name !== undefined && json.has(name)) parts.push(jsonElement(r));
      else {
        r.skip(T_STRUCT);
        parts.push(meta.subarray(start, r.pos));
      }
    }
    return Buffer.concat([meta.subarray(0, listStart), ...parts, meta.subarray(r.pos)]);
  }
  throw new Error('no schema in the footer');
}

/**
 * A streamed Parquet file with the columns named in `json` marked JSON in its
 * footer. Chunks pass on as they come but for the last HOLD bytes.
 */
export async function* withJsonColumns(body: AsyncIterable<Uint8Array>, json: ReadonlySet<string>): AsyncIterable<Uint8Array> {
  if (json.size === 0) {
    yield* body;
    return;
  }
  const held: Uint8Array[] = [];
  let heldBytes = 0;
  for await (const chunk of body) {
    held.push(chunk);
    heldBytes += chunk.length;
    while (held.length > 1 && heldBytes - held[0]!.length >= HOLD) {
      const c = held.shift()!;
      heldBytes -= c.length;
      yield c;
    }
  }
  const tail = Buffer.concat(held, heldBytes);
  const fail = (why: string) => new HypsinkError('HYPSINK_ERR_INVARIANT', `format-parquet: the Parquet writer's output ${why}; nothing of it was stored`);
  if (tail.length < 8 || MAGIC.some((m, i) => tail[tail.length - 4 + i] !== m)) throw fail('does not end in a Parquet footer');
  const len = new DataView(tail.buffer, tail.byteOffset + tail.length - 8, 4).getUint32(0, true);
  if (len + 8 > tail.length) throw fail(`has a footer of ${len} bytes, more than the ${HOLD} bytes held back to mark its JSON columns`);
  let meta: Uint8Array;
  try {
    meta = markJson(tail.subarray(tail.length - 8 - len, tail.length - 8), json);
  } catch (e) {
    throw fail(`has a footer that could not be read (${(e as Error).message})`);
  }
  yield tail.subarray(0, tail.length - 8 - len);
  const end = new Uint8Array(meta.length + 8);
  end.set(meta, 0);
  new DataView(end.buffer).setUint32(meta.length, meta.length, true);
  end.set(MAGIC, meta.length + 4);
  yield end;
}
