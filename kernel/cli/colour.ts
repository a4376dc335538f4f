/**
 * Colour only for a person at a terminal: not into a pipe or a file, and not
 * when NO_COLOR is set to anything (no-color.org). Its own module, with no
 * imports, so the logger can ask it without loading the table library.
 * @ref LLP 0031
 */
export function colourful(out: { isTTY?: boolean } = process.stdout, env: NodeJS.ProcessEnv = process.env): boolean {
  return out.isTTY === true && (env.NO_COLOR ?? '') === '';
}
