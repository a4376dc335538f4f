/**
 * The abuse for the receiver-under-abuse figure, in a process of its own:
 * `concurrency` loops, each POSTing to /v1/ingest/ without a token, with the
 * Authorization header that made the old bearer regex quadratic (issue 18),
 * as fast as the receiver answers. Prints one line `sent <n>` a second.
 *
 *   tsx bench/lib/abuse-client.ts <url> <concurrency>
 */
import * as http from 'node:http';

const [url, conc] = process.argv.slice(2);
const base = new URL(url!);
const concurrency = Number(conc ?? 50);
const header = `Bearer x${' '.repeat(16_000)}y`;
const body = Buffer.from('{"a":1}\n'.repeat(64));
let sent = 0;

function once(): Promise<void> {
  return new Promise((resolve) => {
    const req = http.request(
      {
        hostname: base.hostname,
        port: base.port,
        path: '/v1/ingest/abuse',
        method: 'POST',
        agent: false,
        headers: {
          authorization: header,
          'content-type': 'application/x-ndjson',
          'x-hyp-partition': 'source=x',
          'x-hyp-batch-id': `abuse-${sent}`,
          'content-length': String(body.length),
        },
      },
      (res) => {
        res.resume();
        res.on('end', () => resolve());
        res.on('error', () => resolve());
      },
    );
    req.on('error', () => resolve());
    req.end(body);
    sent++;
  });
}

async function loop(): Promise<void> {
  for (;;) await once();
}

setInterval(() => process.stdout.write(`sent ${sent}\n`), 250).unref();
for (let i = 0; i < concurrency; i++) void loop();
