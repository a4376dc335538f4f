/**
 * Reader leases against generation deletion (LLP 0004). A reader that takes a
 * lease while `retireGeneration` is deleting the generation must be refused;
 * it must never hold a lease on a generation whose files are going away.
 *
 * The deleter runs here; readers run in child processes (this file, started
 * with HYPSINK_LEASE_READER set), each looping take-lease → read the manifest →
 * release, as fast as it can, across the whole deletion of a generation big
 * enough that removing it takes a while.
 */
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, linkSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, test } from 'node:test';
import { generationDir, retireGeneration, takeLease } from '../../kernel/store/generations.js';
import { PartitionStore, partitionRef } from '../../kernel/store/partition.js';
import { tempDir } from '../support/tmp.js';

const READER_ENV = 'HYPSINK_LEASE_READER';

/**
 * Child side: lease, check the manifest is there, release. A refused reader
 * tries again, as a late reader that read the cursor before the swap would,
 * until the generation is gone. Prints one verdict line.
 */
async function readerMain(genDir: string): Promise<void> {
  let leases = 0;
  for (;;) {
    const release = await takeLease(genDir);
    if (!release) {
      if (!existsSync(genDir)) break;
      continue;
    }
    leases++;
    if (leases === 1) process.stdout.write('ready\n');
    // While we hold a lease, the generation must be whole.
    if (!existsSync(join(genDir, 'manifest.json'))) {
      process.stdout.write(`BROKEN: lease ${leases} granted on ${genDir}, but its manifest is gone\n`);
      await release();
      return;
    }
    await release();
  }
  process.stdout.write(`refused after ${leases} leases\n`);
}

if (process.env[READER_ENV]) {
  // One generation per stdin line, one verdict line each.
  const { createInterface } = await import('node:readline');
  for await (const line of createInterface({ input: process.stdin })) await readerMain(line);
} else {
  const SELF = fileURLToPath(import.meta.url);

  /** A reader process, kept for every round. */
  interface Reader {
    readonly child: ChildProcess;
    /** Start looping on `genDir`; resolves once it holds its first lease. */
    start(genDir: string): Promise<void>;
    /** The verdict line of the current round. */
    verdict(): Promise<string>;
  }

  function spawnReader(): Reader {
    const env: NodeJS.ProcessEnv = { ...process.env, [READER_ENV]: '1' };
    delete env.NODE_TEST_CONTEXT;
    const child = spawn(process.execPath, ['--import', 'tsx', SELF], {
      env,
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    const waiters = new Set<() => void>();
    child.stdout!.setEncoding('utf8').on('data', (s: string) => {
      out += s;
      for (const w of waiters) w();
    });
    child.stderr!.setEncoding('utf8').on('data', (s: string) => {
      err += s;
    });
    child.on('exit', () => {
      for (const w of waiters) w();
    });
    /** The next complete stdout line. */
    const line = () =>
      new Promise<string>((resolve, reject) => {
        const check = () => {
          const i = out.indexOf('\n');
          if (i >= 0) {
            waiters.delete(check);
            const l = out.slice(0, i);
            out = out.slice(i + 1);
            resolve(l);
          } else if (child.exitCode !== null || child.signalCode !== null) {
            waiters.delete(check);
            reject(new Error(`reader exited: ${err}`));
          }
        };
        waiters.add(check);
        check();
      });
    return {
      child,
      async start(genDir: string) {
        child.stdin!.write(`${genDir}\n`);
        const l = await line();
        assert.equal(l, 'ready', `the reader's first lease on ${genDir}`);
      },
      verdict: line,
    };
  }

  /** A generation with a manifest and enough files that removing it takes a while. */
  function bigGeneration(partDir: string, n: number, files: number): string {
    const dir = generationDir(partDir, n);
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, 'manifest.json'), '{}');
    // Hard links of one empty file: as slow to remove as files, much faster to make.
    const seed = join(partDir, '.seed');
    writeFileSync(seed, '');
    for (let i = 0; i < files; i++) linkSync(seed, join(dir, `part-${i}.parquet`));
    rmSync(seed);
    return dir;
  }

  describe('reader leases vs retireGeneration', () => {
    test('a reader never holds a lease on a generation being deleted, and the delete never fails', async () => {
      const partDir = tempDir('hypsink-leases-');
      const ROUNDS = 4;
      const READERS = 3;
      const readers = Array.from({ length: READERS }, () => spawnReader());
      try {
        for (let round = 0; round < ROUNDS; round++) {
          const genDir = bigGeneration(partDir, round, 4000);
          await Promise.all(readers.map((r) => r.start(genDir)));
          // Retire until deleted: a live lease makes it wait for its reader (who then sees the tombstone).
          let deleted = false;
          for (let attempt = 0; !deleted; attempt++) {
            assert.ok(attempt < 10_000, 'the generation is deleted once its readers have left');
            deleted = await retireGeneration(genDir);
          }
          const verdicts = await Promise.all(readers.map((r) => r.verdict()));
          for (const [i, v] of verdicts.entries()) assert.match(v, /^refused after \d+ leases$/, `round ${round}, reader ${i}: ${v}`);
          assert.equal(existsSync(genDir), false, 'the generation is gone');
          assert.deepEqual(readdirSync(partDir), [], 'nothing left beside it (no trash)');
        }
      } finally {
        for (const r of readers) r.child.kill('SIGKILL');
      }
    });

    test('a lease is refused once the generation is retired or gone', async () => {
      const partDir = tempDir('hypsink-leases-');
      const genDir = bigGeneration(partDir, 0, 1);
      const held = await takeLease(genDir);
      assert.ok(held, 'a live generation is leased');
      assert.equal(await retireGeneration(genDir), false, 'a live lease keeps it');
      assert.equal(await takeLease(genDir), undefined, 'a tombstoned generation is refused');
      assert.ok(existsSync(join(genDir, 'manifest.json')), 'still whole for the reader holding it');
      await held();
      assert.equal(await retireGeneration(genDir), true);
      assert.equal(existsSync(genDir), false);
      assert.equal(await takeLease(genDir), undefined, 'a deleted generation is refused');
      assert.deepEqual(readdirSync(partDir), []);
    });

    test('sweep() removes the trash a deleter that crashed mid-delete left behind', async () => {
      const root = tempDir('hypsink-leases-');
      const store = new PartitionStore(root, partitionRef('events', 'web'));
      await store.ensure();
      // What a deleter leaves when it dies after moving a generation aside, before removing it.
      const trash = join(store.dir, '.trash-table-7-12345-abcdef');
      mkdirSync(join(trash, '.leases'), { recursive: true });
      writeFileSync(join(trash, 'manifest.json'), '{}');
      writeFileSync(join(trash, '.retired'), '');
      await store.sweep();
      assert.equal(existsSync(trash), false, 'the trash dir is removed');
      assert.ok(existsSync(join(store.dir, 'table-0', 'manifest.json')), 'the current generation is untouched');
      assert.deepEqual(JSON.parse(readFileSync(store.cursorPath, 'utf8')), { v: 1, generation: 0 });
    });
  });
}
