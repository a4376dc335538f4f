/**
 * The simulation's world: one s3rver and one reference receiver over loopback,
 * each behind a fault proxy whose rule a seed sets (5xx, slow answers, 429/503
 * bursts). Shared by the seeds of one driver process; seeds keep apart by
 * prefix and partition names.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startReceiver, type Receiver } from '../../fixtures/receiver/server.js';
import { type FaultProxy, type FaultRule, startFaultProxy } from '../support/fault-proxy.js';
import { startS3Server, type TestS3Server, useS3rverCredentials } from '../support/s3server.js';

export interface World {
  readonly s3: TestS3Server;
  readonly s3Proxy: FaultProxy;
  readonly receiver: Receiver;
  readonly receiverProxy: FaultProxy;
  readonly receiverDir: string;
  readonly token: string;
  setS3Rule(rule: FaultRule | undefined): void;
  setReceiverRule(rule: FaultRule | undefined): void;
  stop(): Promise<void>;
}

export async function startWorld(): Promise<World> {
  useS3rverCredentials();
  const s3 = await startS3Server({ buckets: ['simlake'] });
  const s3Proxy = await startFaultProxy({ target: s3.endpoint });
  const receiverDir = await mkdtemp(join(tmpdir(), 'hypsink-sim-recv-'));
  const token = 'sim-token-4f1c';
  const receiver = await startReceiver({ port: 0, dataDir: receiverDir, token, maxInflight: 64 });
  const receiverProxy = await startFaultProxy({ target: receiver.url });
  return {
    s3,
    s3Proxy,
    receiver,
    receiverProxy,
    receiverDir,
    token,
    setS3Rule: (r) => s3Proxy.setRule(r),
    setReceiverRule: (r) => receiverProxy.setRule(r),
    async stop() {
      await receiverProxy.stop();
      await receiver.close();
      await s3Proxy.stop();
      await s3.stop();
      await rm(receiverDir, { recursive: true, force: true });
    },
  };
}
