/**
 * `hypsink identity` for a person: the cache's id, where it is, the evidence
 * that it is a copy, and what `--moved` / `--copy` did.
 * @ref LLP 0055: copied and restored caches
 */
import { evidenceText } from '../identity.js';
import type { IdentityCopyReport, IdentityReport } from '../runtime.js';

function show(r: IdentityReport): string {
  const lines = [`cache id ${r.id}`, `at ${r.home.root} on host ${r.home.host}${r.home.machine ? ` (machine ${r.home.machine})` : ''}`];
  if (r.copiedFrom) lines.push(`given its own identity ${r.copiedFrom.at}: copied from ${r.copiedFrom.id}; rows at or below seq ${r.copiedFrom.forkSeq} were left to it`);
  if (r.copy) {
    lines.push(
      evidenceText(r.copy),
      'exports are stopped until you say which it is:',
      '  hypsink identity --moved   the original no longer runs (the folder was moved, the host migrated, a backup restored after the original was lost, before it exported more)',
      `  hypsink identity --copy    both run (a cloned image or host), or a restored backup whose original exported more after the backup: this cache gets its own identity; rows at or below seq ${r.copy.forkSeq} are left to the original, rows above export under the new identity`,
    );
  } else lines.push('no evidence of being a copy: it is where it was made');
  return lines.join('\n');
}

function moved(r: IdentityReport): string {
  return `cache ${r.id} is at home at ${r.home.root} now; exports go on under the same identity`;
}

function copied(r: IdentityCopyReport): string {
  const lines = [`cache id ${r.from} → ${r.to}: rows at or below seq ${r.forkSeq} are left to the original; rows above export under the new identity`];
  for (const s of r.sinks) lines.push(`  sink "${s.sink}": ${s.partitions} partition(s) moved to the fork, ${s.rows} row(s) left to the original`);
  return lines.join('\n');
}

export const identityText = { show, moved, copied };
