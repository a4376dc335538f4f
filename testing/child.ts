/**
 * A kit child: one export of the kit's config, in a process of its own, so a
 * fault point can kill it as a power cut would (SIGKILL, no cleanup, no
 * shipper close). Run as `node <execArgv> child.js <config>`.
 */
import { open } from '../kernel/api.js';
import { createLogger } from '../kernel/log.js';

const config = process.argv[2];
if (!config) throw new Error('usage: child <config>');
const k = await open({ config, log: createLogger('silent') });
try {
  await k.export();
} finally {
  await k.close();
}
