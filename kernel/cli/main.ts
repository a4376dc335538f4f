/**
 * The `hypsink` CLI (commander). `--config` is accepted before or after the
 * command. Exit codes: 0 ok, 1 failure, 2 bad input or config.
 */
import { promises as fsp } from 'node:fs';
import { resolve } from 'node:path';
import type { Readable } from 'node:stream';
import { Command, InvalidArgumentError, Option } from 'commander';
import { LIMIT_FLAGS as RECEIVER_LIMIT_FLAGS } from '../receiver/flags.js';
import { accessError } from '../../types/access.js';
import { ERROR_CODES, HypsinkError, isHypsinkError } from '../../types/errors.js';
import { parseDuration } from '../config/duration.js';
import type { Hypsink } from '../runtime.js';
import { addTestCommand } from './test-cmd.js';

// Each command imports what it runs when it runs: `--help` loads commander only, `ingest` and
// `status` no exporter's code, so a host that calls `ingest` often pays for ingest alone. @ref LLP 0025
const api = () => import('../api.js');
const logs = () => import('../log.js');
const render = () => import('./render.js');
const progress = () => import('./progress.js');

interface Out {
  out(s: string): void;
  err(s: string): void;
}

/**
 * Control characters reach a terminal only as visible escapes: a source, a
 * dataset or a file name is untrusted, and an escape sequence in it could
 * rewrite what the operator sees. Tabs, newlines and colour (SGR) sequences pass.
 * @ref LLP 0031
 */
