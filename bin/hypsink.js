#!/usr/bin/env node
// The hypsink CLI. Built or installed, it runs the compiled JavaScript in dist/, with no
// TypeScript loader. In a checkout not built yet (a fresh clone: `npx hypsink` there skips
// the minute-long build), it runs the TypeScript sources through tsx, as the tests do.
// dist/ only ever appears whole (scripts/build.mjs swaps it in), so its presence decides.
// @ref LLP 0070
import { existsSync } from 'node:fs';

const compiled = new URL('../dist/cli/main.js', import.meta.url);
const sources = new URL('../kernel/cli/main.ts', import.meta.url);

/** The sources' `hypsink/plugin` self-imports resolve to sources too (the package's hypsink-source condition). */
const SOURCE_CONDITION = `export async function resolve(s, c, next) {
  return next(s, { ...c, conditions: [...c.conditions, 'hypsink-source'] });
}`;

async function fromSources() {
  let tsx;
  try {
    tsx = await import('tsx/esm/api');
  } catch {
    process.stderr.write('hypsink: dist/ is not built, and tsx (a devDependency) is not installed to run the sources: run "npm install" in the hypsink folder\n');
    process.exit(2);
  }
  tsx.register();
  // Registered after tsx, so it runs first and hands tsx the extra condition.
  (await import('node:module')).register(`data:text/javascript,${encodeURIComponent(SOURCE_CONDITION)}`);
  if (process.stderr.isTTY) process.stderr.write('hypsink: running from the TypeScript sources (dist/ is not built; "npm run build" starts commands faster)\n');
  return (await import(sources.href)).main;
}

let main;
if (!existsSync(compiled) && existsSync(sources)) {
  main = await fromSources();
} else {
  try {
    ({ main } = await import(compiled.href));
  } catch (e) {
    if (e?.code !== 'ERR_MODULE_NOT_FOUND' || !String(e.message).includes('dist/cli/main.js')) throw e;
    process.stderr.write('hypsink: dist/ is missing; run "npm run build" in the hypsink folder (npm install does it)\n');
    process.exit(2);
  }
}
process.exitCode = await main(process.argv);
