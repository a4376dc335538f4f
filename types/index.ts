/** hypsink's public contract. Plugins import from here only. */
export * from './access.js';
export * from './arrow-rows.js';
export * from './config.js';
export type * from './config-file.js';
export * from './content.js';
export * from './engine-types.js';
export * from './errors.js';
export * from './parquet-footer.js';
export * from './parquet-writer.js';
export type * from './hooks.js';
export * from './plugins.js';
export * from './schema.js';
export * from './signals.js';
export type * from './sinks.js';
export * from './storage.js';
export * from './thrift-compact.js';
export type * from './transforms.js';
export * from './postgres.js';
