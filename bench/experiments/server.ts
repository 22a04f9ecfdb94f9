/** Child entry for experiment targets: node --import tsx bench/experiments/server.ts <module-name>. */
import { serveTarget } from '../lib/serve.js';

const name = process.argv[2] ?? '';
const MODULES: Record<string, () => Promise<{ default: import('../lib/types.js').TargetModule }>> = {
  'evaluate-variant': () => import('./evaluate-variant.js'),
  ladder: () => import('./ladder-target.js'),
  'bare-loaded': () => import('./bare-loaded.js'),
};
await serveTarget(name, async () => {
  const load = MODULES[name];
  if (!load) throw new Error(`unknown experiment target ${name}`);
  return load();
});
