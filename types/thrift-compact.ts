/**
 * Thrift's compact protocol, read: what a Parquet file's footer
 * (FileMetaData) and its page headers are written in. For a plugin or the
 * kernel that must read a field of them parquet-wasm does not hand out (a
 * column chunk's offset, a schema element to re-mark); a struct is walked
 * field by field, each value read or skipped by its type.
 * Spec: https://github.com/apache/thrift/blob/master/doc/specs/thrift-compact-protocol.md
 */

/** The compact protocol's type ids, as a field header or a list header carries them. */
export const ThriftType = {
  TRUE: 1,
  FALSE: 2,
  BYTE: 3,
  I16: 4,
  I32: 5,
  I64: 6,
  DOUBLE: 7,
  BINARY: 8,
  LIST: 9,
  SET: 10,
  MAP: 11,
  STRUCT: 12,
} as const;

const T = ThriftType;

/** A zigzag-encoded integer's value. */
export const zigzag = (v: bigint): bigint => (v >> 1n) ^ -(v & 1n);

/**
 * A reader over Thrift compact bytes, from `pos`. Every read checks the end:
 * bytes that end early throw (a damaged footer is an error, never a value
 * made up from the bytes after it).
 */
export class ThriftReader {
  pos = 0;
  constructor(readonly b: Uint8Array) {}

  byte(): number {
    if (this.pos >= this.b.length) throw new Error('Thrift data ends early');
    return this.b[this.pos++]!;
  }

  /** An unsigned varint. */
  varint(): bigint {
    let shift = 0n;
    let out = 0n;
    for (;;) {
      const x = this.byte();
      out |= BigInt(x & 0x7f) << shift;
      if ((x & 0x80) === 0) return out;
      shift += 7n;
      if (shift > 70n) throw new Error('Thrift varint too long');
    }
  }

  /** An i16, i32 or i64 value (zigzag varint) as a number; one beyond 2^53 throws. */
  int(): number {
    const v = zigzag(this.varint());
    if (v > BigInt(Number.MAX_SAFE_INTEGER) || v < -BigInt(Number.MAX_SAFE_INTEGER)) throw new Error(`Thrift integer ${v} out of range`);
    return Number(v);
  }

  /** A binary or string value's bytes (a view, not a copy). */
  binary(): Uint8Array {
    const n = Number(this.varint());
    if (this.pos + n > this.b.length) throw new Error('Thrift data ends early');
    const out = this.b.subarray(this.pos, this.pos + n);
    this.pos += n;
    return out;
  }

  /** A list's (or set's) header: its element count and type. */
  list(): { n: number; type: number } {
    const h = this.byte();
    return { n: h >> 4 === 15 ? Number(this.varint()) : h >> 4, type: h & 0x0f };
  }

  /** Skip one value of `type`. */
  skip(type: number): void {
    switch (type) {
      case T.TRUE:
      case T.FALSE:
        return; // in a struct, a bool is its field header; in a list, one byte (skipped by the list)
      case T.BYTE:
        this.byte();
        return;
      case T.I16:
      case T.I32:
      case T.I64:
        this.varint();
        return;
      case T.DOUBLE:
        if (this.pos + 8 > this.b.length) throw new Error('Thrift data ends early');
        this.pos += 8;
        return;
      case T.BINARY:
        this.binary();
        return;
      case T.LIST:
      case T.SET: {
        const { n, type: et } = this.list();
        for (let i = 0; i < n; i++) {
          if (et === T.TRUE || et === T.FALSE) this.byte();
          else this.skip(et);
        }
        return;
      }
      case T.MAP: {
        const n = Number(this.varint());
        if (n === 0) return;
        const kv = this.byte();
        for (let i = 0; i < n; i++) {
          this.skip(kv >> 4);
          this.skip(kv & 0x0f);
        }
        return;
      }
      case T.STRUCT:
        for (const f of this.fields()) this.skip(f.type);
        return;
      default:
        throw new Error(`unknown Thrift compact type ${type}`);
    }
  }

  /** A struct's field headers, one by one; the caller reads or skips each value. */
  *fields(): Generator<{ id: number; type: number }> {
    let last = 0;
    for (;;) {
      const h = this.byte();
      if (h === 0) return;
      const type = h & 0x0f;
      const delta = h >> 4;
      const id = delta === 0 ? Number(zigzag(this.varint())) : last + delta;
      last = id;
      yield { id, type };
    }
  }
}
