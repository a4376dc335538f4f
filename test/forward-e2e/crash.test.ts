/**
 * Issue 5, crash matrix for the forward sink: SIGKILL at the kernel's export
 * fault points (exporter in a child `hypsink export`) and at the receiver's own
 * fault points (receiver in a child), restart, retry: every row stored once.
 * @ref LLP 0005: write-ahead intent; LLP 0008: batch id; LLP 0009: receiver ledger
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { readStored, startReceiver } from '../../fixtures/receiver/server.js';
import { spawnReceiver } from '../receiver/helpers.js';
import {
  assertExactlyOnce,
  batchIds,
  cliReceiver,
  batchRange,
  e2eConfig,
  FAST,
  ids,
  ingest,
  ingestWith,
  type Json,
  logLines,
  openKernel,
  partitionStatus,
  runCli,
  statusOf,
  TOKEN,
  until,
  workspace,
} from './helpers.js';

const SOURCES = ['alpha', 'beta'] as const;
/** First id of a source's rows: alpha 1.., beta 101.. */
const base = (s: string) => (s === 'alpha' ? 1 : 101);

interface ExporterCase {
  readonly point: 'export.afterShip' | 'export.afterIntent';
  readonly at: number;
  /** Rows per source before the crash. */
  readonly rows: number;
  /** Whether the crashed unit reached the receiver. */
  readonly shipped: boolean;
}

const EXPORTER_CASES: readonly ExporterCase[] = [
  // 5 rows < maxRows 7: the crashed unit is partial, so a retry that re-planned after the
  // new rows arrived would cut a bigger unit under another id and store rows twice.
  { point: 'export.afterShip', at: 1, rows: 5, shipped: true },
  { point: 'export.afterIntent', at: 1, rows: 5, shipped: false },
  // The second unit of the first partition (of three: 7 + 7 + 3 rows). The write that
  // recorded the third unit as `next` while the second was in flight carried the first
  // unit's advance (LLP 0014).
  { point: 'export.afterShip', at: 2, rows: 17, shipped: true },
];

