/**
 * `npx tsx bench/token-preview.ts`: throughput of the free token preview with a warm cache,
 * against the free spend-policy evaluation, in the same run (issue 5 target: preview >= 70% of
 * evaluate).
 *
 *  - evaluate: bench/targets/evaluate.ts (the real service, SQLite, rate limits off);
 *  - token-preview: the real service built the same way, its market-data providers pointed at
 *    the market-data stub (src/devnet/market-stub.ts, in the same child process), Base identity
 *    reads answered by a fixed reader (warm, they are not on the request path anyway). The smoke
 *    check fills the cache; provider answers are reused for 30 s, so during the runs the stub is
 *    asked about once per 30 s (single flight) and nearly every request is a cache hit.
 *
 * Each target runs in its own process (bench/lib/child.ts; this file is also the child entry of
 * the token-preview target), driven by autocannon from this process: 3 rounds, alternating
 * targets, each 1 s warm-up + 5 s measured at 32 connections; the median of the 3 counts.
 * Writes bench/results/token-preview-latest.json.
 *
 * Knobs: BENCH_DURATION (5), BENCH_WARMUP (1), BENCH_ROUNDS (3), BENCH_CONNECTIONS (32),
 * BENCH_ENFORCE=1 (exit 1 when the target is missed).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { LoadSpec, TargetModule } from './lib/types.js';

const SELF = fileURLToPath(import.meta.url);
const TARGET_NAME = 'token-preview';
const TOKEN = '0x5a00000000000000000000000000000000000001';
const TARGET_RATIO = 0.7;

const previewTarget: TargetModule = {
  async start() {
    const [{ buildApp }, { testConfig }, { openInfrastructure }, { startMarketStub }, { injectWith }] = await Promise.all([
      import('../src/app.js'),
      import('../src/config.js'),
      import('../src/platform/deps.js'),
      import('../src/devnet/market-stub.js'),
      import('./lib/types.js'),
    ]);
    const stub = await startMarketStub({
      tokens: {
        [TOKEN]: {
          name: 'Bench Token',
          symbol: 'BENCH',
          decimals: 18,
          priceUsd: '0.0000012345',
          liquidityUsd: '15000.5',
          volume24hUsd: '1234.56',
          fdvUsd: '1234500',
          marketCapUsd: '987654.25',
          priceChange24hPct: '-3.25',
          pairs: [
            { dex: 'uniswap', pairAddress: '0x5a000000000000000000000000000000000000b1', quoteToken: { address: '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913', symbol: 'USDC' }, liquidityUsd: '10000.5', createdAt: '2026-01-01T00:00:00.000Z' },
            { dex: 'uniswap', pairAddress: '0x5a000000000000000000000000000000000000b2', quoteToken: { address: '0x4200000000000000000000000000000000000006', symbol: 'WETH' }, liquidityUsd: '5000', createdAt: '2026-01-02T00:00:00.000Z' },
          ],
        },
      },
    });
    const dir = mkdtempSync(join(tmpdir(), 'paywarden-bench-'));
    const config = testConfig({
      databaseUrl: `sqlite:${join(dir, 'bench.sqlite')}`,
      rateLimits: false,
      logLevel: process.env.BENCH_LOG_LEVEL ?? 'silent',
      marketDexscreenerUrl: stub.dexscreenerUrl,
      marketGeckoterminalUrl: stub.geckoterminalUrl,
    });
    const infra = await openInfrastructure(config);
    const app = await buildApp({
      ...infra,
      market: {
        chain: {
          identity: async () => ({ name: 'Bench Token', symbol: 'BENCH', decimals: 18 }),
          contract: async () => ({ codeSize: 2400, cloneTarget: null, delegatedTo: null, eip1967Implementation: null, zosImplementation: null, delegatecall: false }),
          pool: async () => ({ kind: 'none' as const }), // the preview does not ask
        },
      },
    });
    await app.ready();
    const load: LoadSpec = {
      description: 'POST /api/token-preview, warm cache (real service, market-data stub, SQLite, rate limits off, log level silent)',
      requests: [{ method: 'POST', path: '/api/token-preview', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ chain: 'base', address: TOKEN }) }],
      expectStatus: 200,
      expectBodyIncludes: '"stale":false',
    };
    return {
      listen: (opts) => app.listen(opts),
      inject: injectWith(app),
      load,
      async close() {
        await app.close();
        await infra.close();
        await stub.stop();
        rmSync(dir, { recursive: true, force: true });
      },
    };
  },
};

async function child(): Promise<void> {
  const { serveTarget } = await import('./lib/serve.js');
  await serveTarget(TARGET_NAME, async () => ({ default: previewTarget }));
}

async function parent(): Promise<void> {
  const [{ startTarget }, { saturate, smokeCheck }, { table, writeJson }, { median, round }] = await Promise.all([
    import('./lib/child.js'),
    import('./lib/load.js'),
    import('./lib/report.js'),
    import('./lib/stats.js'),
  ]);
  type Started = Awaited<ReturnType<typeof startTarget>>;
  type Run = Awaited<ReturnType<typeof saturate>>;
  const num = (name: string, def: number) => {
    const v = Number(process.env[name] ?? def);
    if (!Number.isFinite(v) || v <= 0) throw new Error(`${name} must be a positive number`);
    return v;
  };
  const DURATION = num('BENCH_DURATION', 5);
  const WARMUP = num('BENCH_WARMUP', 1);
  const ROUNDS = num('BENCH_ROUNDS', 3);
  const CONNECTIONS = num('BENCH_CONNECTIONS', 32);
  const RESULTS_FILE = fileURLToPath(new URL('./results/token-preview-latest.json', import.meta.url));
  const started = Date.now();

  console.log(`paywarden token-preview benchmark: token-preview vs evaluate; ${ROUNDS} rounds of ${WARMUP} s warm-up + ${DURATION} s, ${CONNECTIONS} connections`);
  const targets: Array<[string, Started]> = [];
  try {
    targets.push([TARGET_NAME, await startTarget(TARGET_NAME, { entry: SELF })]);
    targets.push(['evaluate', await startTarget('evaluate')]);
    for (const [name, t] of targets) {
      const sample = await smokeCheck(t);
      console.log(`  started ${name} (pid ${t.pid}): ${t.load.description}\n    smoke: ${sample.slice(0, 140)}…`);
    }
    const runs = new Map<string, Run[]>(targets.map(([n]) => [n, []]));
    for (let r = 0; r < ROUNDS; r++) {
      const order = r % 2 ? [...targets].reverse() : targets;
      for (const [name, t] of order) {
        const res = await saturate(t, { connections: CONNECTIONS, durationSec: DURATION, warmupSec: WARMUP });
        runs.get(name)!.push(res);
        console.log(`  ${name.padEnd(13)} ${res.rps.toLocaleString('en-US')} req/s, p50 ${res.latencyMs.p50} ms, p99 ${res.latencyMs.p99} ms, server ${res.serverMicrosPerRequest} µs/req, other CPU ${Math.round((res.otherCpu ?? 0) * 100)}%`);
      }
    }
    const summary = targets.map(([name, t]) => {
      const rs = runs.get(name)!;
      return {
        target: name,
        description: t.load.description,
        medianRps: median(rs.map((r) => r.rps)),
        runsRps: rs.map((r) => r.rps),
        medianP50Ms: median(rs.map((r) => r.latencyMs.p50)),
        medianP99Ms: median(rs.map((r) => r.latencyMs.p99)),
        medianServerMicrosPerRequest: median(rs.map((r) => r.serverMicrosPerRequest)),
        medianOtherCpu: median(rs.map((r) => r.otherCpu ?? 0)),
      };
    });
    const preview = summary.find((s) => s.target === TARGET_NAME)!;
    const evaluate = summary.find((s) => s.target === 'evaluate')!;
    const ratio = round(preview.medianRps / evaluate.medianRps, 3);
    const cpuRatio = round(evaluate.medianServerMicrosPerRequest / preview.medianServerMicrosPerRequest, 3);
    console.log('\n' + table(
      ['target', 'req/s (median of 3)', 'runs', 'p50 ms', 'p99 ms', 'server µs/req'],
      summary.map((s) => [s.target, s.medianRps, s.runsRps.map((v) => v.toLocaleString('en-US')).join(' / '), s.medianP50Ms, s.medianP99Ms, s.medianServerMicrosPerRequest]),
    ));
    console.log(`\nratio token-preview/evaluate: ${ratio} (target >= ${TARGET_RATIO}): ${ratio >= TARGET_RATIO ? 'MET' : 'NOT MET'}`);
    console.log(`server CPU per request, evaluate/token-preview: ${cpuRatio} (less sensitive to a noisy machine)`);
    const busy = Math.max(...summary.map((s) => s.medianOtherCpu));
    if (busy > 0.3) console.log(`warning: other processes used a median ${Math.round(busy * 100)}% of a core; figures are noisy`);
    writeJson(RESULTS_FILE, {
      benchmark: 'token-preview',
      date: new Date().toISOString(),
      environment: { node: process.version, platform: `${process.platform}-${process.arch}`, cpus: cpus().length, cpuModel: cpus()[0]?.model },
      settings: { durationSec: DURATION, warmupSec: WARMUP, rounds: ROUNDS, connections: CONNECTIONS, pipelining: 1, host: '127.0.0.1' },
      target: { ratio: TARGET_RATIO },
      summary,
      ratio,
      cpuRatio,
      met: ratio >= TARGET_RATIO,
      runs: Object.fromEntries(runs),
      elapsedSec: round((Date.now() - started) / 1000, 1),
    });
    console.log(`results written to ${RESULTS_FILE}`);
    if (process.env.BENCH_ENFORCE === '1' && ratio < TARGET_RATIO) process.exitCode = 1;
  } finally {
    await Promise.all(targets.map(([, t]) => t.stop()));
  }
}

if (process.argv[2] === TARGET_NAME && typeof process.send === 'function') await child();
else await parent();
