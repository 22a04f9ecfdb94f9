/**
 * Deterministic cost per request, for a machine too busy to time anything: runs inject-worker
 * under valgrind (cachegrind without cache simulation counts executed instructions) with two
 * request counts and reports (instructions(n2) − instructions(n1)) / (n2 − n1) per configuration.
 * Slow (about 2 minutes of CPU per configuration); bundles the worker with esbuild first.
 *   npx tsx bench/experiments/instructions.ts [config ...]   config: bare | evaluate | variant:<flags>
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { table, writeJson } from '../lib/report.js';
import { round } from '../lib/stats.js';

const root = fileURLToPath(new URL('../..', import.meta.url));
const bundle = fileURLToPath(new URL('../.build/inject-worker.mjs', import.meta.url));
mkdirSync(fileURLToPath(new URL('../.build', import.meta.url)), { recursive: true });
execFileSync(`${root}/node_modules/.bin/esbuild`, [
  fileURLToPath(new URL('./inject-worker.ts', import.meta.url)),
  '--bundle', '--platform=node', '--format=esm', '--packages=external', `--outfile=${bundle}`, '--log-level=warning',
]);

const WARM = 3000;
const N1 = 1000;
const N2 = 4000;
const configs = process.argv.length > 2 ? process.argv.slice(2) : [
  'bare', 'variant:', 'variant:nocors', 'variant:lightcors', 'variant:nologger', 'variant:synchook', 'variant:nolimiter',
  'variant:fastmoney', 'variant:firsterror', 'variant:noresponse', 'variant:defaultid', 'variant:nolimiter,synchook,lightcors,fastmoney',
];

function instructions(config: string, n: number): number {
  const [name, flags] = config.startsWith('variant:') ? ['evaluate-variant', config.slice(8)] : [config, ''];
  const r = spawnSync('valgrind', ['--tool=cachegrind', '--cache-sim=no', '--cachegrind-out-file=/dev/null', '--smc-check=all-non-file', process.execPath, bundle, name, String(n), String(WARM)], {
    cwd: root, encoding: 'utf8', env: { ...process.env, BENCH_VARIANT: flags }, maxBuffer: 1 << 24,
  });
  const m = /I\s+refs:\s+([\d,]+)/.exec(r.stderr);
  if (!m || r.status !== 0) throw new Error(`${config}: valgrind failed: ${r.stderr.slice(-2000)}`);
  return Number(m[1]!.replace(/,/g, ''));
}

const rows: Array<{ config: string; perRequest: number }> = [];
for (const c of configs) {
  const a = instructions(c, N1);
  const b = instructions(c, N2);
  const perRequest = (b - a) / (N2 - N1);
  rows.push({ config: c, perRequest: round(perRequest, 0) });
  console.log(`  ${c.padEnd(60)} ${Math.round(perRequest).toLocaleString('en-US')} instructions per request`);
}
const base = rows.find((r) => r.config === 'variant:')?.perRequest;
console.log('\n' + table(['configuration (inject)', 'instructions / request', 'Δ vs variant (as buildApp)'], rows.map((r) => [r.config, r.perRequest, base ? r.perRequest - base : NaN])));
writeJson(fileURLToPath(new URL(`../results/instructions${process.env.INSTR_TAG ? `-${process.env.INSTR_TAG}` : ''}-latest.json`, import.meta.url)), { date: new Date().toISOString(), warm: WARM, n1: N1, n2: N2, rows });
