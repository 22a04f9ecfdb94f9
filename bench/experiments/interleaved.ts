/**
 * In-process interleaved A/B of evaluate variants, for a busy machine. Every configuration is
 * built in this one process (inject(), no sockets) and they take turns in small batches, in a
 * shuffled order each cycle, so interference hits all of them alike; the figure is the median over
 * cycles of (configuration − baseline) CPU µs per request within the same cycle. Socket and HTTP
 * parsing costs are absent, and inject() adds its own constant overhead: read the differences.
 *   npx tsx bench/experiments/interleaved.ts [cycles=40] [batch=400] [flag-set ...]
 */
import { fileURLToPath } from 'node:url';
import { table, writeJson } from '../lib/report.js';
import { median, percentileSorted, round } from '../lib/stats.js';
import { TARGETS } from '../lib/targets.js';
import type { LoadRequest, RunningTarget } from '../lib/types.js';
import { buildVariant, EVALUATE_LOAD, openBenchInfrastructure, parseFlags } from './evaluate-variant.js';

const cycles = Number(process.argv[2] ?? 40);
const batchSize = Number(process.argv[3] ?? 400);
const DEFAULT_SETS = [
  'nologger', 'nocors', 'lightcors', 'noswagger', 'defaultid', 'synchook', 'noreqidhook', 'nolimiter',
  'noresponse', 'firsterror', 'defaultjson', 'fixedtime', 'norules', 'fastmoney',
  'nolimiter,synchook,lightcors,fastmoney',
  'nologger,nocors,noswagger,defaultid,noreqidhook,nolimiter',
  'nologger,nocors,noswagger,defaultid,noreqidhook,nolimiter,norules,fixedtime',
];
const sets = process.argv.length > 4 ? process.argv.slice(4) : DEFAULT_SETS;

type Inject = (req: LoadRequest) => Promise<{ statusCode: number; body: string }>;
interface Config { label: string; inject: Inject; req: LoadRequest; close(): Promise<void> }

const infra = await openBenchInfrastructure();
const configs: Config[] = [];
const fromTarget = (label: string, t: RunningTarget): Config => ({ label, inject: t.inject!.bind(t), req: t.load.requests[0]!, close: () => t.close() });
configs.push(fromTarget('bare', await (await TARGETS.bare()).default.start()));
configs.push(fromTarget('evaluate (real buildApp)', await (await TARGETS.evaluate()).default.start()));
for (const s of ['', ...sets]) {
  const app = await buildVariant(parseFlags(s), infra.deps);
  configs.push({
    label: s ? `variant ${s}` : 'variant (as buildApp) = baseline',
    inject: (req) => app.inject({ method: req.method, url: req.path, headers: req.headers ?? {}, payload: req.body ?? '' }),
    req: EVALUATE_LOAD.requests[0]!,
    close: () => app.close(),
  });
}
const BASE = configs.find((c) => c.label.startsWith('variant (as buildApp)'))!;

async function batch(c: Config, n: number): Promise<number> {
  let left = n;
  const lane = async () => {
    while (left-- > 0) {
      const res = await c.inject(c.req);
      if (res.statusCode !== 200) throw new Error(`${c.label}: ${res.statusCode} ${res.body.slice(0, 200)}`);
    }
  };
  const cpu0 = process.cpuUsage();
  await Promise.all(Array.from({ length: 16 }, lane));
  const cpu = process.cpuUsage(cpu0);
  return (cpu.user + cpu.system) / n;
}

for (const c of configs) await batch(c, 3000); // warm-up
const us = new Map<Config, number[]>(configs.map((c) => [c, []]));
for (let i = 0; i < cycles; i++) {
  const order = [...configs].sort(() => Math.random() - 0.5);
  for (const c of order) us.get(c)!.push(await batch(c, batchSize));
  if ((i + 1) % 10 === 0) console.log(`  cycle ${i + 1}/${cycles}`);
}
for (const c of configs) await c.close();
await infra.close();

const rows = configs.map((c) => {
  const diffs = us.get(c)!.map((v, i) => v - us.get(BASE)![i]!);
  const sorted = [...diffs].sort((a, b) => a - b);
  return {
    label: c.label,
    medianMicros: round(median(us.get(c)!), 1),
    medianDiffMicros: round(median(diffs), 1),
    diffP25: round(percentileSorted(sorted, 25), 1),
    diffP75: round(percentileSorted(sorted, 75), 1),
  };
});
console.log('\n' + table(
  ['configuration (inject, in-process, interleaved)', 'µs/req (median)', 'Δ vs baseline (median of paired)', 'Δ 25th..75th'],
  rows.map((r) => [r.label, r.medianMicros, r.medianDiffMicros, `${r.diffP25} .. ${r.diffP75}`]),
));
writeJson(fileURLToPath(new URL('../results/interleaved-latest.json', import.meta.url)), { date: new Date().toISOString(), cycles, batchSize, rows });
