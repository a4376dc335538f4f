/**
 * Issue 28, a newcomer's friction: the first `npx hypsink` in a fresh clone
 * spent a minute silently building dist/ (npx installs the checkout into its
 * cache and runs its `prepare`), and a Ctrl-C there left npx broken (a half
 * built dist/ the CLI took for a whole one). Now npx builds nothing and the
 * CLI runs the sources until dist/ is built; a build only ever swaps in a
 * whole dist/. Checked in a real `git clone` of this checkout (with its
 * uncommitted changes laid over), node_modules linked to this one's.
 * @ref LLP 0070
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, readdirSync, realpathSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { REPO, runNode, runProcess } from '../support/proc.js';
import { tempDir } from '../support/tmp.js';

/** What a user's shell runs: no TypeScript conditions or loader of this suite's, no npm context. */
const PLAIN: Record<string, string | undefined> = { NODE_OPTIONS: '', HYPSINK_LOG_LEVEL: 'warn' };
for (const k of Object.keys(process.env)) if (k.startsWith('npm_')) PLAIN[k] = undefined;

/** A fresh clone of this checkout as it is now: HEAD, then the working tree's changes and new files. */
function freshClone(): string {
  const clone = join(tempDir('hypsink-clone-'), 'hypsink');
  const git = (args: string[], cwd = REPO, input?: Buffer) => execFileSync('git', args, { cwd, input, maxBuffer: 1 << 28 });
  git(['clone', '-q', '--no-hardlinks', REPO, clone]);
  const diff = git(['diff', 'HEAD', '--binary']);
  if (diff.length > 0) git(['apply', '--binary', '-'], clone, diff);
  for (const f of git(['ls-files', '--others', '--exclude-standard', '-z']).toString().split('\0')) {
    if (f && !f.startsWith('node_modules')) cpSync(join(REPO, f), join(clone, f));
  }
  symlinkSync(realpathSync(join(REPO, 'node_modules')), join(clone, 'node_modules'), 'dir');
  assert.ok(!existsSync(join(clone, 'dist')), 'a fresh clone has no dist/');
  return clone;
}

const building = (clone: string) => readdirSync(clone).filter((n) => n.startsWith('.dist-'));

test('npx hypsink --help in a fresh clone answers from the sources and builds nothing; a command that loads plugins runs too', { timeout: 180_000 }, async () => {
  const clone = freshClone();
  const npmCache = tempDir('hypsink-npx-cache-');
  const r = await runProcess('npx', ['--offline', '--yes', 'hypsink', '--help'], { cwd: clone, env: { ...PLAIN, npm_config_cache: npmCache, npm_config_update_notifier: 'false' } });
  assert.equal(r.code, 0, `${r.stdout}\n${r.stderr}`);
  assert.match(r.stdout, /^Usage: hypsink /m);
  assert.ok(!existsSync(join(clone, 'dist')), `npx built nothing:\n${r.stderr}`);
  assert.deepEqual(building(clone), []);

  // Plugins load from the sources too (they import `hypsink/plugin` by its package name).
  const project = tempDir('hypsink-project-');
  const bin = join(clone, 'bin/hypsink.js');
  const step = async (args: string[], input?: string) => {
    const s = await runNode([bin, ...args], { cwd: project, env: PLAIN, ...(input ? { input } : {}) });
    assert.equal(s.code, 0, `hypsink ${args.join(' ')}:\n${s.stdout}\n${s.stderr}`);
  };
  await step(['init']);
  await step(['ingest', 'events', '--source', 'web'], '{"id":1,"ts":"2026-01-01T00:00:00Z","msg":"hi"}\n');
  await step(['export']);
  assert.ok(existsSync(join(project, 'exports/events/source=web/events.0-1.parquet')), 'exported through the Parquet plugin');
});

test('a build stopped before its swap leaves no dist/, the CLI still answers, and the next build clears what it left', { timeout: 300_000 }, async () => {
  const clone = freshClone();
  const stopped = await runNode([join(clone, 'scripts/build.mjs')], { cwd: clone, env: { ...PLAIN, HYPSINK_BUILD_FAULT: 'build.beforeSwap' } });
  assert.equal(stopped.signal, 'SIGKILL', `the build died at its fault point:\n${stopped.stderr}`);
  assert.ok(!existsSync(join(clone, 'dist')), 'no dist/: nothing the CLI would take for a whole build');
  assert.equal(building(clone).length, 1, 'what the stopped build left, beside dist/');
  const help = await runNode([join(clone, 'bin/hypsink.js'), '--help'], { cwd: clone, env: PLAIN });
  assert.equal(help.code, 0, help.stderr);
  assert.match(help.stdout, /^Usage: hypsink /m);

  // A leftover of a build still running is its own (here: this process's pid); only dead ones go.
  const live = join(clone, `.dist-build-${process.pid}`);
  mkdirSync(live);
  writeFileSync(join(live, 'x'), '');
  const next = await runNode([join(clone, 'scripts/build.mjs')], { cwd: clone, env: { ...PLAIN, HYPSINK_BUILD_FAULT: 'build.start' } });
  assert.equal(next.signal, 'SIGKILL', next.stderr);
  assert.deepEqual(building(clone), [`.dist-build-${process.pid}`], 'the dead build’s folder removed, the live one kept');
});
