/**
 * One target under different Node/V8 flags (garbage-collector sizes, for example), measured in
 * interleaved rounds so that the host's drift hits every configuration alike:
 *   npx tsx bench/experiments/node-flags.ts <target> <sat|rate> [rounds=4] [seconds=5] [configs]
 * `configs` is a `;`-separated list of space-separated flag sets, `none` for no flags (default:
 * `none;--max-semi-space-size=32;--max-semi-space-size=64`). `sat` saturates over
 * BENCH_CONNECTIONS (32) connections and compares req/s and server CPU per request; a number
 * paces that many requests per second (bench/lib/load.ts `paced`, 128 connections) and compares
 * p50/p99. Every configuration runs in its own server process, all started before the first round.
 */
import { startTarget, type StartedTarget } from '../lib/child.js';
import { paced, saturate, smokeCheck, type RunResult } from '../lib/load.js';
import { median } from '../lib/stats.js';
import { isTargetName } from '../lib/targets.js';

const [name = 'evaluate', mode = 'sat'] = process.argv.slice(2, 4);
const rounds = Number(process.argv[4] ?? 4);
const seconds = Number(process.argv[5] ?? 5);
const configs = (process.argv[6] ?? 'none;--max-semi-space-size=32;--max-semi-space-size=64').split(';').map((c) => c.trim());
if (!isTargetName(name)) throw new Error(`unknown target ${name}`);
const connections = Number(process.env.BENCH_CONNECTIONS ?? (mode === 'sat' ? 32 : 128));

const servers: { label: string; t: StartedTarget }[] = [];
try {
  for (const label of configs) {
    const t = await startTarget(name, { execArgv: label === 'none' ? [] : label.split(/\s+/) });
    await smokeCheck(t);
    await saturate(t, { connections: 32, durationSec: 3, warmupSec: 0 }); // JIT warm-up, not counted
    servers.push({ label, t });
  }
  const runs = new Map<string, RunResult[]>(configs.map((c) => [c, []]));
  for (let r = 0; r < rounds; r++) {
    for (const { label, t } of r % 2 ? [...servers].reverse() : servers) {
      const res =
        mode === 'sat'
          ? await saturate(t, { connections, durationSec: seconds, warmupSec: 1 })
          : await paced(t, Number(mode), { connections, durationSec: seconds, warmupSec: 1 });
      runs.get(label)!.push(res);
      console.log(`  ${label}: ${res.rps} req/s, p50 ${res.latencyMs.p50} p99 ${res.latencyMs.p99} ms, ${res.serverMicrosPerRequest} µs/req, loop ${Math.round((res.serverLoopBusy ?? NaN) * 100)}%, other ${res.otherCpu}`);
    }
  }
  for (const label of configs) {
    const rs = runs.get(label)!;
    const m = (f: (x: RunResult) => number) => median(rs.map(f));
    console.log(`${name} ${label} (median of ${rs.length}): ${m((x) => x.rps)} req/s, p50 ${m((x) => x.latencyMs.p50)} p99 ${m((x) => x.latencyMs.p99)} ms, ${m((x) => x.serverMicrosPerRequest)} µs/req`);
  }
} finally {
  for (const { t } of servers) await t.stop();
}
