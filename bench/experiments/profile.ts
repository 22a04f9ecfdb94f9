/**
 * CPU profile of a target under saturation: npx tsx bench/experiments/profile.ts [target] [seconds] [connections=32]
 * Writes a .cpuprofile under bench/results/profiles/ and prints the heaviest functions (self time).
 */
import { mkdirSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startTarget } from '../lib/child.js';
import { saturate, smokeCheck } from '../lib/load.js';
import { isTargetName } from '../lib/targets.js';

const name = process.argv[2] ?? 'evaluate';
const seconds = Number(process.argv[3] ?? 8);
const connections = Number(process.argv[4] ?? 32);
if (!isTargetName(name)) throw new Error(`unknown target ${name}`);
const dir = fileURLToPath(new URL(`../results/profiles/${name}-${Date.now()}`, import.meta.url));
mkdirSync(dir, { recursive: true });
const t = await startTarget(name, { execArgv: ['--cpu-prof', `--cpu-prof-dir=${dir}`] });
await smokeCheck(t);
const r = await saturate(t, { connections, durationSec: seconds, warmupSec: 2 });
console.log(`${name}: ${r.rps} req/s, ${r.serverMicrosPerRequest} µs server CPU per request`);
await t.stop();

interface Node { id: number; callFrame: { functionName: string; url: string; lineNumber: number }; hitCount: number; children?: number[] }
const file = readdirSync(dir).find((f) => f.endsWith('.cpuprofile'));
if (!file) throw new Error('no profile written');
const profile = JSON.parse(readFileSync(join(dir, file), 'utf8')) as { nodes: Node[] };
const total = profile.nodes.reduce((a, n) => a + n.hitCount, 0);
const self = new Map<string, number>();
const byModule = new Map<string, number>();
for (const n of profile.nodes) {
  const url = n.callFrame.url.replace(/^file:\/\/\/work\/main\//, '');
  const key = `${n.callFrame.functionName || '(anon)'} ${url}:${n.callFrame.lineNumber + 1}`;
  self.set(key, (self.get(key) ?? 0) + n.hitCount);
  const mod = url.startsWith('node_modules/') ? url.split('/').slice(0, url.startsWith('node_modules/@') ? 3 : 2).join('/') : url.startsWith('src/') ? 'src/' + url.split('/')[1] : url || n.callFrame.functionName;
  byModule.set(mod, (byModule.get(mod) ?? 0) + n.hitCount);
}
const top = (m: Map<string, number>, k: number) =>
  [...m].sort((a, b) => b[1] - a[1]).slice(0, k).map(([key, v]) => `${((v / total) * 100).toFixed(1).padStart(5)}%  ${key}`).join('\n');
console.log(`\nself time by module:\n${top(byModule, 25)}\n\nself time by function:\n${top(self, 40)}\n\nprofile: ${join(dir, file)}`);
