/**
 * `hypsink test` (Vector's `vector test`): a sink's transform chain, or every
 * chain of the config, run on NDJSON rows from a file; the output rows and
 * the refused ones printed; with `--expect`, exit 1 on any difference from
 * the expected file, each named by row, lines, field, expected and got. What
 * it runs is kernel/cli/test-run.ts; here are only the flags and the text.
 * Exit codes: 0 ran (and matched), 1 a difference (HYPSINK_ERR_TEST), 2 a bad
 * input or expected line, an unknown sink or dataset, a config error.
 * @ref LLP 0071
 */
import type { Command } from 'commander';
import { HypsinkError } from '../../types/errors.js';
import type { SinkTest, TestResult } from './test-run.js';

interface Out {
  out(s: string): void;
}

interface Flags {
  readonly input: string;
  readonly sink?: string;
  readonly dataset?: string;
  readonly expect?: string;
  readonly source: string;
  readonly json?: boolean;
  readonly asExpected?: boolean;
}

/** The output in the expected file's form: per input row its row out, or its refusal; to review and keep as `--expect`. */
function asExpected(s: SinkTest, refusedKey: string): string {
  return s.outcomes.map((x) => JSON.stringify('row' in x ? x.row : { [refusedKey]: x.refused })).join('\n');
}

function sinkText(r: TestResult, s: SinkTest): string {
  const refused = s.outcomes.filter((x) => 'refused' in x).length;
  const lines = [`sink "${s.name}" (dataset "${r.dataset}", ${s.transforms} transform${s.transforms === 1 ? '' : 's'}): ${r.rows} row(s) → ${r.rows - refused} out, ${refused} refused`];
  if (r.expected === null) {
    // A refused row by its line and reason, as the dead letter keeps it by seq: never its values. @ref LLP 0049
    for (const x of s.outcomes) lines.push(`  ${r.input}:${x.line}  ${'row' in x ? JSON.stringify(x.row) : `refused: ${x.refused}`}`);
  } else if (s.differences.length === 0) {
    lines.push(`  matches ${r.expected} (${r.rows} row(s))`);
  } else {
    lines.push(`  ${s.differences.length} difference(s) from ${r.expected}:`);
    for (const d of s.differences) lines.push(`  ${d.message}`);
  }
  return lines.join('\n');
}

function json(r: TestResult): string {
  return JSON.stringify({
    ok: r.sinks.every((s) => s.differences.length === 0),
    input: r.input,
    dataset: r.dataset,
    rows: r.rows,
    sinks: r.sinks.map((s) => ({
      name: s.name,
      transforms: s.transforms,
      columns: s.columns,
      output: s.outcomes.flatMap((x) => ('row' in x ? [{ line: x.line, row: x.row }] : [])),
      refused: s.outcomes.flatMap((x) => ('refused' in x ? [{ line: x.line, reason: x.refused }] : [])),
      expected: r.expected,
      differences: s.differences,
    })),
  });
}

export function addTestCommand(program: Command, io: Out): void {
  program
    .command('test')
    .description("run a sink's transforms (or every sink's of the dataset) on NDJSON rows from a file: print the rows each would ship and the rows it refuses; with --expect, exit 1 on a difference (LLP 0071)")
    .requiredOption('--input <file>', 'NDJSON rows of the dataset, one a line, as "ingest" takes them')
    .option('--sink <name>', 'only this sink (default: every sink of the dataset that has transforms)')
    .option('--dataset <dataset>', 'the dataset the rows are of (default: the one the sinks export)')
    .option('--expect <file>', `NDJSON, one entry per input row: the row expected out, or {"_hyp_refused": true} (or a part of the reason) for a row expected refused`)
    .option('--source <source>', 'the source the rows are read under, as "ingest --source"', 'test')
    .option('--json', 'print the result as JSON')
    .option('--as-expected', 'print the output as an expected file: per input row the row out, or {"_hyp_refused": "<reason>"}; review it, then keep it for --expect')
    .option('--config <file>', 'config file')
    .action(async (o: Flags, cmd: Command) => {
      if (o.asExpected && (o.json || o.expect !== undefined)) throw new HypsinkError('HYPSINK_ERR_USAGE', '--as-expected prints an expected file: give it without --json and --expect');
      const { config } = cmd.optsWithGlobals<{ config?: string }>();
      const { REFUSED_KEY, runTest } = await import('./test-run.js');
      const r = await runTest({ config, input: o.input, sink: o.sink, dataset: o.dataset, expect: o.expect, source: o.source, single: o.asExpected ? '--as-expected' : undefined });
      if (o.asExpected) {
        io.out(asExpected(r.sinks[0]!, REFUSED_KEY));
        return;
      }
      io.out(o.json ? json(r) : r.sinks.map((s) => sinkText(r, s)).join('\n'));
      const failed = r.sinks.find((s) => s.differences.length > 0);
      if (failed) {
        const n = failed.differences.length;
        throw new HypsinkError('HYPSINK_ERR_TEST', `sink "${failed.name}": ${n} difference(s) from ${r.expected}; the first: ${failed.differences[0]!.message}`);
      }
    });
}