describe('the exporter is SIGKILLed mid-export, new rows arrive, a fresh process retries', { concurrency: 3 }, () => {
  for (const c of EXPORTER_CASES) {
    test(`3. ${c.point} (hit ${c.at})`, async () => {
      const ws = await workspace(`crash-${c.point}-${c.at}`);
      const r = await startReceiver({ port: 0, dataDir: ws.recv, token: TOKEN });
      try {
        // One partition at a time, so the n-th hit of the fault point is a known unit.
        await ws.writeConfig(e2eConfig(r.url, { unit: { maxRows: 7 }, driver: { concurrency: 1 } }));
        await ingestWith(ws.configPath, { alpha: [1, c.rows], beta: [101, c.rows] });

        const crashed = await runCli(['export', '--config', ws.configPath, '--json'], {
          HYPSINK_FAULT: c.point,
          HYPSINK_FAULT_AT: String(c.at),
        });
        assert.equal(crashed.signal, 'SIGKILL', `the exporter died by SIGKILL (code ${crashed.code}): ${crashed.stderr}`);
        assert.equal(crashed.stdout, '', 'it died before reporting');

        // Exactly one partition has an open intent; it starts at that partition's watermark.
        const st0 = await statusOf(ws.configPath);
        const open = SOURCES.map((s) => partitionStatus(st0, s)).filter((p) => p.intent);
        assert.equal(open.length, 1, 'one partition was mid-unit');
        const p = open[0]!;
        const other = partitionStatus(st0, p.source === 'alpha' ? 'beta' : 'alpha');
        const U = p.intent!.unit;
        const led0 = await readStored(ws.recv);
        assert.equal(p.watermark, p.intent!.since);
        assert.equal(other.watermark, null, 'the other partition was not started');
        assert.equal(other.intent, null);
        if (c.at === 1) {
          assert.equal(p.watermark, null);
        } else {
          // A write made while the crashed unit was in flight carried the first unit's advance.
          assert.ok(led0.ledger.length >= 1);
          assert.equal(p.watermark, String(batchRange(led0.ledger[0]!.id).until));
          assert.equal(p.exportedRows, 7);
        }
        const ledgered = led0.ledger.map((e) => e.id);
        assert.equal(ledgered.includes(U), c.shipped, c.shipped ? 'the receiver stored the unit' : 'nothing was shipped');
        assert.equal(ledgered.length, c.at - (c.shipped ? 0 : 1));
        const requests0 = r.stats().requests;

        // New rows in both partitions while the intent is open.
        await ingestWith(ws.configPath, { alpha: [1 + c.rows, 4], beta: [101 + c.rows, 4] });

        const retry = await runCli(['export', '--config', ws.configPath, '--json']);
        assert.equal(retry.code, 0, retry.stderr);
        assert.equal(retry.signal, null);
        const report = JSON.parse(retry.stdout) as { sinks: { rows: number }[] };
        // Every row not acknowledged before the crash, the re-sent unit included (counted once, now).
        assert.equal(report.sinks[0]!.rows, 2 * (c.rows + 4) - (c.at === 2 ? 7 : 0));

        // The retry re-sent the recorded unit under its recorded id.
        const delivered = logLines(retry.stderr).filter((l) => l.msg === 'batch delivered');
        const resent = delivered.find((l) => l.unit === U);
        assert.ok(resent, `the retry re-sent batch ${U}`);
        assert.equal(resent.duplicate, c.shipped, c.shipped ? 'the receiver answered duplicate:true' : 'stored on the retry');
        assert.equal(r.stats().duplicates, c.shipped ? 1 : 0);
        assert.ok(r.stats().requests > requests0);

        const st = await assertExactlyOnce(ws.recv, {
          alpha: ids(1, c.rows + 4),
          beta: ids(101, c.rows + 4),
        });
        // The recorded unit holds exactly its range: the pre-crash rows, none of the new ones.
        const unitIds = batchIds(st, U);
        const b = base(p.source);
        const before = ids(b, c.rows);
        assert.ok(unitIds.length > 0 && unitIds.every((id) => before.includes(id)), `batch ${U} holds only pre-crash rows: ${unitIds}`);
        assert.equal(unitIds.length, Math.min(7, c.rows - 7 * (c.at - 1)));
        const done = await statusOf(ws.configPath);
        for (const s of SOURCES) {
          const q = partitionStatus(done, s);
          assert.equal(q.intent, null);
          assert.equal(q.pendingRows, 0);
          assert.equal(q.exportedRows, c.rows + 4, `${s}: every row counted once`);
        }
      } finally {
        await r.close();
        await ws.cleanup();
      }
    });
  }
});

/** A receiver in a child process, whichever entry point started it. */
interface ReceiverChild {
  readonly port: number;
  readonly url: string;
  readonly exited: Promise<{ signal: NodeJS.Signals | null }>;
  /** Its pino lines so far. */
  logs(): Json[];
  kill(signal: NodeJS.Signals): void;
}

/** `tsx fixtures/receiver/main.ts` (logs on stdout). */
async function fixtureReceiver(port: number, dataDir: string, env: Record<string, string>): Promise<ReceiverChild> {
  const c = await spawnReceiver(['--port', String(port), '--data', dataDir, '--log-level', 'debug'], env);
  return {
    port: c.port,
    url: c.url,
    exited: c.exited,
    logs: () => logLines(c.lines.join('\n')),
    kill: (sig) => c.child.kill(sig),
  };
}

/** `hypsink receiver` (logs on stderr). */
async function cliReceiverChild(port: number, dataDir: string, env: Record<string, string>): Promise<ReceiverChild> {
  const c = await cliReceiver(port, dataDir, env);
  return { port: c.port, url: c.url, exited: c.exited, logs: () => logLines(c.stderr()), kill: (sig) => c.child.kill(sig) };
}

