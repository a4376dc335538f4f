/**
 * Issue 28, a newcomer's friction: an S3 endpoint mistyped in the config, fixed
 * before anything was exported, locked the sink to the mistyped one ("its
 * watermarks belong to …"). Nothing of the unit reached the mistyped endpoint
 * (every connection was refused), so the unit is withdrawn; with no unit ever
 * planned, the fixed endpoint is taken (and said so). Once a unit was
 * planned and may have been sent, the lock stays.
 * @ref LLP 0070: a destination no unit was planned for is replaced
 * @ref LLP 0022: a watermark knows its destination
 */
import assert from 'node:assert/strict';
import { createServer } from 'node:net';
import { test } from 'node:test';
import { FAST_RETRY, assertExactlyOnce, cliExport, describeRun, events, ingestWith, readLake, startStack, statusOf, useCredentials, writeConfig } from './helpers.js';

useCredentials();

/** A loopback port nothing listens on: the mistyped endpoint. */
async function closedPort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const { port } = s.address() as { port: number };
  await new Promise((r) => s.close(r));
  return port;
}

test('a mistyped endpoint fixed before anything was exported: the fixed one is taken (logged), exactly once', { timeout: 60_000 }, async (t) => {
  const { s3, dir } = await startStack(t);
  const typo = `http://127.0.0.1:${await closedPort()}`;
  let path = await writeConfig(dir, typo, { config: { retry: FAST_RETRY } });
  await ingestWith(path, 'web', events(1, 12));
  const failed = await cliExport(path);
  assert.equal(failed.code, 1, describeRun(failed));
  const st = await statusOf(path, 'web');
  assert.equal(st.watermark, null, 'nothing was exported');
  assert.equal(st.intent, null, 'the unit nothing of which was sent is withdrawn');

  path = await writeConfig(dir, s3.endpoint, { config: { retry: FAST_RETRY } });
  const fixed = await cliExport(path);
  assert.equal(fixed.code, 0, describeRun(fixed));
  assert.match(fixed.stderr, /no unit was ever planned for s3:\/\/lake\/hyp\/ at http:\/\/127\.0\.0\.1:\d+, so nothing of it is there/, describeRun(fixed));
  assertExactlyOnce(await readLake(s3), { web: events(1, 12) });

  // Back to the mistyped endpoint: the watermarks belong to the fixed one now, so it is refused.
  path = await writeConfig(dir, typo, { config: { retry: FAST_RETRY } });
  await ingestWith(path, 'web', events(13, 2));
  const back = await cliExport(path);
  assert.equal(back.code, 2, describeRun(back));
  assert.match(back.stderr, /HYPSINK_ERR_CONFIG: .*its watermarks belong to s3:\/\/lake\/hyp\/ at /);
});
