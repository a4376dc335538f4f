/**
 * DuckDB doing an export's Parquet work alone: a `peer` figure's reference
 * point, not a competitor. It reads the cache's data files of a workspace
 * (Parquet, zstd) and writes their user columns, in seq order, as one zstd
 * Parquet file: the decode and encode a hypsink `export` does, with none of
 * its bookkeeping, by a native engine on every core. A whole process.
 *   node bench/child/duckdb-recode.mjs <cache dir> <out.parquet>
 * Plain JavaScript, so no TypeScript loader is timed with it.
 * @ref LLP 0101
 */
import { DuckDBInstance } from '@duckdb/node-api';

const [cache, output] = process.argv.slice(2);
if (!cache || !output) {
  process.stderr.write('usage: duckdb-recode.mjs <cache dir> <out.parquet>\n');
  process.exit(2);
}
const quote = (s) => `'${s.replaceAll("'", "''")}'`;
const db = await DuckDBInstance.create(':memory:');
const c = await db.connect();
await c.run(
  `COPY (SELECT * EXCLUDE (_hyp_ingest_seq, _hyp_cache_row_id, _hyp_cache_batch_id) FROM read_parquet(${quote(`${cache}/datasets/**/*.parquet`)}) ORDER BY _hyp_ingest_seq) TO ${quote(output)} (FORMAT parquet, COMPRESSION zstd)`,
);
c.closeSync();
