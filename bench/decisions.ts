/**
 * `npm run bench:decisions`: durable protected decisions (issue 3) against the free evaluation,
 * in one run, each server in its own process, driven by autocannon on 127.0.0.1:
 *  1. saturation: evaluate, decisions on SQLite (synchronous=FULL) and decisions on PostgreSQL,
 *     each closed-loop at every connection count of BENCH_CONNECTIONS, ROUNDS runs per target
 *     and count, alternating; a target's saturation is the highest of its medians over the
 *     counts (its peak), and the ratios to evaluate compare peaks (targets: SQLite >= 0.50,
 *     PostgreSQL >= 0.30). See PEAK_OVER_CONNECTIONS for why one count is not enough;
 *  2. latency at half of each decision target's saturation (target p99 < 10 ms), with requests
 *     evenly paced at that rate (bench/lib/load.ts `paced`: open loop, latency counted from when
 *     each request was due) over as many connections as its peak used;
 *  3. history: decisions on each database at a fixed rate with 10,000 and with 1,000,000
 *     decisions stored before (BENCH_HISTORY, default on; target median ratio <= 1.3).
 * Knobs: BENCH_DURATION (5), BENCH_WARMUP (1), BENCH_ROUNDS (3), BENCH_CONNECTIONS (32,64,128),
 * BENCH_RATE_CONNECTIONS (the connections of the target's peak),
 * BENCH_DATABASE_URL (postgres://postgres@127.0.0.1:5432/postgres), BENCH_HISTORY_RATE (200),
 * BENCH_HISTORY=0 to skip part 3, BENCH_PG=0 to skip PostgreSQL.
 */
import { fileURLToPath } from 'node:url';
import { startTarget, type StartedTarget } from './lib/child.js';
import { paced, saturate, smokeCheck, type RunResult } from './lib/load.js';
import { writeJson } from './lib/report.js';
import { median, round } from './lib/stats.js';

const env = (name: string, def: number) => (process.env[name] ? Number(process.env[name]) : def);
const DURATION = env('BENCH_DURATION', 5);
const WARMUP = env('BENCH_WARMUP', 1);
const ROUNDS = env('BENCH_ROUNDS', 3);
/**
 * PEAK_OVER_CONNECTIONS. Saturation is a server's highest throughput, and a closed-loop client
 * with N connections keeps at most N requests in flight. The free evaluation is bound by its
 * event loop alone and reaches its peak by 32 connections (its loop is 99% busy there). A
 * protected decision also waits for its batch's fsync and signatures, during which its event loop
 * has nothing to do unless more requests wait: at 32 connections the SQLite server's loop was
 * only 76% busy and PostgreSQL's 81%, and both served more with more connections (this machine,
 * medians of 3: SQLite 4,753 / 5,118 / 5,667 decisions/s at 32 / 64 / 128 connections,
 * PostgreSQL 3,766 / 4,801 / 5,146, evaluate 11,222 / 10,808 / 10,894 req/s;
 * bench/experiments/connections.ts). So every target is measured at every count, and its peak
 * counts.
 */
const CONNECTION_COUNTS = (process.env.BENCH_CONNECTIONS ?? '32,64,128').split(',').map(Number);
if (!CONNECTION_COUNTS.length || CONNECTION_COUNTS.some((c) => !Number.isInteger(c) || c < 1)) {
  throw new Error('BENCH_CONNECTIONS: a comma-separated list of connection counts');
}
/**
 * Connections of the half-saturation runs, by default those of the target's peak. A paced client
 * can carry at most connections/latency requests per second: with 10 connections at 1,050
 * decisions/s, any stretch of responses slower than 9.5 ms left requests waiting in the client
 * for a free connection, the backlog grew, and the run stopped being open-loop (PostgreSQL, five
 * alternating rounds: median p50 26 ms and p99 109 ms over 10 connections, 6.9 and 24 ms over
 * 32). As many as the peak used is always enough at half its rate while the latency stays under
 * twice the peak's.
 */
const RATE_CONNECTIONS = process.env.BENCH_RATE_CONNECTIONS ? Number(process.env.BENCH_RATE_CONNECTIONS) : undefined;
const HISTORY_RATE = env('BENCH_HISTORY_RATE', 200);
const RESULTS = fileURLToPath(new URL('./results/decisions-latest.json', import.meta.url));

const line = (r: RunResult) =>
  `  ${r.target.padEnd(18)} ${r.kind}${r.requestedRate ? ` @${r.requestedRate}/s` : ` ${r.connections} conn.`}: ${r.rps} req/s, p50 ${r.latencyMs.p50} ms, p99 ${r.latencyMs.p99} ms, server ${r.serverMicrosPerRequest} µs/req${r.serverLoopBusy === undefined ? '' : `, event loop busy ${Math.round(r.serverLoopBusy * 100)}%`}, other CPU ${Math.round((r.otherCpu ?? 0) * 100)}%`;

