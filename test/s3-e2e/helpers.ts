/**
 * The S3 sink end to end through the real kernel: a config file on disk, the
 * kernel opened from it (`Hypsink.open(await loadConfig(path))`) or the real CLI
 * in a child process, a real s3rver over loopback behind a real fault proxy.
 * The lake is inspected straight from s3rver (never through the proxy, so the
 * proxy's log holds only what the kernel sent), and every object is decoded
 * with parquet-wasm + apache-arrow, independently of the encoder.
 * @ref LLP 0007 (S3 commit rule), LLP 0005 (write-ahead intent)
 */
import assert from 'node:assert/strict';
import { promises as fsp } from 'node:fs';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import type { TestContext } from 'node:test';
import { GetObjectCommand, ListObjectsV2Command, S3Client } from '@aws-sdk/client-s3';
import { tableFromIPC } from 'apache-arrow';
import * as pw from 'parquet-wasm/node';
import { loadConfig } from '../../kernel/config/load.js';
import { ingestNdjson } from '../../kernel/ingest/ingest.js';
import { createLogger } from '../../kernel/log.js';
import { Hypsink, type PartitionStatus } from '../../kernel/runtime.js';
import { type FaultProxy, type FaultRule, startFaultProxy } from '../support/fault-proxy.js';
import { S3RVER_ACCESS_KEY_ID, type TestS3Server, startS3Server } from '../support/s3server.js';
import { REPO, runNode } from '../support/proc.js';
import { tempDir } from '../support/tmp.js';

export { REPO };
export const BIN = join(REPO, 'test/support/bin.mjs');

/**
 * s3rver checks the access key id but not V4 signatures, so the secret can be a
 * distinctive value that every no-secret assertion looks for.
 */
export const SECRET_ACCESS_KEY = 'hypE2Esecret/Zq8vW3xK9pL2mN7rT4yU6iO1aS5dF0gH';

/** Point the AWS default credential chain (which the plugin uses) at s3rver's account. */
export function useCredentials(): void {
  process.env.AWS_ACCESS_KEY_ID = S3RVER_ACCESS_KEY_ID;
  process.env.AWS_SECRET_ACCESS_KEY = SECRET_ACCESS_KEY;
  delete process.env.AWS_SESSION_TOKEN;
  delete process.env.AWS_PROFILE;
  process.env.AWS_EC2_METADATA_DISABLED = 'true';
}

// ---------------------------------------------------------------- the stack

export interface Stack {
  readonly s3: TestS3Server;
  /** A fault proxy in front of s3: configure the sink with `proxy.endpoint` to see and shape its traffic. */
  readonly proxy: FaultProxy;
  /** A fresh temp dir for the config, cache and state. */
  readonly dir: string;
}

/** A fresh s3rver (bucket "lake") and proxy per test: keys of two caches would otherwise collide. */
export async function startStack(t: TestContext, rule?: FaultRule): Promise<Stack> {
  const s3 = await startS3Server({ buckets: ['lake'] });
  const proxy = await startFaultProxy({ target: s3.endpoint, ...(rule ? { rule } : {}) });
  t.after(async () => {
    await proxy.stop();
    await s3.stop();
  });
  return { s3, proxy, dir: tempDir('hypsink-s3e2e-') };
}

// ---------------------------------------------------------------- config

export const EVENTS_DATASET = {
  columns: [
    { name: 'id', type: 'INT64', nullable: false },
    { name: 'ts', type: 'TIMESTAMP', nullable: false },
    { name: 'msg', type: 'STRING', nullable: true },
  ],
  timestampColumn: 'ts',
};

/** The `lake` sink exactly as issue 4 states it, on the test's endpoint. */
export function lakeSink(endpoint: string): Record<string, unknown> {
  return {
    writer: '@hypsink/format-parquet',
    destination: '@hypsink/s3',
    datasets: ['events'],
    schedule: '*/5 * * * *',
    config: { bucket: 'lake', prefix: 'hyp', region: 'us-east-1', endpoint, forcePathStyle: true },
  };
}

