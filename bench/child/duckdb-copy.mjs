/**
 * The DuckDB jobs of the `peer` figure group, each a whole process:
 *   node bench/child/duckdb-copy.mjs ndjson <in.ndjson> <out.parquet>
 *     what a user would run instead of hypsink to move NDJSON into Parquet.
 *   node bench/child/duckdb-copy.mjs recode <cache dir> <out.parquet>
 *     a reference point, not a competitor: the cache's data files (Parquet,
 *     zstd) read and their user columns written, in seq order, as one zstd
 *     Parquet file: an export's decode and encode by a native engine on every
 *     core, none of its bookkeeping (LLP 0101).
 * Plain JavaScript, so no TypeScript loader is timed with it.
 */
import { DuckDBInstance } from '@duckdb/node-api';

const [job, input, output] = process.argv.slice(2);
const quote = (s) => `'${s.replaceAll("'", "''")}'`;
const SELECT = {
  ndjson: (from) => `SELECT * FROM read_json(${quote(from)}, format = 'newline_delimited')`,
  recode: (cache) =>
    `SELECT * EXCLUDE (_hyp_ingest_seq, _hyp_cache_row_id, _hyp_cache_batch_id) FROM read_parquet(${quote(`${cache}/datasets/**/*.parquet`)}) ORDER BY _hyp_ingest_seq`,
};
if (!(job in SELECT) || !input || !output) {
  process.stderr.write('usage: duckdb-copy.mjs ndjson <in.ndjson> <out.parquet> | recode <cache dir> <out.parquet>\n');
  process.exit(2);
}
const db = await DuckDBInstance.create(':memory:');
const c = await db.connect();
await c.run(`COPY (${SELECT[job](input)}) TO ${quote(output)} (FORMAT parquet, COMPRESSION zstd)`);
c.closeSync();
