#!/usr/bin/env node
// The hypsink CLI. TypeScript sources run through tsx's loader, so built-in and
// third-party .ts plugins load the same way.
import { register } from 'tsx/esm/api';

register();
const { main } = await import('../kernel/cli/main.ts');
process.exitCode = await main(process.argv);
