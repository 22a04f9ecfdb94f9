/**
 * `npm run bench:payments` (issue 4):
 *  1. the 402 challenge path (GET /api/quick-check without payment) against the free evaluation,
 *     saturation, BENCH_ROUNDS runs each alternating, medians and ratio (target >= 0.80);
 *  2. full paid round trips on the devnet with the official @x402/fetch client: 402, sign,
 *     retry, verify, produce, store, settle on chain, 200 (target median < 100 ms).
 */
import { fileURLToPath } from 'node:url';
import { startTarget, type StartedTarget } from './lib/child.js';
import { saturate, smokeCheck, type RunResult } from './lib/load.js';
import { writeJson } from './lib/report.js';
import { median, percentileSorted, round } from './lib/stats.js';
import { startPaidStack } from '../tests/helpers/paid.js';

const env = (name: string, def: number) => (process.env[name] ? Number(process.env[name]) : def);
const ROUNDS = env('BENCH_ROUNDS', 3);
const DURATION = env('BENCH_DURATION', 5);
const PAID = env('BENCH_PAID_REQUESTS', 50);
const RESULTS = fileURLToPath(new URL('./results/payments-latest.json', import.meta.url));

async function main(): Promise<void> {
  const names = ['evaluate', 'challenge'];
  const targets = new Map<string, StartedTarget>();
  const sat = new Map<string, RunResult[]>(names.map((n) => [n, []]));
  try {
    for (const n of names) {
      const t = await startTarget(n);
      await smokeCheck(t);
      targets.set(n, t);
      console.log(`started ${n}: ${t.load.description}`);
    }
    for (let r = 0; r < ROUNDS; r++) {
      for (const n of r % 2 ? [...names].reverse() : names) {
        const res = await saturate(targets.get(n)!, { durationSec: DURATION, warmupSec: 1 });
        sat.get(n)!.push(res);
        console.log(`  ${n.padEnd(9)} ${res.rps} req/s, p50 ${res.latencyMs.p50} ms, p99 ${res.latencyMs.p99} ms, other CPU ${Math.round((res.otherCpu ?? 0) * 100)}%`);
      }
    }
  } finally {
    for (const t of targets.values()) await t.stop();
  }
  const rps = Object.fromEntries(names.map((n) => [n, median(sat.get(n)!.map((r) => r.rps))]));

  console.log(`\n${PAID} paid quick checks, one after another, with the official x402 client`);
  const stack = await startPaidStack({ config: { logLevel: 'silent' } });
  const times: number[] = [];
  try {
    const pay = stack.payingFetch(1);
    for (let i = 0; i < PAID + 3; i++) {
      const t0 = performance.now();
      const res = await pay(`${stack.url}/api/quick-check`);
      await res.text();
      if (res.status !== 200) throw new Error(`paid request answered ${res.status}`);
      if (i >= 3) times.push(performance.now() - t0); // the first few warm up caches and the facilitator
    }
  } finally {
    await stack.close();
  }
  const sorted = Float64Array.from(times).sort();
  const results = {
    date: new Date().toISOString(),
    challengeVsEvaluate: { medianRps: rps, ratio: round(rps.challenge! / rps.evaluate!, 3), target: 0.8 },
    paidRoundTripMs: { median: round(median(times), 1), p90: round(percentileSorted(sorted, 90), 1), requests: times.length, target: 100 },
  };
  console.log(JSON.stringify(results, null, 2));
  writeJson(RESULTS, results);
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
