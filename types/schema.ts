/**
 * Dataset schemas: the shape of the rows a host records and a sink exports.
 *
 * Values travel in "row form": plain JSON-compatible values. INT64 is a number
 * when it is a safe integer and a decimal string otherwise; TIMESTAMP is an
 * ISO-8601 string (UTC, millisecond precision); JSON is any JSON value.
 */

/** The column types a dataset may declare. */
export type ColumnType = 'INT64' | 'DOUBLE' | 'STRING' | 'BOOLEAN' | 'TIMESTAMP' | 'JSON';

export const COLUMN_TYPES: readonly ColumnType[] = ['INT64', 'DOUBLE', 'STRING', 'BOOLEAN', 'TIMESTAMP', 'JSON'];

/** One user column of a dataset. */
export interface ColumnSpec {
  readonly name: string;
  readonly type: ColumnType;
  /** A non-nullable column rejects rows where the value is missing or null. */
  readonly nullable: boolean;
}

/** A dataset's schema. Adding a nullable column later is allowed; older files read it as null. */
export interface DatasetSchema {
  readonly columns: readonly ColumnSpec[];
  /** The TIMESTAMP column retention ages rows by; without one only the row cap applies. */
  readonly timestampColumn?: string;
}

/** A row in row form, keyed by column name. Internal `_hyp_*` columns never appear. */
export type Row = Record<string, unknown>;

/** The column that names a row's logical partition. It lives in the path, not in data files. */
export const PARTITION_COLUMN = 'source';

/** Prefix of the kernel's internal columns; stripped from every read and export. */
export const INTERNAL_PREFIX = '_hyp_';
