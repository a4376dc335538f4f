/**
 * A figure of DESIGN §10: a named value, its target, and whether it meets it.
 * A figure group measures one or more figures from one setup (figures 1 and 2
 * share their ticks). Groups register in bench/figures/index.ts.
 */
import type { BenchContext } from './context.js';

export type Op = '<=' | '>=' | '==';

export interface Target {
  readonly op: Op;
  readonly bound: number;
}

export interface Figure {
  readonly name: string;
  readonly value: number;
  /** As written in results.json, e.g. "<= 1.5". */
  readonly target: string;
  readonly pass: boolean;
}

export interface FigureGroup {
  /** Short id for `--only`. */
  readonly id: string;
  readonly title: string;
  run(ctx: BenchContext): Promise<Figure[]>;
}

export const le = (bound: number): Target => ({ op: '<=', bound });
export const ge = (bound: number): Target => ({ op: '>=', bound });
export const eq = (bound: number): Target => ({ op: '==', bound });

function meets(value: number, t: Target): boolean {
  if (!Number.isFinite(value)) return false;
  switch (t.op) {
    case '<=':
      return value <= t.bound;
    case '>=':
      return value >= t.bound;
    case '==':
      return value === t.bound;
  }
}

/** Round for reading: ratios to 3 decimals, large values to integers. */
function tidy(value: number): number {
  if (!Number.isFinite(value)) return value;
  if (Math.abs(value) >= 1000) return Math.round(value);
  return Math.round(value * 1000) / 1000;
}

/** `alsoOk` false fails the figure whatever its value (a side condition the value cannot show). */
export function figure(name: string, value: number, target: Target, alsoOk = true): Figure {
  const v = tidy(value);
  return { name, value: v, target: `${target.op} ${target.bound}`, pass: alsoOk && meets(v, target) };
}
