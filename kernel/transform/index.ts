/**
 * The transform engine: a sink's `transforms` built into a chain, bound to a
 * unit's columns, applied to its Arrow batches. @ref LLP 0046
 */
export { type BoundChain, buildTransforms, canonicalJson, fingerprint, type TransformChain, type TransformChainContext } from './chain.js';
export { BUILTIN_KINDS, DEFAULT_MASK } from './config.js';
export { PATTERN_NAMES, type PatternName } from './patterns.js';