const RECEIVER_CASES = [
  // Data appended and fsynced, no ledger line: the restart truncates it, the retry stores it.
  { point: 'receiver.afterData', first: fixtureReceiver, restart: cliReceiverChild },
  // Ledgered, no 200: the retry is answered duplicate.
  { point: 'receiver.afterLedger', first: cliReceiverChild, restart: fixtureReceiver },
] as const;

describe('the receiver is SIGKILLed at its own fault points, restarted on the same data dir and port', { concurrency: 2 }, () => {
  for (const c of RECEIVER_CASES) {
    test(`4. ${c.point}`, async () => {
      const ws = await workspace(`recv-${c.point}`);
      const env = { HYPSINK_TOKEN: TOKEN };
      const first = await c.first(0, ws.recv, { ...env, HYPSINK_FAULT: c.point });
      const port = first.port;
      await ws.writeConfig(e2eConfig(first.url, { unit: { maxRows: 7 }, forward: FAST, driver: { concurrency: 1 } }));
      const { k } = await openKernel(ws.configPath);
      let second: ReceiverChild | undefined;
      try {
        await ingest(k, 'alpha', 1, 10);
        await ingest(k, 'beta', 101, 3);
        const [rep] = await k.export('central');
        const died = await first.exited;
        assert.equal(died.signal, 'SIGKILL', 'the receiver died at its fault point');
        assert.equal(rep?.failed, 2, 'no answer, then nobody listening: both partitions failed');
        for (const part of rep?.partitions ?? []) assert.equal(part.error?.code, 'HYPSINK_ERR_RETRYABLE');

        const st0 = await k.status();
        for (const s of SOURCES) assert.equal(partitionStatus(st0, s).watermark, null, 'nothing was acknowledged');
        // The first partition's first unit is the batch the receiver died on.
        const crashedUnit = SOURCES.map((s) => partitionStatus(st0, s).intent).find((i) => i?.since === null)?.unit;
        assert.ok(crashedUnit);
        const led0 = await readStored(ws.recv);
        if (c.point === 'receiver.afterData') {
          assert.equal(led0.ledger.length, 0, 'died before its ledger line');
          assert.ok(led0.unledgeredBytes > 0, 'the batch is in the data file, un-ledgered');
        } else {
          assert.deepEqual(
            led0.ledger.map((e) => e.id),
            [crashedUnit],
            'the batch is ledgered, its 200 never sent',
          );
          assert.equal(led0.unledgeredBytes, 0);
        }

        second = await c.restart(port, ws.recv, env);
        assert.equal(second.port, port);
        const [ok] = await k.export('central');
        assert.equal(ok?.failed, 0, JSON.stringify(ok?.partitions.map((p) => p.error?.message)));
        const st = await assertExactlyOnce(ws.recv, { alpha: ids(1, 10), beta: ids(101, 3) });
        assert.ok(st.ledger.some((e) => e.id === crashedUnit));
        // The child logs a duplicate before it answers, but on another channel (its stdout pipe) than the
        // answer: the line may reach this process after the export has returned.
        if (c.point === 'receiver.afterLedger') await until(() => second!.logs().some((l) => l.msg === 'duplicate'), 'the restarted receiver\'s duplicate log line');
        const logs = second.logs();
        const truncated = logs.filter((l) => l.msg === 'truncated an un-ledgered batch tail (crash before its ledger line)');
        assert.equal(truncated.length, c.point === 'receiver.afterData' ? 1 : 0, 'the restart cut the un-ledgered tail');
        const dups = logs.filter((l) => l.msg === 'duplicate').map((l) => l.id);
        assert.deepEqual(dups, c.point === 'receiver.afterLedger' ? [crashedUnit] : [], 'only a ledgered batch is answered duplicate');
        const done = await k.status();
        for (const s of SOURCES) assert.equal(partitionStatus(done, s).pendingRows, 0);
        assert.equal(partitionStatus(done, 'alpha').exportedRows, 10);
        assert.equal(partitionStatus(done, 'beta').exportedRows, 3);
      } finally {
        await k.close();
        first.kill('SIGKILL');
        if (second) {
          second.kill('SIGTERM');
          await second.exited;
        }
        await ws.cleanup();
      }
    });
  }
});
