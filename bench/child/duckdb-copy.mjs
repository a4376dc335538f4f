/**
 * The DuckDB jobs of the `peer` figure group, each a whole process:
 *   node bench/child/duckdb-copy.mjs ndjson <in.ndjson> <out.parquet>
 *     what a user would run instead of hypsink to move NDJSON into Parquet.
 *   node bench/child/duckdb-copy.mjs recode <cache dir> <out.parquet>
 *     a reference point, not a competitor: the cache's data files read in seq
 *     order (listed by the first seq each one's name carries, so no sort) and
 *     their user columns written as one zstd Parquet file with the export's
 *     types (the demo dataset's `ts` as UTC µs, `payload` as JSON) and row
 *     groups: an export's decode and encode by a native engine on every
 *     core, none of its bookkeeping (LLP 0101, LLP 0111).
 * Plain JavaScript, so no TypeScript loader is timed with it.
 */
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { DuckDBInstance } from '@duckdb/node-api';

const [job, input, output] = process.argv.slice(2);
const quote = (s) => `'${s.replaceAll("'", "''")}'`;

/** The cache's data files of every partition, in seq order: `data-<first seq>-<last seq>.parquet`. */
function dataFiles(cache) {
  const found = [];
  for (const e of readdirSync(join(cache, 'datasets'), { recursive: true, withFileTypes: true })) {
    if (!e.isFile() || !e.name.endsWith('.parquet')) continue;
    const m = /^data-(\d+)-(\d+)\.parquet$/.exec(e.name);
    if (!m) throw new Error(`recode: ${join(e.parentPath ?? e.path, e.name)} is not named data-<first>-<last>.parquet; the cache's layout changed, so fix this job's listing`);
    found.push({ first: Number(m[1]), path: join(e.parentPath ?? e.path, e.name) });
  }
  if (found.length === 0) throw new Error(`recode: no data files under ${cache}/datasets`);
  return found.sort((a, b) => a.first - b.first).map((f) => quote(f.path));
}

const SELECT = {
  ndjson: (from) => `SELECT * FROM read_json(${quote(from)}, format = 'newline_delimited')`,
  // ORDER BY _hyp_ingest_seq here made DuckDB sort 1M rows it already had in order: 430 MB and a
  // third of its time, which LLP 0101 took for the cost of the recode itself. @ref LLP 0111
  recode: (cache) =>
    `SELECT * EXCLUDE (_hyp_ingest_seq, _hyp_cache_row_id, _hyp_cache_batch_id) REPLACE (ts::TIMESTAMPTZ AS ts, payload::JSON AS payload) FROM read_parquet([${dataFiles(cache).join(', ')}], hive_partitioning = false)`,
};
const OPTIONS = { ndjson: '', recode: ', ROW_GROUP_SIZE 65536' };
if (!(job in SELECT) || !input || !output) {
  process.stderr.write('usage: duckdb-copy.mjs ndjson <in.ndjson> <out.parquet> | recode <cache dir> <out.parquet>\n');
  process.exit(2);
}
const db = await DuckDBInstance.create(':memory:');
const c = await db.connect();
await c.run(`COPY (${SELECT[job](input)}) TO ${quote(output)} (FORMAT parquet, COMPRESSION zstd${OPTIONS[job]})`);
c.closeSync();
