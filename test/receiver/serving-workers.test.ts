/**
 * An aggregator keeps its ingest's workers between bursts (LLP 0088): a
 * host's kernel stops its parse worker 5 s after its last job; the same
 * kernel serving as an aggregator keeps it. Both wait past the 5 s side by
 * side, so the plain kernel shows the wait is long enough.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { test } from 'node:test';
import { openAggregate } from '../../kernel/receiver/aggregate.js';
import { openKernel, writeConfig } from '../support/kernel.js';
import { RECEIVED, tempDir } from './helpers.js';

test("receiver --config keeps its parse worker past a host kernel's idle time", async () => {
  const { dir, cleanup } = await tempDir('aggregator-workers');
  const open = async (name: string) => {
    const cfg = await writeConfig(dir, { cache: { root: join(dir, name, 'cache') }, state: { dir: join(dir, name, 'state') }, datasets: { events: RECEIVED }, sinks: {} }, `${name}.json`);
    return (await openKernel(cfg)).k;
  };
  const host = await open('host');
  const served = await open('served');
  const agg = await openAggregate(served);
  try {
    await Promise.all([host.parsers.ready(), served.parsers.ready()]);
    await sleep(5_600);
    assert.equal(host.parsers.running, false, "a host's parse worker stops 5 s after its last job");
    assert.equal(served.parsers.running, true, "the aggregator's is kept");
  } finally {
    await agg.close();
    await served.close();
    await host.close();
    await cleanup();
  }
});
