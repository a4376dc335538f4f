import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after } from 'node:test';

/**
 * A fresh temp dir on real disk, removed when the current test (or suite) ends.
 * Call it in a test or in a describe() body, not inside a before() hook: there
 * node:test runs the cleanup as soon as the hook itself finishes.
 */
export function tempDir(prefix = 'hypsink-'): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}
