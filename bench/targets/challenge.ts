import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildApp } from '../../src/app.js';
import { testConfig } from '../../src/config.js';
import { startDevnet } from '../../src/devnet/index.js';
import { openInfrastructure } from '../../src/platform/deps.js';
import { injectWith, type TargetModule } from '../lib/types.js';

/**
 * The 402 challenge path of a paid report: GET /api/quick-check without PAYMENT-SIGNATURE, on
 * the real service configured against a devnet (anvil + facilitator) started in this process.
 * Every answer must be the 402 with PAYMENT-REQUIRED; nothing is charged.
 */
const target: TargetModule = {
  async start() {
    const devnet = await startDevnet();
    const dir = mkdtempSync(join(tmpdir(), 'paywarden-bench-'));
    const config = testConfig({
      databaseUrl: `sqlite:${join(dir, 'bench.sqlite')}`,
      rateLimits: false,
      logLevel: process.env.BENCH_LOG_LEVEL ?? 'silent',
      rpcUrls: [devnet.rpcUrl],
      facilitatorUrl: devnet.facilitatorUrl,
      payTo: devnet.accounts[5]!.address,
    });
    const infra = await openInfrastructure(config);
    const app = await buildApp(infra);
    await app.ready();
    return {
      listen: (opts) => app.listen(opts),
      inject: injectWith(app),
      load: {
        description: 'GET /api/quick-check without payment: the 402 x402 challenge (devnet facilitator)',
        requests: [{ method: 'GET', path: '/api/quick-check' }],
        expectStatus: 402,
      },
      async close() {
        await app.close();
        await infra.close();
        await devnet.stop();
        rmSync(dir, { recursive: true, force: true });
      },
    };
  },
};

export default target;
