/**
 * The ablation of ablation.ts without sockets: Fastify inject() in a fresh process per
 * configuration and round, CPU µs per request (median of rounds). Socket and HTTP parsing costs,
 * the same for every configuration, drop out, so the differences are the service's own.
 *   npx tsx bench/experiments/inject-ablation.ts [rounds=3] [count=20000]
 */
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { table, writeJson } from '../lib/report.js';
import { median, round } from '../lib/stats.js';

const WORKER = fileURLToPath(new URL('./inject-worker.ts', import.meta.url));
interface Config { label: string; name: string; flags?: string }
const v = (flags: string): Config => ({ label: `variant ${flags || '(as buildApp)'}`, name: 'evaluate-variant', flags });
const CONFIGS: Config[] = [
  { label: 'bare', name: 'bare' },
  { label: 'evaluate (real)', name: 'evaluate' },
  v(''),
  v('nologger'),
  v('nocors'),
  v('noswagger'),
  v('defaultid'),
  v('synchook'),
  v('noreqidhook'),
  v('nolimiter'),
  v('noresponse'),
  v('firsterror'),
  v('fixedtime'),
  v('norules'),
  v('defaultjson'),
  v('nologger,nocors,nolimiter,synchook'),
  v('nologger,nocors,noswagger,defaultid,noreqidhook,nolimiter'),
  v('nologger,nocors,noswagger,defaultid,noreqidhook,nolimiter,norules,fixedtime'),
  { label: 'bare, evaluate body', name: 'bare-evaluate-body' },
];
const rounds = Number(process.argv[2] ?? 3);
const count = Number(process.argv[3] ?? 20000);
const us = new Map<Config, number[]>(CONFIGS.map((c) => [c, []]));
for (let r = 0; r < rounds; r++) {
  for (const c of r % 2 ? [...CONFIGS].reverse() : CONFIGS) {
    const out = execFileSync(process.execPath, ['--import', 'tsx', WORKER, c.name, String(count)], {
      encoding: 'utf8',
      env: { ...process.env, BENCH_VARIANT: c.flags ?? '' },
    });
    const line = JSON.parse(out.trim().split('\n').pop()!) as { cpuMicrosPerRequest: number };
    us.get(c)!.push(line.cpuMicrosPerRequest);
    console.log(`  r${r + 1} ${c.label.padEnd(90)} ${line.cpuMicrosPerRequest.toFixed(1)} µs/req`);
  }
}
const bare = median(us.get(CONFIGS[0]!)!);
const real = median(us.get(CONFIGS[1]!)!);
console.log('\n' + table(
  ['configuration (inject, CPU µs per request)', 'median µs', 'runs', 'minus bare', 'saved vs real'],
  CONFIGS.map((c) => {
    const m = median(us.get(c)!);
    return [c.label, round(m, 1), us.get(c)!.map((x) => x.toFixed(1)).join(' / '), round(m - bare, 1), round(real - m, 1)];
  }),
));
writeJson(fileURLToPath(new URL('../results/inject-ablation-latest.json', import.meta.url)), {
  date: new Date().toISOString(), rounds, count,
  configs: CONFIGS.map((c) => ({ label: c.label, medianMicros: median(us.get(c)!), runs: us.get(c) })),
});
