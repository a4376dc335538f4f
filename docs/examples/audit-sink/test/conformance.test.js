// The hypsink conformance kit over this sink: every exactly-once case, each a test.
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { conformance } from 'hypsink/testing';

const plugin = fileURLToPath(new URL('..', import.meta.url));

for (const c of conformance({
  plugins: [plugin],
  sink: (dir) => ({ plugin: 'hypsink-audit-sink', config: { dir } }),
  // Every row in the sink's JSONL files (one per partition), duplicates included.
  read: async (dir) => {
    const text = await readFile(join(dir, 'conformance', 'source=kit.jsonl'), 'utf8').catch(() => '');
    return text.split('\n').filter(Boolean).map((line) => JSON.parse(line));
  },
}))
  test(c.name, c.run);
