/**
 * redact: masks what the finders find inside STRING values, and inside the
 * string values of JSON values (only at given JSON paths, if any), with a
 * fixed mask. Column-wise: the anchors run once over a column's bytes, and
 * only the cells they touch are decoded and looked at; a column where nothing
 * is found is passed on as it was (the same Data). A JSON value that must be
 * looked into and is not valid JSON is refused: it cannot be known what in it
 * is a string value. What it never looks at (member names, numbers, encoded forms): @ref LLP 0066. @ref LLP 0046
 */
import { isUtf8 } from 'node:buffer';
import type { Data, RecordBatch } from 'apache-arrow';
import type { ColumnSpec } from '../../types/schema.js';
import type { BoundTransform, RowRefusal, TransformOutput } from '../../types/transforms.js';
import { batchOf, isValid, utf8Cells } from '../../types/arrow-rows.js';
import { replaceCells, schemaOf, withoutRows } from './arrow.js';
import { type JsonError, type PathStep, rewriteJsonStrings } from './json.js';
import { type Finder, redactText } from './patterns.js';

export interface RedactPlan {
  /** Indexes of the columns to redact in the input, with whether each is JSON. */
  readonly targets: readonly { readonly index: number; readonly name: string; readonly json: boolean }[];
  readonly finders: readonly Finder[];
  readonly paths: readonly PathStep[][] | null;
  readonly mask: string;
}

/** Mark in `flags` every cell of `[offsets[0], offsets[n])` a match of `re` over `text` touches (`at`: cell starts in `text`). */
function touch(re: RegExp, text: string, at: Int32Array | ((i: number) => number), n: number, flags: Uint8Array): void {
  const start = typeof at === 'function' ? at : (i: number) => at[i]!;
  re.lastIndex = 0;
  let cell = 0;
  for (let m = re.exec(text); m !== null; m = re.exec(text)) {
    const s = m.index;
    const e = s + Math.max(1, m[0].length);
    if (m[0].length === 0) re.lastIndex++;
    while (cell < n && start(cell + 1) <= s) cell++; // first cell ending after s
    for (let c = cell; c < n && start(c) < e; c++) flags[c] = 1;
  }
}

/**
 * Which cells may hold something to mask: those the finders' anchors touch,
 * found over the whole column's text at once. ASCII anchors run over the
 * bytes as Latin-1 (byte offsets are cell offsets); the others over the
 * UTF-8 text, when every cell is valid UTF-8 on its own. A finder without an
 * anchor makes every cell a candidate.
 */
function candidates(d: Data, finders: readonly Finder[], json: boolean): Uint8Array {
  const { offsets, bytes, length: n } = utf8Cells(d);
  const flags = new Uint8Array(n);
  const base = offsets[0]!;
  const end = offsets[n]!;
  const every = finders.some((f) => f.anchor === null || (json && !f.asciiAnchor));
  if (every) return flags.fill(1);
  const view = Buffer.from(bytes.buffer, bytes.byteOffset + base, end - base);
  const rel = new Int32Array(n + 1);
  for (let i = 0; i <= n; i++) rel[i] = offsets[i]! - base;
  const ascii = finders.filter((f) => f.asciiAnchor);
  if (ascii.length > 0) {
    const latin1 = view.toString('latin1');
    for (const f of ascii) touch(f.anchor!, latin1, rel, n, flags);
    if (json) for (const re of new Set(ascii.map((f) => f.jsonAnchor))) touch(re, latin1, rel, n, flags);
  }
  const other = finders.filter((f) => !f.asciiAnchor);
  if (other.length > 0) {
    // Cell starts in UTF-16 units; valid only if each cell is whole UTF-8, so the text is the cells' texts joined.
    const text = view.toString('utf8');
    let whole = isUtf8(view);
    for (let i = 0; whole && i < n; i++) if (rel[i]! < rel[i + 1]! && (view[rel[i]!]! & 0xc0) === 0x80) whole = false;
    if (!whole) return flags.fill(1);
    const units = new Int32Array(n + 1);
    let u = 0;
    let cell = 0;
    for (let b = 0; b < view.length; b++) {
      while (cell < n && rel[cell + 1]! <= b) units[++cell] = u;
      const x = view[b]!;
      if ((x & 0xc0) !== 0x80) u += x >= 0xf0 ? 2 : 1;
    }
    while (cell < n) units[++cell] = u;
    if (u !== text.length) return flags.fill(1);
    for (const f of other) touch(f.anchor!, text, units, n, flags);
  }
  return flags;
}

export function bindRedact(input: readonly ColumnSpec[], plan: RedactPlan): BoundTransform {
  const schema = schemaOf(input);
  const { finders, mask, paths } = plan;
  const members = finders.filter((f) => f.member);
  const encoder = new TextEncoder();
  const redactValue = (value: string, key: string | undefined): string | null => {
    if (key !== undefined) for (const f of members) if (f.member!(key, value)) return mask;
    return redactText(value, finders, mask);
  };
  return {
    columns: input,
    apply(batch: RecordBatch): TransformOutput {
      const children = [...batch.data.children];
      const refused = new Map<number, string>();
      for (const t of plan.targets) {
        const d = children[t.index]!;
        const flags = candidates(d, finders, t.json);
        const { offsets, bytes } = utf8Cells(d);
        const buf = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
        const replaced = new Map<number, Uint8Array>();
        for (let i = 0; i < d.length; i++) {
          if (flags[i] === 0 || !isValid(d, i)) continue;
          const text = buf.toString('utf8', offsets[i]!, offsets[i + 1]!);
          if (!t.json) {
            const out = redactText(text, finders, mask);
            if (out !== null) replaced.set(i, encoder.encode(out));
            continue;
          }
          const out: string | null | JsonError = rewriteJsonStrings(text, paths, redactValue);
          if (out === null) continue;
          if (typeof out === 'string') replaced.set(i, encoder.encode(out));
          else if (!refused.has(i)) refused.set(i, `column "${t.name}" is not valid JSON (${out.error}): what in it to redact cannot be known, so the row is not shipped`);
        }
        children[t.index] = replaceCells(d, replaced);
      }
      const out = batchOf(schema, children, batch.numRows);
      if (refused.size === 0) return { batch: out, refused: [] };
      const rows = [...refused.keys()].sort((a, b) => a - b);
      const reasons: RowRefusal[] = rows.map((row) => ({ row, reason: refused.get(row)! }));
      return { batch: withoutRows(out, rows), refused: reasons };
    },
  };
}
