#!/usr/bin/env node
// The CLI from its TypeScript sources, for tests: bin/hypsink.js runs the compiled dist/.
// The npm scripts set --conditions=hypsink-source, so `hypsink/plugin` resolves to sources too.
import { register } from 'tsx/esm/api';

register();
const { main } = await import('../../kernel/cli/main.ts');
process.exitCode = await main(process.argv);
