/**
 * The receiver's clients: who may talk to it, and under which name.
 *
 * A tokens file (`--tokens-file`) maps each bearer token to a client name, one
 * client a line:
 *
 *     # comment lines and blank lines are ignored
 *     <client-name> <token>
 *
 * A client name is 1-64 of [A-Za-z0-9._-]; a token is 16-1024 visible ASCII
 * characters (no spaces). Names and tokens are each unique in the file. A single
 * `--token` / HYPSINK_TOKEN, and every request under `--insecure-no-auth`, is
 * client `default` (DEFAULT_CLIENT, which also owns ledger lines written before
 * clients existed).
 * @ref LLP 0027: a client's batch ids are its own.
 */
import { createHash } from 'node:crypto';
import { promises as fsp } from 'node:fs';
import { HypsinkError, type Logger } from '../../types/index.js';
import { DEFAULT_CLIENT } from './store.js';

/** A longer Authorization header is refused (401) unread: no legitimate token is that long. */
export const MAX_AUTH_HEADER = 4096;
const CLIENT_NAME = /^[A-Za-z0-9._-]{1,64}$/;
const TOKEN = /^[\x21-\x7e]{16,1024}$/;

/** token digest (hex) → client name. */
export type TokenTable = ReadonlyMap<string, string>;

function digest(token: string): string {
  return createHash('sha256').update(token, 'utf8').digest('hex');
}

/**
 * The token of an `Authorization: Bearer <token>` header, or null. A linear
 * hand parse (a backtracking regex was quadratic in the header's length):
 * "Bearer" in any case, one or more spaces/tabs, the token, trailing
 * spaces/tabs trimmed.
 */
export function bearerToken(header: string | undefined): string | null {
  if (header === undefined || header.length > MAX_AUTH_HEADER || header.length < 8) return null;
  if (header.slice(0, 6).toLowerCase() !== 'bearer') return null;
  const blank = (i: number) => {
    const c = header.charCodeAt(i);
    return c === 0x20 || c === 0x09;
  };
  let i = 6;
  if (!blank(i)) return null;
  while (i < header.length && blank(i)) i++;
  let j = header.length;
  while (j > i && blank(j - 1)) j--;
  return j > i ? header.slice(i, j) : null;
}

/**
 * The client a header authenticates, or null. Looked up by the token's sha256:
 * timing can tell an attacker at most how a guess's digest compares with a real
 * token's digest, which says nothing usable about the token itself.
 */
export function clientFor(table: TokenTable, header: string | undefined): string | null {
  const token = bearerToken(header);
  return token === null ? null : (table.get(digest(token)) ?? null);
}

/** The table of a single `--token`: client `default`. */
export function singleToken(token: string): TokenTable {
  if (!TOKEN.test(token)) {
    throw new HypsinkError(
      'HYPSINK_ERR_CONFIG',
      'receiver: the token must be 16-1024 visible ASCII characters without spaces; generate one, e.g. `openssl rand -hex 32`',
      { hint: 'Start the receiver with a --token such as the output of `openssl rand -hex 32`.' },
    );
  }
  return new Map([[digest(token), DEFAULT_CLIENT]]);
}

/** Parse a tokens file's text. Errors name the file and the 1-based line. */
export function parseTokens(text: string, file: string): TokenTable {
  const table = new Map<string, string>();
  const names = new Map<string, number>();
  const lineOf = new Map<string, number>();
  const hint = 'Fix the tokens file: one "<client-name> <token>" per line ("#" starts a comment); then start the receiver again (or send it SIGHUP).';
  const bad = (n: number, what: string) => new HypsinkError('HYPSINK_ERR_CONFIG', `receiver: ${file}: line ${n}: ${what}`, { hint });
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const n = i + 1;
    const line = lines[i]!.replace(/\r$/, '').trim();
    if (line === '' || line.startsWith('#')) continue;
    const fields = line.split(/[ \t]+/);
    if (fields.length !== 2) throw bad(n, 'expected "<client-name> <token>" (two fields separated by spaces)');
    const [name, token] = fields as [string, string];
    if (!CLIENT_NAME.test(name)) throw bad(n, 'a client name is 1-64 of A-Z a-z 0-9 . _ -');
    if (!TOKEN.test(token)) throw bad(n, 'a token is 16-1024 visible ASCII characters without spaces');
    const prevName = names.get(name);
    if (prevName !== undefined) throw bad(n, `client ${name} is already named on line ${prevName}; give each client one line`);
    const d = digest(token);
    const prevToken = lineOf.get(d);
    if (prevToken !== undefined) throw bad(n, `this token is already the token of line ${prevToken}; give each client its own token`);
    names.set(name, n);
    lineOf.set(d, n);
    table.set(d, name);
  }
  if (table.size === 0) throw new HypsinkError('HYPSINK_ERR_CONFIG', `receiver: ${file}: no clients; add a line "<client-name> <token>"`, { hint });
  return table;
}

/** Read and parse a tokens file; warns when others than its owner may read it. */
export async function loadTokens(file: string, log?: Logger): Promise<TokenTable> {
  let text: string;
  try {
    const st = await fsp.stat(file);
    if (process.platform !== 'win32' && (st.mode & 0o077) !== 0) {
      log?.warn({ file, mode: (st.mode & 0o777).toString(8) }, 'the tokens file is readable by group or others; chmod 600 it');
    }
    text = await fsp.readFile(file, 'utf8');
  } catch (e) {
    throw new HypsinkError('HYPSINK_ERR_CONFIG', `receiver: cannot read the tokens file ${file}: ${(e as Error).message}`, {
      hint: 'Give --tokens-file the path of a file the receiver may read.',
    });
  }
  return parseTokens(text, file);
}
