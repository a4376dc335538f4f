/**
 * The house rule (DESIGN §1, LLP 0024): a plugin imports hypsink only as
 * `hypsink/plugin` (the package's public plugin entry), besides its own folder,
 * Node built-ins and npm packages the project depends on — never `kernel/`,
 * and never `types/` by a relative path. Every source under `plugins/` (and the third-party test plugins
 * under test/fixtures/plugins) is scanned with TypeScript's own import scanner,
 * which sees static imports, re-exports, `import()` and `require()`.
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { builtinModules } from 'node:module';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { test } from 'node:test';
import ts from 'typescript';
import { FIXTURE_PLUGINS, REPO } from '../support/kernel.js';

const pkg = JSON.parse(readFileSync(join(REPO, 'package.json'), 'utf8')) as {
  name: string;
  dependencies?: Record<string, string>;
  devDependencies?: Record<string, string>;
};
const PACKAGES = new Set(Object.keys({ ...pkg.dependencies, ...pkg.devDependencies }));
const TYPES = join(REPO, 'types');
const SOURCE = /\.(ts|mts|cts|js|mjs|cjs|tsx|jsx)$/;

function packageName(spec: string): string {
  const parts = spec.split('/');
  return spec.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0]!;
}

const inside = (dir: string, path: string) => {
  const rel = relative(dir, path);
  return rel === '' || (!rel.startsWith('..') && !rel.startsWith(sep) && !/^[A-Za-z]:/.test(rel));
};

/** Why `spec`, imported by `file` of the plugin in `pluginDir`, breaks the rule; null when it is fine. */
function violation(file: string, pluginDir: string, spec: string): string | null {
  if (spec.startsWith('node:') || builtinModules.includes(spec) || builtinModules.includes(spec.split('/')[0]!)) return null;
  if (spec.startsWith('.')) {
    const target = resolve(dirname(file), spec);
    if (inside(pluginDir, target)) return null;
    if (inside(join(REPO, 'kernel'), target)) return `imports kernel internals (${spec})`;
    if (inside(TYPES, target)) return `imports the contract by relative path (${spec}); import it from 'hypsink/plugin'`;
    return `imports outside its folder (${spec})`;
  }
  if (spec.startsWith('/') || spec.startsWith('file:')) return `imports by absolute path (${spec})`;
  if (spec.startsWith('#')) return `uses a package-internal import (${spec})`;
  const name = packageName(spec);
  if (name === pkg.name) return spec === `${pkg.name}/plugin` ? null : `imports hypsink other than as '${pkg.name}/plugin' (${spec})`;
  if (!PACKAGES.has(name)) return `imports "${name}", which is not a dependency in package.json`;
  return null;
}

function importsOf(text: string): string[] {
  return ts.preProcessFile(text, true, true).importedFiles.map((f) => f.fileName);
}

function sources(dir: string): string[] {
  const out: string[] = [];
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    if (e.name === 'node_modules') continue;
    const p = join(dir, e.name);
    if (e.isDirectory()) out.push(...sources(p));
    else if (SOURCE.test(e.name)) out.push(p);
  }
  return out;
}

function scan(root: string): { files: number; problems: string[] } {
  const problems: string[] = [];
  let files = 0;
  for (const plugin of readdirSync(root, { withFileTypes: true })) {
    if (!plugin.isDirectory()) continue;
    const pluginDir = join(root, plugin.name);
    for (const file of sources(pluginDir)) {
      files++;
      for (const spec of importsOf(readFileSync(file, 'utf8'))) {
        const why = violation(file, pluginDir, spec);
        if (why) problems.push(`${relative(REPO, file)}: ${why}`);
      }
    }
  }
  return { files, problems };
}

test("no plugin imports hypsink other than as 'hypsink/plugin' (and its own folder, npm packages)", () => {
  const builtin = scan(join(REPO, 'plugins'));
  assert.ok(builtin.files >= 5, `scanned the built-in plugins (${builtin.files} files)`);
  assert.deepEqual(builtin.problems, []);
});

test('the third-party test plugins follow the same rule', () => {
  const fixtures = scan(FIXTURE_PLUGINS);
  assert.ok(fixtures.files >= 3);
  assert.deepEqual(fixtures.problems, []);
});

test('the scanner catches every way of importing the kernel', () => {
  const file = join(REPO, 'plugins/example/src/index.ts');
  const pluginDir = join(REPO, 'plugins/example');
  const text = [
    "import { Hypsink } from '../../../kernel/runtime.js';",
    "import type { Cache } from '../../../kernel/cache.js';",
    "export { fault } from '../../../kernel/fault.js';",
    "export * from '../../../kernel/hooks.js';",
    "const m = await import('../../../kernel/log.js');",
    "const r = require('../../../kernel/io/lock.js');",
    "import '../../../kernel/daemon.js';",
    "import { x } from '../../s3/src/index.js';",
    "import y from 'left-pad';",
    "import z from 'hypsink/kernel/runtime.js';",
    "import { HypsinkError } from '../../../types/index.js';",
    "import { ERROR_CODES } from 'hypsink';",
    "import { HypsinkError as E } from 'hypsink/plugin';",
    "import { z as zod } from 'zod';",
    "import { join } from 'node:path';",
    "import { helper } from './helper.js';",
  ].join('\n');
  const found = importsOf(text).map((s) => [s, violation(file, pluginDir, s)]);
  const bad = found.filter(([, why]) => why !== null).map(([s]) => s);
  assert.deepEqual(bad, [
    '../../../kernel/runtime.js',
    '../../../kernel/cache.js',
    '../../../kernel/fault.js',
    '../../../kernel/hooks.js',
    '../../../kernel/log.js',
    '../../../kernel/io/lock.js',
    '../../../kernel/daemon.js',
    '../../s3/src/index.js',
    'left-pad',
    'hypsink/kernel/runtime.js',
    '../../../types/index.js',
    'hypsink',
  ]);
  assert.match(String(found[0]![1]), /kernel internals/);
});
