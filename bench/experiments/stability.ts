/** Saturation runs back to back on one server, to see warm-up and drift: npx tsx bench/experiments/stability.ts [target] [runs=8] [seconds=3] */
import { startTarget } from '../lib/child.js';
import { saturate, smokeCheck } from '../lib/load.js';

const name = process.argv[2] ?? 'bare';
const runs = Number(process.argv[3] ?? 8);
const seconds = Number(process.argv[4] ?? 3);
const t = await startTarget(name);
try {
  await smokeCheck(t);
  for (let i = 0; i < runs; i++) {
    const r = await saturate(t, { durationSec: seconds, warmupSec: 0 });
    const mem = await t.cpu();
    console.log(`  ${name} run ${i + 1}: ${r.rps} req/s, ${r.serverMicrosPerRequest} µs/req, server ${r.serverCpu}, client ${r.clientCpu}, other ${r.otherCpu}, heap ${((mem.heapUsedBytes ?? 0) / 2 ** 20).toFixed(1)} MiB, rss ${((mem.rssBytes ?? 0) / 2 ** 20).toFixed(1)} MiB`);
  }
} finally {
  await t.stop();
}
