// A host embedding hypsink: record a batch of rows, export it, read the status.
import { open } from 'hypsink';

const k = await open(); // ./hypsink.config.json, else the embedded default (dataset "activity", Parquet files in ./exports)
try {
  const rows = [1, 2, 3].map((id) => ({ id, ts: `2026-01-01T00:00:0${id}Z`, kind: 'click', user: `u${id}` }));
  // A retry with the same batch id never adds a row twice.
  const r = await k.ingest('activity', rows, { source: 'web', batchId: `clicks-${rows[0].id}` });
  const [tick] = await k.export('archive');
  const [p] = (await k.status()).sinks[0].partitions;
  console.log(`ingested ${r.accepted}, exported ${tick.rows}; exported ${p.exportedRows} of ${p.committedRows}, pending ${p.pendingRows}`);
} finally {
  await k.close();
}
