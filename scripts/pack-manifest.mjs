#!/usr/bin/env node
// The package.json a tarball ships, made at pack time (prepack: `strip`, postpack:
// `restore`). The checkout's scripts (build, prepare, test, bench …) run files the
// tarball does not ship, so the packed manifest has none: an install of the tarball
// then finds no `prepare` whose file is missing. The checkout's package.json is kept
// aside, byte for byte, and put back after the pack; a pack stopped in between is put
// right by the next one. @ref LLP 0070
import { existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const manifest = join(root, 'package.json');
const kept = join(root, '.package.json.packing');

const restore = () => {
  if (existsSync(kept)) renameSync(kept, manifest);
};

const what = process.argv[2];
if (what === 'strip') {
  restore(); // a pack stopped before its postpack: start again from the checkout's own
  const text = readFileSync(manifest, 'utf8');
  writeFileSync(kept, text);
  const { scripts: _scripts, ...packed } = JSON.parse(text);
  writeFileSync(manifest, `${JSON.stringify(packed, null, 2)}\n`);
} else if (what === 'restore') {
  restore();
} else {
  process.stderr.write('usage: node scripts/pack-manifest.mjs strip|restore\n');
  process.exit(2);
}
