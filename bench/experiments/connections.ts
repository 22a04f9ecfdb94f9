/**
 * Saturation against the number of connections: is a target saturated at the benchmarks' 32?
 *   npx tsx bench/experiments/connections.ts [targets=evaluate,decisions-sqlite] [counts=16,32,64,128] [rounds=3] [seconds=4]
 * Every target runs in its own server process; the counts alternate direction round by round.
 * A closed-loop client with N connections keeps at most N requests in flight: a server whose
 * answers wait on something other than its event loop (a group commit's fsync, a signing worker,
 * database round trips) is not saturated until enough requests wait with them, and its event
 * loop shows idle time at the benchmark's count. Prints req/s, p50/p99, the server's event-loop
 * busy fraction and CPU µs per request, with medians per count.
 */
import { startTarget } from '../lib/child.js';
import { saturate, smokeCheck, type RunResult } from '../lib/load.js';
import { median } from '../lib/stats.js';
import { isTargetName } from '../lib/targets.js';

const targets = (process.argv[2] ?? 'evaluate,decisions-sqlite').split(',');
const counts = (process.argv[3] ?? '16,32,64,128').split(',').map(Number);
const rounds = Number(process.argv[4] ?? 3);
const seconds = Number(process.argv[5] ?? 4);
for (const name of targets) if (!isTargetName(name)) throw new Error(`unknown target ${name}`);

for (const name of targets) {
  const t = await startTarget(name);
  try {
    await smokeCheck(t);
    await saturate(t, { connections: 32, durationSec: 3, warmupSec: 0 }); // JIT warm-up, not counted
    const runs = new Map<number, RunResult[]>(counts.map((c) => [c, []]));
    for (let r = 0; r < rounds; r++) {
      for (const c of r % 2 ? [...counts].reverse() : counts) {
        const res = await saturate(t, { connections: c, durationSec: seconds, warmupSec: 1 });
        runs.get(c)!.push(res);
        const busy = res.serverLoopBusy === undefined ? '' : ` loop ${Math.round(res.serverLoopBusy * 100)}%`;
        console.log(`  ${name} ${String(c).padStart(3)} conn: ${res.rps} req/s, p50 ${res.latencyMs.p50} p99 ${res.latencyMs.p99} ms,${busy} ${res.serverMicrosPerRequest} µs/req, other ${res.otherCpu}`);
      }
    }
    for (const c of counts) {
      const rs = runs.get(c)!;
      const m = (f: (x: RunResult) => number) => median(rs.map(f));
      console.log(`${name} ${c} connections (median of ${rs.length}): ${m((x) => x.rps)} req/s, p99 ${m((x) => x.latencyMs.p99)} ms, loop ${Math.round(m((x) => x.serverLoopBusy ?? NaN) * 100)}%, ${m((x) => x.serverMicrosPerRequest)} µs/req`);
    }
  } finally {
    await t.stop();
  }
}
