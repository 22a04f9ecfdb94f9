/**
 * Where the evaluate/bare gap comes from, bottom up: bench/experiments/ladder-target.ts builds the
 * evaluate route from bare Fastify one service piece at a time (steps 0 to 6), and every
 * configuration runs in its own server process, measured at saturation in interleaved rounds
 * (the order reverses every round). Prints median req/s and server CPU µs per request.
 *   npx tsx bench/experiments/ladder.ts [configs] [rounds=5] [seconds=3]
 * configs: comma-separated, each `bare`, `evaluate` (bench/targets), `loaded` (bare-loaded.ts: the
 * bare route in a process holding the whole service) or `L<step>[:<mode>]` (ladder-target.ts);
 * default bare,loaded,L0,L1,L2,L3,L4,L5,L6,evaluate. List one twice to get two processes of it.
 */
import { fileURLToPath } from 'node:url';
import { startTarget, type StartedTarget } from '../lib/child.js';
import { saturate, smokeCheck, type RunResult } from '../lib/load.js';
import { median } from '../lib/stats.js';
import { table } from '../lib/report.js';

const EXP = fileURLToPath(new URL('./server.ts', import.meta.url));
const specs = (process.argv[2] ?? 'bare,loaded,L0,L1,L2,L3,L4,L5,L6,evaluate').split(',');
const rounds = Number(process.argv[3] ?? 5);
const seconds = Number(process.argv[4] ?? 3);

function start(spec: string): Promise<StartedTarget> {
  if (spec === 'loaded') return startTarget('bare-loaded', { entry: EXP });
  const m = /^L(\d)(?::(\w+))?$/.exec(spec);
  if (m) return startTarget('ladder', { entry: EXP, env: { LADDER_STEP: m[1], LADDER_MODE: m[2] ?? '' } });
  return startTarget(spec);
}

const servers: StartedTarget[] = [];
try {
  for (const spec of specs) {
    const t = await start(spec);
    servers.push(t);
    await smokeCheck(t);
    await saturate(t, { durationSec: 3, warmupSec: 0 }); // JIT warm-up, not counted
  }
  const runs = specs.map(() => [] as RunResult[]);
  for (let r = 0; r < rounds; r++) {
    for (const i of r % 2 ? [...specs.keys()].reverse() : [...specs.keys()]) {
      const res = await saturate(servers[i]!, { durationSec: seconds, warmupSec: 1 });
      runs[i]!.push(res);
      console.log(`  ${specs[i]}: ${res.rps} req/s, ${res.serverMicrosPerRequest} µs/req, other ${res.otherCpu}`);
    }
  }
  const m = (i: number, f: (x: RunResult) => number) => median(runs[i]!.map(f));
  console.log(table(['config', 'req/s', 'µs/req'], specs.map((s, i) => [s, m(i, (x) => x.rps), m(i, (x) => x.serverMicrosPerRequest)])));
} finally {
  for (const t of servers) await t.stop();
}
