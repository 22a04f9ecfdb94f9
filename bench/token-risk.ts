/**
 * `npx tsx bench/token-risk.ts`: cost of the paid token-risk report on the devnet (anvil with the
 * token zoo). For every zoo token, plus USDC and an address without code, it produces the report
 * (tokenRisk, the pipeline's produce step) BENCH_ITERATIONS times and reports:
 *  - the median and p95 wall time per report;
 *  - RPC requests per report, counted at the HTTP layer (every fetch the viem transport makes),
 *    independently of the collector's own meter (also shown, and checked to agree);
 *  - sequential rounds per report: how many times the report waited on the RPC with nothing else
 *    in flight (a round of parallel requests counts once).
 * The run is repeated with BENCH_LATENCY_MS of added latency per RPC request (default 50 ms,
 * roughly a hosted Base RPC), where the wall time is dominated by rounds x latency.
 * Prints a table and writes bench/results/token-risk-latest.json.
 *
 * Knobs (environment): BENCH_ITERATIONS (25), BENCH_LATENCY_MS (50).
 */
import { writeFileSync, mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { countingClient, type RpcCounter } from './lib/rpc-counter.js';
import { median, percentileSorted, round } from './lib/stats.js';
import { startDevnet } from '../src/devnet/index.js';
import { tokenRisk } from '../src/features/token-risk/report.js';
import type { RpcMeter } from '../src/features/token-risk/rpc.js';

const ITERATIONS = Number(process.env.BENCH_ITERATIONS ?? 25);
const LATENCY_MS = Number(process.env.BENCH_LATENCY_MS ?? 50);
const RESULTS_FILE = fileURLToPath(new URL('./results/token-risk-latest.json', import.meta.url));

const p95 = (xs: number[]) => percentileSorted([...xs].sort((a, b) => a - b), 95);
const r1 = (x: number) => round(x, 1);

interface Row {
  target: string;
  decision: string;
  medianMs: number;
  p95Ms: number;
  requests: number;
  rounds: number;
  meter: RpcMeter;
}

async function measure(name: string, address: string, rpcUrl: string, latencyMs: number): Promise<Row> {
  const counter: RpcCounter = { requests: 0, rounds: 0, inFlight: 0 };
  const chain = countingClient(rpcUrl, counter, latencyMs);
  const times: number[] = [];
  const requests = new Set<number>();
  const rounds = new Set<number>();
  let meter: RpcMeter = { requests: 0, rounds: 0 };
  let decision = '';
  // warm-up (JIT, connection pool, and the client's one eth_chainId: the first report makes one more request, 8 at most here)
  await tokenRisk(chain, { chain: 'base', address }, new Date());
  for (let i = 0; i < ITERATIONS; i++) {
    counter.requests = 0;
    counter.rounds = 0;
    const t0 = performance.now();
    const report = await tokenRisk(chain, { chain: 'base', address }, new Date(), { onMeter: (m) => (meter = m) });
    times.push(performance.now() - t0);
    requests.add(counter.requests);
    rounds.add(counter.rounds);
    decision = report.verdict.decision;
    if (counter.requests !== meter.requests) throw new Error(`${name}: HTTP layer saw ${counter.requests} requests, the collector counted ${meter.requests}`);
  }
  if (requests.size !== 1 || rounds.size !== 1) throw new Error(`${name}: request or round count varies between runs (${[...requests]}, ${[...rounds]})`);
  return { target: name, decision, medianMs: r1(median(times)), p95Ms: r1(p95(times)), requests: [...requests][0]!, rounds: [...rounds][0]!, meter };
}

const devnet = await startDevnet({ zoo: true });
try {
  const zoo = devnet.zoo!;
  const targets: Array<[string, string]> = [...Object.entries(zoo.tokens), ['usdc', zoo.usdc], ['eoa (no code)', devnet.accounts[3]!.address]];
  const runs: Record<string, Row[]> = {};
  for (const latency of [0, LATENCY_MS]) {
    const rows: Row[] = [];
    for (const [name, address] of targets) rows.push(await measure(name, address, devnet.rpcUrl, latency));
    runs[`latency${latency}ms`] = rows;
    console.log(`\ntoken-risk report on the devnet, ${ITERATIONS} reports per target, +${latency} ms per RPC request`);
    console.log('target            decision    median ms   p95 ms   RPC requests   rounds');
    for (const r of rows) {
      console.log(`${r.target.padEnd(18)}${r.decision.padEnd(12)}${String(r.medianMs).padStart(9)}${String(r.p95Ms).padStart(9)}${String(r.requests).padStart(15)}${String(r.rounds).padStart(9)}`);
    }
    const all = rows.map((r) => r.medianMs);
    console.log(`median of medians ${r1(median(all))} ms; max RPC requests ${Math.max(...rows.map((r) => r.requests))} (target <= 12); max rounds ${Math.max(...rows.map((r) => r.rounds))}`);
  }
  mkdirSync(dirname(RESULTS_FILE), { recursive: true });
  writeFileSync(RESULTS_FILE, `${JSON.stringify({ at: new Date().toISOString(), iterations: ITERATIONS, runs }, null, 2)}\n`);
  console.log(`\nwrote ${RESULTS_FILE}`);
} finally {
  await devnet.stop();
}
