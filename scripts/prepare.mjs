#!/usr/bin/env node
// npm's `prepare` (after `npm install` / `npm ci` here): build dist/, so `bin/hypsink.js`
// and `npm start` run compiled, and give the example plugin package its dependency on this
// checkout (docs/examples/audit-sink/node_modules/hypsink → here), as `npm install
// hypsink` would for its author. On `npm pack`, prepack has just built. Under `npx
// hypsink` in a checkout (npm_command "exec"), npm installs this folder into its npx
// cache and runs prepare first: no build there (a minute, silent, and a Ctrl-C in it
// left npx broken); bin/hypsink.js runs the sources until dist/ is built. @ref LLP 0070
import { execFileSync } from 'node:child_process';
import { mkdirSync, rmSync, symlinkSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
if (!['pack', 'publish', 'exec'].includes(process.env.npm_command ?? '')) {
  execFileSync(process.execPath, [join(root, 'scripts/build.mjs')], { stdio: 'inherit' });
}
for (const example of ['docs/examples/audit-sink']) {
  const modules = join(root, example, 'node_modules');
  mkdirSync(modules, { recursive: true });
  const link = join(modules, 'hypsink');
  rmSync(link, { recursive: true, force: true });
  symlinkSync(relative(modules, root), link, 'dir');
}
