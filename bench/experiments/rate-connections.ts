/** How autocannon's overallRate pacing depends on the connection count (npx tsx bench/experiments/rate-connections.ts [target]). */
import { startTarget } from '../lib/child.js';
import { atRate, saturate, smokeCheck } from '../lib/load.js';
import { median } from '../lib/stats.js';
import { isTargetName } from '../lib/targets.js';

const name = process.argv[2] ?? 'evaluate';
if (!isTargetName(name)) throw new Error(`unknown target ${name}`);
const t = await startTarget(name);
try {
  await smokeCheck(t);
  const sats = [];
  for (let i = 0; i < 3; i++) sats.push((await saturate(t, { durationSec: 3 })).rps);
  const m = median(sats);
  console.log(`${name} saturation ${sats.join(' / ')} -> median ${m}`);
  for (const c of [1, 2, 4, 8, 16, 32]) {
    const r = await atRate(t, m / 2, { connections: c, durationSec: 4 });
    console.log(`  conns ${String(c).padStart(2)} @${r.requestedRate}: ${r.rps}/s p50 ${r.latencyMs.p50} p90 ${r.latencyMs.p90} p99 ${r.latencyMs.p99} p99.9 ${r.latencyMs.p999} (ac p99 ${r.autocannonLatencyMs?.p99}) server ${r.serverCpu} other ${r.otherCpu}`);
  }
} finally {
  await t.stop();
}
