/**
 * A replay's arguments and result, apart from the replay itself: `hypsink
 * replay`, the daemon's API and `hypsink ctl` check and print them without
 * loading the export's modules. @ref LLP 0061
 */
import { HypsinkError } from '../../types/errors.js';

export interface ReplayResult {
  readonly sink: string;
  readonly partition: string;
  readonly since: string | null;
  readonly until: string;
  readonly unit: string;
  readonly digest: string;
  readonly rows: number;
  /** The destination already held the unit under this name and digest: nothing was written. */
  readonly duplicate: boolean;
  /** A replay of this range left unfinished by an earlier run (a crash) was finished. */
  readonly resumed: boolean;
}

/**
 * A replay's range as given (command-line flags, API query parameters): each a
 * seq, a decimal integer, `until` required. Refused before anything opens.
 */
export function replayRangeArgs(given: { dataset?: string | null; source?: string | null; since?: string | null; until?: string | null }, name: (field: string) => string): { dataset: string; source: string; since: string | null; until: string } {
  for (const f of ['dataset', 'source', 'until'] as const) {
    if (!given[f]) throw new HypsinkError('HYPSINK_ERR_USAGE', `a replay needs ${name(f)}`, { hint: 'Give the partition (dataset and source) and the range (until, and since unless it starts the partition), as "hypsink verify" names them.' });
  }
  for (const f of ['since', 'until'] as const) {
    const v = given[f];
    if (v !== undefined && v !== null && !/^(0|[1-9]\d{0,18})$/.test(v)) throw new HypsinkError('HYPSINK_ERR_USAGE', `${name(f)} ${JSON.stringify(v)} is not a seq (a decimal integer)`);
  }
  return { dataset: given.dataset!, source: given.source!, since: given.since ?? null, until: given.until! };
}

/** A replay's result in words, as `replay` and `ctl replay` print it. */
export function replayText(r: ReplayResult): string {
  const what = r.duplicate ? 'the destination already holds it under this name and digest; nothing was sent' : 'sent again';
  return `sink "${r.sink}": ${r.partition} (${r.since ?? 'start'}, ${r.until}], ${r.rows} row(s) as ${r.unit}: ${what}${r.resumed ? ' (an unfinished replay finished)' : ''}`;
}

