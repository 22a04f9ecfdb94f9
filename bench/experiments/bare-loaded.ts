/**
 * Experiment target (bench/experiments/ladder.ts): the bare route of bench/targets/bare.ts, served
 * from a process that has also opened the service's infrastructure and built the whole app, which
 * then sits idle. Compared with `bare`, it tells whether the service's size (its modules, code and
 * heap) slows a route that runs none of it.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildApp } from '../../src/app.js';
import { testConfig } from '../../src/config.js';
import { openInfrastructure } from '../../src/platform/deps.js';
import bare from '../targets/bare.js';
import type { TargetModule } from '../lib/types.js';

const target: TargetModule = {
  async start() {
    const dir = mkdtempSync(join(tmpdir(), 'paywarden-bench-'));
    const infra = await openInfrastructure(testConfig({ databaseUrl: `sqlite:${join(dir, 'bench.sqlite')}`, rateLimits: false, logLevel: 'silent' }));
    const service = await buildApp(infra);
    await service.ready();
    const served = await bare.start();
    return {
      ...served,
      load: { ...served.load, description: 'bare route, in a process that also holds the whole service (idle)' },
      async close() {
        await served.close();
        await service.close();
        await infra.close();
        rmSync(dir, { recursive: true, force: true });
      },
    };
  },
};
export default target;
