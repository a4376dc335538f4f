/**
 * The embedded default: what `hypsink` does with no config file. A cache under
 * `.hypsink/`, one local-fs Parquet sink writing to `./exports`, and the demo
 * dataset (activity events with a nested JSON payload).
 */
export const DEFAULT_CONFIG = {
  cache: { root: '.hypsink/cache' },
  state: { dir: '.hypsink/state' },
  maintenance: { retention: { maxAge: '30d', ackCoupled: true } },
  datasets: {
    activity: {
      columns: [
        { name: 'id', type: 'INT64', nullable: false },
        { name: 'ts', type: 'TIMESTAMP', nullable: false },
        { name: 'kind', type: 'STRING', nullable: false },
        { name: 'user', type: 'STRING', nullable: true },
        { name: 'duration_ms', type: 'DOUBLE', nullable: true },
        { name: 'ok', type: 'BOOLEAN', nullable: true },
        { name: 'payload', type: 'JSON', nullable: true },
      ],
      timestampColumn: 'ts',
    },
  },
  sinks: {
    archive: {
      writer: '@hypsink/format-parquet',
      destination: '@hypsink/local-fs',
      datasets: ['activity'],
      schedule: '*/5 * * * *',
      config: { dir: 'exports' },
    },
  },
} as const;

/**
 * What `npm start` (`hypsink demo`) runs on, whatever `hypsink.config.json`
 * says: the embedded default's dataset and sink, in folders of its own, so a
 * config written by `hypsink init` (another schema, the same `.hypsink/` and
 * `exports/`) is never mixed with the demo's rows.
 */
export const DEMO_CONFIG = {
  ...DEFAULT_CONFIG,
  cache: { root: '.hypsink/demo/cache' },
  state: { dir: '.hypsink/demo/state' },
  sinks: { archive: { ...DEFAULT_CONFIG.sinks.archive, config: { dir: 'demo-exports' } } },
} as const;
