/**
 * Child of inject-ablation.ts: builds one target in-process (no socket) and measures the CPU
 * time per request of Fastify inject() at a fixed concurrency. Prints one JSON line.
 *   node --import tsx bench/experiments/inject-worker.ts <target|experiment> <count> [warm-up count]
 */
import { TARGETS, isTargetName } from '../lib/targets.js';
import type { TargetModule } from '../lib/types.js';

const name = process.argv[2] ?? '';
const count = Number(process.argv[3] ?? 20000);
const CONCURRENCY = 16;
const experiments: Record<string, () => Promise<{ default: TargetModule }>> = {
  'evaluate-variant': () => import('./evaluate-variant.js'),
};
const load = isTargetName(name) ? TARGETS[name] : experiments[name];
if (!load) throw new Error(`unknown target ${name}`);
const target = await (await load()).default.start();
const maybeInject = target.inject;
const maybeReq = target.load.requests[0];
if (!maybeInject || !maybeReq) throw new Error(`${name} cannot be injected`);
const inject = maybeInject.bind(target);
const req = maybeReq;
const expect = target.load.expectStatus ?? 200;

async function batch(n: number): Promise<void> {
  let left = n;
  const lane = async () => {
    while (left-- > 0) {
      const res = await inject(req);
      if (res.statusCode !== expect) throw new Error(`${name}: status ${res.statusCode}: ${res.body.slice(0, 300)}`);
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, lane));
}

await batch(Number(process.argv[4] ?? Math.min(10000, count))); // warm-up: JIT, caches
const cpu0 = process.cpuUsage();
const t0 = process.hrtime.bigint();
await batch(count);
const wall = Number(process.hrtime.bigint() - t0) / 1000;
const cpu = process.cpuUsage(cpu0);
// Printed before closing: a target whose close leaves nothing for the event loop to wait on
// ends the process (exit code 13, an unsettled top-level await) before a line after it runs.
console.log(JSON.stringify({ name, count, cpuMicrosPerRequest: (cpu.user + cpu.system) / count, wallMicrosPerRequest: wall / count }));
await target.close();
process.exit(0);
