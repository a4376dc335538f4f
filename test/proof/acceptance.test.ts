/**
 * Acceptance (the plan's T6, DESIGN §8): the real kernel cache, real retention,
 * real compaction, all four sinks — local-fs, S3 on s3rver over loopback,
 * forward to the reference receiver over loopback, postgres to an embedded
 * PostgreSQL over a loopback TCP proxy (read back with SQL) — and the real
 * driver outbox.
 */
import assert from 'node:assert/strict';
import { promises as fsp } from 'node:fs';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { after, before, test } from 'node:test';
import { makeData, makeVector, Table, TimestampMillisecond, tableToIPC } from 'apache-arrow';
import * as pw from 'parquet-wasm/node';
import { buildColumn } from '../../kernel/store/columns.js';
import { encodeSegment } from '../../kernel/store/segments.js';
import { loadConfig } from '../../kernel/config/load.js';
import { ingestNdjson } from '../../kernel/ingest/ingest.js';
import { createLogger } from '../../kernel/log.js';
import { Hypsink } from '../../kernel/runtime.js';
import { checkDestinations, Ledger, SINKS, WatermarkWatch, writeScenarioConfig } from '../sim/harness.js';
import { startWorld, type World } from '../sim/world.js';

let world: World;
before(async () => {
  world = await startWorld();
  process.env.SIM_TOKEN = world.token;
});
after(() => world.stop());

interface Scene {
  /** The scene's own name for a source: the world's receiver is shared between scenes. */
  src(name: string): string;
  dir: string;
  prefix: string;
  k: Hypsink;
  ledger: Ledger;
  watch: WatermarkWatch;
  ingest(source: string, n: number): Promise<void>;
  exportAll(): Promise<Map<string, number>>;
  check(): Promise<void>;
}

let scenes = 0;
async function scene(opts: { unitRows?: number; before?: (dir: string, src: (name: string) => string) => Promise<void> } = {}): Promise<Scene> {
  const dir = await mkdtemp(join(tmpdir(), 'hypsink-accept-'));
  const no = ++scenes;
  const prefix = `accept/${no}/${process.pid}`;
  const src = (name: string) => `${name}.${no}.${process.pid}`;
  await opts.before?.(dir, src);
  const config = await writeScenarioConfig(dir, world, { prefix, unitRows: opts.unitRows ?? 5000, rowGroupRows: 512 });
  const k = await Hypsink.open(await loadConfig(config), { log: createLogger('silent') });
  const ledger = new Ledger();
  const watch = new WatermarkWatch(join(dir, 'state'));
  const problems: string[] = [];
  const s: Scene = {
    src,
    dir,
    prefix,
    k,
    ledger,
    watch,
    async ingest(name, n) {
      const source = src(name);
      const rows = ledger.rows(source, n);
      const r = await ingestNdjson(k, 'events', source, Readable.from(rows.map((x) => `${JSON.stringify(x)}\n`)), 'acceptance');
      assert.equal(r.rejected, 0);
      ledger.ack(source, rows);
    },
    /** One tick of every sink; rows exported per sink. */
    async exportAll() {
      const out = new Map<string, number>();
      for (const name of SINKS) {
        const [r] = await k.export(name);
        out.set(name, r!.rows);
        await watch.check(`export ${name}`, problems);
      }
      return out;
    },
    async check() {
      for (const name of SINKS) await k.export(name);
      const status = await k.status();
      await checkDestinations(dir, world, prefix, ledger, status, problems);
      await watch.check('final', problems);
      await k.close();
      assert.deepEqual(problems, []);
    },
  };
  return s;
}

const pgCount = async () => Number((await world.pgQuery<{ n: string }>('SELECT count(*)::text AS n FROM events'))[0]!.n);

async function countFiles(dir: string): Promise<number> {
  let n = 0;
  for (const e of await fsp.readdir(dir, { withFileTypes: true, recursive: true }).catch(() => [])) if (e.isFile() && !e.name.endsWith('.part')) n++;
  return n;
}

test('a tick with no new rows writes 0 files, 0 objects and sends 0 bytes', async () => {
  const s = await scene();
  await s.ingest('web', 120);
  await s.ingest('app', 7);
  await s.exportAll();
  const files = await countFiles(join(s.dir, 'exports'));
  const s3Requests = world.s3Proxy.log.length;
  const receiverRequests = world.receiverProxy.log.length;
  const pgBytes = world.pgProxy.stats.bytesFromClients;
  const pgConnections = world.pgProxy.stats.connections;
  const tableRows = await pgCount();
  const rows = await s.exportAll();
  assert.deepEqual([...rows.values()], SINKS.map(() => 0));
  assert.equal(await countFiles(join(s.dir, 'exports')), files);
  assert.equal(world.s3Proxy.log.length - s3Requests, 0, 'no S3 request at all');
  assert.equal(world.receiverProxy.log.length - receiverRequests, 0, 'no request to the receiver');
  assert.equal(world.pgProxy.stats.bytesFromClients - pgBytes, 0, 'not a byte to PostgreSQL');
  assert.equal(world.pgProxy.stats.connections - pgConnections, 0, 'no connection to PostgreSQL');
  assert.equal(await pgCount(), tableRows);
  await s.check();
});

