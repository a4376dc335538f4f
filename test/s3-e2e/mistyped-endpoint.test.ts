/**
 * Issue 28, a newcomer's friction: an S3 endpoint mistyped in the config, fixed
 * before anything was exported, locked the sink to the mistyped one ("its
 * watermarks belong to …"). Nothing was delivered there, so the fixed
 * destination is taken, and said so; the mistyped one is spent, since an
 * unconfirmed unit may have reached it. Once something was delivered the lock
 * stays, and its hint names the ways on.
 * @ref LLP 0070: a destination nothing was delivered to is replaced
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

test('a mistyped endpoint fixed before anything was exported: the fixed one is taken (logged), exactly once; the mistyped one is spent', { timeout: 60_000 }, async (t) => {
  const { s3, dir } = await startStack(t);
  const typo = `http://127.0.0.1:${await closedPort()}`;
  let path = await writeConfig(dir, typo, { config: { retry: FAST_RETRY } });
  await ingestWith(path, 'web', events(1, 12));
  const failed = await cliExport(path);
  assert.equal(failed.code, 1, describeRun(failed));
  assert.equal((await statusOf(path, 'web')).watermark, null, 'nothing was exported');

  path = await writeConfig(dir, s3.endpoint, { config: { retry: FAST_RETRY } });
  const fixed = await cliExport(path);
  assert.equal(fixed.code, 0, describeRun(fixed));
  assert.match(fixed.stderr, /nothing was delivered to s3:\/\/lake\/hyp\/ at http:\/\/127\.0\.0\.1:\d+/, describeRun(fixed));
  assertExactlyOnce(await readLake(s3), { web: events(1, 12) });

  // Back to the mistyped endpoint: an unconfirmed unit may be there, so it is refused as forgotten ones are.
  path = await writeConfig(dir, typo, { config: { retry: FAST_RETRY } });
  await ingestWith(path, 'web', events(13, 2));
  const back = await cliExport(path);
  assert.equal(back.code, 2, describeRun(back));
  assert.match(back.stderr, /HYPSINK_ERR_CONFIG/);
});
