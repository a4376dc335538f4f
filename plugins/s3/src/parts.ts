/**
 * Cuts a blob body into parts of exactly `partSize` bytes (the last one may be
 * smaller, never empty), holding at most one part plus one chunk in memory.
 * Chunks are referenced until the part is cut, so a producer must not reuse a
 * chunk's memory after yielding it (the usual async-iterable contract).
 */
export class PartReader {
  private readonly chunks: Uint8Array[] = [];
  private buffered = 0;
  private ended = false;
  /** Total bytes handed out as parts so far. */
  bytesRead = 0;

  constructor(
    private readonly source: AsyncIterator<Uint8Array>,
    private readonly partSize: number,
  ) {}

  /** True once the body is exhausted and every byte was handed out. */
  get done(): boolean {
    return this.ended && this.buffered === 0;
  }

  /**
   * The next part, or null at the end. A full part is only cut once more bytes
   * are known to follow, so a body of exactly `partSize` bytes is one final part.
   */
  async next(): Promise<Buffer | null> {
    while (!this.ended && this.buffered <= this.partSize) {
      const r = await this.source.next();
      if (r.done) {
        this.ended = true;
        break;
      }
      if (r.value.byteLength > 0) {
        this.chunks.push(r.value);
        this.buffered += r.value.byteLength;
      }
    }
    if (this.buffered === 0) return null;
    const take = Math.min(this.partSize, this.buffered);
    const all = Buffer.concat(this.chunks, this.buffered);
    const part = all.subarray(0, take);
    this.chunks.length = 0;
    this.buffered -= take;
    if (this.buffered > 0) this.chunks.push(all.subarray(take));
    this.bytesRead += take;
    return part;
  }
}