test('a tick after N new rows exports exactly N rows, whatever the partition size', async () => {
  const s = await scene();
  await s.ingest('big', 20_000);
  await s.ingest('small', 3);
  await s.exportAll();
  await s.ingest('big', 37);
  await s.ingest('small', 37);
  for (const name of SINKS) {
    const [r] = await s.k.export(name);
    const per = Object.fromEntries(r!.partitions.map((p) => [p.partition.source, p.rows]));
    assert.deepEqual(per, { [s.src('big')]: 37, [s.src('small')]: 37 }, `sink ${name}`);
  }
  await s.check();
});

test('exactly once across a retention front-prune and a compaction swap between exports', async () => {
  const s = await scene({ unitRows: 40 });
  await s.ingest('web', 100);
  await s.exportAll();
  await s.ingest('web', 60);
  await s.k.export('files'); // one sink ahead of the others: ack-coupled retention keeps the rest
  const pruned = await s.k.retention({ maxRows: 30, ackCoupled: true });
  assert.equal(pruned[0]!.prunedRows, 100, 'only rows every sink exported were pruned');
  await s.k.cache.compact();
  await s.ingest('web', 25);
  await s.exportAll();
  await s.check();
});

test('exactly once across retention and compaction running during exports', async () => {
  const s = await scene({ unitRows: 30 });
  for (let i = 0; i < 6; i++) await s.ingest(i % 2 ? 'web' : 'app', 90);
  await s.k.export('files');
  await Promise.all([
    s.k.export('lake'),
    s.k.cache.compact(),
    s.k.export('central'),
    s.k.retention({ maxRows: 50, ackCoupled: true }),
    s.ingest('web', 33),
    s.k.export('files'),
  ]);
  await s.check();
});

test('the watermark composes with the outbox respool: a failed partition retried next tick exports no row twice and skips none', async () => {
  const s = await scene({ unitRows: 20 });
  await s.ingest('web', 70);
  // The first unit lands, then the store fails beyond the retry budget.
  let puts = 0;
  world.setS3Rule((r) => (r.method === 'PUT' && ++puts > 1 ? { kind: 'respond', status: 500, body: '<Error><Code>InternalError</Code></Error>' } : undefined));
  world.setReceiverRule((r) => (r.method === 'POST' ? { kind: 'respond', status: 503, headers: { 'retry-after': '0' } } : undefined));
  const [lake] = await s.k.export('lake');
  const [central] = await s.k.export('central');
  world.setS3Rule(undefined);
  world.setReceiverRule(undefined);
  assert.equal(lake!.failed, 1);
  assert.equal(central!.failed, 1);
  const status = await s.k.status();
  const lakeWeb = status.sinks.find((x) => x.name === 'lake')!.partitions[0]!;
  assert.equal(lakeWeb.exportedRows, 20, 'the unit before the failure counts, the failed one does not');
  assert.match(lakeWeb.lastError ?? '', /s3:\/\/simlake\//);
  await s.ingest('web', 11);
  await s.check();
});

/** A Parquet file as a writer before the seq column made it. */
function legacyParquet(ids: number[]): Uint8Array {
  const ts = new BigInt64Array(ids.map((i) => BigInt(Date.UTC(2025, 0, 1) + i * 1000)));
  const table = new Table({
    id: makeVector(buildColumn('INT64', ids)),
    ts: makeVector(makeData({ type: new TimestampMillisecond(), length: ids.length, nullCount: 0, data: ts } as never)),
    msg: makeVector(buildColumn('STRING', ids.map((i) => `legacy${i}`))),
  });
  return pw.writeParquet(pw.Table.fromIPCStream(tableToIPC(table, 'stream')));
}

test('legacy rows without a seq are exported once, then never again', async () => {
  const legacy = [900001, 900002, 900003, 900004];
  const s = await scene({
    before: async (dir, src) => {
      const p = join(dir, `cache/datasets/events/source=${encodeSegment(src('old'))}`);
      await fsp.mkdir(join(p, 'table-0'), { recursive: true });
      const bytes = legacyParquet(legacy);
      await fsp.writeFile(join(p, 'table-0', 'legacy.parquet'), bytes);
      const files = [{ name: 'legacy.parquet', rows: legacy.length, bytes: bytes.byteLength, minSeq: null, maxSeq: null, rowGroups: [{ rows: legacy.length, minSeq: null, maxSeq: null }] }];
      await fsp.writeFile(join(p, 'table-0', 'manifest.json'), JSON.stringify({ v: 1, generation: 0, files, spools: {}, prunedThroughSeq: null, forcedPrunes: [] }));
      await fsp.writeFile(join(p, 'partition.json'), JSON.stringify({ v: 1, dataset: 'events', source: src('old') }));
      await fsp.writeFile(join(p, 'cursor.json'), JSON.stringify({ v: 1, generation: 0 }));
    },
  });
  s.ledger.rows(s.src('old'), 0);
  for (const id of legacy) {
    s.ledger.attempted.get(s.src('old'))!.add(id);
    s.ledger.acked.get(s.src('old'))!.add(id);
  }
  const first = await s.exportAll();
  assert.deepEqual([...first.values()], SINKS.map(() => 4), 'legacy rows exported once by each sink');
  await s.ingest('old', 6);
  const second = await s.exportAll();
  assert.deepEqual([...second.values()], SINKS.map(() => 6), 'then only the new rows');
  await s.k.cache.compact();
  assert.deepEqual([...(await s.exportAll()).values()], SINKS.map(() => 0), 'compaction does not make them new again');
  await s.check();
});
