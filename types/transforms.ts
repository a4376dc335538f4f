/**
 * Transforms: per-sink column work between the read of a unit and its encoder
 * or shipper (select, drop, rename, redact, hash are built in; a plugin adds
 * its own kinds with `registerTransform`). A transform works on Arrow
 * columns, batch by batch, and says its output columns before it sees a row,
 * so the schema a sink writes is known when the sink is built.
 *
 * Transforms are pure and deterministic: the same batch in gives the same
 * bytes out, on every read of a unit and after a restart. The configured
 * chain is part of what a unit is (its identity is recorded with the unit's
 * intent): a changed chain changes what the sink delivers, as a changed
 * destination does. @ref LLP 0046
 */
import type { RecordBatch } from 'apache-arrow';
import type { Logger } from './plugins.js';
import type { ColumnSpec } from './schema.js';
import type { PluginOptionsSpec } from './sinks.js';

/** A row a transform left out of its output, and why. */
export interface RowRefusal {
  /** The row's index in the batch the transform was given. */
  readonly row: number;
  /**
   * Why, naming the column and what failed (`column "payload" is not valid
   * JSON (at offset 17)`). Never the value, nor any part of it: reasons reach
   * logs and dead letters, and a refused value is one that could not be made
   * safe to ship.
   */
  readonly reason: string;
}

/** What a bound transform makes of one batch. */
export interface TransformOutput {
  /**
   * The rows of the input batch that were not refused, in their order, as
   * columns exactly `BoundTransform.columns` (names, order, Arrow types of
   * those column types).
   */
  readonly batch: RecordBatch;
  /** The rows left out, ascending by `row`, each once. Every input row is in `batch` or here. */
  readonly refused: readonly RowRefusal[];
}

/** A transform bound to the columns it will be given. */
export interface BoundTransform {
  /** The columns of every batch `apply` returns: known before any row. */
  readonly columns: readonly ColumnSpec[];
  /**
   * Map one batch of the input columns (as `bind` was given them) to one of
   * `columns`. Pure: no clock, no randomness, no state carried from one
   * batch to the next; the same batch gives byte-identical output. A row the
   * transform cannot map safely is refused, never passed on as it was.
   * Throwing fails the whole unit (nothing of it ships).
   */
  apply(batch: RecordBatch): TransformOutput;
}

/** A configured transform, not yet bound to columns. */
export interface Transform {
  /**
   * What makes its output what it is beyond its config, e.g. the version of
   * its algorithm: part of the chain's identity, so changing it makes units
   * recorded before it stand out. Never a secret.
   */
  readonly version?: string;
  /**
   * Check the input columns and say the output ones. A column it needs that
   * is not there, or is of a type it does not take, is an error:
   * HypsinkError `HYPSINK_ERR_CONFIG` whose message starts with the field,
   * `config.column: no column "x"`; the kernel prefixes the sink and
   * `transforms[i].`. A unit is bound with its own columns (those of its
   * intent), so one transform may be bound more than once.
   */
  bind(input: readonly ColumnSpec[]): BoundTransform;
}

/** What a transform plugin's factory gets when a sink's chain is built. */
export interface TransformBuildContext {
  /** The sink instance name from the config. */
  readonly sink: string;
  /** The folder relative config paths resolve against. */
  readonly baseDir: string;
  readonly log: Logger;
}

/**
 * A transform kind a plugin provides, configured in a sink's `transforms` as
 * `{ "plugin": "<name>", "config": { … } }`. `config` reaches `create` with
 * its `${VAR}` references resolved; in the chain's identity every value that
 * came from the environment is replaced by a fingerprint.
 */
export interface TransformFactory {
  readonly name: string;
  /** The options it takes (the entry's `config`), checked before `create`: fields as `transforms[i].config.<key>`. */
  readonly options?: PluginOptionsSpec;
  create(config: Record<string, unknown>, ctx: TransformBuildContext): Transform;
}
