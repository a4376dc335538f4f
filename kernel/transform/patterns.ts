/**
 * What redact looks for: the built-in named patterns and the user's regular
 * expressions. A finder says, for one cell's text, the ranges to mask. It
 * also has an anchor: a global regex without assertions, run once over a
 * whole column's text, such that a cell holding a match of the finder holds a
 * match of the anchor (or is touched by one). Cells the anchors do not touch
 * are left as they are without being looked at one by one, which is what
 * makes redact cheap on a column where secrets are rare. @ref LLP 0046
 */

/** The built-in patterns, by the names a config gives. */
export const PATTERN_NAMES = ['email', 'bearer', 'aws-key', 'credit-card'] as const;
export type PatternName = (typeof PATTERN_NAMES)[number];

export interface Finder {
  /** For messages: the pattern name or `regex[i]`. */
  readonly name: string;
  /**
   * Global, no assertions: every cell whose text holds a match of this
   * finder holds or touches a match of the anchor in the column's text. null:
   * any cell may hold one (each is looked at).
   */
  readonly anchor: RegExp | null;
  /**
   * Whether the finder matches ASCII characters only, so its anchor finds
   * them in a column's bytes read as Latin-1 (an ASCII character is its own
   * byte in UTF-8, and no byte of another character is ASCII); otherwise the
   * anchor runs over the column's UTF-8 text.
   */
  readonly asciiAnchor: boolean;
  /**
   * JSON text: what else makes a cell a candidate, for the escapes that can
   * spell a match differently in the raw text than in the decoded value.
   */
  readonly jsonAnchor: RegExp;
  /** Push `start, end` of every range to mask in `text`. */
  find(text: string, out: number[]): void;
  /** JSON only: mask the whole string value of the object member named `key`. */
  member?(key: string, value: string): boolean;
}

const NON_ASCII_WORD = /^[\p{L}\p{M}\p{N}]$/u;

/** The code point ending just before `i`, and its length in code units. */
function before(text: string, i: number): [number, number] {
  const lo = text.charCodeAt(i - 1);
  if (lo >= 0xdc00 && lo <= 0xdfff && i >= 2) {
    const hi = text.charCodeAt(i - 2);
    if (hi >= 0xd800 && hi <= 0xdbff) return [((hi - 0xd800) << 10) + (lo - 0xdc00) + 0x10000, 2];
  }
  return [lo, 1];
}

/** The code point starting at `i`, and its length in code units. */
function at(text: string, i: number): [number, number] {
  const cp = text.codePointAt(i)!;
  return [cp, cp > 0xffff ? 2 : 1];
}

const isAsciiAlnum = (c: number) => (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a);
const nonAsciiWord = (c: number) => c >= 0x80 && NON_ASCII_WORD.test(String.fromCodePoint(c));
/** An e-mail local part: letters, digits, `. _ % + -` (exotic characters end it: LLP 0046). */
const isLocal = (c: number) => isAsciiAlnum(c) || c === 0x2e || c === 0x5f || c === 0x25 || c === 0x2b || c === 0x2d || nonAsciiWord(c);
const isLabel = (c: number) => isAsciiAlnum(c) || c === 0x2d || nonAsciiWord(c);

/**
 * E-mail addresses, found from each `@`: the local part to its left, at least
 * two domain labels to its right, the last not all digits and of two
 * characters or more. Code, not one regex: a regex for this backtracks over
 * every long word of a cell that holds an `@`.
 */
function findEmails(text: string, out: number[]): void {
  let from = 0;
  for (;;) {
    const a = text.indexOf('@', from);
    if (a < 0) return;
    let s = a;
    while (s > 0) {
      const [c, n] = before(text, s);
      if (!isLocal(c)) break;
      s -= n;
    }
    let e = a + 1;
    let labels = 0;
    let lastStart = e;
    let end = -1;
    for (;;) {
      const ls = e;
      while (e < text.length) {
        const [c, n] = at(text, e);
        if (!isLabel(c)) break;
        e += n;
      }
      if (e === ls) break;
      labels++;
      lastStart = ls;
      end = e;
      if (text.charCodeAt(e) !== 0x2e) break; // '.'
      e++;
    }
    const tld = end > 0 ? text.slice(lastStart, end) : '';
    if (s < a && labels >= 2 && tld.length >= 2 && !/^[0-9]+$/.test(tld)) {
      out.push(s, end);
      from = end;
    } else from = a + 1;
  }
}

/** Every range of group 1 (or the whole match) of a global regex with indices (`d`). */
function regexRanges(re: RegExp, group: number) {
  return (text: string, out: number[]) => {
    re.lastIndex = 0;
    for (let m = re.exec(text); m !== null; m = re.exec(text)) {
      if (m[0].length === 0) {
        re.lastIndex += (text.codePointAt(m.index) ?? 0) > 0xffff ? 2 : 1; // an empty match masks nothing; step past it
        continue;
      }
      const r: readonly [number, number] | undefined = group === 0 ? [m.index, m.index + m[0].length] : m.indices?.[group];
      if (r && r[1] > r[0]) out.push(r[0], r[1]);
    }
  };
}

