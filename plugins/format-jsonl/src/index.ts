/** `@hypsink/format-jsonl`: one JSON object per line, streamed in ~1 MiB chunks. */
import type { BlobBody, Encoder, PluginContext, Unit } from 'hypsink/plugin';

const CHUNK = 1 << 20;

async function* encode(unit: Unit): BlobBody {
  const enc = new TextEncoder();
  let buf = '';
  for await (const row of unit.rows()) {
    buf += JSON.stringify(row) + '\n';
    if (buf.length >= CHUNK) {
      yield enc.encode(buf);
      buf = '';
    }
  }
  if (buf) yield enc.encode(buf);
}

export default function activate(ctx: PluginContext): void {
  ctx.registerEncoder({
    name: ctx.manifest.name,
    // It takes no writerConfig: any key there is a mistake. @ref LLP 0032
    options: { keys: [] },
    create(): Encoder {
      return { extension: 'jsonl', contentType: 'application/x-ndjson', encode };
    },
  });
}
