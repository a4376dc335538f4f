/**
 * A figure of DESIGN §10: a named value, its target, and whether it meets it.
 * A figure group measures one or more figures from one setup (figures 1 and 2
 * share their ticks). Groups register in bench/figures/index.ts.
 */
import type { BenchContext } from './context.js';

/** `report`: a figure measured and shown, with no target to meet (it always passes). */
export type Op = '<=' | '>=' | '==' | 'report';

export interface Target {
  readonly op: Op;
  readonly bound: number;
}

/** How the measurements a figure is computed from spread: their count, least, median and greatest. */
export interface Spread {
  readonly n: number;
  readonly min: number;
  readonly median: number;
  readonly max: number;
}

export interface Figure {
  readonly name: string;
  readonly value: number;
  /** As written in results.json, e.g. "<= 1.5". */
  readonly target: string;
  readonly pass: boolean;
  /** Of the per-repetition values the figure is the median of (n 1: one measurement). @ref LLP 0040 */
  readonly spread: Spread;
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
export const report: Target = { op: 'report', bound: Number.NaN };

function meets(value: number, t: Target): boolean {
  if (!Number.isFinite(value)) return false;
  switch (t.op) {
    case '<=':
      return value <= t.bound;
    case '>=':
      return value >= t.bound;
    case '==':
      return value === t.bound;
    case 'report':
      return true;
  }
}

/** Round for reading: ratios to 3 decimals, large values to integers. */
function tidy(value: number): number {
  if (!Number.isFinite(value)) return value;
  if (Math.abs(value) >= 1000) return Math.round(value);
  return Math.round(value * 1000) / 1000;
}

function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

export function spreadOf(samples: readonly number[]): Spread {
  if (samples.length === 0) throw new Error('a figure needs at least one measurement for its spread');
  return { n: samples.length, min: tidy(Math.min(...samples)), median: tidy(median(samples)), max: tidy(Math.max(...samples)) };
}

/** The spread as the table shows it next to the value: `min / median / max (n=…)`. */
export function showSpread(s: Spread): string {
  return s.n === 1 ? 'one measurement' : `${s.min} / ${s.median} / ${s.max} (n=${s.n})`;
}

/**
 * `samples`: the per-repetition values the figure is the median of (one
 * value for a single measurement). `alsoOk` false fails the figure whatever
 * its value (a side condition the value cannot show).
 */
export function figure(name: string, value: number, target: Target, samples: readonly number[], alsoOk = true): Figure {
  const v = tidy(value);
  return { name, value: v, target: target.op === 'report' ? 'report only' : `${target.op} ${target.bound}`, pass: alsoOk && meets(v, target), spread: spreadOf(samples) };
}
