/**
 * Named fault points at every durable boundary. Inert unless HYPSINK_FAULT names
 * one; then the process kills itself with SIGKILL (no cleanup, no flush of
 * buffers), exactly like a power cut as far as the process's state goes.
 * HYPSINK_FAULT_AT=n crashes on the n-th hit (default 1), so a test can crash
 * the second unit of a tick rather than the first. HYPSINK_FAULT_ACTION=throw
 * makes the point throw a passing error instead: an operation that fails
 * (rather than a process that dies) right after that durable step.
 * HYPSINK_FAULT_READ=<text> makes every read of a cache data file whose path
 * contains the text fail with EIO, under parquet-wasm: a disk that cannot read.
 *
 * The list is declared here, in one place, so the crash matrix can discover
 * every point and fail when one has no case.
 */
import { HypsinkError } from '../types/errors.js';

export const FAULT_POINTS = {
  'alloc.afterReserve': 'seq block reserved durably, no seq from it stamped yet',
  'spool.afterAppend': 'a spool frame is durable, the caller not yet answered',
  'spool.afterSeal': 'the current spool segment was sealed (renamed), not yet flushed',
  'flush.afterDataFile': 'a partition data file is durable, the manifest does not list it',
  'flush.afterManifest': 'the manifest lists the new file (commit point), the segment still exists',
  'flush.afterCommitAll': 'every partition of a segment committed, the segment not yet deleted',
  'flush.afterBatchRecord': "a batch's last row is committed and the batch recorded as committed, the command not yet answered",
  'batch.afterSpoolMovedAway': "a batch's spool (committed, or held and dropped) is renamed out of the way (.trash-…), not yet removed",
  'partition.afterCursor': 'a new partition cursor is written',
  'names.afterRename': 'a name made under the first name rule is renamed to the current one, others not yet',
  'retention.afterNewGeneration': 'retention wrote generation n+1, the cursor still names n',
  'retention.afterCursorSwap': 'retention swapped the cursor, generation n not yet retired',
  'compact.beforeCursorSwap': 'compaction wrote generation n+1, the cursor still names n',
  'compact.afterCursorSwap': 'compaction swapped the cursor, generation n not yet retired',
  'export.afterIntent': 'the intent is durable, nothing shipped',
  'export.afterShip': 'the unit is shipped (blob committed / batch stored), the watermark not advanced',
  'export.afterAdvance': 'the watermark is advanced and the intent cleared',
  'export.afterSinkState': "the sink's state (its destination, its datasets) is recorded, nothing planned yet",
  'forget.afterRename': "a forgotten sink's watermarks are renamed away, not yet removed",
  'blob.afterDayBlob': 'one blob of a multi-blob unit (time keys: one per day or hour) is stored, others not yet',
  'iceberg.afterDataFile': "one of a unit's Iceberg data files is stored (after each), no manifest names it",
  'iceberg.afterManifest': "the unit's manifest and its first manifest list are stored, no metadata version names them",
  'iceberg.afterManifestList': 'the manifest list of the snapshot is stored, the metadata version not yet created',
  'iceberg.afterCommit': "the table's next metadata version is created (the unit committed), the version hint not yet moved",
  'iceberg.afterVersionHint': 'the version hint names the new version, the watermark not yet advanced',
  'iceberg.afterCompactFiles': "maintain --tables wrote a table's compacted data files, no manifest names them",
  'iceberg.afterReplaceCommit': "maintain --tables created the table's next version (the compaction's replace snapshot), the version hint not yet moved",
  'localfs.afterTemp': 'the temp blob is written and fsynced, not linked',
  'localfs.afterRecord': "local-fs's commit record names the blob (key, size, digest), the blob not yet linked",
  'localfs.afterLink': 'the blob is linked under its key, temp not removed',
  'receiver.afterData': "the receiver appended and fsynced a batch (to its data file, or with --config into its cache), its ledger does not list it",
  'receiver.afterLedger': "the receiver's ledger lists the batch, the 200 not yet sent",
  'receiver.afterClaim': 'an aggregator with --claims holds the claim on a batch (claimed, its lease running), nothing of it spooled',
  'receiver.afterHold': "an aggregator with --claims spooled the batch held (durable, no flush commits it), the claim not yet marked stored",
  'receiver.afterStored': 'an aggregator with --claims marked the claim stored, its held spool not yet released nor flushed',
  's3.afterParts': 'every multipart part is uploaded, the upload not yet completed',
  'postgres.afterCopy': "a unit's rows are copied and its watermark row moved, in a transaction not yet committed",
  'postgres.afterCommit': "a unit's transaction committed (rows and watermark row), the local watermark not yet written",
} as const;

export type FaultPoint = keyof typeof FAULT_POINTS;


let hits = 0;
let armedFor: string | undefined;

/**
 * Crash here if this point is selected. The environment is read at each call
 * (points sit at durable boundaries, never in per-row loops), so a long-lived
 * worker — the seeded simulation's — can arm a point between operations.
 */
export function fault(point: FaultPoint): void {
  const selected = process.env.HYPSINK_FAULT;
  if (selected !== point) return;
  if (armedFor !== selected) {
    armedFor = selected;
    hits = 0;
  }
  hits += 1;
  if (hits < Number(process.env.HYPSINK_FAULT_AT ?? '1')) return;
  if (process.env.HYPSINK_FAULT_ACTION === 'throw') {
    throw new HypsinkError('HYPSINK_ERR_RETRYABLE', `injected failure at fault point ${point} (HYPSINK_FAULT_ACTION=throw)`);
  }
  process.kill(process.pid, 'SIGKILL');
}

/** Whether reads of this data file are to fail with EIO (HYPSINK_FAULT_READ). */
export function readFaulted(path: string): boolean {
  const t = process.env.HYPSINK_FAULT_READ;
  return t !== undefined && t !== '' && path.includes(t);
}

/** Forget hits counted so far (a worker re-arming the same point). */
export function resetFaultHits(): void {
  hits = 0;
  armedFor = undefined;
}
