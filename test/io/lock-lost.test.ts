/**
 * A cache lock lost while its holder's event loop was blocked. proper-lockfile
 * keeps the lock fresh on a timer; a holder blocked past staleMs can be taken
 * over as stale by another process, and must notice before its next commit
 * point (`assertHeld`), not only at release. Its release must then leave the
 * new holder's lock alone.
 *
 * The contender is a real second process: this file, started with
 * HYPSINK_LOCK_TAKER set to the locked directory.
 */
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmdirSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { describe, test } from 'node:test';
import { ProcessLock } from '../../kernel/io/lock.js';
import { HypsinkError } from '../../types/errors.js';
import { tempDir } from '../support/tmp.js';

const TAKER_ENV = 'HYPSINK_LOCK_TAKER';
/** proper-lockfile's floor: refreshed every 1 s, stale after 2 s. */
const STALE_MS = 2000;
const TAKEN = 'taken-by-child';

if (process.env[TAKER_ENV]) {
  // Child: wait for the lock (taking it once stale), say so, then answer "check" / "release" on stdin.
  const target = process.env[TAKER_ENV];
  const lock = new ProcessLock(target, `cache ${target}`, { waitMs: 60_000, staleMs: STALE_MS });
  const rl = createInterface({ input: process.stdin });
  const lines = rl[Symbol.asyncIterator]();
  process.stdout.write('contending\n');
  await lock.with('takeover', async () => {
    writeFileSync(join(target, TAKEN), String(process.pid));
    process.stdout.write('acquired\n');
    for (;;) {
      const { value, done } = await lines.next();
      if (done || value === 'release') break;
      try {
        await lock.assertHeld('the child check');
        process.stdout.write('held\n');
      } catch (e) {
        process.stdout.write(`lost: ${(e as Error).message}\n`);
      }
    }
  });
  process.stdout.write('released\n');
  rl.close();
  process.stdin.destroy();
} else {
  const SELF = fileURLToPath(import.meta.url);

  interface Taker {
    readonly child: ChildProcess;
    line(): Promise<string>;
    send(cmd: string): void;
    readonly exited: Promise<number | null>;
  }

  function spawnTaker(target: string): Taker {
    const env: NodeJS.ProcessEnv = { ...process.env, [TAKER_ENV]: target };
    delete env.NODE_TEST_CONTEXT;
    const child = spawn(process.execPath, ['--import', 'tsx', SELF], { env, stdio: ['pipe', 'pipe', 'pipe'] });
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
    const exited = new Promise<number | null>((resolve) =>
      child.on('exit', (code) => {
        resolve(code);
        for (const w of waiters) w();
      }),
    );
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
            reject(new Error(`the taker exited: ${err}`));
          }
        };
        waiters.add(check);
        check();
      });
    return { child, line, send: (cmd) => child.stdin!.write(`${cmd}\n`), exited };
  }

  const lockedNaming = (...parts: string[]) => (e: unknown) => {
    assert.ok(e instanceof HypsinkError, `a HypsinkError, got ${String(e)}`);
    assert.equal(e.code, 'HYPSINK_ERR_LOCKED');
    for (const p of parts) assert.ok(e.message.includes(p), `"${e.message}" names ${p}`);
    return true;
  };

  /** Block this process's event loop (so its lock is not refreshed) until `file` appears. */
  function blockUntil(file: string): void {
    const end = Date.now() + 60_000;
    while (!existsSync(file)) if (Date.now() > end) throw new Error(`${file} never appeared`);
  }

  describe('ProcessLock.assertHeld', () => {
    /**
     * Hold the lock, start a contender, block the event loop until it has taken
     * the lock as stale, then run `afterTakeover` (still inside the old hold).
     * Returns the contender, the old hold's outcome and the label.
     */
    async function takeover(afterTakeover: (lock: ProcessLock, target: string) => Promise<void>) {
      const target = tempDir('hypsink-lock-lost-');
      const label = `cache ${target}`;
      const lock = new ProcessLock(target, label, { waitMs: 5000, staleMs: STALE_MS });
      let taker: Taker | undefined;
      // Kept apart: a failed release would replace the operation's own error.
      let failed: { e: unknown } | undefined;
      const outcome = await lock
        .with('flush', async () => {
          taker = spawnTaker(target);
          assert.equal(await taker.line(), 'contending');
          blockUntil(join(target, TAKEN));
          await afterTakeover(lock, target).catch((e: unknown) => {
            failed = { e };
          });
        })
        .then(
          () => null,
          (e: unknown) => e,
        );
      if (failed) throw failed.e;
      assert.ok(taker);
      assert.equal(await taker.line(), 'acquired');
      return { target, label, taker, outcome };
    }

    const stop = (taker: Taker | undefined) => {
      if (taker && taker.child.exitCode === null) taker.child.kill('SIGKILL');
    };

    test('after a stale takeover by another process, a write guarded by the blocked holder does not proceed', async () => {
      let taker: Taker | undefined;
      try {
        const r = await takeover(async (lock, target) => {
          // The commit point, as the kernel guards it.
          await assert.rejects(async () => {
            await lock.assertHeld('manifest write');
            writeFileSync(join(target, 'manifest.json'), '{}');
          }, lockedNaming(`cache ${target}`, 'manifest write'));
          assert.equal(existsSync(join(target, 'manifest.json')), false, 'the guarded write did not happen');
        });
        taker = r.taker;
        assert.ok(r.outcome !== null && lockedNaming(r.label, 'lost')(r.outcome), 'the release reports the loss too');
      } finally {
        stop(taker);
      }
    });

    test("after a stale takeover, the old holder's release leaves the new holder's lock alone", async () => {
      let taker: Taker | undefined;
      try {
        const r = await takeover(async () => undefined);
        taker = r.taker;
        assert.ok(r.outcome !== null && lockedNaming(r.label, 'lost')(r.outcome), `the release reports the loss: ${String(r.outcome)}`);
        assert.ok(existsSync(join(r.target, '.lock')), 'the new holder still has its lock dir');
        const holderFile = join(r.target, '.lock-holder.json');
        assert.ok(existsSync(holderFile), "the new holder's record is still there");
        const holder = JSON.parse(readFileSync(holderFile, 'utf8')) as { pid: number; op: string };
        assert.equal(holder.pid, taker.child.pid, 'the holder record names the new holder');
        assert.equal(holder.op, 'takeover');
        taker.send('check');
        assert.equal(await taker.line(), 'held', 'the new holder still provably holds it');
        taker.send('release');
        assert.equal(await taker.line(), 'released');
        assert.equal(await taker.exited, 0);
        assert.equal(existsSync(join(r.target, '.lock')), false);
      } finally {
        stop(taker);
      }
    });

    test('does nothing while held, however long the operation (the lock is refreshed)', async () => {
      const target = tempDir('hypsink-lock-lost-');
      const lock = new ProcessLock(target, `cache ${target}`, { waitMs: 5000, staleMs: 4000 });
      await lock.with('compact', async () => {
        await lock.assertHeld('cursor swap');
        await sleep(2500); // past one refresh interval (staleMs / 2)
        await lock.assertHeld('watermark write');
      });
    });

    test('throws when the lock is not held (before taking it, after releasing it)', async () => {
      const target = tempDir('hypsink-lock-lost-');
      const lock = new ProcessLock(target, `cache ${target}`, { waitMs: 5000 });
      await assert.rejects(lock.assertHeld('manifest write'), lockedNaming(`cache ${target}`, 'manifest write'));
      await lock.with('flush', () => lock.assertHeld('manifest write'));
      await assert.rejects(lock.assertHeld('manifest write'), lockedNaming(`cache ${target}`, 'manifest write'));
    });

    test('throws when the lock dir was removed, or replaced by a new one (even one reusing the inode)', async () => {
      const target = tempDir('hypsink-lock-lost-');
      const lockDir = join(target, '.lock');
      const lock = new ProcessLock(target, `cache ${target}`, { waitMs: 5000 });
      await assert.rejects(
        lock.with('flush', async () => {
          rmdirSync(lockDir);
          await assert.rejects(lock.assertHeld('manifest write'), lockedNaming('manifest write'));
        }),
        lockedNaming('lost'),
      );
      await assert.rejects(
        lock.with('retention', async () => {
          // What a stale takeover does: remove the dir, make a new one (ext4 often hands back the same inode).
          rmdirSync(lockDir);
          mkdirSync(lockDir);
          await assert.rejects(lock.assertHeld('cursor swap'), lockedNaming('cursor swap'));
        }),
        lockedNaming('lost'),
      );
      assert.ok(statSync(lockDir).isDirectory(), 'the replacement lock dir is not ours to remove');
    });
  });
}
