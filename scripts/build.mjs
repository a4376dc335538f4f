#!/usr/bin/env node
// `npm run build`: compile to dist/ (JavaScript, .d.ts, source maps), copy what the
// compiled code reads beside itself (each built-in plugin's plugin.json), then bundle
// the CLI into dist/cli/ (esbuild): one file per command path instead of hundreds of
// modules, which is most of a command's start. @ref LLP 0025
//
// Everything is built in a folder of its own beside dist/ and swapped in at the end:
// a build stopped anywhere (Ctrl-C, a tsc error) leaves the dist/ there was, or none,
// never a part of one, which bin/hypsink.js would take for a whole build. @ref LLP 0070
import { execFileSync } from 'node:child_process';
import { cpSync, existsSync, readFileSync, readdirSync, renameSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const dist = join(root, 'dist');
const BUILDING = /^\.dist-(build|old)-(\d+)$/;
const out = `.dist-build-${process.pid}`;
const tmp = join(root, out);

/** For the test of a stopped build: HYPSINK_BUILD_FAULT=<point> kills the build there. */
const fault = (point) => {
  if (process.env.HYPSINK_BUILD_FAULT === point) process.kill(process.pid, 'SIGKILL');
};
const alive = (pid) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return e.code === 'EPERM';
  }
};

// What stopped builds left (their process gone): not dist/, so nothing reads it.
for (const name of readdirSync(root)) {
  const m = BUILDING.exec(name);
  if (m && !alive(Number(m[2]))) rmSync(join(root, name), { recursive: true, force: true });
}
fault('build.start');
const step = (what) => process.stderr.write(`build: ${what}\n`);
step('compiling the TypeScript (tsc, most of a minute)');
const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
try {
  execFileSync(process.execPath, [tsc, '-p', join(root, 'tsconfig.build.json'), '--outDir', tmp], { stdio: 'inherit' });
} catch {
  rmSync(tmp, { recursive: true, force: true });
  process.stderr.write(`build: tsc failed (errors above); ${existsSync(dist) ? 'dist/ is the previous build' : 'dist/ was not made'}: fix them and run "npm run build" again\n`);
  process.exit(1);
}
for (const name of readdirSync(join(root, 'plugins'))) {
  const manifest = join(root, 'plugins', name, 'plugin.json');
  if (existsSync(manifest)) cpSync(manifest, join(tmp, 'plugins', name, 'plugin.json'));
}

const { build } = await import('esbuild');
step('bundling the CLI (esbuild)');
const builtins = readdirSync(join(root, 'plugins')).filter((n) => existsSync(join(tmp, 'plugins', n, 'src/index.js')));
// The plugins import `hypsink/plugin` by self-reference; its exports point into dist/, which
// is not there yet: the same modules in the folder being built.
const { exports } = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
const alias = Object.fromEntries(
  Object.entries(exports)
    .filter(([, to]) => typeof to === 'object')
    .map(([entry, to]) => [entry === '.' ? 'hypsink' : `hypsink/${entry.slice(2)}`, to.default.replace(/^\.\/dist\//, `./${out}/`)]),
);
await build({
  absWorkingDir: root,
  entryPoints: {
    main: `${out}/kernel/cli/main.js`,
    // Beside the chunks that start them (workerEntry resolves a sibling file).
    'flush-worker': `${out}/kernel/flush/flush-worker.js`,
    'parse-worker': `${out}/kernel/ingest/parse-worker.js`,
    'parquet-worker': `${out}/types/parquet-worker.js`,
    ...Object.fromEntries(builtins.map((n) => [`plugin-${n}`, `${out}/plugins/${n}/src/index.js`])),
  },
  outdir: `${out}/cli`,
  alias,
  bundle: true,
  splitting: true,
  format: 'esm',
  platform: 'node',
  target: 'node20',
  sourcemap: true,
  external: ['parquet-wasm', '@aws-sdk/*'],
  define: { __HYPSINK_PLUGINS_DIR__: JSON.stringify('../plugins') },
  // CommonJS dependencies bundled into ESM still ask for these.
  banner: {
    js: [
      "import { createRequire as __hypsinkRequire } from 'node:module';",
      "import { fileURLToPath as __hypsinkPath } from 'node:url';",
      'const require = __hypsinkRequire(import.meta.url);',
      'const __filename = __hypsinkPath(import.meta.url);',
      "const __dirname = __filename.slice(0, __filename.lastIndexOf('/'));",
    ].join(' '),
  },
  logLevel: 'warning',
}).catch((e) => {
  rmSync(tmp, { recursive: true, force: true });
  throw e;
});

// The swap: the old build aside, the new one in, the old one gone. Stopped between the two
// renames, there is no dist/ (the CLI then runs from the sources) and the next build clears up.
fault('build.beforeSwap');
const old = join(root, `.dist-old-${process.pid}`);
if (existsSync(dist)) renameSync(dist, old);
renameSync(tmp, dist);
rmSync(old, { recursive: true, force: true });
step('dist/ is ready');
