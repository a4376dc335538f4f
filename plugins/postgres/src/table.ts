/**
 * The tables the sink writes: the dataset's table (created from the dataset
 * schema, or checked against it), its watermark table and its dead letter.
 * DDL runs under a transaction-scoped advisory lock per table, so several
 * hosts starting at once do not race CREATE TABLE IF NOT EXISTS (which can fail
 * with a duplicate-key error on the catalog when two run together).
 */
import { type ColumnSpec, type ColumnType, HypsinkError } from 'hypsink/plugin';
import type pg from 'pg';

/** A quoted identifier: `"a""b"`. */
export const q = (name: string) => `"${name.replace(/"/g, '""')}"`;

/** The dataset type's column type, as CREATE TABLE takes it and `format_type` names it (without modifiers). */
export const PG_TYPES: Record<ColumnType, { ddl: string; shown: string }> = {
  INT64: { ddl: 'bigint', shown: 'bigint' },
  DOUBLE: { ddl: 'double precision', shown: 'double precision' },
  STRING: { ddl: 'text', shown: 'text' },
  BOOLEAN: { ddl: 'boolean', shown: 'boolean' },
  TIMESTAMP: { ddl: 'timestamptz', shown: 'timestamp with time zone' },
  JSON: { ddl: 'jsonb', shown: 'jsonb' },
};

/** The column every table gets first: the row's source (its logical partition). */
export const SOURCE_COLUMN = 'source';

export interface Names {
  readonly schema: string;
  readonly watermarks: string;
  readonly rejects: string;
  readonly units: string;
}

/** The sink's own tables, quoted and schema-qualified. */
export function ownTables(n: Names): { wm: string; rj: string; un: string } {
  return { wm: `${q(n.schema)}.${q(n.watermarks)}`, rj: `${q(n.schema)}.${q(n.rejects)}`, un: `${q(n.schema)}.${q(n.units)}` };
}

/**
 * The watermark table, the dead letter and the unit records, created if
 * missing (always: they are the sink's own). A deployment from before unit
 * records has the first two: the third is made on its first export, and its
 * units committed before stay recorded by the watermark row alone. @ref LLP 0056
 */
export async function ensureOwnTables(c: pg.ClientBase, n: Names): Promise<void> {
  const { wm, rj, un } = ownTables(n);
  // CREATE TABLE IF NOT EXISTS needs CREATE on the schema even when the table is there: a role
  // given only the table privileges (its tables made beforehand) would never export. @ref LLP 0045
  const there = await c.query<{ ok: boolean }>('SELECT to_regclass($1) IS NOT NULL AND to_regclass($2) IS NOT NULL AND to_regclass($3) IS NOT NULL AS ok', [wm, rj, un]);
  if (there.rows[0]?.ok) return;
  await inLock(c, `${n.schema}.${n.watermarks}`, async () => {
    await c.query(
      `CREATE TABLE IF NOT EXISTS ${wm} (
        writer text NOT NULL, sink text NOT NULL, dataset text NOT NULL, source text NOT NULL,
        until bigint NOT NULL, unit text NOT NULL, target text NOT NULL,
        updated_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (writer, sink, dataset, source))`,
    );
    // row_json is jsonb (LLP 0069); a dead letter made before as text is kept and written as text.
    await c.query(
      `CREATE TABLE IF NOT EXISTS ${rj} (
        writer text NOT NULL, sink text NOT NULL, dataset text NOT NULL, source text NOT NULL,
        unit text NOT NULL, ordinal integer NOT NULL, reason text NOT NULL, row_json jsonb NOT NULL,
        target text NOT NULL, rejected_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (writer, sink, unit, ordinal))`,
    );
    // One row per committed unit of a writer's partition, keyed by its until (a partition's units
    // never share one). since NULL: the partition's first unit. digest NULL: a range committed
    // before unit records existed, known only from the watermark row (rows, rejected NULL too).
    await c.query(
      `CREATE TABLE IF NOT EXISTS ${un} (
        writer text NOT NULL, sink text NOT NULL, dataset text NOT NULL, source text NOT NULL,
        since bigint, until bigint NOT NULL, unit text NOT NULL, digest text,
        rows bigint, rejected integer, target text NOT NULL,
        committed_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (writer, sink, dataset, source, until))`,
    );
  });
}

interface TableColumn {
  readonly name: string;
  readonly type: string;
  readonly nullable: boolean;
  readonly hasDefault: boolean;
}

/**
 * The table's columns, null when there is no such table: each type without
 * modifiers (a domain by its base type), NOT NULL also by its domain, and an
 * identity column as one with a default (COPY leaves it out, the server fills
 * it). From pg_catalog: information_schema.columns costs 10–40 ms a query on an
 * idle server, paid before the first row of every export a process makes.
 * @ref LLP 0092
 */
async function tableColumns(c: pg.ClientBase, schema: string, table: string): Promise<TableColumn[] | null> {
  const r = await c.query<{ column_name: string | null; data_type: string | null; nullable: boolean | null; has_default: boolean | null }>(
    `SELECT a.attname AS column_name,
        format_type(CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE a.atttypid END, NULL) AS data_type,
        NOT (a.attnotnull OR (t.typtype = 'd' AND t.typnotnull)) AS nullable,
        a.atthasdef OR a.attidentity <> '' AS has_default
      FROM pg_catalog.pg_class k
      JOIN pg_catalog.pg_namespace s ON s.oid = k.relnamespace
      LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = k.oid AND a.attnum > 0 AND NOT a.attisdropped
      LEFT JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
      WHERE s.nspname = $1 AND k.relname = $2
      ORDER BY a.attnum`,
    [schema, table],
  );
  if (r.rows.length === 0) return null;
  return r.rows.filter((x) => x.column_name !== null).map((x) => ({ name: x.column_name!, type: x.data_type!, nullable: x.nullable === true, hasDefault: x.has_default === true }));
}

