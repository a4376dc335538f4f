/**
 * JSON text, string values rewritten in place: a validating scanner (the
 * grammar JSON.parse accepts) that hands each string value, at or under a
 * node the paths select, to a visitor, and splices what it returns back in as
 * a JSON string. Everything else stays byte for byte as it was, so the text
 * stays valid JSON and a value with nothing to redact is unchanged.
 * No tree is built. @ref LLP 0046
 */

/** One step of a JSON path: a member name, an array index, or any; `deep` for `..` (at any depth below). */
export type PathStep =
  | { readonly kind: 'key'; readonly key: string; readonly deep: boolean }
  | { readonly kind: 'index'; readonly index: number; readonly deep: boolean }
  | { readonly kind: 'any'; readonly deep: boolean };

const MAX_STEPS = 64;
const NAME = /^[A-Za-z_$][A-Za-z0-9_$-]*/;

/**
 * A JSON path: `$`, then `.name`, `["name"]`, `[2]`, `[*]`, `.*`, and `..`
 * before any of them for "at any depth". Throws a message for a config error.
 */
export function parseJsonPath(src: string): PathStep[] {
  const fail = (why: string): never => {
    throw new Error(`"${src}" is not a JSON path (${why}); write it like $.user.email, $.items[*].note, $..password or $["odd key"]`);
  };
  if (src[0] !== '$') fail('it must start with $');
  const steps: PathStep[] = [];
  let i = 1;
  while (i < src.length) {
    let deep = false;
    if (src.startsWith('..', i)) {
      deep = true;
      i += 2;
      if (src[i] === '[') {
        // `..[0]`, `..["a"]`: fall through to the bracket form
      } else {
        i -= 1; // read the name as after a single dot
      }
    }
    const c = src[i];
    if (c === '.') {
      i++;
      if (src[i] === '*') {
        steps.push({ kind: 'any', deep });
        i++;
        continue;
      }
      const m = NAME.exec(src.slice(i));
      if (!m) fail(`a name must follow "." at ${i}; quote other names: ["…"]`);
      steps.push({ kind: 'key', key: m![0], deep });
      i += m![0].length;
    } else if (c === '[') {
      const rest = src.slice(i);
      const idx = /^\[(\d+)\]/.exec(rest);
      const star = /^\[\*\]/.exec(rest);
      const quoted = /^\[("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')\]/.exec(rest);
      if (idx) {
        steps.push({ kind: 'index', index: Number(idx[1]), deep });
        i += idx[0].length;
      } else if (star) {
        steps.push({ kind: 'any', deep });
        i += star[0].length;
      } else if (quoted) {
        const q = quoted[1]!;
        let key: string;
        try {
          key = JSON.parse(q[0] === '"' ? q : `"${q.slice(1, -1).replace(/\\'/g, "'").replace(/"/g, '\\"')}"`) as string;
        } catch {
          return fail(`bad escape in the name at ${i}`);
        }
        steps.push({ kind: 'key', key, deep });
        i += quoted[0].length;
      } else fail(`expected [number], [*] or ["name"] at ${i}`);
    } else fail(`unexpected "${c}" at ${i}`);
    if (steps.length > MAX_STEPS) fail(`more than ${MAX_STEPS} steps`);
  }
  return steps;
}

/** Why JSON text is not valid, without any of it. */
export interface JsonError {
  readonly error: string;
}

const OBJ = 0;
const ARR = 1;

interface Frame {
  readonly kind: number;
  /** This container's own match states and selection. */
  readonly states: readonly number[];
  readonly selected: boolean;
  index: number;
}

/** States are `path · 128 + step`: path `p` has matched its first `step` steps on the way here. */
const STEP_BITS = 128;

/**
 * The match states and selection of a child reached by `key` (a member) or
 * `index` (an element), from its container's states.
 */
function child(paths: readonly PathStep[][], states: readonly number[], key: string | undefined, index: number): { states: number[]; selected: boolean } {
  const next: number[] = [];
  let selected = false;
  for (const s of states) {
    const p = (s / STEP_BITS) | 0;
    const pos = s % STEP_BITS;
    const step = paths[p]![pos]!;
    if (step.deep && !next.includes(s)) next.push(s);
    const hit = step.kind === 'any' || (step.kind === 'key' ? key === step.key : key === undefined && index === step.index);
    if (!hit) continue;
    if (pos + 1 === paths[p]!.length) selected = true;
    else if (!next.includes(s + 1)) next.push(s + 1);
  }
  return { states: selected ? [] : next, selected };
}

const isWs = (c: number) => c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;
const isDigit = (c: number) => c >= 0x30 && c <= 0x39;
const isHex = (c: number) => isDigit(c) || (c >= 0x41 && c <= 0x46) || (c >= 0x61 && c <= 0x66);
const ESCAPES = new Set([0x22, 0x5c, 0x2f, 0x62, 0x66, 0x6e, 0x72, 0x74]);

/**
 * Rewrite the string values of JSON `text` that `paths` select (null: all;
 * a path selects its node and everything under it): `visit(value, key)` gets
 * each decoded value and the name of the member it is the value of (if it
 * is one), and returns its replacement or null to keep it. Member names are
 * never visited. Returns the new text, null when nothing changed, or why
 * the text is not JSON.
 */
export function rewriteJsonStrings(
  text: string,
  paths: readonly PathStep[][] | null,
  visit: (value: string, key: string | undefined) => string | null,
): string | null | JsonError {
  const n = text.length;
  let i = 0;
  const stack: Frame[] = [];
  let parts: string[] | null = null;
  let copied = 0;
  // The value about to be read: its match states, whether it is selected, the member it is the value of.
  let states: readonly number[] = paths ? paths.flatMap((p, k) => (p.length > 0 ? [k * STEP_BITS] : [])) : [];
  let selected = paths === null || paths.some((p) => p.length === 0);
  let member: string | undefined;

  const bad = (why: string): JsonError => ({ error: `${why} at offset ${i}` });
  const ws = () => {
    while (i < n && isWs(text.charCodeAt(i))) i++;
  };
  /** Scan a string at `i` (a quote); leaves `i` after it. Returns whether it has escapes, or an error. */
  const string = (): boolean | JsonError => {
    let escaped = false;
    i++;
    for (;;) {
      if (i >= n) return bad('unterminated string');
      const c = text.charCodeAt(i);
      if (c === 0x22) {
        i++;
        return escaped;
      }
      if (c === 0x5c) {
        escaped = true;
        const e = text.charCodeAt(i + 1);
        if (e === 0x75) {
          for (let k = 2; k < 6; k++) if (!isHex(text.charCodeAt(i + k))) return bad('bad \\u escape');
          i += 6;
        } else if (ESCAPES.has(e)) i += 2;
        else return bad('bad escape');
        continue;
      }
      if (c < 0x20) return bad('control character in a string');
      i++;
    }
  };
  const number = (): JsonError | null => {
    if (text.charCodeAt(i) === 0x2d) i++;
    if (text.charCodeAt(i) === 0x30) i++;
    else if (isDigit(text.charCodeAt(i))) while (isDigit(text.charCodeAt(i))) i++;
    else return bad('bad number');
    if (text.charCodeAt(i) === 0x2e) {
      i++;
      if (!isDigit(text.charCodeAt(i))) return bad('bad number');
      while (isDigit(text.charCodeAt(i))) i++;
    }
    const e = text.charCodeAt(i);
    if (e === 0x65 || e === 0x45) {
      i++;
      const s = text.charCodeAt(i);
      if (s === 0x2b || s === 0x2d) i++;
      if (!isDigit(text.charCodeAt(i))) return bad('bad number');
      while (isDigit(text.charCodeAt(i))) i++;
    }
    return null;
  };
  const enter = (key: string | undefined, index: number) => {
    const top = stack[stack.length - 1]!;
    member = key;
    if (top.selected) {
      selected = true;
      states = [];
    } else if (paths && top.states.length > 0) {
      const c = child(paths, top.states, key, index);
      selected = c.selected;
      states = c.states;
    } else {
      selected = false;
      states = [];
    }
  };
  /** After `{` or `,` in an object: a member name, `:`, then its value. */
  const memberName = (): JsonError | null => {
    ws();
    if (text.charCodeAt(i) !== 0x22) return bad('expected a member name');
    const start = i;
    const esc = string();
    if (typeof esc !== 'boolean') return esc;
    const key = esc ? (JSON.parse(text.slice(start, i)) as string) : text.slice(start + 1, i - 1);
    ws();
    if (text.charCodeAt(i) !== 0x3a) return bad('expected ":"');
    i++;
    enter(key, 0);
    return null;
  };

  // Each turn reads one value, then closes what it completes.
  for (;;) {
    ws();
    if (i >= n) return bad('unexpected end');
    const c = text.charCodeAt(i);
    if (c === 0x7b || c === 0x5b) {
      i++;
      stack.push({ kind: c === 0x7b ? OBJ : ARR, states, selected, index: 0 });
      ws();
      const close = c === 0x7b ? 0x7d : 0x5d;
      if (text.charCodeAt(i) !== close) {
        if (c === 0x7b) {
          const e = memberName();
          if (e) return e;
        } else enter(undefined, 0);
        continue;
      }
      i++;
      stack.pop();
    } else if (c === 0x22) {
      const start = i;
      const esc = string();
      if (typeof esc !== 'boolean') return esc;
      if (selected) {
        const value = esc ? (JSON.parse(text.slice(start, i)) as string) : text.slice(start + 1, i - 1);
        const out = visit(value, member);
        if (out !== null) {
          parts ??= [];
          parts.push(text.slice(copied, start), JSON.stringify(out));
          copied = i;
        }
      }
    } else if (c === 0x2d || isDigit(c)) {
      const e = number();
      if (e) return e;
    } else if (text.startsWith('true', i)) i += 4;
    else if (text.startsWith('false', i)) i += 5;
    else if (text.startsWith('null', i)) i += 4;
    else return bad('unexpected character');
    // Close the containers this value completes; open the next member or element.
    for (;;) {
      const top = stack[stack.length - 1];
      ws();
      if (!top) {
        if (i < n) return bad('unexpected character after the value');
        if (parts === null) return null;
        parts.push(text.slice(copied));
        return parts.join('');
      }
      const d = text.charCodeAt(i);
      if (d === 0x2c) {
        i++;
        if (top.kind === OBJ) {
          const e = memberName();
          if (e) return e;
        } else enter(undefined, ++top.index);
        break;
      }
      if (d === (top.kind === OBJ ? 0x7d : 0x5d)) {
        i++;
        stack.pop();
        continue;
      }
      return bad(i >= n ? 'unexpected end' : top.kind === OBJ ? 'expected "," or "}"' : 'expected "," or "]"');
    }
  }
}