export function forTerminal(s: string): string {
  // biome-ignore lint/suspicious/noControlCharactersInRegex: finding control characters is the point
  return s.replace(/\x1b\[[0-9;]*m|[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]/g, (c) =>
    c.length > 1 ? c : `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`,
  );
}

const stdio: Out = {
  out: (s) => process.stdout.write(s.endsWith('\n') ? s : `${s}\n`),
  err: (s) => process.stderr.write(s.endsWith('\n') ? s : `${s}\n`),
};

async function open(cmd: Command): Promise<Hypsink> {
  const { config } = cmd.optsWithGlobals<{ config?: string }>();
  return (await api()).open({ config });
}

async function withKernel<T>(cmd: Command, fn: (k: Hypsink) => Promise<T>): Promise<T> {
  const k = await open(cmd);
  try {
    return await fn(k);
  } finally {
    await k.close();
  }
}

/**
 * An input file, opened before reading: a missing one is bad input (exit 2),
 * one its user may not read a permission (exit 1), never a crash; with its
 * size when it is a regular file.
 */
async function openInput(file: string): Promise<{ input: Readable; size: number | null }> {
  try {
    const fh = await fsp.open(resolve(file), 'r');
    const st = await fh.stat();
    if (st.isDirectory()) {
      await fh.close();
      throw Object.assign(new Error('is a folder'), { code: 'EISDIR' });
    }
    return { input: fh.createReadStream(), size: st.isFile() ? st.size : null };
  } catch (e) {
    // A file its user may not read is a permission to fix (@ref LLP 0033); a wrong name, nothing read at all.
    throw (
      accessError(e, { elsewhere: 'pass another --file' }) ??
      new HypsinkError('HYPSINK_ERR_INPUT', `cannot read input file ${resolve(file)} (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`, {
        hint: 'Check the --file path: a readable NDJSON file, or - for standard input; nothing was read.',
      })
    );
  }
}

/** A port flag's value; anything else is a command-line mistake (commander shows the usage). */
function portNumber(v: string): number {
  const n = Number(v);
  if (!/^\d+$/.test(v) || n > 65535) throw new InvalidArgumentError('must be a port number 0-65535.');
  return n;
}

/** How long a drain waits for running units by default (README "Shutdown"). */
const DRAIN_TIMEOUT_MS = 30_000;

/** `--drain-timeout`: a duration ("90s", "2m", "500ms") or a number of milliseconds. */
function drainTimeout(v: string): number {
  const ms = parseDuration(/^\d+$/.test(v) ? Number(v) : v);
  if (ms === null) throw new InvalidArgumentError('must be a duration such as 30s, 2m or 500ms (or a number of milliseconds).');
  return ms;
}

/**
 * `run --require-healthy`: every sink's destination reached as `validate
 * --connect` reaches it; any failure refuses the start, naming each failed sink
 * and its error. @ref LLP 0068
 */
async function requireHealthy(k: Hypsink, io: Out): Promise<void> {
  const [checks, { maskSecrets }, { checkLine, connectionFailure }] = await Promise.all([k.checkConnections(), logs(), import('../sinks/connect.js')]);
  const failure = connectionFailure(checks);
  if (!failure) return;
  const failed = checks.filter((c) => !c.ok);
  for (const c of failed) io.err(maskSecrets(`hypsink: ${checkLine(c)}`));
  throw new HypsinkError(failure.code, `run --require-healthy: not starting: ${failed.map((c) => maskSecrets(checkLine(c))).join('; ')}`, {
    hint: 'Fix what each FAILED line says and start again ("hypsink validate --connect" checks the same without starting); without --require-healthy, hypsink run starts anyway and retries each tick.',
  });
}

export function buildProgram(io: Out = stdio): Command {
  const program = new Command('hypsink')
    .description('Incremental, exactly-once export of the local activity cache')
    .option('--config <file>', 'config file (default: hypsink.config.json here, else the embedded default)')
    .showHelpAfterError()
    // A usage mistake says so, through the same escaping as every other line.
    .configureOutput({
      writeErr: (s) => io.err(s),
      outputError: (s, write) => write(`hypsink: HYPSINK_ERR_USAGE: a command-line mistake: ${s.replace(/^error: /, '')}`),
    })
    .exitOverride();
  // Logs for a person at a terminal, JSON lines otherwise (LLP 0035).
  program.addOption(new Option('--log-format <format>', 'log lines: pretty at a terminal, JSON otherwise (auto), or always json or pretty').choices(['auto', 'json', 'pretty']).default('auto'));
  program.hook('preAction', async (_p, cmd) => (await logs()).setLogFormat(cmd.optsWithGlobals<{ logFormat: 'auto' | 'json' | 'pretty' }>().logFormat));

  program
    .command('init')
    .description('write a commented starter config (--receiver: an aggregator\'s, for hypsink receiver --config)')
    .option('--force', 'overwrite an existing file')
    .option('--receiver', "an aggregator's config: the client column and an Iceberg table (default file aggregator.config.json)")
    .option('--config <file>', 'where to write it (default hypsink.config.json)')
    .action(async (o: { force?: boolean; receiver?: boolean }, cmd: Command) => {
      // --config may stand before the command too, where the program's option takes it.
      const given = cmd.optsWithGlobals<{ config?: string }>().config;
      const init = await import('./init.js');
      if (o.receiver) {
        const path = resolve(given ?? 'aggregator.config.json');
        await init.writeStarter(path, o.force ?? false, init.RECEIVER_STARTER, 'hypsink init --receiver');
        io.out(`wrote ${path}; start it with: hypsink receiver --config ${path} --tokens-file receiver.tokens --port 8787 (the file's comments say what the tokens file holds)`);
        return;
      }
      const path = resolve(given ?? 'hypsink.config.json');
      await init.writeStarter(path, o.force ?? false);
      io.out(`wrote ${path}`);
    });

  program
    .command('ingest <dataset>')
    .description('NDJSON rows → spool → flush; bad rows go to the dead letter (exit 2)')
    .requiredOption('--source <source>', 'the partition value (e.g. host or app name)')
    .option('--file <file>', 'NDJSON file, or - for standard input', '-')
    .option('--batch-id <id>', 'name this batch of rows: a retry with the same id never adds a row twice')
    .option('--config <file>', 'config file')
    .option('--json', 'print the result as JSON')
    .action(async (dataset: string, o: { source: string; file: string; batchId?: string; json?: boolean }, cmd: Command) => {
      await withKernel(cmd, async (k) => {
        const { IngestError, ingestNdjson, rejectedError } = await import('../ingest/ingest.js');
        k.cache.schema(dataset); // an unknown dataset fails before any input is opened
        const { input, size } = o.file === '-' ? { input: process.stdin, size: null } : await openInput(o.file);
        const label = o.file === '-' ? '<stdin>' : resolve(o.file);
        // On a TTY: bytes read of the file's size, or rows from stdin (LLP 0035).
        const bar = o.json ? null : await (await progress()).ingestBar(size);
        let r: Awaited<ReturnType<typeof ingestNdjson>>;
        try {
          r = await ingestNdjson(k, dataset, o.source, input, label, {
            batchId: o.batchId,
            onRead: bar?.onRead,
          });
        } catch (e) {
          // Exit 0 says every valid row is durable: spooled whole, it commits with the next flush.
          if (!(e instanceof IngestError && e.durable === 'all' && e.retryable)) throw e;
          io.err((await logs()).maskSecrets(`hypsink: warning: ${e.code}: ${e.message}`));
          r = e.result;
        } finally {
          bar?.stop();
        }
        if (o.json) io.out(JSON.stringify(r));
        else if (r.duplicate) io.out(`batch ${r.batchId} was ingested before (${r.accepted} row(s)): acknowledged again, nothing added`);
        else {
          const resumed = r.resumedAfterLine > 0 ? `, resumed after line ${r.resumedAfterLine}` : '';
          io.out(`ingested ${r.accepted} row(s) into ${dataset}/source=${o.source}${r.rejected ? `, rejected ${r.rejected}` : ''} (batch ${r.batchId}${resumed})`);
        }
        if (r.rejected > 0 && !r.duplicate) throw rejectedError(r, dataset, label);
      });
    });

  program
    .command('flush')
    .description('flush every spool into the cache')
    .option('--config <file>', 'config file')
    .action(async (_o: unknown, cmd: Command) => {
      await withKernel(cmd, async (k) => {
        const r = await k.flush();
        io.out(`flushed ${r.segments} segment(s), ${r.partitions.reduce((n, p) => n + p.rows, 0)} row(s)`);
      });
    });

  program
    .command('export')
    .description('one tick of the named sink (or all sinks)')
    .option('--sink <name>', 'only this sink')
    .option('--config <file>', 'config file')
    .option('--json', 'print the result as JSON')
    .action(async (o: { sink?: string; json?: boolean }, cmd: Command) => {
      await withKernel(cmd, async (k) => {
        await k.flush();
        // On a TTY: per sink, rows exported of its rows pending (LLP 0035).
        const bars = o.json ? null : await (await progress()).exportBars();
        let reports: Awaited<ReturnType<Hypsink['export']>>;
        try {
          reports = await k.export(o.sink, { onPending: bars?.onPending, onUnit: bars?.onUnit });
        } finally {
          bars?.stop();
        }
        if (o.json) {
          io.out(
            JSON.stringify({
              sinks: reports.map((r) => ({
                name: r.sink,
                rows: r.rows,
                bytes: r.bytes,
                units: r.units,
                partitions: r.partitions.map((p) => ({
                  dataset: p.partition.dataset,
                  source: p.partition.source,
                  rows: p.rows,
                  bytes: p.bytes,
                  units: p.units,
                  gapRows: p.gapRows,
                  rejectedRows: p.rejectedRows,
                  waiting: p.waiting,
                  error: p.error ? `${p.error.code}: ${p.error.message}` : null,
                })),
              })),
            }),
          );
        } else {
          io.out((await render()).exportTable(reports));
        }
        const failed = reports.flatMap((r) => r.partitions.filter((p) => p.error));
        if (failed.length > 0) throw failed[0]!.error!;
      });
    });

  program
    .command('run')
    .description('the daemon: scheduled exports, graceful drain on SIGINT/SIGTERM (a second one exits at once), SIGHUP reloads the config')
    .option('--config <file>', 'config file')
    .option('--metrics-port <port>', 'serve Prometheus metrics on 127.0.0.1:<port>/metrics', portNumber)
    .option('--drain-timeout <duration>', 'how long a drain waits for running units before aborting them, e.g. 30s, 2m, 500ms', drainTimeout, DRAIN_TIMEOUT_MS)
    .option('--require-healthy', "refuse to start when a sink's destination fails its connection check (what validate --connect checks)")
    .option('--api [address]', 'serve the control API (hypsink ctl) on [host:]port, default 127.0.0.1:4977; anywhere but loopback it needs a token')
    .option('--api-token-file <file>', 'the API token, the first line of this file (else HYPSINK_API_TOKEN); required with a non-loopback --api')
    .action(async (o: { metricsPort?: number; drainTimeout: number; requireHealthy?: boolean; api?: string | true; apiTokenFile?: string }, cmd: Command) => {
      // The API's address and token are checked before anything opens: a refused one starts nothing. @ref LLP 0067
      const control = o.api === undefined && o.apiTokenFile === undefined ? null : await (await import('../control/cli.js')).apiSettings(o);
      const k = await open(cmd);
      try {
        // A sink's config error ends `run` now (exit 2), not at every tick; with
        // --require-healthy, so does a destination that cannot be reached. @ref LLP 0068
        if (o.requireHealthy) await requireHealthy(k, io);
        else await k.buildSinks();
      } catch (e) {
        await k.close();
        throw e;
      }
      const { Supervisor } = await import('../control/state.js');
      const { config } = cmd.optsWithGlobals<{ config?: string }>();
      const sup = new Supervisor(k, {
        // A reload reads the config file again, with the same logger.
        open: async () => (await api()).open({ config, log: k.log }),
        daemon: {
          onTick: (r) => sup.kernel.log.info({ sink: r.sink, rows: r.rows, bytes: r.bytes, units: r.units, failed: r.failed }, 'tick'),
          drainMs: o.drainTimeout,
        },
      });
      const metricsModule = o.metricsPort === undefined ? null : await import('../metrics.js');
      const metrics =
        metricsModule === null
          ? null
          : await metricsModule.serveMetrics(metricsModule.createMetrics(k), o.metricsPort!).catch(async (e: unknown) => {
              await k.close();
              throw e;
            });
      // The metrics follow the kernel a reload puts in place (its counters start again, as after a restart).
      if (metricsModule && metrics) sup.onSwap((next) => metrics.use(metricsModule.createMetrics(next)));
      if (metrics) k.log.info({ port: metrics.port }, 'metrics on /metrics');
      const served = control
        ? await (await import('../control/api.js')).serveApi(sup, control).catch(async (e: unknown) => {
            await metrics?.close();
            await k.close();
            throw e;
          })
        : null;
      if (served) k.log.info({ url: served.url, token: control?.token !== undefined }, 'control API listening');
      sup.start();
      k.log.info({ sinks: [...k.sinks.keys()], drainTimeoutMs: o.drainTimeout }, 'hypsink running; Ctrl-C to stop (a second Ctrl-C exits at once)');
      const onHup = () => {
        sup.kernel.log.info('SIGHUP: reloading the config');
        sup.reload().catch((e: unknown) => {
          const err = e as HypsinkError;
          sup.kernel.log.error({ code: err.code, hint: err.hint }, `reload refused, the running config stays: ${err.message}`);
        });
      };
      process.on('SIGHUP', onHup);
      await new Promise<void>((done) => {
        let draining = false;
        const stop = (signal: NodeJS.Signals) => {
          if (draining) {
            // The operator asked twice: exit now. Safe as a crash is: a unit cut off here
            // keeps its intent on disk and the next run finishes it under the same
            // identity, exactly once. @ref LLP 0068
            sup.kernel.log.warn(
              { signal },
              `second ${signal}: exiting now without waiting for the drain; a unit cut off keeps its intent and the next run finishes it, exactly once`,
            );
            process.exit(128 + (signal === 'SIGINT' ? 2 : 15));
          }
          draining = true;
          sup.kernel.log.info({ signal, drainTimeoutMs: o.drainTimeout }, `draining: running units get up to ${o.drainTimeout} ms; ${signal} again to exit at once`);
          void metrics?.close();
          // The API answers during the drain (ready says "stopping"), then closes.
          void sup
            .stop()
            .then(() => served?.close())
            .then(done);
        };
        // Kept for the whole drain, not `once`: signal-exit (under proper-lockfile and
        // write-file-atomic) re-raises a signal that has no listener but its own, which
        // killed the process mid-drain whenever its listener came after ours.
        process.on('SIGINT', stop);
        process.on('SIGTERM', stop);
      });
      process.off('SIGHUP', onHup);
    });

  program
    .command('ctl')
    .description("talk to a running daemon's API (hypsink run --api): status, pause, resume, restart, replay, reload, health")
    .argument('<action>', 'status, pause, resume, restart, replay, reload or health')
    .argument('[sink]', 'the sink (pause, resume, restart and replay need one; status shows one)')
    .option('--api <address>', 'the API address, [host:]port (else HYPSINK_API, else 127.0.0.1:4977)')
    .option('--token-file <file>', 'the API token, the first line of this file (else HYPSINK_API_TOKEN)')
    .option('--no-wait', 'pause: answer at once, before the tick in flight has finished its units')
    .option('--dataset <dataset>', 'replay: the dataset of the partition')
    .option('--source <source>', 'replay: the source of the partition')
    .option('--until <seq>', 'replay: the last seq of the range (inclusive)')
    .option('--since <seq>', 'replay: the seq before the range (exclusive); omit for the partition start')
    .option('--json', 'print the answer as JSON')
    .action(async (action: string, sink: string | undefined, o: { api?: string; tokenFile?: string; wait: boolean; json?: boolean; dataset?: string; source?: string; since?: string; until?: string }) => {
      const { runCtl } = await import('../control/cli.js');
      await runCtl(action, sink, o, io.out, async () => (await render()).statusTable);
    });

  program
    .command('maintain')
    .description("run retention, compaction and/or the table sinks' maintenance now (all without flags)")
    .option('--retention', 'prune old rows')
    .option('--compact', 'compact partitions')
    .option('--tables', 'compact data files, expire old snapshots and remove orphans of table sinks (Iceberg)')
    .option('--config <file>', 'config file')
    .action(async (o: { retention?: boolean; compact?: boolean; tables?: boolean }, cmd: Command) => {
      const all = !o.retention && !o.compact && !o.tables;
      await withKernel(cmd, async (k) => {
        const r = await k.maintain({ retention: all || o.retention, compact: all || o.compact, tables: all || o.tables });
        const pruned = r.retention.reduce((n, x) => n + x.prunedRows, 0);
        const forced = r.retention.reduce((n, x) => n + x.forcedRows, 0);
        io.out(`retention pruned ${pruned} row(s)${forced ? ` (${forced} before every sink had them: gap)` : ''}; compacted ${r.compaction.length} partition(s)`);
        for (const t of r.tables) io.out(`sink ${t.sink}: ${t.done}`);
      });
    });

  program
    .command('iceberg')
    .description("an Iceberg table sink's catalog: `register` adds its path-based tables to the catalog writerConfig.catalog names")
    .argument('<action>', 'register')
    .requiredOption('--sink <name>', 'the Iceberg table sink')
    .option('--config <file>', 'config file')
    .action(async (action: string, o: { sink: string }, cmd: Command) => {
      if (action !== 'register') throw new HypsinkError('HYPSINK_ERR_USAGE', `iceberg: unknown action "${action}"; the one action is register (hypsink iceberg register --sink <name>)`);
      await withKernel(cmd, async (k) => {
        io.out(`sink ${o.sink}: ${await k.registerTables(o.sink)}`);
      });
    });

  program
    .command('forget <sink>')
    .description("drop a sink's watermarks (all, or one dataset's): retention may then prune the rows it holds back")
    .option('--dataset <dataset>', 'only this dataset')
    .option('--yes', 'drop them (without it, only say what would be dropped)')
    .option('--config <file>', 'config file')
    .action(async (name: string, o: { dataset?: string; yes?: boolean }, cmd: Command) => {
      await withKernel(cmd, async (k) => {
        const plan = await k.forgetPlan(name, o.dataset);
        io.out((await render()).forgetText(plan, o.yes ?? false));
        if (o.yes) await k.forget(plan);
      });
    });

  program
    .command('accept-destination <sink>')
    .description("the sink's data was moved to the destination its config names now, or its transforms or keys changed: its watermarks go on there, in the shape its config says")
    .option('--config <file>', 'config file')
    .action(async (name: string, _o: unknown, cmd: Command) => {
      await withKernel(cmd, async (k) => {
        const { from, to } = await k.acceptDestination(name);
        io.out(`sink "${name}": its watermarks now belong to ${to}${from ? ` (they belonged to ${from})` : ''}`);
      });
    });

  program
    .command('identity')
    .description("this cache's identity, and whether it looks like a copy of another (a cloned image or host, a restored backup); with --moved or --copy, say what it is (LLP 0055)")
    .option('--moved', 'the original no longer runs (the folder was moved, the host migrated): keep the identity here')
    .option('--copy', "both run, or this is a restored backup whose later history reached the destinations: give this cache its own identity; rows up to the fork seq are left to the original")
    .option('--fork-seq <seq>', 'with --copy: the last seq the original may hold (default: the one recorded when the copy was first seen)')
    .option('--json', 'print as JSON')
    .option('--config <file>', 'config file')
    .action(async (o: { moved?: boolean; copy?: boolean; forkSeq?: string; json?: boolean }, cmd: Command) => {
      if (o.moved && o.copy) throw new HypsinkError('HYPSINK_ERR_USAGE', '--moved and --copy say opposite things: give one');
      if (o.forkSeq !== undefined && !o.copy) throw new HypsinkError('HYPSINK_ERR_USAGE', '--fork-seq goes with --copy');
      await withKernel(cmd, async (k) => {
        const { identityText } = await import('./identity-text.js');
        if (o.copy) {
          const r = await k.identityCopy(o.forkSeq !== undefined ? { forkSeq: o.forkSeq } : {});
          io.out(o.json ? JSON.stringify(r) : identityText.copied(r));
          return;
        }
        if (o.moved) {
          await k.identityMoved();
          io.out(o.json ? JSON.stringify(await k.identity()) : identityText.moved(await k.identity()));
          return;
        }
        const r = await k.identity();
        io.out(o.json ? JSON.stringify(r) : identityText.show(r));
      });
    });

  program
    .command('replay <sink>')
    .description('send one exported range of one partition again, exactly once: the way back when "hypsink verify" finds a hole (LLP 0061)')
    .requiredOption('--dataset <dataset>', 'the dataset of the partition')
    .requiredOption('--source <source>', 'the source of the partition')
    .requiredOption('--until <seq>', 'the last seq of the range (inclusive)')
    .option('--since <seq>', 'the seq before the range (exclusive); omit for the partition start')
    .option('--json', 'print the result as JSON')
    .option('--config <file>', 'config file')
    .action(async (name: string, o: { dataset: string; source: string; since?: string; until: string; json?: boolean }, cmd: Command) => {
      const { replayRangeArgs, replayText } = await import('../sinks/replay-args.js');
      const a = replayRangeArgs(o, (f) => `--${f}`);
      await withKernel(cmd, async (k) => {
        const r = await k.replay(name, a.dataset, a.source, a.since, a.until);
        io.out(o.json ? JSON.stringify(r) : replayText(r));
      });
    });

  program
    .command('validate')
    .description('check the config as an export would: every sink built (its plugins, environment variables and own config); nothing exported')
    .option('--config <file>', 'config file')
    .option('--connect', "also reach each sink's destination, writing nothing visible there: one line per sink (LLP 0036)")
    .option('--json', 'print the per-sink results as JSON')
    .action(async (o: { connect?: boolean; json?: boolean }, cmd: Command) => {
      await withKernel(cmd, async (k) => {
        if (!o.connect) {
          const names = await k.validate();
          if (o.json) io.out(JSON.stringify({ sinks: names.map((name) => ({ name, ok: true, probed: false, checked: 'built' })) }));
          else io.out(`config OK: ${names.length} sink(s)${names.length ? ` (${names.join(', ')})` : ''}`);
          return;
        }
        const [checks, { maskSecrets }, { checksText, connectionFailure }] = await Promise.all([k.checkConnections(), logs(), import('../sinks/connect.js')]);
        io.out(checksText(checks, o.json ?? false, maskSecrets));
        const failed = connectionFailure(checks);
        if (failed) throw failed;
      });
    });

  program
    .command('verify')
    .description("read back what each sink's destination holds and check it against the watermarks and the cache; exit 1 on any finding")
    .option('--sink <name>', 'only this sink')
    .option('--json', 'print the report as JSON')
    .option('--config <file>', 'config file')
    .action(async (o: { sink?: string; json?: boolean }, cmd: Command) => {
      await withKernel(cmd, async (k) => {
        const r = await k.verify(o.sink);
        const { verifyFailed, verifyText } = await import('../sinks/verify.js');
        io.out(o.json ? JSON.stringify(r) : verifyText(r));
        if (!r.ok) throw verifyFailed(r);
      });
    });

  addTestCommand(program, io); // `hypsink test`: a sink's transforms on rows from a file (LLP 0071)

  program
    .command('status')
    .description('per sink × partition: watermark, pending, exported, intent, gaps, last error')
    .option('--json', 'print as JSON')
    .option('--config <file>', 'config file')
    .action(async (o: { json?: boolean }, cmd: Command) => {
      await withKernel(cmd, async (k) => {
        const s = await k.status();
        io.out(o.json ? JSON.stringify(s) : (await render()).statusTable(s));
      });
    });

  program
    .command('demo')
    .description('the main job: ingest a new batch of demo rows and export it (what npm start runs), in folders of its own under .hypsink/demo and demo-exports, whatever hypsink.config.json says')
    .action(async () => {
      const [{ runDemo }, { DEMO_CONFIG }, a] = await Promise.all([import('./demo.js'), import('../config/defaults.js'), api()]);
      const k = await a.open({ config: DEMO_CONFIG });
      try {
        await runDemo(k, io.out);
      } finally {
        await k.close();
      }
    });

  const receiver = program
    .command('receiver')
    .description(
      'the central receiver: with --config, a hypsink host that ingests what forward sinks send into its cache, each row under its client, and exports it with its own sinks; without, the reference receiver that appends to files under --data. SIGHUP re-reads --tokens-file',
    )
    .requiredOption('--port <port>', 'port to listen on')
    .option('--config <file>', "ingest into this config's cache and run its sinks (each dataset needs the client column, a STRING)")
    .option('--client-column <name>', 'with --config: the column every row gets its client\'s name in (default hyp_client)')
    .option('--data <dir>', 'where stored rows and the ledger go (required without --config; with it, default <state dir>/receiver, the ledger alone)')
    .option('--max-cache-bytes <n>', 'with --config: answer 429 while the cache folder holds more than this (default: no bound)')
    .option('--claims <url>', 'with --config: several aggregators behind one address share a claim table in this PostgreSQL (postgres://…; HYPSINK_CLAIMS_URL if not given), so a batch retried at another aggregator is stored once')
    .option('--aggregator-name <name>', "with --claims: this aggregator's name in the claim table, the same across restarts (default: its cache's id)")
    .option('--claim-lease-ms <n>', 'with --claims: a claim is this aggregator\'s this long before another may take it over (default 30000)')
    .option('--settle-every-ms <n>', 'with --claims: settle held batches against the claim table this often, and at start (default 10000)')
    .option('--tokens-file <file>', 'clients and their tokens, one "<client-name> <token>" a line')
    .option('--token <token>', 'require this bearer token (client "default"; HYPSINK_TOKEN if not given)')
    .option('--insecure-no-auth', 'accept every request without a token (client "default")');
  // The limit flags and their checks are the receiver's own (kernel/receiver/flags.ts, a table with no imports to load).
  for (const f of RECEIVER_LIMIT_FLAGS) receiver.option(`--${f.flag} <n>`, f.help);
  receiver.action(async (o: Record<string, string | boolean | undefined>, cmd: Command) => {
    const [{ startReceiver }, { intFlag, limitsFromFlags }] = await Promise.all([import('../receiver/server.js'), import('../receiver/flags.js')]);
    const camel = (flag: string) => flag.replace(/-([a-z])/g, (_m, c: string) => c.toUpperCase());
    const str = (flag: string) => {
      const v = o[camel(flag)];
      return typeof v === 'string' ? v : undefined;
    };
    const { config } = cmd.optsWithGlobals<{ config?: string }>();
    if (config === undefined && str('data') === undefined) {
      throw new HypsinkError('HYPSINK_ERR_USAGE', 'receiver: give --config <file> (ingest into its cache) or --data <dir> (append to files)', {
        hint: 'Run `hypsink receiver --config hypsink.config.json --tokens-file tokens --port 8787`, or with --data <dir> for the file receiver.',
      });
    }
    const port = intFlag('port', str('port') ?? '', 0, 65535);
    const limits = limitsFromFlags(str);
    const maxCacheBytes = str('max-cache-bytes') === undefined ? undefined : intFlag('max-cache-bytes', str('max-cache-bytes')!, 1);
    const tokensFile = str('tokens-file');
    // Without --token, HYPSINK_TOKEN is the token: argv is visible to every local user.
    const token = str('token') ?? (tokensFile === undefined ? process.env.HYPSINK_TOKEN || undefined : undefined);
    const log = (await logs()).createLogger();
    // With --config the receiver is a host: its cache, its sinks on their schedules (the daemon). @ref LLP 0074
    // The URL carries a password: from the environment rather than argv, which every local user can read. @ref LLP 0080
    const claimsUrl = str('claims') ?? (process.env.HYPSINK_CLAIMS_URL || undefined);
    const claimFlags = ['aggregator-name', 'claim-lease-ms', 'settle-every-ms'].filter((f) => str(f) !== undefined);
    if ((claimsUrl !== undefined || claimFlags.length > 0) && config === undefined) {
      throw new HypsinkError('HYPSINK_ERR_USAGE', 'receiver: claims (--claims or HYPSINK_CLAIMS_URL) are for an aggregator: give --config <file> too', {
        hint: 'Run `hypsink receiver --config <file> --claims postgres://… --aggregator-name <name>` on each aggregator behind the address.',
      });
    }
    if (claimsUrl === undefined && claimFlags.length > 0) {
      throw new HypsinkError('HYPSINK_ERR_USAGE', `receiver: --${claimFlags[0]} needs the claim table: pass --claims <postgres url> or set HYPSINK_CLAIMS_URL`);
    }
    const claims =
      claimsUrl === undefined
        ? undefined
        : {
            url: claimsUrl,
            ...(str('aggregator-name') !== undefined ? { aggregator: str('aggregator-name')! } : {}),
            ...(str('claim-lease-ms') !== undefined ? { leaseMs: intFlag('claim-lease-ms', str('claim-lease-ms')!, 1) } : {}),
            ...(str('settle-every-ms') !== undefined ? { settleEveryMs: intFlag('settle-every-ms', str('settle-every-ms')!, 1) } : {}),
          };
    const agg =
      config === undefined
        ? null
        : await (await import('../receiver/aggregate.js')).openAggregate(await open(cmd), { maxCacheBytes, clientColumn: str('client-column'), ...(claims ? { claims } : {}) });
    const data = str('data') !== undefined ? resolve(str('data')!) : agg!.ledgerDir;
    let r: Awaited<ReturnType<typeof startReceiver>>;
    try {
      r = await startReceiver({
        port,
        dataDir: data,
        token,
        tokensFile: tokensFile === undefined ? undefined : resolve(tokensFile),
        insecureNoAuth: o.insecureNoAuth === true,
        ...limits,
        log,
        ...(agg ? { cache: agg.cache } : {}),
      });
    } catch (e) {
      await agg?.close();
      throw e;
    }
    const auth = r.stats().clients === 0 ? ' — AUTH IS OFF (--insecure-no-auth): anyone who can connect can store batches' : '';
    io.out(`receiver listening on ${r.url} (${agg ? `${agg.cache.describe}; ledger in ${data}` : `data in ${data}`})${auth}`);
    const onHup = () => void r.reload();
    process.on('SIGHUP', onHup);
    let stop: (signal: NodeJS.Signals) => void = () => undefined;
    await new Promise<void>((done) => {
      let stopping = false;
      // The receiver first (no new batch), then the sinks drain as `hypsink run`'s do.
      stop = (signal) => {
        if (stopping) {
          // Asked twice: exit now, as safe as a crash (answered batches are durable in their spools).
          log.warn({ signal }, `second ${signal}: exiting now without waiting for the drain`);
          process.exit(128 + (signal === 'SIGINT' ? 2 : 15));
        }
        stopping = true;
        void r
          .close()
          .catch((e: Error) => log.error({ err: e.message }, 'receiver close failed'))
          .then(() => agg?.close())
          .then(done, (e: Error) => {
            log.error({ err: e.message }, 'sinks did not drain');
            done();
          });
      };
      // `on`, not `once`: a lock held at the signal (proper-lockfile's signal-exit) re-raises the signal,
      // killing the drain, when it finds itself the only listener, as it does once a `once` listener is spent.
      process.on('SIGINT', stop);
      process.on('SIGTERM', stop);
    });
    process.off('SIGINT', stop);
    process.off('SIGTERM', stop);
    process.off('SIGHUP', onHup);
  });

  return program;
}

/** An error hypsink has no code for, as one line: its type (unless plain Error) and the first line of its message. */
function unexpected(e: unknown): HypsinkError {
  const name = e instanceof Error && e.name !== 'Error' && !(e.message ?? '').startsWith(e.name) ? `${e.name}: ` : '';
  const text = e instanceof Error ? e.message : String(e);
  return new HypsinkError('HYPSINK_ERR_UNEXPECTED', `${name}${text.split('\n')[0]}`, { cause: e });
}

/** The stack of an error and of its causes. */
function stacks(e: unknown): string {
  const out: string[] = [];
  for (let c: unknown = e, i = 0; c !== undefined && c !== null && i < 5; c = (c as { cause?: unknown }).cause, i++) {
    out.push(`${i === 0 ? '' : 'caused by: '}${(c as Error).stack ?? String(c)}`);
  }
  return out.join('\n');
}

export async function main(argv: string[], given: Out = stdio): Promise<number> {
  // JSON output is unchanged by it: JSON.stringify escapes C0 itself, and a C1 or U+2028 only sits inside a string.
  const io: Out = { out: (s) => given.out(forTerminal(s)), err: (s) => given.err(forTerminal(s)) };
  const program = buildProgram(io);
  try {
    await program.parseAsync(argv);
    return 0;
  } catch (e) {
    const err = e as { code?: string; exitCode?: number };
    if (typeof err.code === 'string' && err.code.startsWith('commander.')) {
      // Help and version are not errors; usage mistakes are bad input (commander printed the mistake and the usage).
      if (err.code === 'commander.helpDisplayed' || err.code === 'commander.version') return 0;
      io.err(`  → ${ERROR_CODES.HYPSINK_ERR_USAGE.hint}`);
      return ERROR_CODES.HYPSINK_ERR_USAGE.exit;
    }
    const { maskSecrets } = await logs();
    // Every failure is one coded line and its hint; the stack only when asked for.
    const known = isHypsinkError(e) ? e : (accessError(e) ?? unexpected(e));
    io.err(maskSecrets(`hypsink: ${known.code}: ${known.message}\n  → ${known.hint}`));
    if (/^(debug|trace)$/i.test(process.env.HYPSINK_LOG_LEVEL ?? '')) io.err(maskSecrets(stacks(e)));
    return known.exitCode;
  }
}

export { HypsinkError };