/** What the server spent on a target's runs: CPU per request and its event loop's busy fraction (medians). */
const serverMedians = (runs: RunResult[]) => ({
  serverMicrosPerRequest: median(runs.map((r) => r.serverMicrosPerRequest)),
  loopBusy: median(runs.map((r) => r.serverLoopBusy ?? NaN)),
});

async function started(name: string, extraEnv: NodeJS.ProcessEnv = {}): Promise<StartedTarget> {
  const t = await startTarget(name, { env: extraEnv });
  await smokeCheck(t);
  console.log(`  started ${name}: ${t.load.description}`);
  return t;
}

async function main(): Promise<void> {
  const names = ['evaluate', 'decisions-sqlite', ...(process.env.BENCH_PG === '0' ? [] : ['decisions-postgres'])];
  const targets = new Map<string, StartedTarget>();
  const results: Record<string, unknown> = { date: new Date().toISOString() };
  try {
    for (const n of names) targets.set(n, await started(n));
    console.log(`\nsaturation at ${CONNECTION_COUNTS.join(', ')} connections`);
    const sat = new Map<string, RunResult[]>(names.flatMap((n) => CONNECTION_COUNTS.map((c) => [`${n}@${c}`, []])));
    for (let r = 0; r < ROUNDS; r++) {
      for (const n of r % 2 ? [...names].reverse() : names) {
        for (const c of r % 2 ? [...CONNECTION_COUNTS].reverse() : CONNECTION_COUNTS) {
          const res = await saturate(targets.get(n)!, { connections: c, durationSec: DURATION, warmupSec: WARMUP });
          sat.get(`${n}@${c}`)!.push(res);
          console.log(line(res));
        }
      }
    }
    const byConnections = Object.fromEntries(
      names.map((n) => [n, Object.fromEntries(CONNECTION_COUNTS.map((c) => [c, median(sat.get(`${n}@${c}`)!.map((r) => r.rps))]))]),
    );
    const peakConnections = Object.fromEntries(
      names.map((n) => [n, CONNECTION_COUNTS.reduce((best, c) => (byConnections[n]![c]! > byConnections[n]![best]! ? c : best))]),
    );
    const rps = Object.fromEntries(names.map((n) => [n, byConnections[n]![peakConnections[n]!]!]));
    const ratios = Object.fromEntries(names.filter((n) => n !== 'evaluate').map((n) => [n, round(rps[n]! / rps.evaluate!, 3)]));
    const saturation = Object.fromEntries(names.map((n) => [n, serverMedians(sat.get(`${n}@${peakConnections[n]}`)!)]));
    for (const n of names) {
      console.log(`  ${n}: peak ${rps[n]} req/s at ${peakConnections[n]} connections (medians ${CONNECTION_COUNTS.map((c) => `${byConnections[n]![c]} @${c}`).join(', ')})`);
    }

    console.log('\nlatency at half of saturation');
    const half: Record<string, { p50: number; p99: number } & ReturnType<typeof serverMedians>> = {};
    for (const n of names.filter((x) => x !== 'evaluate')) {
      const runs: RunResult[] = [];
      for (let r = 0; r < ROUNDS; r++) {
        const res = await paced(targets.get(n)!, rps[n]! / 2, { connections: RATE_CONNECTIONS ?? peakConnections[n]!, durationSec: DURATION, warmupSec: WARMUP });
        runs.push(res);
        console.log(line(res));
      }
      half[n] = { p50: median(runs.map((r) => r.latencyMs.p50)), p99: median(runs.map((r) => r.latencyMs.p99)), ...serverMedians(runs) };
    }
    for (const t of targets.values()) await t.stop();
    targets.clear();
    Object.assign(results, {
      saturationMedianRps: rps,
      peakConnections,
      saturationMedianRpsByConnections: byConnections,
      ratioToEvaluate: ratios,
      saturation,
      halfSaturation: half,
    });

    if (process.env.BENCH_HISTORY !== '0') {
      const medians: Record<string, Record<string, number>> = {};
      const historyRatios: Record<string, number> = {};
      for (const n of names.filter((x) => x !== 'evaluate')) {
        console.log(`\nhistory: ${n} at ${HISTORY_RATE}/s with 10,000 vs 1,000,000 stored decisions`);
        const m: Record<string, number> = {};
        for (const prefill of [10_000, 1_000_000]) {
          const t = await started(n, { BENCH_PREFILL: String(prefill), BENCH_POLICIES: '1' });
          const runs: RunResult[] = [];
          for (let r = 0; r < ROUNDS; r++) {
            const res = await paced(t, HISTORY_RATE, { connections: 4, durationSec: DURATION, warmupSec: WARMUP });
            runs.push(res);
            console.log(line(res));
          }
          m[String(prefill)] = median(runs.map((r) => r.latencyMs.p50));
          await t.stop();
        }
        medians[n] = m;
        historyRatios[n] = round(m['1000000']! / m['10000']!, 3);
      }
      Object.assign(results, { historyMedianMs: medians, historyRatio: historyRatios });
    }
  } finally {
    for (const t of targets.values()) await t.stop();
  }
  console.log('\nsummary');
  console.log(JSON.stringify(results, null, 2));
  writeJson(RESULTS, results);
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
