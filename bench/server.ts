/**
 * Child-process entry of the benchmarks: `node --import tsx bench/server.ts <target>`, started by
 * startTarget() in bench/lib/child.ts. Runs one target of bench/lib/targets.ts on 127.0.0.1.
 */
import { serveTarget } from './lib/serve.js';
import { isTargetName, TARGETS } from './lib/targets.js';

const name = process.argv[2] ?? '';
await serveTarget(name, async () => {
  if (!isTargetName(name)) throw new Error(`unknown target "${name}"; known: ${Object.keys(TARGETS).join(', ')}`);
  return TARGETS[name]();
});
