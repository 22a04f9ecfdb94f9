/**
 * Ablation study of the evaluate route: every configuration in its own server process, measured
 * at saturation in interleaved rounds; reports median req/s and median server CPU µs per request
 * (the robust figure on a shared machine).
 *   npx tsx bench/experiments/ablation.ts [rounds=3] [seconds=3] [config-label ...]
 * ABLATION_WAIT_QUIET=<s> first waits (at most that long) for a quiet machine.
 * ABLATION_RATE=2000 measures at that fixed rate (10 connections) instead of saturation: the same
 * arrival pattern for every configuration, so CPU µs per request compares costs without the
 * batching differences of saturation (the better figure when the machine is busy).
 */
import { fileURLToPath } from 'node:url';
import { startTarget, type StartedTarget } from '../lib/child.js';
import { atRate, saturate, smokeCheck, type RunResult } from '../lib/load.js';
import { table, writeJson } from '../lib/report.js';
import { waitForQuiet } from '../lib/machine.js';
import { median } from '../lib/stats.js';

const EXP = fileURLToPath(new URL('./server.ts', import.meta.url));
interface Config { label: string; name: string; entry?: string; env?: Record<string, string>; quiet?: boolean }
const variant = (flags: string): Config => ({ label: `variant ${flags || '(as buildApp)'}`, name: 'evaluate-variant', entry: EXP, env: { BENCH_VARIANT: flags } });

const ALL: Config[] = [
  { label: 'bare', name: 'bare' },
  { label: 'evaluate (real)', name: 'evaluate' },
  { label: 'evaluate (real), LOG_LEVEL=info to /dev/null', name: 'evaluate', env: { BENCH_LOG_LEVEL: 'info' }, quiet: true },
  variant(''),
  variant('nologger'),
  variant('nocors'),
  variant('noswagger'),
  variant('defaultid'),
  variant('synchook'),
  variant('noreqidhook'),
  variant('nolimiter'),
  variant('noresponse'),
  variant('firsterror'),
  variant('fixedtime'),
  variant('norules'),
  variant('defaultjson'),
  variant('lightcors'),
  variant('fastmoney'),
  variant('norequestlog'),
  variant('noredact'),
  { label: 'variant (as buildApp), LOG_LEVEL=info to /dev/null', name: 'evaluate-variant', entry: EXP, env: { BENCH_VARIANT: '', BENCH_LOG_LEVEL: 'info' }, quiet: true },
  { label: 'variant norequestlog, LOG_LEVEL=info to /dev/null', name: 'evaluate-variant', entry: EXP, env: { BENCH_VARIANT: 'norequestlog', BENCH_LOG_LEVEL: 'info' }, quiet: true },
  variant('nolimiter,synchook,lightcors,fastmoney'),
  variant('nolimiter,synchook,lightcors,fastmoney,nologger'),
  variant('nocors,nolimiter,synchook,defaultid'),
  variant('nologger,nocors,noswagger,defaultid,noreqidhook,nolimiter'),
  variant('nologger,nocors,noswagger,defaultid,noreqidhook,nolimiter,norules,fixedtime'),
  { label: 'bare, evaluate body', name: 'bare-evaluate-body' },
];

const rounds = Number(process.argv[2] ?? 3);
const seconds = Number(process.argv[3] ?? 3);
const only = process.argv.slice(4);
const configs = only.length ? ALL.filter((c) => only.some((o) => c.label.includes(o)) || c.label === 'bare') : ALL;

if (process.env.ABLATION_WAIT_QUIET) {
  const busy = await waitForQuiet({ timeoutSec: Number(process.env.ABLATION_WAIT_QUIET), log: console.log });
  console.log(`  starting with ${busy?.toFixed(2)} cores busy`);
}
const started = new Map<Config, StartedTarget>();
const results = new Map<Config, RunResult[]>(configs.map((c) => [c, []]));
try {
  for (const c of configs) {
    const t = await startTarget(c.name, { ...(c.entry ? { entry: c.entry } : {}), ...(c.env ? { env: c.env } : {}), quiet: !!c.quiet });
    await smokeCheck(t);
    started.set(c, t);
  }
  for (const c of configs) await saturate(started.get(c)!, { durationSec: 3, warmupSec: 0 }); // JIT warm-up, not counted
  for (let r = 0; r < rounds; r++) {
    const order = r % 2 ? [...configs].reverse() : configs;
    for (const c of order) {
      const rate = Number(process.env.ABLATION_RATE ?? 0);
      const res = rate
        ? await atRate(started.get(c)!, rate, { connections: 10, durationSec: seconds, warmupSec: 1 })
        : await saturate(started.get(c)!, { durationSec: seconds, warmupSec: 1 });
      results.get(c)!.push(res);
      console.log(`  r${r + 1} ${c.label.padEnd(70)} ${String(res.rps).padStart(6)} req/s ${String(res.serverMicrosPerRequest).padStart(6)} µs/req  other ${res.otherCpu}`);
    }
  }
} finally {
  await Promise.all([...started.values()].map((t) => t.stop()));
}

const bareUs = median(results.get(configs[0]!)!.map((r) => r.serverMicrosPerRequest));
const bareRps = median(results.get(configs[0]!)!.map((r) => r.rps));
const realUs = median(results.get(configs.find((c) => c.label.startsWith('evaluate (real)')) ?? configs[0]!)!.map((r) => r.serverMicrosPerRequest));
const rows = configs.map((c) => {
  const rs = results.get(c)!;
  const us = median(rs.map((r) => r.serverMicrosPerRequest));
  const rps = median(rs.map((r) => r.rps));
  const usMin = Math.min(...rs.map((r) => r.serverMicrosPerRequest));
  return [c.label, rps, Math.round((rps / bareRps) * 100) / 100, us, usMin, Math.round((us - realUs) * 10) / 10, Math.round((bareUs / us) * 100) / 100] as Array<string | number>;
});
console.log('\n' + table(['configuration', 'req/s (median)', 'vs bare', 'server µs/req (median)', '(min)', 'vs real µs', 'bare µs / this µs'], rows));
writeJson(fileURLToPath(new URL(`../results/ablation${process.env.ABLATION_RATE ? '-rate' : ''}-latest.json`, import.meta.url)), {
  date: new Date().toISOString(), rounds, seconds, rate: Number(process.env.ABLATION_RATE ?? 0) || 'saturation',
  configs: configs.map((c) => ({ label: c.label, runs: results.get(c)!.map((r) => ({ rps: r.rps, us: r.serverMicrosPerRequest, otherCpu: r.otherCpu })) })),
});
