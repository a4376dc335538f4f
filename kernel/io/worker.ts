/** The worker machinery lives in the SDK (plugins encode off the kernel's thread too). @ref LLP 0079 */
export * from '../../types/worker.js';
