/**
 * hash: a column's values replaced by the hex HMAC-SHA256 of their text,
 * under a key from the environment, so a destination can join on a value it
 * never sees. The text is what a row holds: a STRING's UTF-8 bytes, a JSON
 * value's JSON text as the cache keeps it, an INT64's decimal digits. The
 * result is a STRING column of 64 lowercase hex characters; null stays null.
 * @ref LLP 0046
 */
import { type Data, makeData, type RecordBatch, Utf8 } from 'apache-arrow';
import type { ColumnSpec } from '../../types/schema.js';
import type { BoundTransform, TransformOutput } from '../../types/transforms.js';
import { batchOf, isValid, utf8Cells } from '../../types/arrow-rows.js';
import { schemaOf, validityAt0 } from './arrow.js';
import type { HmacSha256 } from './sha256.js';

const HEX_LENGTH = 64;
const TWO32 = 4294967296;
/** The high half of every safe integer is within ±2^21. */
const HI_SAFE = 2097152;
const LO = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1 ? 0 : 1;

/** The hex HMAC of each value of `d`, as a Utf8 column; `text` writes a value's bytes into `scratch` when it is not Utf8. */
function hashColumn(d: Data, hmac: HmacSha256, type: ColumnSpec['type']): Data<Utf8> {
  const n = d.length;
  const { bitmap, nullCount } = validityAt0(d);
  const valid = nullCount === 0 ? null : d;
  const offsets = new Int32Array(n + 1);
  const out = new Uint8Array((n - nullCount) * HEX_LENGTH);
  let pos = 0;
  if (type === 'INT64') {
    const values = d.values as BigInt64Array;
    const halves = new Int32Array(values.buffer, values.byteOffset, values.length * 2);
    const scratch = new Uint8Array(24);
    for (let i = 0; i < n; i++) {
      if (valid === null || isValid(d, i)) {
        const hi = halves[2 * i + 1 - LO]!;
        const text = hi >= -HI_SAFE && hi < HI_SAFE ? String(hi * TWO32 + (halves[2 * i + LO]! >>> 0)) : values[i]!.toString();
        for (let k = 0; k < text.length; k++) scratch[k] = text.charCodeAt(k);
        hmac.hexInto(scratch, 0, text.length, out, pos);
        pos += HEX_LENGTH;
      }
      offsets[i + 1] = pos;
    }
  } else {
    const { offsets: from, bytes } = utf8Cells(d);
    for (let i = 0; i < n; i++) {
      if (valid === null || isValid(d, i)) {
        hmac.hexInto(bytes, from[i]!, from[i + 1]!, out, pos);
        pos += HEX_LENGTH;
      }
      offsets[i + 1] = pos;
    }
  }
  return makeData({ type: new Utf8(), length: n, nullCount, nullBitmap: bitmap, valueOffsets: offsets, data: out });
}

export function bindHash(input: readonly ColumnSpec[], targets: readonly number[], hmac: HmacSha256): BoundTransform {
  const columns = input.map((c, i) => (targets.includes(i) ? { name: c.name, type: 'STRING' as const, nullable: c.nullable } : c));
  const schema = schemaOf(columns);
  return {
    columns,
    apply(batch: RecordBatch): TransformOutput {
      const children = [...batch.data.children];
      for (const i of targets) children[i] = hashColumn(children[i]!, hmac, input[i]!.type);
      return { batch: batchOf(schema, children, batch.numRows), refused: [] };
    },
  };
}
