/**
 * audit-sink: a request sink that appends each unit's rows to `<dir>/<dataset>/source=<source>.jsonl`
 * exactly once, and logs every watermark advance. `<file>.units` lists `<unit id> <file size after it> <digest>`.
 */
import { appendFile, mkdir, open, readFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { HypsinkError, type PluginContext, type ShipResult, type Unit, type UnitShipper, unitConflict } from 'hypsink/plugin';

export default function activate(ctx: PluginContext): void {
  // Tap-only (the kernel calls it): a SyncHook fired right after the durable advance, so never block here.
  ctx.hooks.watermarkAdvanced.tap(ctx.manifest.name, (e) => {
    ctx.log.info({ sink: e.sink, source: e.partition.source, from: e.from?.seq ?? null, to: e.to.seq, unit: e.unit }, 'watermark advanced');
  });
  ctx.registerSink({
    name: ctx.manifest.name,
    // The host checks `config` before create: unknown keys (with a did-you-mean), then validate.
    options: { keys: ['dir'], validate: (o) => (typeof o.dir === 'string' ? { value: o } : { issues: [{ message: 'expected a folder', path: ['dir'] }] }) },
    create(config, build): UnitShipper {
      const dir = resolve(build.baseDir, config.dir as string);
      return {
        limits: { maxRows: 10_000, maxBytes: 16 * 1024 * 1024 },
        // A pure function of its arguments: a retried unit gets the same id.
        unitId: (p, since, until) => `${p.key}:${since?.seq ?? '-'}:${until.seq}`,
        async ship(unit: Unit): Promise<ShipResult> {
          const file = join(dir, `${unit.partition.key}.jsonl`);
          const done = (await readFile(`${file}.units`, 'utf8').catch(() => '')).split('\n').filter(Boolean);
          const held = done.find((l) => l.split(' ')[0] === unit.id)?.split(' ');
          // Same id, other digest: other rows under its label (a copied cache), refused. No digest: recorded before digests.
          if (held?.[2] !== undefined && held[2] !== unit.digest) throw unitConflict({ sink: build.sink, partition: unit.partition, since: unit.since?.seq ?? null, until: unit.until.seq, digest: unit.digest, held: { since: unit.since?.seq ?? null, until: unit.until.seq, digest: held[2] }, where: `${file}.units` });
          if (held) return { rows: 0, bytes: 0, duplicate: true };
          const lines: string[] = [];
          for await (const row of unit.rows()) lines.push(`${JSON.stringify(row)}\n`);
          const text = lines.join('');
          if (unit.signal.aborted) throw new HypsinkError('HYPSINK_ERR_ABORTED', `sink "${build.sink}": stopped by shutdown`);
          try {
            await mkdir(dirname(file), { recursive: true });
            const fh = await open(file, 'a');
            try {
              // Cut what a crash left after the last recorded unit, then append, fsync, and only then record.
              await fh.truncate(Number(done.at(-1)?.split(' ')[1] ?? 0));
              await fh.write(text);
              await fh.sync();
              await appendFile(`${file}.units`, `${unit.id} ${(await fh.stat()).size} ${unit.digest}\n`);
            } finally {
              await fh.close();
            }
          } catch (e) {
            // A full disk may clear on its own (retried with backoff); anything else needs a person.
            const retryable = (e as NodeJS.ErrnoException).code === 'ENOSPC';
            throw new HypsinkError(retryable ? 'HYPSINK_ERR_RETRYABLE' : 'HYPSINK_ERR_DESTINATION', `sink "${build.sink}": cannot write ${file} (${(e as Error).message})`, { cause: e, retryable });
          }
          return { rows: lines.length, bytes: Buffer.byteLength(text), duplicate: false };
        },
        async close() {},
      };
    },
  });
}
