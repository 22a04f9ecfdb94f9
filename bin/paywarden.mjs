#!/usr/bin/env node
// The operator CLI runs the TypeScript sources directly, like `npm start` does.
import { register } from 'tsx/esm/api';

register();
const { run } = await import('../src/cli.ts');
process.exitCode = await run(process.argv.slice(2));
