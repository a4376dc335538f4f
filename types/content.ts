/**
 * A unit is known by its content: its label (writer, partition, `(since,
 * until]`) and its digest. A destination that finds the label already there
 * with another digest has found other rows under this unit's name, most
 * likely from a copy of this cache (a cloned host, a restored backup) that
 * handed out the same seqs. That is never "already committed": every sink
 * refuses it with this error, so the operator hears of it, nothing is counted
 * as delivered, and the unit stays pending.
 * @ref LLP 0054: a unit's digest
 * @ref LLP 0055: copied and restored caches
 */
import { HypsinkError } from './errors.js';
import type { PartitionRef } from './storage.js';

/** What a sink found under a unit's label at its destination. */
export interface UnitConflictFacts {
  /** The sink instance. */
  readonly sink: string;
  readonly partition: PartitionRef;
  /** The unit being shipped: its range and digest. */
  readonly since: string | null;
  readonly until: string;
  readonly digest: string;
  /** What the destination holds there: its range (when it differs) and the digest recorded with it (null: none). */
  readonly held: { readonly since: string | null; readonly until: string; readonly digest: string | null };
  /** Where it was found (a path, an s3:// URL, a table, a database), no secrets. */
  readonly where: string;
}

const range = (since: string | null, until: string) => `(${since ?? 'start'}, ${until}]`;

/**
 * The refusal of a label that matches with other content (HYPSINK_ERR_CONFLICT):
 * names the sink, the partition, both ranges, both digests and the likely cause.
 */
export function unitConflict(f: UnitConflictFacts): HypsinkError {
  const p = f.partition;
  const same = f.held.since === f.since && f.held.until === f.until;
  const held = `${same ? 'the same range' : `unit ${range(f.held.since, f.held.until)}`} with ${f.held.digest === null ? 'no recorded digest' : `digest ${f.held.digest}`}`;
  return new HypsinkError(
    'HYPSINK_ERR_CONFLICT',
    `sink "${f.sink}": unit ${range(f.since, f.until)} of ${p.dataset}/source=${p.source} (digest ${f.digest}) is not what ${f.where} holds under its name (${held}): ` +
      'the destination has other rows of this cache id and these seqs, so this cache is most likely a copy of another (a cloned image or host, a restored backup) that handed out the same seqs again. ' +
      'Nothing was written or counted as delivered. Run "hypsink status" for the evidence, then "hypsink identity --copy" on the copy (it exports its own rows under a new identity)',
  );
}
