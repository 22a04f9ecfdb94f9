/**
 * `npx tsx bench/preflight.ts`: cost of the paid transaction preflight on the devnet (anvil as
 * Base with USDC, Uniswap v2 and the preflight test contracts). For a few representative
 * transactions it produces the report (transactionPreflight, the pipeline's produce step)
 * BENCH_ITERATIONS times and reports:
 *  - the median and p95 wall time per report;
 *  - RPC requests per report, counted at the HTTP layer (every fetch the viem transport makes)
 *    and checked against the producer's own counter (preflightRpcCounter); target <= 4;
 *  - sequential rounds per report (a round of parallel requests counts once).
 * The run is repeated with BENCH_LATENCY_MS added to every RPC request (default 50 ms, roughly a
 * hosted Base RPC), where wall time is about rounds x latency. The last row is the fallback for
 * nodes without eth_simulateV1 (eth_call + debug_traceCall), once the node is known to lack it.
 * Prints tables and writes bench/results/preflight-latest.json.
 *
 * Knobs (environment): BENCH_ITERATIONS (50), BENCH_LATENCY_MS (50).
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { countingClient, type RpcCounter } from './lib/rpc-counter.js';
import { median, percentileSorted, round } from './lib/stats.js';
import { startDevnet } from '../src/devnet/index.js';
import { transactionPreflight, type PreflightInput } from '../src/features/preflight/preflight.js';
import { preflightRpcCounter } from '../src/features/preflight/rpc.js';
import { preflightCase, preparePreflightScenarios } from '../tests/helpers/preflight-scenarios.js';

const ITERATIONS = Number(process.env.BENCH_ITERATIONS ?? 50);
const LATENCY_MS = Number(process.env.BENCH_LATENCY_MS ?? 50);
const RESULTS_FILE = fileURLToPath(new URL('./results/preflight-latest.json', import.meta.url));

const p95 = (xs: number[]) => percentileSorted([...xs].sort((a, b) => a - b), 95);
const r1 = (x: number) => round(x, 1);

interface Row {
  target: string;
  decision: string;
  method: string;
  medianMs: number;
  p95Ms: number;
  requests: number;
  rounds: number;
}

async function measure(target: string, input: PreflightInput, rpcUrl: string, latencyMs: number, noSimulate = false): Promise<Row> {
  const counter: RpcCounter = { requests: 0, rounds: 0, inFlight: 0 };
  const chain = countingClient(rpcUrl, counter, latencyMs, noSimulate ? ['eth_simulateV1'] : []);
  // warm-up (JIT, sockets; the fallback learns eth_simulateV1 is missing; the client's one eth_chainId, so that a
  // client's first report makes one more request than the figures below: 5 for the swap, over the budget of 4)
  await transactionPreflight(chain, input, new Date());
  const times: number[] = [];
  const requests = new Set<number>();
  const rounds = new Set<number>();
  let decision = '';
  let method = '';
  for (let i = 0; i < ITERATIONS; i++) {
    counter.requests = 0;
    counter.rounds = 0;
    const counted = preflightRpcCounter.requests;
    const t0 = performance.now();
    const report = await transactionPreflight(chain, input, new Date());
    times.push(performance.now() - t0);
    if (preflightRpcCounter.requests - counted !== counter.requests) throw new Error(`${target}: HTTP saw ${counter.requests} requests, the producer counted ${preflightRpcCounter.requests - counted}`);
    requests.add(counter.requests);
    rounds.add(counter.rounds);
    decision = report.verdict.decision;
    method = report.simulation.method ?? 'none';
  }
  if (requests.size !== 1 || rounds.size !== 1) throw new Error(`${target}: request or round count varies between runs (${[...requests]}, ${[...rounds]})`);
  return { target, decision, method, medianMs: r1(median(times)), p95Ms: r1(p95(times)), requests: [...requests][0]!, rounds: [...rounds][0]!};
}

const devnet = await startDevnet();
try {
  const sc = await preparePreflightScenarios(devnet);
  const input = (name: string) => preflightCase(name, sc).input as PreflightInput;
  const targets: Array<[string, PreflightInput, boolean?]> = [
    ['USDC transfer', input('plain USDC transfer')],
    ['USDC transfer, no sender', input('USDC transfer without a sender')],
    ['unlimited approve to EOA', input('unlimited approve to an EOA')],
    ['Uniswap v2 swap', input('swap USDC for PFT on Uniswap v2')],
    ['revert with reason', input('revert with a reason')],
    ['poisoned recipient', input('payment to a poisoned look-alike')],
    ['USDC transfer, fallback', input('plain USDC transfer'), true],
  ];
  const runs: Record<string, Row[]> = {};
  for (const latency of [0, LATENCY_MS]) {
    const rows: Row[] = [];
    for (const [name, tx, noSimulate] of targets) rows.push(await measure(name, tx, devnet.rpcUrl, latency, noSimulate));
    runs[`latency${latency}ms`] = rows;
    console.log(`\ntransaction preflight on the devnet, ${ITERATIONS} reports per target, +${latency} ms per RPC request`);
    console.log('target                     decision  method            median ms   p95 ms   RPC requests   rounds');
    for (const r of rows) {
      console.log(`${r.target.padEnd(27)}${r.decision.padEnd(10)}${r.method.padEnd(16)}${String(r.medianMs).padStart(11)}${String(r.p95Ms).padStart(9)}${String(r.requests).padStart(15)}${String(r.rounds).padStart(9)}`);
    }
    const all = rows.map((r) => r.medianMs);
    console.log(`median of medians ${r1(median(all))} ms; max RPC requests ${Math.max(...rows.map((r) => r.requests))} (target <= 4); max rounds ${Math.max(...rows.map((r) => r.rounds))}`);
  }
  mkdirSync(dirname(RESULTS_FILE), { recursive: true });
  writeFileSync(RESULTS_FILE, `${JSON.stringify({ at: new Date().toISOString(), iterations: ITERATIONS, runs }, null, 2)}\n`);
  console.log(`\nwrote ${RESULTS_FILE}`);
} finally {
  await devnet.stop();
}
