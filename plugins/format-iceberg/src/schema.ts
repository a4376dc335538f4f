/**
 * The table's schema and partition spec, from the columns a unit hands the
 * writer. Field ids are the table's: a column keeps the id it was first
 * committed with, a new nullable column gets the next id, and a change Iceberg
 * cannot express safely (a column's type changed) is refused. `source` (the
 * partition's source, which the cache keeps in the path) is field 1 of every
 * table, written into each data file as a constant.
 * @ref LLP 0051 (the table format), LLP 0053 (schema evolution)
 */
import { HypsinkError } from 'hypsink/plugin';
import type { ColumnSpec, ColumnType } from 'hypsink/plugin';

export type IcebergType = 'long' | 'double' | 'string' | 'boolean' | 'timestamptz';

export interface SchemaField {
  readonly id: number;
  readonly name: string;
  readonly required: boolean;
  readonly type: IcebergType;
  readonly doc?: string;
}

export interface IcebergSchema {
  readonly type: 'struct';
  readonly 'schema-id': number;
  readonly fields: readonly SchemaField[];
}

export interface SpecField {
  readonly name: string;
  readonly transform: 'identity' | 'day';
  readonly 'source-id': number;
  readonly 'field-id': number;
}

export interface PartitionSpec {
  readonly 'spec-id': number;
  readonly fields: readonly SpecField[];
}

export const SOURCE_FIELD = 'source';
export const SOURCE_FIELD_ID = 1;
/** Partition field ids start at 1000, as the spec's writers do. */
export const FIRST_PARTITION_FIELD_ID = 1000;

const TYPES: Record<ColumnType, IcebergType> = {
  INT64: 'long',
  DOUBLE: 'double',
  STRING: 'string',
  BOOLEAN: 'boolean',
  TIMESTAMP: 'timestamptz',
  JSON: 'string',
};

export function icebergType(t: ColumnType): IcebergType {
  return TYPES[t];
}

/**
 * The first schema of a new table: `source` (never null), then the unit's
 * columns, a NOT NULL column as a required field. @ref LLP 0069
 */
export function firstSchema(columns: readonly ColumnSpec[]): IcebergSchema {
  return {
    type: 'struct',
    'schema-id': 0,
    fields: [
      { id: SOURCE_FIELD_ID, name: SOURCE_FIELD, required: true, type: 'string', doc: 'the source the rows were recorded under' },
      ...columns.map((c, i) => ({ id: i + 2, name: c.name, required: !c.nullable, type: icebergType(c.type) })),
    ],
  };
}

/**
 * The partition spec: identity on `source`, then `day(<timestampColumn>)`
 * when the writer partitions by day.
 */
export function firstSpec(schema: IcebergSchema, dayColumn: string | undefined): PartitionSpec {
  const fields: SpecField[] = [{ name: SOURCE_FIELD, transform: 'identity', 'source-id': SOURCE_FIELD_ID, 'field-id': FIRST_PARTITION_FIELD_ID }];
  if (dayColumn !== undefined) {
    const f = schema.fields.find((x) => x.name === dayColumn)!;
    fields.push({ name: `${dayColumn}_day`, transform: 'day', 'source-id': f.id, 'field-id': FIRST_PARTITION_FIELD_ID + 1 });
  }
  return { 'spec-id': 0, fields };
}

/**
 * What the table's current schema needs to take the unit's columns: null when
 * it takes them as it is, else the next schema (new fields, optional, with
 * new ids; a required field the unit's column may leave null made optional,
 * which Iceberg allows; an optional field is never made required, as its
 * files may hold nulls). A column whose type differs from the table's field,
 * or that would shadow `source`, is refused: Iceberg reads old files by field
 * id, and a changed type would read them wrongly.
 * @ref LLP 0069
 */
export function evolve(table: string, current: IcebergSchema, lastColumnId: number, columns: readonly ColumnSpec[]): { schema: IcebergSchema; lastColumnId: number } | null {
  const added: SchemaField[] = [];
  const relaxed = new Set<number>();
  let last = lastColumnId;
  for (const c of columns) {
    const want = icebergType(c.type);
    if (c.name === SOURCE_FIELD) {
      throw new HypsinkError('HYPSINK_ERR_CONFIG', `iceberg table "${table}": the dataset has a column "${SOURCE_FIELD}", which the table keeps for the rows' source; rename the column (a transform can) before it reaches this sink`);
    }
    const f = current.fields.find((x) => x.name === c.name);
    if (f === undefined) {
      added.push({ id: ++last, name: c.name, required: false, type: want });
    } else if (f.required && c.nullable) {
      relaxed.add(f.id);
    }
    if (f !== undefined && f.type !== want) {
      throw new HypsinkError(
        'HYPSINK_ERR_CONFIG',
        `iceberg table "${table}": column "${c.name}" is ${f.type} in the table (field ${f.id}) and ${c.type} (${want}) in the rows this sink writes; Iceberg cannot change a column's type safely this way: give the new column another name, or export to a new table (writerConfig.table)`,
      );
    }
  }
  if (added.length === 0 && relaxed.size === 0) return null;
  const fields = current.fields.map((f) => (relaxed.has(f.id) ? { ...f, required: false } : f));
  return { schema: { type: 'struct', 'schema-id': current['schema-id'] + 1, fields: [...fields, ...added] }, lastColumnId: last };
}

/** The field ids of the unit's columns in the table's schema (each is there once `evolve` is committed). */
export function fieldIds(schema: IcebergSchema, columns: readonly ColumnSpec[]): number[] {
  return columns.map((c) => {
    const f = schema.fields.find((x) => x.name === c.name);
    if (f === undefined) throw new HypsinkError('HYPSINK_ERR_INVARIANT', `iceberg: column "${c.name}" has no field in schema ${schema['schema-id']}`);
    return f.id;
  });
}
