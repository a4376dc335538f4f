#!/usr/bin/env node
// The hypsink CLI: compiled JavaScript (dist/), no TypeScript loader at run time.
let main;
try {
  ({ main } = await import('../dist/cli/main.js'));
} catch (e) {
  if (e?.code !== 'ERR_MODULE_NOT_FOUND' || !String(e.message).includes('dist/cli/main.js')) throw e;
  process.stderr.write('hypsink: dist/ is missing; run "npm run build" in the hypsink folder (npm install does it)\n');
  process.exit(2);
}
process.exitCode = await main(process.argv);