/** `Bearer <token>` (RFC 6750's b64token), any case; the token is masked, the word kept. */
const BEARER = /(?<![A-Za-z0-9_])bearer(?:\s+|\s*[:=]\s*)([A-Za-z0-9\-._~+/]+=*)/dgi;
/** AWS access key ids: long-term (AKIA) and temporary (ASIA), 20 characters. */
const AWS_KEY_ID = /(?:AKIA|ASIA)[A-Z0-9]{16}/g;
/**
 * An AWS secret access key (40 characters of base64) after a key name holding
 * "secret" (`aws_secret_access_key = …`, `"SecretAccessKey": "…"`); the value
 * is masked, the name kept.
 */
const AWS_SECRET = /secret[A-Za-z0-9_-]{0,30}["']?(?:\s*(?:[:=]|=>)\s*|\s+)["']?([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])/dgi;
const AWS_SECRET_VALUE = /^[A-Za-z0-9/+]{40}$/;
/** A run of digits with single spaces or dashes between them. */
const DIGIT_RUN = /[0-9](?:[ -]?[0-9])*/g;

function luhn(digits: string): boolean {
  let sum = 0;
  for (let i = digits.length - 1, odd = false; i >= 0; i--, odd = !odd) {
    let d = digits.charCodeAt(i) - 0x30;
    if (odd) {
      d *= 2;
      if (d > 9) d -= 9;
    }
    sum += d;
  }
  return sum % 10 === 0;
}

/**
 * Card numbers: 13 to 19 digits, spaces or dashes between groups allowed,
 * first digit 2 to 6 (the card networks' ranges; it keeps epoch-millisecond
 * timestamps out), Luhn-checked. Within a longer run, any span of whole
 * groups that is one is masked.
 */
function findCards(text: string, out: number[]): void {
  DIGIT_RUN.lastIndex = 0;
  for (let m = DIGIT_RUN.exec(text); m !== null; m = DIGIT_RUN.exec(text)) {
    const run = m[0];
    if (run.length < 13) continue;
    // groups: [start, end) in text and their digits
    const groups: { s: number; e: number; d: string }[] = [];
    const re = /[0-9]+/g;
    for (let g = re.exec(run); g !== null; g = re.exec(run)) groups.push({ s: m.index + g.index, e: m.index + g.index + g[0].length, d: g[0] });
    let digits = 0;
    for (const g of groups) digits += g.d.length;
    if (digits < 13) continue;
    for (let i = 0; i < groups.length; i++) {
      let d = '';
      for (let j = i; j < groups.length; j++) {
        d += groups[j]!.d;
        if (d.length > 19) break;
        if (d.length >= 13 && d.charCodeAt(0) >= 0x32 && d.charCodeAt(0) <= 0x36 && luhn(d)) out.push(groups[i]!.s, groups[j]!.e);
      }
    }
  }
}

/**
 * The built-ins' anchors use no character JSON.stringify escapes, so in JSON
 * text only a \u escape (which can spell any character) can hide them.
 */
const UNICODE_ESCAPE = /\\u/g;
/** A user regex may match `"`, `\`, `/` or a control character, which JSON text may write escaped. */
const ANY_ESCAPE = /\\/g;

const BUILTIN: Record<PatternName, Finder[]> = {
  email: [{ name: 'email', anchor: /@/g, asciiAnchor: true, jsonAnchor: UNICODE_ESCAPE, find: findEmails }],
  bearer: [{ name: 'bearer', anchor: /bearer/gi, asciiAnchor: true, jsonAnchor: UNICODE_ESCAPE, find: regexRanges(BEARER, 1) }],
  'aws-key': [
    { name: 'aws-key', anchor: /A[KS]IA/g, asciiAnchor: true, jsonAnchor: UNICODE_ESCAPE, find: regexRanges(AWS_KEY_ID, 0) },
    {
      name: 'aws-key',
      anchor: /secret/gi,
      asciiAnchor: true,
      jsonAnchor: UNICODE_ESCAPE,
      find: regexRanges(AWS_SECRET, 1),
      member: (key, value) => /secret/i.test(key) && AWS_SECRET_VALUE.test(value),
    },
  ],
  'credit-card': [{ name: 'credit-card', anchor: /[0-9](?:[ -]?[0-9]){12}/g, asciiAnchor: true, jsonAnchor: UNICODE_ESCAPE, find: findCards }],
};

export function builtinFinders(name: PatternName): readonly Finder[] {
  return BUILTIN[name];
}

/**
 * Whether a regex source has an assertion (`^ $ \b \B`, a lookahead or a
 * lookbehind): its matches then depend on what is around a cell, and it
 * cannot be run over a whole column as an anchor.
 */
export function hasAssertions(src: string): boolean {
  let inClass = false;
  for (let i = 0; i < src.length; i++) {
    const c = src[i];
    if (c === '\\') {
      if (!inClass && (src[i + 1] === 'b' || src[i + 1] === 'B')) return true;
      i++;
      continue;
    }
    if (inClass) {
      if (c === ']') inClass = false;
      continue;
    }
    if (c === '[') inClass = true;
    else if (c === '^' || c === '$') return true;
    else if (c === '(' && src[i + 1] === '?' && (src[i + 2] === '=' || src[i + 2] === '!' || (src[i + 2] === '<' && (src[i + 3] === '=' || src[i + 3] === '!')))) return true;
  }
  return false;
}

/**
 * Whether a regex source (Unicode mode, case-sensitive) can match ASCII
 * characters only: ASCII literals and escapes, `\d`, `\w`, classes that are
 * not negated, back-references. `.`, `\s` (Unicode spaces), `\D \W \S`,
 * `\p{…}`, negated classes or any non-ASCII character in the source make it
 * false. Conservative: false may be said of a regex that is ASCII-only.
 */
export function matchesAsciiOnly(src: string): boolean {
  let inClass = false;
  for (let i = 0; i < src.length; ) {
    const c = src[i]!;
    if (c.charCodeAt(0) >= 0x80) return false;
    if (c === '\\') {
      const e = src[i + 1];
      if (e === undefined || e.charCodeAt(0) >= 0x80 || 'sDWSpP'.includes(e)) return false;
      const rest = src.slice(i);
      const code = /^\\(?:u([0-9A-Fa-f]{4})|u\{([0-9A-Fa-f]+)\}|x([0-9A-Fa-f]{2}))/.exec(rest);
      if (code) {
        if (Number.parseInt(code[1] ?? code[2] ?? code[3]!, 16) >= 0x80) return false;
        i += code[0].length;
      } else if (e === 'u' || e === 'x') return false;
      else if (e === 'k') {
        const end = src.indexOf('>', i);
        if (end < 0) return false;
        i = end + 1;
      } else i += e === 'c' ? 3 : 2;
      continue;
    }
    if (inClass) {
      if (c === ']') inClass = false;
    } else if (c === '[') {
      if (src[i + 1] === '^') return false;
      inClass = true;
    } else if (c === '.') return false;
    i++;
  }
  return true;
}

/** `(?i)` at the start of a user regex: case-insensitive (JavaScript has no inline flags). */
const CASE_FLAG = '(?i)';

/** Compile a user regex (Unicode mode, `(?i)` prefix for any case); throws a message for the config error. */
export function compileUserRegex(source: string): { re: RegExp; anchor: RegExp | null; ascii: boolean } {
  const insensitive = source.startsWith(CASE_FLAG);
  const body = insensitive ? source.slice(CASE_FLAG.length) : source;
  const flags = insensitive ? 'giu' : 'gu';
  let re: RegExp;
  try {
    re = new RegExp(body, flags);
  } catch (e) {
    throw new Error(`not a valid regular expression (${(e as Error).message.replace(/^Invalid regular expression: /, '')})`);
  }
  if (new RegExp(`^(?:${body})$`, flags.replace('g', '')).test('')) throw new Error('matches the empty string; a redaction must match at least one character');
  // With (?i), Unicode case folding matches K (U+212A) for k and ſ (U+017F) for s: not ASCII-only.
  return { re, anchor: hasAssertions(body) ? null : new RegExp(body, flags), ascii: !insensitive && matchesAsciiOnly(body) };
}

export function userFinder(index: number, source: string): Finder {
  const { re, anchor, ascii } = compileUserRegex(source);
  return { name: `regex[${index}]`, anchor, asciiAnchor: ascii, jsonAnchor: ANY_ESCAPE, find: regexRanges(re, 0) };
}

/** Sort and merge `start, end` pairs (overlapping or touching ranges become one). */
export function mergeRanges(flat: number[]): number[] {
  if (flat.length <= 2) return flat;
  const pairs: [number, number][] = [];
  for (let i = 0; i < flat.length; i += 2) pairs.push([flat[i]!, flat[i + 1]!]);
  pairs.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  const out: number[] = [pairs[0]![0], pairs[0]![1]];
  for (let i = 1; i < pairs.length; i++) {
    const [s, e] = pairs[i]!;
    if (s <= out[out.length - 1]!) out[out.length - 1] = Math.max(out[out.length - 1]!, e);
    else out.push(s, e);
  }
  return out;
}

/** `text` with every range of every finder replaced by `mask`; null when nothing matched. */
export function redactText(text: string, finders: readonly Finder[], mask: string): string | null {
  const found: number[] = [];
  for (const f of finders) f.find(text, found);
  if (found.length === 0) return null;
  const ranges = mergeRanges(found);
  let out = '';
  let last = 0;
  for (let i = 0; i < ranges.length; i += 2) {
    out += text.slice(last, ranges[i]) + mask;
    last = ranges[i + 1]!;
  }
  return out + text.slice(last);
}
