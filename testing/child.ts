/**
 * A kit child: one export of the kit's config, in a process of its own, so a
 * fault point can kill it as a power cut would (SIGKILL, no cleanup, no
 * shipper close). Run as `node <execArgv> child.js <config>`. With
 * HYPSINK_KIT_PROBE (a `Probe` as JSON), the kit's probe watches every ship
 * and kills the process where it says. @ref LLP 0059
 */
import { open } from '../kernel/api.js';
import { createLogger } from '../kernel/log.js';
import { setShipProbe } from '../kernel/sinks/probe.js';
import { type Probe, shipProbe } from './probe.js';

const config = process.argv[2];
if (!config) throw new Error('usage: child <config>');
const probe = process.env.HYPSINK_KIT_PROBE;
if (probe) setShipProbe(shipProbe(JSON.parse(probe) as Probe));
const k = await open({ config, log: createLogger('silent') });
try {
  await k.export();
} finally {
  await k.close();
}
