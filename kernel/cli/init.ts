/**
 * `hypsink init`: a starter config with comments (JSON has none, so "//" keys
 * carry them); `init --receiver`, an aggregator's (`hypsink receiver --config`).
 */
import { promises as fsp } from 'node:fs';
import { HypsinkError } from '../../types/errors.js';

export const STARTER = {
  // biome-ignore lint/suspicious/noTemplateCurlyInString: it documents the config's ${ENV} syntax
  '//': 'hypsink config. Relative paths resolve against this file\'s folder. ${NAME} reads an environment variable.',
  cache: { root: '.hypsink/cache' },
  state: { dir: '.hypsink/state' },
  maintenance: {
    '//': 'retention keeps rows every sink has not exported yet, unless hardMaxRows forces it (a gap, reported in status)',
    retention: { maxAge: '30d', ackCoupled: true },
  },
  datasets: {
    events: {
      columns: [
        { name: 'id', type: 'INT64', nullable: false },
        { name: 'ts', type: 'TIMESTAMP', nullable: false },
        { name: 'msg', type: 'STRING', nullable: true },
        { name: 'payload', type: 'JSON', nullable: true },
      ],
      timestampColumn: 'ts',
    },
  },
  sinks: {
    archive: {
      '//': 'Parquet files under ./exports, one per unit; minRows/maxDelay avoid small files',
      writer: '@hypsink/format-parquet',
      destination: '@hypsink/local-fs',
      datasets: ['events'],
      schedule: '*/5 * * * *',
      config: { dir: 'exports' },
    },
  },
};

const events = STARTER.datasets.events;

/**
 * The aggregator's config: the agents' dataset plus the client column the
 * receiver fills, and one Iceberg table on a local path (no network needed to
 * try it); the comments say how to point it at S3 or PostgreSQL instead, and
 * where the tokens file comes in: it is a flag of `hypsink receiver`, not a
 * config key, so SIGHUP can re-read it without a reload. @ref LLP 0074 @ref LLP 0076
 */
export const RECEIVER_STARTER = {
  '//': [
    'hypsink aggregator config. Run it from this folder: hypsink receiver --config <this file> --tokens-file receiver.tokens --port 8787',
    'receiver.tokens holds one "<client-name> <token>" a line, a client per agent (names: letters, digits, . _ -; tokens: e.g. openssl rand -hex 32); chmod 600 it; SIGHUP re-reads it.',
    // biome-ignore lint/suspicious/noTemplateCurlyInString: it documents the config's ${ENV} syntax
    'Each agent has the same dataset (without hyp_client) and a forward sink: { "plugin": "@hypsink/forward", "datasets": ["events"], "config": { "url": "http://<this host>:8787", "token": "${HYPSINK_TOKEN}" } }.',
    // biome-ignore lint/suspicious/noTemplateCurlyInString: it documents the config's ${ENV} syntax
    'Relative paths resolve against this file\'s folder. ${NAME} reads an environment variable. README: "A fleet: agents, aggregators and a lake".',
  ],
  cache: { root: '.hypsink/agg-cache' },
  state: { dir: '.hypsink/agg-state' },
  maintenance: STARTER.maintenance,
  datasets: {
    events: {
      '//': "the agents' columns, plus hyp_client: the receiver writes the name of the client whose token sent each row there, overwriting whatever the client put in it",
      columns: [...events.columns, { name: 'hyp_client', type: 'STRING', nullable: false }],
      timestampColumn: events.timestampColumn,
    },
  },
  sinks: {
    lake: {
      '//': [
        'An Apache Iceberg table per dataset at ./lake/<table>: one snapshot per unit; minRows/maxDelay gather many agents\' batches into few commits.',
        'On S3: "destination": "@hypsink/s3", "config": { "bucket": "lake", "prefix": "hyp" } (credentials from the AWS environment).',
        // biome-ignore lint/suspicious/noTemplateCurlyInString: it documents the config's ${ENV} syntax
        'PostgreSQL instead: { "plugin": "@hypsink/postgres", "datasets": ["events"], "config": { "url": "${HYPSINK_PG_URL}", "table": "events" } }.',
      ],
      writer: '@hypsink/format-iceberg',
      destination: '@hypsink/local-fs',
      datasets: ['events'],
      schedule: '* * * * *',
      minRows: 10000,
      maxDelay: '1m',
      config: { dir: 'lake' },
      writerConfig: { table: 'events' },
    },
  },
};

/** Write `config` to `path`, refusing an existing file unless `force`. */
export async function writeStarter(path: string, force: boolean, config: object = STARTER, command = 'hypsink init'): Promise<void> {
  try {
    await fsp.writeFile(path, JSON.stringify(config, null, 2) + '\n', { flag: force ? 'w' : 'wx' });
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'EEXIST') {
      throw new HypsinkError('HYPSINK_ERR_CONFIG', `${path} already exists; pass --force to overwrite it`, {
        hint: `Keep the file and edit it, or run "${command} --force" to replace it with the starter config.`,
      });
    }
    throw e;
  }
}
