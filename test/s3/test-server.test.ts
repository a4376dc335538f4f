/**
 * The S3 stand-in every S3 test and the simulation judge by: once a write is
 * answered, the object is there whole, as S3 shows it. s3rver 3.7.1 answers a
 * PutObject, an UploadPart and a CompleteMultipartUpload when the bytes have
 * passed its hashing stream, not when its file stream has written them: on a
 * slow disk a part was read back short at completion and the object stored
 * cut, its md5 of the cut bytes. Here every write of the process is slowed
 * (the real disk, later), as the CI machine's disk was when seed 214 read a
 * lake object with no Parquet footer. @ref LLP 0107
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { CompleteMultipartUploadCommand, CreateMultipartUploadCommand, GetObjectCommand, PutObjectCommand, S3Client, UploadPartCommand } from '@aws-sdk/client-s3';
import { startS3Server, type TestS3Server, useS3rverCredentials } from '../support/s3server.js';

let s3: TestS3Server;
let client: S3Client;
const realWrite = fs.write;

before(async () => {
  useS3rverCredentials();
  s3 = await startS3Server({ buckets: ['slow'] });
  client = new S3Client({ endpoint: s3.endpoint, region: 'us-east-1', forcePathStyle: true });
});

after(async () => {
  fs.write = realWrite;
  client.destroy();
  await s3.stop();
});

/**
 * Every fs.write of the process (what a file stream and a callback writeFile
 * call) of 512 bytes or more lands `ms` late: a loaded disk, where the small
 * files s3rver writes after an object's bytes (its md5, its metadata) are
 * written before them.
 */
function slowWrites(ms: number): () => void {
  fs.write = ((...args: unknown[]) => {
    const data = args[1];
    const delay = ArrayBuffer.isView(data) && data.byteLength >= 512 ? ms : 0;
    setTimeout(() => (realWrite as (...a: unknown[]) => void)(...args), delay);
  }) as typeof fs.write;
  return () => {
    fs.write = realWrite;
  };
}

function objectFile(key: string): string {
  return path.join(s3.directory, 'slow', `${key}._S3rver_object`);
}

async function getBody(key: string): Promise<Buffer> {
  const r = await client.send(new GetObjectCommand({ Bucket: 'slow', Key: key }));
  return Buffer.from(await r.Body!.transformToByteArray());
}

test('a PutObject answered is an object whole on disk and over GET, on a slow disk', async () => {
  const body = Buffer.from(Array.from({ length: 3000 }, (_, i) => i % 251));
  const restore = slowWrites(40);
  try {
    for (let i = 0; i < 3; i++) {
      await client.send(new PutObjectCommand({ Bucket: 'slow', Key: `put-${i}`, Body: body }));
      assert.deepEqual(await readFile(objectFile(`put-${i}`)), body, `put-${i} on disk right after its answer`);
      assert.deepEqual(await getBody(`put-${i}`), body);
    }
  } finally {
    restore();
  }
});

test('a multipart upload answered is the parts whole, in order, on a slow disk', async () => {
  const parts = [Buffer.alloc(2048, 1), Buffer.alloc(1024, 2), Buffer.alloc(46, 3)];
  const restore = slowWrites(40);
  try {
    const { UploadId } = await client.send(new CreateMultipartUploadCommand({ Bucket: 'slow', Key: 'multi' }));
    const done = [];
    for (const [i, p] of parts.entries()) {
      const r = await client.send(new UploadPartCommand({ Bucket: 'slow', Key: 'multi', UploadId, PartNumber: i + 1, Body: p }));
      done.push({ PartNumber: i + 1, ETag: r.ETag });
    }
    await client.send(new CompleteMultipartUploadCommand({ Bucket: 'slow', Key: 'multi', UploadId, MultipartUpload: { Parts: done } }));
    const whole = Buffer.concat(parts);
    assert.deepEqual(await readFile(objectFile('multi')), whole, 'the object on disk right after completion');
    assert.deepEqual(await getBody('multi'), whole);
  } finally {
    restore();
  }
});