export interface LakeOptions {
  /** Merged into the sink's `config` (partSize, retry, bucket ...). */
  readonly config?: Record<string, unknown>;
  /** Sink-level `unit` bounds, to cut a partition into several units. */
  readonly unit?: { maxRows?: number; maxBytes?: number };
  /** Merged into the top-level `driver` section. */
  readonly driver?: Record<string, unknown>;
  /** The writer's (encoder's) own options. */
  readonly writerConfig?: Record<string, unknown>;
}

/** Writes `<dir>/hypsink.config.json` (cache and state under `dir`) and returns its path. */
export async function writeConfig(dir: string, endpoint: string, opts: LakeOptions = {}): Promise<string> {
  const sink = lakeSink(endpoint);
  const lake = {
    ...sink,
    config: { ...(sink.config as Record<string, unknown>), ...opts.config },
    ...(opts.unit ? { unit: opts.unit } : {}),
    ...(opts.writerConfig ? { writerConfig: opts.writerConfig } : {}),
  };
  const config = {
    cache: { root: 'cache', lockWaitMs: 5_000 },
    state: { dir: 'state' },
    driver: { lockWaitMs: 5_000, ...opts.driver },
    datasets: { events: EVENTS_DATASET },
    sinks: { lake },
  };
  const path = join(dir, 'hypsink.config.json');
  await fsp.writeFile(path, `${JSON.stringify(config, null, 2)}\n`);
  return path;
}

/** A retry budget that keeps failing tests fast. */
export const FAST_RETRY = { attempts: 3, baseMs: 10, maxMs: 2_000 };

// ---------------------------------------------------------------- the kernel

export interface CapturedLines {
  readonly lines: string[];
  text(): string;
}

/** Opens the kernel from the config file, logging (at debug) into memory. */
export async function openKernel(configPath: string, logs?: CapturedLines): Promise<Hypsink> {
  const sink = logs ?? captureLines();
  const log = createLogger('debug', { write: (s: string) => void sink.lines.push(s) });
  return Hypsink.open(await loadConfig(configPath), { log });
}

export function captureLines(): CapturedLines {
  const lines: string[] = [];
  return { lines, text: () => lines.join('') };
}

export async function withKernel<T>(configPath: string, fn: (k: Hypsink) => Promise<T>, logs?: CapturedLines): Promise<T> {
  const k = await openKernel(configPath, logs);
  try {
    return await fn(k);
  } finally {
    await k.close();
  }
}

// ---------------------------------------------------------------- rows

export interface EventRow {
  readonly id: number;
  readonly ts: string;
  readonly msg: string | null;
}

const T0 = Date.parse('2026-03-01T00:00:00.000Z');

/** Deterministic hex noise: Parquet (zstd) cannot squeeze it much, so it sizes a blob. */
function noise(seed: number, chars: number): string {
  let x = (seed * 2654435761) >>> 0 || 1;
  let out = '';
  while (out.length < chars) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    out += (x >>> 0).toString(16).padStart(8, '0');
  }
  return out.slice(0, chars);
}

/**
 * Rows with ids `from .. from+n-1`: a null msg every 7th row, a non-ASCII one
 * every 11th, and `pad` hex characters of noise when a blob must be large.
 */
export function events(from: number, n: number, pad = 0): EventRow[] {
  return Array.from({ length: n }, (_, i) => {
    const id = from + i;
    const msg = id % 7 === 0 ? null : `${id % 11 === 0 ? 'größe ✓ ' : 'm'}${id}${pad ? `:${noise(id, pad)}` : ''}`;
    return { id, ts: new Date(T0 + id * 1000 + (id % 1000)).toISOString(), msg };
  });
}

/** Ingests rows through the kernel's NDJSON ingest (spool → flush), asserting none was rejected. */
export async function ingest(k: Hypsink, source: string, rows: readonly EventRow[]): Promise<void> {
  const input = Readable.from(rows.map((r) => `${JSON.stringify(r)}\n`));
  const r = await ingestNdjson(k, 'events', source, input, `test:${source}`);
  assert.equal(r.rejected, 0, `rows rejected: ${JSON.stringify(r.samples)}`);
  assert.equal(r.accepted, rows.length);
}

export async function ingestWith(configPath: string, source: string, rows: readonly EventRow[]): Promise<void> {
  await withKernel(configPath, (k) => ingest(k, source, rows));
}

