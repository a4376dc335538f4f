/**
 * The leak test: rows holding secrets of every built-in pattern, in a STRING
 * and a JSON column, exported through every built-in sink kind with redaction
 * on (local-fs JSON Lines and uncompressed Parquet, the forward sink into the
 * reference receiver, the Postgres sink). Some of the rows are refused by a
 * plugin transform before the redaction, so their raw values never met it.
 * No secret may appear in any byte of any destination, in the sinks' state
 * (watermarks, intents, dead letters), in a log line (debug level) or in
 * `status`. @ref LLP 0049
 */
import assert from 'node:assert/strict';
import { promises as fsp } from 'node:fs';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { readStored, startReceiver } from '../../fixtures/receiver/server.js';
import { loadConfig } from '../../kernel/config/load.js';
import { createLogger } from '../../kernel/log.js';
import { Hypsink } from '../../kernel/runtime.js';
import { FIXTURE_PLUGINS, ingestText, readExports, walkFiles, writeConfig } from '../support/kernel.js';
import { testPg } from '../support/pg.js';
import { tempDir } from '../support/tmp.js';

const TOKEN = 'leak-test-token-Pw4Nq8';

after(async () => (await testPg()).stop());

/** Every secret planted, as the text that must never leave. */
const SECRETS = {
  email: 'grace.hopper@navy.example.com',
  bearer: 'abcDEF123456.ghiJKL-789_xyz',
  awsKeyId: 'AKIAIOSFODNN7EXAMPLE',
  awsSecret: 'wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY',
  card: '4111 1111 1111 1111',
  cardDashed: '4111-1111-1111-1111',
  cardDigits: '4111111111111111',
};

function message(id: number): string {
  switch (id % 5) {
    case 0:
      return `contact ${SECRETS.email} about it`;
    case 1:
      return `Authorization: Bearer ${SECRETS.bearer}`;
    case 2:
      return `aws_access_key_id=${SECRETS.awsKeyId} aws_secret_access_key = ${SECRETS.awsSecret}`;
    case 3:
      return `paid with ${SECRETS.card} yesterday`;
    default:
      return `card ${SECRETS.cardDashed}; mail ${SECRETS.email}`;
  }
}

function payload(id: number): unknown {
  return { note: message(id + 1), SecretAccessKey: SECRETS.awsSecret, contact: { email: SECRETS.email, ids: [SECRETS.awsKeyId] }, n: id };
}

const DATASET = {
  columns: [
    { name: 'id', type: 'INT64', nullable: false },
    { name: 'ts', type: 'TIMESTAMP', nullable: false },
    { name: 'msg', type: 'STRING', nullable: true },
    { name: 'payload', type: 'JSON', nullable: true },
    { name: 'tag', type: 'STRING', nullable: true },
  ],
  timestampColumn: 'ts',
};

const ALL = ['email', 'bearer', 'aws-key', 'credit-card'];
const CHAIN = [
  // Rows tagged "bad" are refused here, raw: they must not reach a dead letter or a log with their values.
  { plugin: 'test-upper-transform', config: { column: 'tag' } },
  { redact: { columns: ['msg'], patterns: ALL } },
  { redact: { columns: ['payload'], patterns: ALL } },
];

async function bytesUnder(dir: string): Promise<Buffer> {
  const files = await walkFiles(dir);
  return Buffer.concat(await Promise.all(files.map((f) => fsp.readFile(f))));
}

function assertNoSecret(where: string, text: string): void {
  for (const [kind, secret] of Object.entries(SECRETS)) assert.ok(!text.includes(secret), `${where} holds the ${kind} secret`);
}

