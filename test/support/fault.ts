/** Arming the kernel's named fault points from a test, in this process. */
import { resetFaultHits } from '../../kernel/fault.js';

/** Run `fn` with the fault point armed to throw (the operation fails right after that durable step). */
export async function throwingAt<T>(point: string, fn: () => Promise<T>): Promise<T> {
  process.env.HYPSINK_FAULT = point;
  process.env.HYPSINK_FAULT_ACTION = 'throw';
  resetFaultHits();
  try {
    return await fn();
  } finally {
    delete process.env.HYPSINK_FAULT;
    delete process.env.HYPSINK_FAULT_ACTION;
    resetFaultHits();
  }
}