/** The one partition's status line (the sink "lake", dataset events, `source`). */
export async function partitionStatus(k: Hypsink, source: string): Promise<PartitionStatus> {
  const s = (await k.status()).sinks.find((x) => x.name === 'lake');
  const p = s?.partitions.find((x) => x.dataset === 'events' && x.source === source);
  assert.ok(p, `status has no line for lake × events/source=${source}`);
  return p;
}

export function statusOf(configPath: string, source: string): Promise<PartitionStatus> {
  return withKernel(configPath, (k) => partitionStatus(k, source));
}

// ---------------------------------------------------------------- the CLI

export interface CliRun {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly stdout: string;
  readonly stderr: string;
}

/** The real `hypsink` CLI (bin/hypsink.js) in a child process. */
export function runCli(args: readonly string[], env: Record<string, string | undefined> = {}, cwd = REPO): Promise<CliRun> {
  return runNode([BIN, ...args], { env, cwd });
}

/** `hypsink export --sink lake --json` in a child process; HYPSINK_FAULT selects a crash point. */
export function cliExport(configPath: string, env: Record<string, string | undefined> = {}): Promise<CliRun> {
  return runCli(['export', '--sink', 'lake', '--json', '--config', configPath], env);
}

export function describeRun(r: CliRun): string {
  return `exit ${r.code ?? r.signal}\n--- stdout\n${r.stdout}\n--- stderr\n${r.stderr}`;
}

// ---------------------------------------------------------------- the lake

function client(endpoint: string): S3Client {
  return new S3Client({ region: 'us-east-1', endpoint, forcePathStyle: true, maxAttempts: 1 });
}

/** Every key in the bucket under `prefix`, read straight from s3rver. */
export async function listKeys(s3: TestS3Server, prefix = '', bucket = 'lake'): Promise<string[]> {
  const c = client(s3.endpoint);
  try {
    const keys: string[] = [];
    let token: string | undefined;
    do {
      const r = await c.send(new ListObjectsV2Command({ Bucket: bucket, Prefix: prefix, ContinuationToken: token }));
      for (const o of r.Contents ?? []) if (o.Key) keys.push(o.Key);
      token = r.IsTruncated ? r.NextContinuationToken : undefined;
    } while (token);
    return keys.sort();
  } finally {
    c.destroy();
  }
}

export async function getObject(s3: TestS3Server, key: string, bucket = 'lake'): Promise<Buffer> {
  const c = client(s3.endpoint);
  try {
    const r = await c.send(new GetObjectCommand({ Bucket: bucket, Key: key }));
    return Buffer.from(await r.Body!.transformToByteArray());
  } finally {
    c.destroy();
  }
}

export interface Decoded {
  readonly fields: string[];
  readonly rows: EventRow[];
}

/** A Parquet blob decoded with parquet-wasm + apache-arrow, values back in row form. */
export function decodeParquet(buf: Uint8Array): Decoded {
  const t = tableFromIPC(pw.readParquet(buf).intoIPCStream());
  const fields = t.schema.fields.map((f) => f.name);
  const col = (name: string) => t.getChild(name);
  const rows: EventRow[] = [];
  for (let i = 0; i < t.numRows; i++) {
    const id = col('id')?.get(i) as bigint | number | null;
    const ts = col('ts')?.get(i) as bigint | number | Date | null;
    const msg = col('msg')?.get(i) as string | null;
    rows.push({
      id: Number(id),
      ts: ts === null || ts === undefined ? String(ts) : new Date(ts instanceof Date ? ts.getTime() : Number(ts)).toISOString(),
      msg: msg ?? null,
    });
  }
  return { fields, rows };
}

/** `hyp/events/source=<src>/events.<since>-<until>.parquet` */
export const KEY_RE = /^hyp\/events\/source=([^/]+)\/events\.(\d+)-(\d+)\.parquet$/;

export interface LakeObject {
  readonly key: string;
  readonly source: string;
  readonly since: bigint;
  readonly until: bigint;
  readonly fields: string[];
  readonly rows: EventRow[];
}

/** Every object of the events dataset, decoded, in (source, since) order. */
export async function readLake(s3: TestS3Server): Promise<LakeObject[]> {
  const out: LakeObject[] = [];
  for (const key of await listKeys(s3, 'hyp/')) {
    const m = KEY_RE.exec(key);
    assert.ok(m, `unexpected key in the lake: ${key}`);
    const d = decodeParquet(await getObject(s3, key));
    out.push({ key, source: decodeURIComponent(m[1]!), since: BigInt(m[2]!), until: BigInt(m[3]!), ...d });
  }
  return out.sort((a, b) => a.source.localeCompare(b.source) || (a.since < b.since ? -1 : a.since > b.since ? 1 : 0));
}

