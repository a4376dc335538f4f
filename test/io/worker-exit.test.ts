/**
 * A worker thread with no call in flight never holds the process open: a CLI
 * command whose worker is idle exits when its work is done, not when the
 * worker's idle timer closes it. A call in flight does hold it (its caller
 * awaits a reply that nothing else keeps alive). @ref LLP 0079
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import { REPO, runNode } from '../support/proc.js';

test('a process whose worker is idle ends without waiting for the idle timer; the call in flight was answered', async () => {
  const r = await runNode(['--import', 'tsx', join(REPO, 'test/fixtures/worker/exit-child.ts')], { env: { NODE_OPTIONS: '--conditions=hypsink-source' } });
  assert.equal(r.code, 0, r.stderr);
  const out = JSON.parse(r.stdout.trim()) as { reply: number; runningAtExit: boolean };
  assert.equal(out.reply, 7, 'the call in flight held the process until its reply');
  assert.equal(out.runningAtExit, true, 'the process ended with its worker idle, before the idle timer closed it');
});
