/** `hypsink init`: a starter config with comments (JSON has none, so "//" keys carry them). */
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

export async function writeStarter(path: string, force: boolean): Promise<void> {
  try {
    await fsp.writeFile(path, JSON.stringify(STARTER, null, 2) + '\n', { flag: force ? 'w' : 'wx' });
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'EEXIST') {
      throw new HypsinkError('HYPSINK_ERR_CONFIG', `${path} already exists; pass --force to overwrite it`, {
        hint: 'Keep the file and edit it, or run "hypsink init --force" to replace it with the starter config.',
      });
    }
    throw e;
  }
}