/**
 * The exactly-once oracle: for each source, its objects hold every expected row
 * exactly once (ids unique and complete, values equal), user columns only, and
 * their `(since, until]` ranges chain from 0 without gap or overlap up to the
 * watermark when one is given.
 */
export function assertExactlyOnce(
  objects: readonly LakeObject[],
  expected: Readonly<Record<string, readonly EventRow[]>>,
  watermarks: Readonly<Record<string, string | null>> = {},
): void {
  const sources = Object.keys(expected).sort();
  assert.deepEqual([...new Set(objects.map((o) => o.source))].sort(), sources.filter((s) => expected[s]!.length > 0), 'sources in the lake');
  for (const o of objects) {
    assert.deepEqual(o.fields, ['id', 'ts', 'msg'], `${o.key}: user columns only, no _hyp_* (got ${o.fields.join(', ')})`);
    assert.ok(o.rows.length > 0, `${o.key}: an empty blob`);
    assert.ok(o.until > o.since, `${o.key}: until ≤ since`);
  }
  for (const source of sources) {
    const mine = objects.filter((o) => o.source === source);
    let at = 0n;
    for (const o of mine) {
      assert.equal(o.since, at, `source=${source}: ${o.key} does not start where the previous object ended (${at})`);
      at = o.until;
    }
    const wm = watermarks[source];
    if (wm !== undefined) assert.equal(String(at), wm ?? '0', `source=${source}: the last object ends at the watermark`);
    const got = mine.flatMap((o) => o.rows);
    const counts = new Map<number, number>();
    for (const r of got) counts.set(r.id, (counts.get(r.id) ?? 0) + 1);
    const dup = [...counts].filter(([, n]) => n > 1).map(([id]) => id);
    assert.deepEqual(dup, [], `source=${source}: ids delivered more than once`);
    const want = [...expected[source]!].sort((a, b) => a.id - b.id);
    const missing = want.filter((r) => !counts.has(r.id)).map((r) => r.id);
    assert.deepEqual(missing.slice(0, 20), [], `source=${source}: ${missing.length} id(s) never delivered`);
    assert.deepEqual([...got].sort((a, b) => a.id - b.id), want, `source=${source}: delivered rows differ from the ingested rows`);
  }
}

// ---------------------------------------------------------------- the proxy's view

export type Logged = FaultProxy['log'][number];

/** Requests that write: PutObject, UploadPart, Create/CompleteMultipartUpload. */
export const isWrite = (l: Logged) => l.req.method === 'PUT' || l.req.method === 'POST';
export const isPutObject = (l: Logged) => l.req.method === 'PUT' && !l.req.query.has('uploadId');
export const isPart = (l: Logged) => l.req.method === 'PUT' && l.req.query.has('partNumber');
export const isComplete = (l: Logged) => l.req.method === 'POST' && l.req.query.has('uploadId');
export const isCreate = (l: Logged) => l.req.method === 'POST' && l.req.query.has('uploads');

/** Writes the store actually received (forwarded by the proxy), per object key. */
export function forwardedWrites(proxy: FaultProxy, from = 0): Logged[] {
  return proxy.log.slice(from).filter((l) => isWrite(l) && l.action === 'forward');
}

/** Asserts a text (logs, status, CLI output) carries no credential. */
export function assertNoSecret(text: string, what: string, keyId = S3RVER_ACCESS_KEY_ID, secret = SECRET_ACCESS_KEY): void {
  assert.ok(!text.includes(secret), `${what} contains the secret access key`);
  // The secret's distinctive tail, in case something printed it cut or re-encoded.
  assert.ok(!text.includes(secret.slice(-16)), `${what} contains part of the secret access key`);
  assert.ok(!text.includes(encodeURIComponent(secret)), `${what} contains the secret access key, URL-encoded`);
  if (keyId !== S3RVER_ACCESS_KEY_ID) assert.ok(!text.includes(keyId), `${what} contains the access key id`);
}
