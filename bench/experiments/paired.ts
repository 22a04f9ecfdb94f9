/**
 * Paired ablation, for a busy machine: each configuration is loaded at the same fixed rate AT THE
 * SAME TIME as the baseline (the service as buildApp builds it), so both see the same interference,
 * and the per-request server CPU of the two is compared run by run. Reports the median paired
 * difference (configuration − baseline, µs of server CPU per request) over the rounds.
 *   npx tsx bench/experiments/paired.ts [rounds=4] [seconds=3] [rate=1500] [label-filter ...]
 */
import { fileURLToPath } from 'node:url';
import { startTarget, type StartedTarget } from '../lib/child.js';
import { atRate, smokeCheck, type RunResult } from '../lib/load.js';
import { table, writeJson } from '../lib/report.js';
import { median, round } from '../lib/stats.js';

const EXP = fileURLToPath(new URL('./server.ts', import.meta.url));
interface Config { label: string; name: string; entry?: string; env?: Record<string, string>; quiet?: boolean }
const variant = (flags: string): Config => ({ label: `variant ${flags || '(as buildApp)'}`, name: 'evaluate-variant', entry: EXP, env: { BENCH_VARIANT: flags } });

const BASE = variant('');
const ALL: Config[] = [
  { label: 'bare', name: 'bare' },
  { label: 'bare, evaluate body (echo)', name: 'bare-evaluate-body' },
  { label: 'evaluate (real)', name: 'evaluate' },
  { label: 'variant (as buildApp), LOG_LEVEL=info to /dev/null', name: 'evaluate-variant', entry: EXP, env: { BENCH_VARIANT: '', BENCH_LOG_LEVEL: 'info' }, quiet: true },
  { label: 'variant norequestlog, LOG_LEVEL=info to /dev/null', name: 'evaluate-variant', entry: EXP, env: { BENCH_VARIANT: 'norequestlog', BENCH_LOG_LEVEL: 'info' }, quiet: true },
  variant('nologger'),
  variant('noredact'),
  variant('norequestlog'),
  variant('nocors'),
  variant('lightcors'),
  variant('noswagger'),
  variant('defaultid'),
  variant('synchook'),
  variant('noreqidhook'),
  variant('nolimiter'),
  variant('noresponse'),
  variant('firsterror'),
  variant('defaultjson'),
  variant('fixedtime'),
  variant('norules'),
  variant('fastmoney'),
  variant('synchook,nolimiter,lightcors,fastmoney'),
  variant('synchook,nolimiter,lightcors,fastmoney,norequestlog'),
  variant('nologger,nocors,noswagger,defaultid,noreqidhook,nolimiter'),
  variant('nologger,nocors,noswagger,defaultid,noreqidhook,nolimiter,norules,fixedtime'),
];

const rounds = Number(process.argv[2] ?? 4);
const seconds = Number(process.argv[3] ?? 3);
const rate = Number(process.argv[4] ?? 1500);
const only = process.argv.slice(5);
const configs = only.length ? ALL.filter((c) => only.some((o) => c.label.includes(o))) : ALL;

const start = (c: Config) => startTarget(c.name, { ...(c.entry ? { entry: c.entry } : {}), ...(c.env ? { env: c.env } : {}), quiet: !!c.quiet });
const started = new Map<Config, StartedTarget>();
const pairs = new Map<Config, Array<{ base: RunResult; cfg: RunResult }>>(configs.map((c) => [c, []]));
try {
  for (const c of [BASE, ...configs]) {
    const t = await start(c);
    await smokeCheck(t);
    started.set(c, t);
  }
  const base = started.get(BASE)!;
  for (let r = 0; r < rounds; r++) {
    for (const c of r % 2 ? [...configs].reverse() : configs) {
      const o = { connections: 10, durationSec: seconds, warmupSec: 1 };
      const [b, x] = await Promise.all([atRate(base, rate, o), atRate(started.get(c)!, rate, o)]);
      pairs.get(c)!.push({ base: b, cfg: x });
      console.log(`  r${r + 1} ${c.label.padEnd(80)} base ${String(b.serverMicrosPerRequest).padStart(6)}  this ${String(x.serverMicrosPerRequest).padStart(6)}  diff ${(x.serverMicrosPerRequest - b.serverMicrosPerRequest).toFixed(1).padStart(6)} µs/req  other ${x.otherCpu}`);
    }
  }
} finally {
  await Promise.all([...started.values()].map((t) => t.stop()));
}

const rows = configs.map((c) => {
  const ps = pairs.get(c)!;
  const diffs = ps.map((p) => p.cfg.serverMicrosPerRequest - p.base.serverMicrosPerRequest);
  const ratios = ps.map((p) => p.cfg.serverMicrosPerRequest / p.base.serverMicrosPerRequest);
  return {
    label: c.label,
    medianDiffMicros: round(median(diffs), 1),
    diffs: diffs.map((d) => round(d, 1)),
    medianRatio: round(median(ratios), 3),
    medianBaseMicros: round(median(ps.map((p) => p.base.serverMicrosPerRequest)), 1),
    medianMicros: round(median(ps.map((p) => p.cfg.serverMicrosPerRequest)), 1),
  };
});
console.log('\n' + table(
  ['configuration (paired with the service as buildApp builds it)', 'Δ µs/req (median)', 'Δ per round', 'cost ratio', 'this µs', 'base µs'],
  rows.map((r) => [r.label, r.medianDiffMicros, r.diffs.join(' / '), r.medianRatio, r.medianMicros, r.medianBaseMicros]),
));
writeJson(fileURLToPath(new URL('../results/paired-ablation-latest.json', import.meta.url)), { date: new Date().toISOString(), rounds, seconds, rate, rows });
