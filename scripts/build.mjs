#!/usr/bin/env node
// `npm run build`: compile to dist/ (JavaScript, .d.ts, source maps), copy what the
// compiled code reads beside itself (each built-in plugin's plugin.json), then bundle
// the CLI into dist/cli/ (esbuild): one file per command path instead of hundreds of
// modules, which is most of a command's start. @ref LLP 0025
import { execFileSync } from 'node:child_process';
import { cpSync, existsSync, readdirSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const dist = join(root, 'dist');
rmSync(dist, { recursive: true, force: true });
const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
try {
  execFileSync(process.execPath, [tsc, '-p', join(root, 'tsconfig.build.json')], { stdio: 'inherit' });
} catch {
  process.stderr.write('build: tsc failed (errors above); dist/ is incomplete, fix them and run "npm run build" again\n');
  process.exit(1);
}
for (const name of readdirSync(join(root, 'plugins'))) {
  const manifest = join(root, 'plugins', name, 'plugin.json');
  if (existsSync(manifest)) cpSync(manifest, join(dist, 'plugins', name, 'plugin.json'));
}

// The CLI bundle. Code split, so each command still loads only what it runs. The built-in
// plugins are entries of it: they share its one apache-arrow (a unit's batches are Arrow
// objects, and Arrow checks classes), and the host imports them from here when bundled.
// Kept out: parquet-wasm (it loads its .wasm beside itself) and the AWS SDK (the s3
// plugin's chunk imports it when that plugin loads). Third-party plugins load by path.
const { build } = await import('esbuild');
const builtins = readdirSync(join(root, 'plugins')).filter((n) => existsSync(join(dist, 'plugins', n, 'src/index.js')));
await build({
  absWorkingDir: root,
  entryPoints: {
    main: 'dist/kernel/cli/main.js',
    // Beside the chunks that start them (workerEntry resolves a sibling file).
    'flush-worker': 'dist/kernel/flush/flush-worker.js',
    'parse-worker': 'dist/kernel/ingest/parse-worker.js',
    ...Object.fromEntries(builtins.map((n) => [`plugin-${n}`, `dist/plugins/${n}/src/index.js`])),
  },
  outdir: 'dist/cli',
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
});
