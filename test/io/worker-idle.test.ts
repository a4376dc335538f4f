/**
 * A worker stops its idle time after its last reply; `keepIdle` changes that
 * time from then on, a timer already running included (the aggregator keeps
 * its workers between bursts so, LLP 0088).
 */
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { test } from 'node:test';
import { WorkerThread } from '../../types/worker.js';

const ECHO = new URL('../fixtures/worker/echo-worker.ts', import.meta.url);
const echo = () => new WorkerThread<{ n: number }, { n: number }>(ECHO, { what: 'echo', idleMs: 150 });

test('a worker stops its idle time after its last reply, or as keepIdle says from then on', async () => {
  const plain = echo();
  const keptBefore = echo();
  const keptAfter = echo();
  try {
    keptBefore.keepIdle(60_000);
    for (const w of [plain, keptBefore, keptAfter]) assert.equal((await w.call({ n: 1 })).n, 1);
    // keptAfter's 150 ms timer runs now: keepIdle times it again, from now, with the new length.
    keptAfter.keepIdle(60_000);
    await sleep(600);
    assert.equal(plain.running, false, 'stopped 150 ms after its reply');
    assert.equal(keptBefore.running, true, 'kept: keepIdle before the call');
    assert.equal(keptAfter.running, true, 'kept: keepIdle while its idle timer ran');
    // A worker kept longer still answers, and is kept again after.
    assert.equal((await keptAfter.call({ n: 2 })).n, 2);
    await sleep(300);
    assert.equal(keptAfter.running, true);
  } finally {
    for (const w of [plain, keptBefore, keptAfter]) await w.close();
  }
});
