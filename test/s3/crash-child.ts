/**
 * Child process for crash.test.ts: one multipart putIfAbsent that SIGKILLs
 * itself at the fault point named by HYPSINK_FAULT (like the kernel's hook).
 */
import { useS3rverCredentials } from '../support/s3server.js';
import { KEY, OPTS, baseConfig, bodyOf, bytes, makeDestination } from './helpers.js';

useS3rverCredentials();
const endpoint = process.env.S3_ENDPOINT!;
const { dest } = makeDestination(baseConfig(endpoint, { prefix: 'crash', partSize: 64 * 1024 }), {
  fault: (point) => {
    if (point === process.env.HYPSINK_FAULT) process.kill(process.pid, 'SIGKILL');
  },
});
const r = await dest.putIfAbsent(KEY, bodyOf(bytes(200 * 1024, 42)), { ...OPTS, signal: new AbortController().signal });
process.stdout.write(JSON.stringify(r));
await dest.close();