export interface TableTarget {
  readonly sink: string;
  readonly schema: string;
  readonly table: string;
  readonly create: boolean;
}

/**
 * Make the table fit `columns` (the unit's, fixed in its intent): create it,
 * add a nullable column the dataset gained, or refuse with the column that
 * differs. A table that fits already (every run after the first) is read
 * once, outside any transaction and without the DDL lock: one round trip
 * before the unit's COPY, not four, and a host holding the lock for its DDL
 * does not hold up the exports of the others. Only DDL takes the lock, in a
 * transaction of its own, reading the table again under it.
 * @ref LLP 0097: a table that fits is read, not locked
 */
export async function ensureTable(c: pg.ClientBase, t: TableTarget, columns: readonly ColumnSpec[]): Promise<void> {
  const seen = await tableColumns(c, t.schema, t.table);
  if (seen !== null && columnsToAdd(t, seen, columns).length === 0) return;
  const full = `${q(t.schema)}.${q(t.table)}`;
  const shown = `${t.schema}.${t.table}`;
  await inLock(c, shown, async () => {
    let have = await tableColumns(c, t.schema, t.table);
    if (have === null) {
      if (!t.create) {
        throw new HypsinkError(
          'HYPSINK_ERR_DESTINATION',
          `sink "${t.sink}": table ${shown} does not exist and config.createTable is false; create it (${describeColumns(columns)}) or set config.createTable to true`,
        );
      }
      const defs = [`${q(SOURCE_COLUMN)} text NOT NULL`, ...columns.map((col) => `${q(col.name)} ${PG_TYPES[col.type].ddl}${col.nullable ? '' : ' NOT NULL'}`)];
      await c.query(`CREATE TABLE ${full} (${defs.join(', ')})`);
      have = (await tableColumns(c, t.schema, t.table)) ?? [];
    }
    for (const col of columnsToAdd(t, have, columns)) await c.query(`ALTER TABLE ${full} ADD COLUMN ${q(col.name)} ${PG_TYPES[col.type].ddl}`);
  });
}

/**
 * The columns to add for the table to fit `columns` (nullable ones the
 * dataset gained, with config.createTable); any other difference is refused,
 * naming the column and what to do.
 */
function columnsToAdd(t: TableTarget, have: readonly TableColumn[], columns: readonly ColumnSpec[]): ColumnSpec[] {
  const full = `${q(t.schema)}.${q(t.table)}`;
  const shown = `${t.schema}.${t.table}`;
  const byName = new Map(have.map((x) => [x.name, x]));
  const wanted: ColumnSpec[] = [{ name: SOURCE_COLUMN, type: 'STRING', nullable: false }, ...columns];
  const add: ColumnSpec[] = [];
  for (const col of wanted) {
    const got = byName.get(col.name);
    const expect = PG_TYPES[col.type].shown;
    if (!got) {
      if (t.create && col.nullable) {
        add.push(col);
        continue;
      }
      throw new HypsinkError(
        'HYPSINK_ERR_DESTINATION',
        `sink "${t.sink}": table ${shown} has no column "${col.name}" (${expect}${col.nullable ? '' : ' NOT NULL'}), which the dataset has; ` +
          (col.nullable ? 'add it, or set config.createTable to true to let the sink add it' : `add it (ALTER TABLE ${full} ADD COLUMN ${q(col.name)} ${PG_TYPES[col.type].ddl})`),
      );
    }
    if (got.type !== expect) {
      throw new HypsinkError(
        'HYPSINK_ERR_DESTINATION',
        `sink "${t.sink}": column "${col.name}" of table ${shown} is ${got.type}, but the dataset's ${col.type} column goes to ${expect}; change the column's type or point config.table at another table`,
      );
    }
  }
  for (const got of have) {
    if (!wanted.some((w) => w.name === got.name) && !got.nullable && !got.hasDefault) {
      throw new HypsinkError(
        'HYPSINK_ERR_DESTINATION',
        `sink "${t.sink}": table ${shown} has a NOT NULL column "${got.name}" without a default that the dataset does not have, so no row could be written; give it a default, make it nullable, or point config.table at another table`,
      );
    }
  }
  return add;
}

function describeColumns(columns: readonly ColumnSpec[]): string {
  return [`${SOURCE_COLUMN} text NOT NULL`, ...columns.map((c) => `${c.name} ${PG_TYPES[c.type].ddl}${c.nullable ? '' : ' NOT NULL'}`)].join(', ');
}

/** Run `fn` in a transaction holding an advisory lock named after `what`. */
async function inLock(c: pg.ClientBase, what: string, fn: () => Promise<void>): Promise<void> {
  await c.query('BEGIN');
  try {
    await c.query('SELECT pg_advisory_xact_lock(hashtext($1))', [`hypsink:ddl:${what}`]);
    await fn();
    await c.query('COMMIT');
  } catch (e) {
    await c.query('ROLLBACK').catch(() => undefined);
    throw e;
  }
}