test('no planted secret reaches a destination byte, a dead letter, the sinks\' state, a log line or status', { timeout: 180_000 }, async () => {
  const dir = tempDir();
  const recv = tempDir('hypsink-leak-recv-');
  const receiver = await startReceiver({ port: 0, dataDir: recv, token: TOKEN });
  const pg = await testPg();
  const url = await pg.database('leak');
  const logs: string[] = [];
  const config = await writeConfig(dir, {
    cache: { root: 'cache' },
    state: { dir: 'state' },
    plugins: [join(FIXTURE_PLUGINS, 'upper-transform')],
    datasets: { events: DATASET },
    sinks: {
      lines: { writer: '@hypsink/format-jsonl', destination: '@hypsink/local-fs', datasets: ['events'], config: { dir: 'out-jsonl' }, transforms: CHAIN },
      lake: { writer: '@hypsink/format-parquet', destination: '@hypsink/local-fs', datasets: ['events'], config: { dir: 'out-parquet' }, writerConfig: { compression: 'uncompressed' }, transforms: CHAIN },
      central: { plugin: '@hypsink/forward', datasets: ['events'], config: { url: receiver.url, token: TOKEN }, transforms: CHAIN },
      warehouse: { plugin: '@hypsink/postgres', datasets: ['events'], config: { url, maxRows: 40 }, transforms: CHAIN },
    },
  });
  const log = createLogger('debug', { write: (s: string) => void logs.push(s) });
  const k = await Hypsink.open(await loadConfig(config), { log });
  const n = 200;
  try {
    let text = '';
    for (let id = 0; id < n; id++) {
      text += `${JSON.stringify({ id, ts: 1_700_000_000_000 + id, msg: message(id), payload: payload(id), tag: id % 7 === 0 ? 'bad' : 'ok' })}\n`;
    }
    await ingestText(k, 'host-1', text);
    await k.flush();
    const refused = Array.from({ length: n }, (_, id) => id).filter((id) => id % 7 === 0).length;
    for (const r of await k.export()) {
      assert.equal(r.failed, 0, `${r.sink}: ${r.partitions.map((p) => p.error?.message).join('; ')}`);
      assert.equal(r.rows, n, `${r.sink} accounted for every row`);
    }
    const status = await k.status();
    for (const s of status.sinks) assert.equal(s.partitions[0]!.rejectedRows, refused, `${s.name}: the refused rows are counted`);

    // Destinations, byte for byte, and what they decode to.
    assertNoSecret('the JSON Lines files', (await bytesUnder(join(dir, 'out-jsonl'))).toString('latin1'));
    assertNoSecret('the Parquet files', (await bytesUnder(join(dir, 'out-parquet'))).toString('latin1'));
    const parquet = await readExports(join(dir, 'out-parquet'));
    assert.equal(parquet.reduce((c, f) => c + f.rows.length, 0), n - refused);
    assertNoSecret('the decoded Parquet rows', JSON.stringify(parquet.map((f) => f.rows)));
    assertNoSecret("the receiver's store", (await bytesUnder(recv)).toString('latin1'));
    assert.equal((await readStored(recv)).rows.events!['host-1']!.length, n - refused);
    const table = (await pg.query('SELECT t::text AS row FROM events t', [], url)).rows.map((r) => r.row as string);
    assert.equal(table.length, n - refused);
    assertNoSecret('the Postgres table', table.join('\n'));
    const rejected = (await pg.query('SELECT t::text AS row FROM hypsink_rejected t', [], url)).rows;
    assertNoSecret("the Postgres sink's dead-letter table", JSON.stringify(rejected));

    // Something was masked (the test sees the shipped rows), and the masks are where the secrets were.
    assert.ok(table.some((r) => r.includes('[redacted]')));

    // The kernel's own records: watermarks, intents, dead letters of refused rows.
    const state = (await bytesUnder(join(dir, 'state'))).toString('utf8');
    assert.ok(state.includes('value refused'), 'the dead letters are there (with reasons)');
    assertNoSecret("the sinks' state and dead letters", state);
    assertNoSecret('the log', logs.join(''));
    assert.ok(logs.some((l) => l.includes('refused')), 'the log says rows were refused');
    assertNoSecret('status', JSON.stringify(status));
  } finally {
    await k.close();
    await receiver.close();
  }
});
