/**
 * The cache-global seq allocator: monotonic int64 from 1, persisted at
 * `<cacheRoot>/_hyp_ingest_seq.json` as the decimal end of the last durably
 * reserved block. A block is reserved (write-file-atomic, fsync) before any
 * seq in it is stamped, so a crash leaves gaps but never re-issues a seq.
 * A block is sized by what its caller says it will take (a flush: the rows of
 * its segment), so a process does not die holding seqs nobody will stamp; the
 * file only ever moves up.
 * @ref LLP 0001: allocator and commit ordering
 * @ref LLP 0039: a reservation sized by what the flush will take
 */
import { join } from 'node:path';
import { HypsinkError } from '../../types/errors.js';
import { fault } from '../fault.js';
import { isDecimalSeq, readJsonFile, writeJsonAtomic } from '../io/durable.js';
import { KeyedMutex } from '../mutex.js';
import type { CommitGuard } from '../store/partition.js';

interface AllocatorFile {
  v: 1;
  /** Every seq ≤ reservedThrough may have been handed out. The next block starts above it. */
  reservedThrough: string;
}

export interface SeqRange {
  readonly first: bigint;
  readonly last: bigint;
}

/** A commit larger than the block size may reserve up to this many times its size. */
const LARGE_COMMIT_BLOCKS = 4;

export class SeqAllocator {
  private next = 0n;
  private end = -1n; // inclusive; next > end means no block in hand
  /** The writer lock was taken anew: the block in hand holds only if nobody reserved since. */
  private stale = false;
  private readonly mutex = new KeyedMutex();
  readonly path: string;

  constructor(
    cacheRoot: string,
    private readonly blockSize = 1024,
    /** Proves the writer lock is still ours before a block is reserved (two writers would share seqs). */
    private readonly guard?: CommitGuard,
  ) {
    this.path = join(cacheRoot, '_hyp_ingest_seq.json');
  }

  /**
   * Called whenever this process takes the cache writer lock from nobody:
   * another process may have reserved (and committed) higher seqs meanwhile,
   * and stamping our older leftovers after theirs would break "commit order =
   * seq order" within a partition. The next allocation checks: the block in
   * hand is kept only if the file still ends at it, i.e. nobody reserved since.
   * @ref LLP 0016: a block kept across lock takes
   */
  invalidate(): void {
    this.stale = true;
  }

  /**
   * `n` contiguous seqs. Caller holds the cache writer lock and the partition's
   * commit section. `ahead`: how many seqs the caller will take from here on,
   * `n` included (a flush: the rows of its segment not yet committed). A
   * reservation is a block (or 4 × `n` for a commit larger than a block),
   * capped at `ahead`: what a process leaves unstamped when it exits is then
   * only what it was told would come and did not (a commit found done already).
   */
  allocate(n: number, ahead?: number): Promise<SeqRange> {
    if (!Number.isInteger(n) || n <= 0) throw new RangeError(`allocate(${n})`);
    return this.mutex.run('alloc', async () => {
      const want = BigInt(n);
      if (this.stale) {
        this.stale = false;
        // Every reservation moves the file's end up, so an end equal to ours means nobody reserved after us.
        if (this.end - this.next + 1n >= want && (await this.readReserved()) !== this.end) {
          this.next = 0n;
          this.end = -1n;
        }
      }
      if (this.end - this.next + 1n < want) {
        // Contiguity within a commit keeps pruned-range records compact.
        const reserved = await this.readReserved();
        // Nobody reserved since our block (the file only moves up, and only under the writer lock):
        // its rest is still ours alone, so the new block goes on from it and no seq is skipped.
        // @ref LLP 0039
        const first = reserved === this.end ? this.next : reserved + 1n;
        // A block, or for a large commit four times its size (the next large commits need no durable write),
        // but never more than the caller says will come: a process exits holding nothing it was not told of.
        const block = BigInt(this.blockSize);
        const cap = want > block ? want * BigInt(LARGE_COMMIT_BLOCKS) : block;
        const coming = ahead === undefined ? cap : BigInt(Math.max(n, ahead));
        const size = coming < cap ? coming : cap;
        const end = first + size - 1n;
        await this.guard?.assertHeld(`reserving seqs ${first}..${end} in ${this.path}`);
        await writeJsonAtomic(this.path, { v: 1, reservedThrough: end.toString() } satisfies AllocatorFile);
        fault('alloc.afterReserve');
        this.next = first;
        this.end = end;
      }
      const first = this.next;
      this.next += want;
      return { first, last: first + want - 1n };
    });
  }

  /**
   * Mark every seq up to `seq` as handed out, so the next block starts above
   * it (`identity --copy --fork-seq N` with N above this cache's reservation:
   * the seqs up to N are the original's, and a row of this cache stamped at
   * or below N would sit under its watermarks, never exported). Caller holds
   * the cache writer lock. A reservation already above `seq` stays. @ref LLP 0055
   */
  reserveThrough(seq: bigint): Promise<void> {
    return this.mutex.run('alloc', async () => {
      if ((await this.readReserved()) >= seq) return;
      await this.guard?.assertHeld(`reserving seqs through ${seq} in ${this.path}`);
      await writeJsonAtomic(this.path, { v: 1, reservedThrough: seq.toString() } satisfies AllocatorFile);
      // The block in hand (if any) lies below: the next allocation starts above the new end.
      this.next = 0n;
      this.end = -1n;
    });
  }

  /**
   * The reservation on disk. It may be read outside the allocator's section (a
   * batch record takes it as its `maxSeq`), so it is checked against what was
   * handed out before the read began: a reservation landing during the read
   * raises `end` above a file read before it, and is no regression.
   */
  async readReserved(): Promise<bigint> {
    const handedOut = this.end;
    const file = await readJsonFile<AllocatorFile>(
      this.path,
      (v) => {
        const f = v as Partial<AllocatorFile>;
        return f && f.v === 1 && isDecimalSeq(f.reservedThrough) ? null : 'expected {"v":1,"reservedThrough":"<decimal>"}';
      },
      'seq allocator file',
    );
    const reserved = file ? BigInt(file.reservedThrough) : 0n;
    if (reserved < handedOut) {
      throw new HypsinkError(
        'HYPSINK_ERR_INVARIANT',
        `seq allocator file ${this.path} went backwards (${reserved} < ${handedOut} already handed out)`,
      );
    }
    return reserved;
  }
}
