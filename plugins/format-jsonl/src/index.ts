/** `@hypsink/format-jsonl`: one JSON object per line, streamed in ~1 MiB chunks. */
import type { BlobBody, Encoder, PluginContext, StoredBlob, Unit } from 'hypsink/plugin';

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

/** A blob's rows: its lines, read back a chunk at a time (a last line without its newline counts too). @ref LLP 0037 */
async function countRows(blob: StoredBlob): Promise<number> {
  let rows = 0;
  let last = 0x0a;
  for (let offset = 0; offset < blob.bytes; ) {
    const chunk = await blob.read(offset, Math.min(CHUNK, blob.bytes - offset));
    if (chunk.byteLength === 0) throw new Error(`cut short at byte ${offset} of ${blob.bytes}`);
    for (let i = chunk.indexOf(0x0a); i >= 0; i = chunk.indexOf(0x0a, i + 1)) rows++;
    last = chunk[chunk.byteLength - 1]!;
    offset += chunk.byteLength;
  }
  return last === 0x0a ? rows : rows + 1;
}

export default function activate(ctx: PluginContext): void {
  ctx.registerEncoder({
    name: ctx.manifest.name,
    // It takes no writerConfig: any key there is a mistake. @ref LLP 0032
    options: { keys: [] },
    create(): Encoder {
      return { extension: 'jsonl', contentType: 'application/x-ndjson', encode, countRows };
    },
  });
}
