import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildApp } from '../../src/app.js';
import { testConfig } from '../../src/config.js';
import { openInfrastructure } from '../../src/platform/deps.js';
import { injectWith, type TargetModule } from '../lib/types.js';

/** The README's example: a valid request that the rules APPROVE. */
export const EVALUATE_BODY = {
  agentId: 'agent-7',
  requestId: 'req-001',
  chain: 'base',
  asset: 'USDC',
  recipient: '0x1111111111111111111111111111111111111111',
  amount: '12.50',
  policy: {
    maxPerTransaction: '25',
    remainingDailyBudget: '100',
    requireHumanAbove: '20',
    maxRepeats: 3,
    allowedRecipients: ['0x1111111111111111111111111111111111111111'],
    blockUnknownRecipients: true,
  },
  context: { repeatCount: 0 },
};

/**
 * The real service as `npm start` builds it (openInfrastructure + buildApp, its own logger
 * configuration at LOG_LEVEL=silent), on a temporary SQLite database, with RATE_LIMITS=off.
 * BENCH_LOG_LEVEL overrides the level (e.g. `info` to see what logging costs).
 */
const target: TargetModule = {
  async start() {
    const dir = mkdtempSync(join(tmpdir(), 'paywarden-bench-'));
    const config = testConfig({
      databaseUrl: `sqlite:${join(dir, 'bench.sqlite')}`,
      rateLimits: false,
      logLevel: process.env.BENCH_LOG_LEVEL ?? 'silent',
    });
    const infra = await openInfrastructure(config);
    const app = await buildApp(infra);
    await app.ready();
    return {
      listen: (opts) => app.listen(opts),
      inject: injectWith(app),
      load: {
        description: 'POST /api/spendpolicy/evaluate (real service, SQLite, rate limits off, log level silent)',
        requests: [
          {
            method: 'POST',
            path: '/api/spendpolicy/evaluate',
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify(EVALUATE_BODY),
          },
        ],
        expectStatus: 200,
        expectBodyIncludes: '"decision":"APPROVE"',
      },
      async close() {
        await app.close();
        await infra.close();
        rmSync(dir, { recursive: true, force: true });
      },
    };
  },
};

export default target;
