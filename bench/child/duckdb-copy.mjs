/**
 * The peer of the `peer` figure group: what a user would run instead of
 * hypsink to move NDJSON into Parquet — one DuckDB job, a whole process.
 *   node bench/child/duckdb-copy.mjs <in.ndjson> <out.parquet>
 * Plain JavaScript, so no TypeScript loader is timed with it.
 */
import { DuckDBInstance } from '@duckdb/node-api';

const [input, output] = process.argv.slice(2);
if (!input || !output) {
  process.stderr.write('usage: duckdb-copy.mjs <in.ndjson> <out.parquet>\n');
  process.exit(2);
}
const quote = (s) => `'${s.replaceAll("'", "''")}'`;
const db = await DuckDBInstance.create(':memory:');
const c = await db.connect();
await c.run(`COPY (SELECT * FROM read_json(${quote(input)}, format = 'newline_delimited')) TO ${quote(output)} (FORMAT parquet, COMPRESSION zstd)`);
c.closeSync();
